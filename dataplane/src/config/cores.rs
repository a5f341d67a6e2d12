//! The `[cores]` table: which CPUs vSPACE manages, in which mode, and how it
//! moves threads.
//!
//! ```toml
//! [cores]
//! mode = "e"              # off (default) | p | e | r
//! cpus = [0, 1]           # the cores split between vCPUs and queue workers
//! period_ms = 100         # paper: 100
//! margin = 1.1            # paper: 1.1
//! apply = "affinity"      # affinity (default) | cpuset | advise
//! # cgroup = "/sys/fs/cgroup/vadapt"   # parent of the cpusets, apply = "cpuset"
//! queue_workers = "per-port"  # per-port (default) | per-nq-core
//!
//! [cores.thresholds]      # Algorithm 3; defaults in vadapt_policy::vspace
//! slo_p95_us = 1000
//! ```
//!
//! The mode, period, MARGIN and thresholds are the policy crate's
//! [`VspaceConfig`]; its `total_cores` is the length of `cpus` here, so the
//! operator names the cores once.

use super::value_error::ValueError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vadapt_policy::vspace::{ThresholdParams, VspaceConfig, VspaceConfigError, VspaceMode};

/// How the core manager carries out an allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApplyMethod {
    /// `sched_setaffinity` on each thread (default).
    #[default]
    Affinity,
    /// cgroup cpusets (v1, or v2 in threaded mode) under `cgroup`.
    Cpuset,
    /// Compute and report, move nothing.
    Advise,
}

impl std::str::FromStr for ApplyMethod {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        match s {
            "affinity" => Ok(ApplyMethod::Affinity),
            "cpuset" => Ok(ApplyMethod::Cpuset),
            "advise" => Ok(ApplyMethod::Advise),
            _ => Err(ValueError::expected(s, "`affinity`, `cpuset` or `advise`")),
        }
    }
}

/// How many queue workers run, and what each serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueWorkers {
    /// A worker thread per VM port, each allowed on every NQ core (default).
    #[default]
    PerPort,
    /// One worker per NQ core, pinned to it; ports' queue sets are
    /// reassigned between workers as the NQ group grows and shrinks
    /// ([`crate::worker::pool`]).
    PerNqCore,
}

impl std::str::FromStr for QueueWorkers {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        match s {
            "per-port" => Ok(QueueWorkers::PerPort),
            "per-nq-core" => Ok(QueueWorkers::PerNqCore),
            _ => Err(ValueError::expected(s, "`per-port` or `per-nq-core`")),
        }
    }
}

/// A VM's role for vSPACE-R.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmRole {
    /// Latency-critical: its vCPUs are the vCPU group (default).
    #[default]
    Lc,
    /// Best-effort: in vSPACE-R it runs on the cores lent to best-effort
    /// work, and is paused (QMP `stop`) while there are none.
    Be,
}

impl VmRole {
    /// `lc` or `be`.
    pub fn as_str(self) -> &'static str {
        match self {
            VmRole::Lc => "lc",
            VmRole::Be => "be",
        }
    }
}

impl std::str::FromStr for VmRole {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        match s {
            "lc" => Ok(VmRole::Lc),
            "be" => Ok(VmRole::Be),
            _ => Err(ValueError::expected(s, "`lc` or `be`")),
        }
    }
}

/// Why a `[cores]` table is invalid, naming its key.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CoresConfigError {
    /// Too few CPUs to split between the groups.
    #[error("cpus: {0} (vSPACE needs at least 2 CPUs to split)")]
    TooFewCpus(String),
    /// A CPU is listed twice in `cpus`.
    #[error("cpus: CPU {0} is listed twice")]
    CpuTwice(usize),
    /// `apply = "cpuset"` without a `cgroup`.
    #[error("cgroup: required with apply = \"cpuset\"")]
    NoCgroup,
    /// vSPACE's parameters are invalid.
    #[error(transparent)]
    Vspace(VspaceConfigError),
}

