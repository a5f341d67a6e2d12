//! vSPACE-Guest: the VM's online vCPUs and active queue pairs follow the
//! groups' sizes, through the QEMU guest agent when `qga = PATH` is
//! configured for the VM.
//!
//! The paper's guest side runs inside the VM and sets the number of active
//! vCPUs (cpusets) and vNQs (RSS/XPS) to match the host's groups. Here the
//! host asks the guest agent: `guest-set-vcpus` (the lowest-numbered vCPUs
//! stay online) for the vCPU group's size, and `guest-exec` of `ethtool -L
//! IFACE combined N` for the NQ group's size, capped by the port's queue
//! pairs. A guest's `ethtool -L` reaches vadapt as `SET_VRING_ENABLE`.
//!
//! Bounded and quiet: a VM is asked at most once per [`MIN_INTERVAL`], and
//! only when what it should have differs from what was last applied; after
//! a failure it is asked again after [`RETRY_AFTER`]; each distinct error is
//! logged once. Every agent exchange has a short deadline, so an agent that
//! does not answer costs the manager one period at most.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use vadapt_coremgr::error_chain::error_chain;
use vadapt_coremgr::qga::{self, QgaLimits};

/// Least time between two requests to one VM's agent.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How long after a failed request the VM's agent is asked again.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// Deadlines of one request: short, since the manager's period waits.
const LIMITS: QgaLimits = QgaLimits {
    timeout: Duration::from_millis(500),
    max_line: 1 << 20,
    exec_timeout: Duration::from_secs(2),
};

/// What one VM's guest should have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestTarget {
    /// vCPUs online (at least 1).
    pub vcpus: usize,
    /// Active queue pairs (at least 1).
    pub queue_pairs: u16,
}

/// One VM's guest side.
#[derive(Debug)]
pub struct GuestSide {
    qga: Option<PathBuf>,
    iface: String,
    /// What was last applied (vCPUs online as the guest reported them).
    applied_vcpus: Option<usize>,
    applied_pairs: Option<u16>,
    last_try: Option<Instant>,
    failed: bool,
    /// The last error, logged once.
    pub error: Option<String>,
}

/// What [`GuestSide::drive`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestOutcome {
    /// No agent, nothing to change, or too soon.
    Nothing,
    /// Changed: a line for `vadapt cores`.
    Applied(String),
    /// A request failed (the error is in [`GuestSide::error`]).
    Failed,
}

impl GuestSide {
    /// The guest side of a VM with agent socket `qga` and interface `iface`
    /// (`None`: `eth0`).
    pub fn new(qga: Option<PathBuf>, iface: Option<String>) -> Self {
        GuestSide {
            qga,
            iface: iface.unwrap_or_else(|| "eth0".into()),
            applied_vcpus: None,
            applied_pairs: None,
            last_try: None,
            failed: false,
            error: None,
        }
    }

    /// Whether an agent is configured.
    pub fn has_agent(&self) -> bool {
        self.qga.is_some()
    }

    /// vCPUs online and queue pairs active, as last applied.
    pub fn applied(&self) -> (Option<usize>, Option<u16>) {
        (self.applied_vcpus, self.applied_pairs)
    }

    /// Whether a request is due at `now` for `target`.
    pub fn due(&self, now: Instant, target: GuestTarget) -> bool {
        if self.qga.is_none() {
            return false;
        }
        let changed = self.applied_vcpus != Some(target.vcpus)
            || self.applied_pairs != Some(target.queue_pairs);
        let wait = if self.failed {
            RETRY_AFTER
        } else {
            MIN_INTERVAL
        };
        changed
            && self
                .last_try
                .is_none_or(|t| now.saturating_duration_since(t) >= wait)
    }

    /// Bring the guest to `target` if due (see the module docs). `vm` names
    /// it in log lines.
    pub fn drive(&mut self, vm: &str, now: Instant, target: GuestTarget) -> GuestOutcome {
        if !self.due(now, target) {
            return GuestOutcome::Nothing;
        }
        let Some(path) = self.qga.clone() else {
            return GuestOutcome::Nothing;
        };
        self.last_try = Some(now);
        let mut done = Vec::new();
        let mut result = Ok(());
        if self.applied_vcpus != Some(target.vcpus) {
            match qga::set_online_vcpus(&path, target.vcpus, LIMITS) {
                Ok(ch) => {
                    // A guest with fewer vCPUs, or some it cannot offline,
                    // ends elsewhere: remember the target, not to ask again.
                    self.applied_vcpus = Some(target.vcpus);
                    done.push(format!("vCPUs online {} -> {}", ch.before, ch.after));
                }
                Err(e) => result = Err(format!("guest-set-vcpus: {}", error_chain(&e))),
            }
        }
        if result.is_ok() && self.applied_pairs != Some(target.queue_pairs) {
            match qga::set_queue_pairs(&path, &self.iface, target.queue_pairs, LIMITS) {
                Ok(()) => {
                    self.applied_pairs = Some(target.queue_pairs);
                    done.push(format!("queue pairs {}", target.queue_pairs));
                }
                Err(e) => result = Err(format!("ethtool -L: {}", error_chain(&e))),
            }
        }
        match result {
            Ok(()) => {
                self.failed = false;
                self.error = None;
                let line = format!("{vm}: guest {}", done.join(", "));
                tracing::info!(vm, "core manager: {line}");
                GuestOutcome::Applied(line)
            }
            Err(e) => {
                self.failed = true;
                if self.error.as_deref() != Some(&e) {
                    tracing::warn!(vm, error = %e, "core manager: the guest agent did not apply vSPACE-Guest's change; host side only until it does");
                }
                self.error = Some(e);
                GuestOutcome::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(vcpus: usize, queue_pairs: u16) -> GuestTarget {
        GuestTarget { vcpus, queue_pairs }
    }

    #[test]
    fn without_an_agent_nothing_is_due() {
        let g = GuestSide::new(None, None);
        assert!(!g.has_agent());
        assert!(!g.due(Instant::now(), t(1, 1)));
    }

    #[test]
    fn requests_are_rate_limited_and_retried_later_after_a_failure() {
        let dir = std::env::temp_dir().join(format!("nq-guest-side-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        // No socket there: every request fails at connect.
        let mut g = GuestSide::new(Some(dir.join("absent.qga")), None);
        let t0 = Instant::now();
        assert!(g.due(t0, t(1, 1)));
        assert_eq!(g.drive("vm1", t0, t(1, 1)), GuestOutcome::Failed);
        assert!(
            g.error.as_deref().unwrap().starts_with("guest-set-vcpus"),
            "{:?}",
            g.error
        );
        assert!(
            !g.due(t0 + MIN_INTERVAL, t(1, 1)),
            "failed: waits RETRY_AFTER"
        );
        assert!(g.due(t0 + RETRY_AFTER, t(1, 1)));
        assert_eq!(
            g.drive("vm1", t0 + Duration::from_millis(1), t(1, 1)),
            GuestOutcome::Nothing
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