/// The `[cores]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoresConfig {
    /// vSPACE mode: `off` (default), `p`, `e` or `r`.
    #[serde(default)]
    pub mode: VspaceMode,
    /// The CPUs split between the groups.
    #[serde(default)]
    pub cpus: Vec<usize>,
    /// Period of one measurement and allocation, ms.
    #[serde(default = "default_period_ms")]
    pub period_ms: u64,
    /// MARGIN of Algorithm 2.
    #[serde(default = "default_margin")]
    pub margin: f64,
    /// How allocations are carried out.
    #[serde(default)]
    pub apply: ApplyMethod,
    /// Parent cgroup of the cpusets (`apply = "cpuset"`).
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
    /// Initial thresholds and the explorer's constants.
    #[serde(default)]
    pub thresholds: ThresholdParams,
    /// A worker per port, or one per NQ core.
    #[serde(default)]
    pub queue_workers: QueueWorkers,
}

fn default_period_ms() -> u64 {
    VspaceConfig::default().period_ms
}

fn default_margin() -> f64 {
    VspaceConfig::default().margin
}

impl Default for CoresConfig {
    fn default() -> Self {
        let v = VspaceConfig::default();
        CoresConfig {
            mode: v.mode,
            cpus: Vec::new(),
            period_ms: v.period_ms,
            margin: v.margin,
            apply: ApplyMethod::default(),
            cgroup: None,
            thresholds: v.thresholds,
            queue_workers: QueueWorkers::default(),
        }
    }
}

impl CoresConfig {
    /// The policy crate's configuration for these cores.
    pub fn vspace(&self) -> VspaceConfig {
        VspaceConfig {
            mode: self.mode,
            total_cores: self.cpus.len(),
            period_ms: self.period_ms,
            margin: self.margin,
            thresholds: self.thresholds,
        }
    }

    /// Check the table; the error says which key is wrong.
    pub fn validate(&self) -> Result<(), CoresConfigError> {
        self.vspace().validate().map_err(|e| match e {
            VspaceConfigError::InvalidParam {
                param: "total_cores",
                reason,
            } => CoresConfigError::TooFewCpus(reason),
            e => CoresConfigError::Vspace(e),
        })?;
        let mut seen = std::collections::HashSet::new();
        if let Some(c) = self.cpus.iter().find(|c| !seen.insert(**c)) {
            return Err(CoresConfigError::CpuTwice(*c));
        }
        if self.apply == ApplyMethod::Cpuset
            && self.cgroup.is_none()
            && self.mode != VspaceMode::Off
        {
            return Err(CoresConfigError::NoCgroup);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_and_the_papers_constants() {
        let c: CoresConfig = toml::from_str("").unwrap();
        assert_eq!(c, CoresConfig::default());
        assert_eq!(c.mode, VspaceMode::Off);
        assert_eq!(c.vspace(), VspaceConfig::default());
        c.validate().unwrap();
    }

    #[test]
    fn a_table_reads_and_names_its_errors() {
        let c: CoresConfig = toml::from_str(
            "mode = \"e\"\ncpus = [0, 1, 2]\napply = \"advise\"\n[thresholds]\nslo_p95_us = 500\n",
        )
        .unwrap();
        assert_eq!(c.vspace().total_cores, 3);
        assert_eq!(c.vspace().thresholds.slo_p95_us, 500);
        c.validate().unwrap();
        let one = CoresConfig {
            cpus: vec![0],
            ..c.clone()
        };
        assert!(
            one.validate().unwrap_err().to_string().starts_with("cpus:"),
            "{:?}",
            one.validate()
        );
        let twice = CoresConfig {
            cpus: vec![0, 0],
            ..c.clone()
        };
        assert!(twice.validate().unwrap_err().to_string().contains("twice"));
        let cpuset = CoresConfig {
            apply: ApplyMethod::Cpuset,
            ..c.clone()
        };
        assert!(cpuset
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("cgroup"));
        assert!(toml::from_str::<CoresConfig>("mood = \"e\"").is_err());
    }
}
