//! vSPACE's core allocator: how many cores the vCPU group and the
//! network-queue (NQ) group get for the next period (vSPACE paper,
//! Algorithms 1 and 2, and the vSPACE-R step of §4.2).
//!
//! Each period the caller measures the CPU time each group used
//! ([`GroupLoad`], in cores) and asks [`CoreAllocator::next`] for the next
//! [`CoreAllocation`]. A group's *demand* is `TotalUtil / Th`: the cores it
//! needs to run at its utilisation threshold `Th` ([`Thresholds`], from the
//! threshold explorer). The allocator only counts cores; which CPU ids make up
//! each group is [`CoreSets::place`](super::placement::CoreSets::place)'s job.
//!
//! - **vSPACE-P** ([`VspaceMode::Performance`], Algorithm 1): every core is in
//!   use; the groups split them in proportion to their demands (lines 2–6).
//! - **vSPACE-E** ([`VspaceMode::Energy`], Algorithm 2): each group asks for
//!   `ReqCore = ceil(TotalUtil / Th)` cores. If the two ask for more than
//!   there are, the cores are split in proportion to the `ReqCore`s (lines
//!   5–7). Otherwise a group that needs more gets `ReqCore` at once (lines 12
//!   and 17) and a group that needs fewer shrinks only to
//!   `ceil(MARGIN × TotalUtil / Th)` (lines 10 and 15, MARGIN = 1.1), so a
//!   small dip does not take a core away. The cores left over are *idle*
//!   ([`CoreAllocation::idle_cores`]): the caller sets them to their lowest
//!   frequency where cpufreq exists.
//! - **vSPACE-R** ([`VspaceMode::Resource`], §4.2): as vSPACE-E, then the cores
//!   left over go to best-effort (BE) VMs ([`CoreAllocation::be_cores`]). With
//!   none left, BE VMs are paused until a core frees
//!   ([`CoreAllocation::pause_be`]).
//!
//! # Departures from the paper, and why
//!
//! - **Each group keeps at least one core**, and each `ReqCore` is at least 1.
//!   A cpuset cannot be empty: a group with no core would have its threads
//!   nowhere to run. The paper's `round` can give a group 0 cores (vSPACE-P
//!   with one idle group) and its `ceil` gives 0 for an idle group.
//! - **Fewer than two cores is refused** ([`CoreAllocator::new`]): two groups
//!   of at least one core each need two. With one core there is no isolation
//!   to manage; the caller leaves the threads time-sharing it (the paper's
//!   Time-Sharing configuration, §3.2).
//! - **The proportional split sums to `TotalCore` exactly.** The vCPU group
//!   gets `round(TotalCore × ReqCore_vCPU / ReqCore_total)` and the NQ group
//!   the rest. The paper rounds both lines independently, which can hand out
//!   one core too many or too few (3 cores split 1.5 / 1.5 round to 2 + 2).
//!   Halves round up, so a tie goes to the vCPU group.
//! - **In vSPACE-E the margin only slows shrinking.** The paper's line 10 can
//!   *grow* a group it meant to shrink once `0.1 × TotalUtil / Th > 1`
//!   (prev 12, `TotalUtil / Th` = 11: `ReqCore` 11 < 12, but
//!   `ceil(1.1 × 11)` = 13). The margined value is kept within
//!   `[ReqCore, PrevCore]`.
//! - **In vSPACE-E a group's margin yields to the other group's growth.** When
//!   one group keeps margin cores while the other grows to its `ReqCore`, the
//!   paper's lines 9–18 can hand out more cores than exist (4 cores, prev
//!   3 + 1, `ReqCore` 2 + 2: line 10 keeps 3, line 17 gives 2). The group
//!   holding margin cores gives back what is needed (never going below its
//!   `ReqCore`, and `ReqCore_total ≤ TotalCore` on this branch, so it always
//!   fits).
//! - **vSPACE-P with no demand at all** (both groups idle) has nothing to
//!   split by: the previous split stays (an even split if the previous
//!   allocation did not use every core).
//! - **`ceil` and `round` ignore float error below 10⁻⁹ cores**, so
//!   `2.1 / 0.7` (3.0000000000000004 in floating point) asks for 3 cores,
//!   not 4.
//! - **Garbage in, a valid allocation out.** A utilisation that is NaN or
//!   negative reads as 0, one above the host's cores (+∞ included) as every
//!   core; a threshold below [`THRESHOLD_FLOOR`] (0, negative, NaN included)
//!   reads as that floor. [`VspaceManager`](super::manager::VspaceManager)
//!   does better with a non-finite measurement: it keeps the allocation as it
//!   is for that period.
//!
//! The paper does not say what best-effort VMs do under vSPACE-P and
//! vSPACE-E, where it ran none. Here [`CoreAllocation::be_cores`] is 0 in
//! those modes, so a BE VM, if the caller has one, is paused.

use super::error::{invalid, VspaceConfigError};
use super::thresholds::Thresholds;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Thresholds below this (per-core utilisation) read as this in the
/// allocator, so a threshold of 0, a negative one or NaN cannot divide by
/// zero: demand is then `TotalUtil / 0.01`, and the proportional split and
/// `ReqCore_total > TotalCore` keep the allocation within the host.
pub const THRESHOLD_FLOOR: f64 = 0.01;

/// Float error ignored by `ceil` and `round` on core counts.
const CORE_EPSILON: f64 = 1e-9;

/// vSPACE's operating mode (paper §4.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VspaceMode {
    /// vSPACE does not manage cores (the default). Refused by
    /// [`CoreAllocator::new`] and [`VspaceManager::new`](super::manager::VspaceManager::new):
    /// the caller runs no core-management loop.
    #[default]
    #[serde(rename = "off")]
    Off,
    /// vSPACE-P, performance: every core in use (Algorithm 1).
    #[serde(rename = "p", alias = "P", alias = "performance")]
    Performance,
    /// vSPACE-E, energy efficiency: as few cores as the thresholds allow,
    /// the rest idle at the lowest frequency (Algorithm 2).
    #[serde(rename = "e", alias = "E", alias = "energy")]
    Energy,
    /// vSPACE-R, resource efficiency: as vSPACE-E, the rest lent to
    /// best-effort VMs (§4.2).
    #[serde(rename = "r", alias = "R", alias = "resource")]
    Resource,
}

impl VspaceMode {
    /// Every mode, in the paper's order.
    pub const ALL: [VspaceMode; 4] = [
        VspaceMode::Off,
        VspaceMode::Performance,
        VspaceMode::Energy,
        VspaceMode::Resource,
    ];

    /// Name in config files and on the command line: `off`, `p`, `e`, `r`.
    pub fn as_str(self) -> &'static str {
        match self {
            VspaceMode::Off => "off",
            VspaceMode::Performance => "p",
            VspaceMode::Energy => "e",
            VspaceMode::Resource => "r",
        }
    }
}

impl fmt::Display for VspaceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for VspaceMode {
    type Err = VspaceConfigError;

    /// `off`, `p` / `performance`, `e` / `energy`, `r` / `resource`, in
    /// any case (the paper writes vSPACE-P, -E, -R).
    fn from_str(s: &str) -> Result<Self, VspaceConfigError> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(VspaceMode::Off),
            "p" | "performance" => Ok(VspaceMode::Performance),
            "e" | "energy" => Ok(VspaceMode::Energy),
            "r" | "resource" => Ok(VspaceMode::Resource),
            other => Err(invalid(
                "mode",
                format!("unknown mode `{other}` (expected one of: off, p, e, r)"),
            )),
        }
    }
}

/// CPU time each group used over one period, in cores: the sum over the
/// group's threads of on-CPU time divided by the period's length
/// (3.2 = three cores and a fifth busy). The paper's `TotalUtil`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupLoad {
    /// The vCPU group: every vCPU thread of the managed VM(s), in cores.
    pub vcpu_util: f64,
    /// The NQ group: every queue worker, in cores.
    pub nq_util: f64,
}

impl GroupLoad {
    /// True if both utilisations are finite numbers.
    pub fn is_finite(&self) -> bool {
        self.vcpu_util.is_finite() && self.nq_util.is_finite()
    }
}

/// How many cores each group gets for the next period. Counts only: which
/// CPUs they are is decided by
/// [`CoreSets::place`](super::placement::CoreSets::place).
///
/// From [`CoreAllocator`] every field adds up to the allocator's total
/// cores, each group has at least one core, `idle_cores` is 0 outside
/// vSPACE-E and `be_cores` is 0 outside vSPACE-R
/// ([`CoreAllocation::is_valid_for`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CoreAllocation {
    /// Cores dedicated to the vCPU threads.
    pub vcpu_cores: usize,
    /// Cores dedicated to the queue workers.
    pub nq_cores: usize,
    /// Cores nobody runs on (vSPACE-E). The caller sets them to their lowest
    /// frequency where cpufreq exists.
    pub idle_cores: usize,
    /// Cores lent to best-effort VMs (vSPACE-R).
    pub be_cores: usize,
}

impl CoreAllocation {
    /// Cores the allocation accounts for (all four fields).
    pub fn total(&self) -> usize {
        self.vcpu_cores
            .saturating_add(self.nq_cores)
            .saturating_add(self.idle_cores)
            .saturating_add(self.be_cores)
    }

    /// True if best-effort VMs must be paused: no core is lent to them
    /// (vSPACE-R with every core taken, and always in vSPACE-P and vSPACE-E).
    pub fn pause_be(&self) -> bool {
        self.be_cores == 0
    }

    /// True if this is an allocation the allocator can return for `mode` on
    /// `total_cores` cores: each group at least one core, the fields add up to
    /// `total_cores`, no idle core outside vSPACE-E and no BE core outside
    /// vSPACE-R. Always false for [`VspaceMode::Off`].
    pub fn is_valid_for(&self, mode: VspaceMode, total_cores: usize) -> bool {
        let mode_ok = match mode {
            VspaceMode::Off => false,
            VspaceMode::Performance => self.idle_cores == 0 && self.be_cores == 0,
            VspaceMode::Energy => self.be_cores == 0,
            VspaceMode::Resource => self.idle_cores == 0,
        };
        mode_ok && self.vcpu_cores >= 1 && self.nq_cores >= 1 && self.total() == total_cores
    }
}

/// The vSPACE core allocator for one mode and one set of cores. Stateless:
/// the previous allocation is passed in. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoreAllocator {
    mode: VspaceMode,
    total_cores: usize,
    margin: f64,
}

impl CoreAllocator {
    /// Fewest cores vSPACE can manage: one per group.
    pub const MIN_CORES: usize = 2;
    /// Most cores accepted; keeps every core count exact in an `f64`.
    pub const MAX_CORES: usize = 1 << 16;
    /// Largest accepted MARGIN.
    pub const MAX_MARGIN: f64 = 10.0;

    /// Check the allocator's parameters; the error names the first bad one as
    /// it is written in config files.
    pub fn validate(
        mode: VspaceMode,
        total_cores: usize,
        margin: f64,
    ) -> Result<(), VspaceConfigError> {
        if mode == VspaceMode::Off {
            return Err(invalid(
                "mode",
                "`off` manages no cores: there is nothing to allocate",
            ));
        }
        if !(Self::MIN_CORES..=Self::MAX_CORES).contains(&total_cores) {
            return Err(invalid(
                "total_cores",
                format!(
                    "must be {} to {} (one core per group at least), not {total_cores}",
                    Self::MIN_CORES,
                    Self::MAX_CORES
                ),
            ));
        }
        Self::validate_margin(margin)
    }

    /// Check MARGIN alone (the configuration checks it even with mode `off`).
    pub fn validate_margin(margin: f64) -> Result<(), VspaceConfigError> {
        if !(1.0..=Self::MAX_MARGIN).contains(&margin) {
            return Err(invalid(
                "margin",
                format!(
                    "must be 1 to {} (paper: 1.1; 1 = no margin), not {margin}",
                    Self::MAX_MARGIN
                ),
            ));
        }
        Ok(())
    }

    /// An allocator of `total_cores` cores in `mode`, shrinking vSPACE-E and
    /// vSPACE-R groups through `margin` (paper: 1.1).
    pub fn new(
        mode: VspaceMode,
        total_cores: usize,
        margin: f64,
    ) -> Result<Self, VspaceConfigError> {
        Self::validate(mode, total_cores, margin)?;
        Ok(CoreAllocator {
            mode,
            total_cores,
            margin,
        })
    }

    /// The mode (never [`VspaceMode::Off`]).
    pub fn mode(&self) -> VspaceMode {
        self.mode
    }

    /// Cores managed.
    pub fn total_cores(&self) -> usize {
        self.total_cores
    }

    /// MARGIN of Algorithm 2.
    pub fn margin(&self) -> f64 {
        self.margin
    }

    /// The allocation before any measurement: every core in use, split evenly
    /// (the odd core to the vCPU group). vSPACE-E and vSPACE-R shrink from
    /// there; starting small would risk the SLO for a period.
    pub fn initial(&self) -> CoreAllocation {
        let (vcpu_cores, nq_cores) = even_split(self.total_cores);
        CoreAllocation {
            vcpu_cores,
            nq_cores,
            idle_cores: 0,
            be_cores: 0,
        }
    }

    /// A group's demand in cores, `TotalUtil / Th` (Algorithm 1 lines 2–3
    /// before rounding), with the sanitising rules of the module docs.
    pub fn demand(&self, util: f64, threshold: f64) -> f64 {
        // NaN and negatives fail `> 0.0` and read as 0.
        let util = if util > 0.0 {
            util.min(self.total_cores as f64)
        } else {
            0.0
        };
        // NaN fails `>=` and reads as the floor.
        let threshold = if threshold >= THRESHOLD_FLOOR {
            threshold
        } else {
            THRESHOLD_FLOOR
        };
        util / threshold
    }

    /// The allocation for the next period, from the one in force (`prev`),
    /// the load measured under it and the current thresholds.
    ///
    /// Never panics; the result is valid
    /// ([`CoreAllocation::is_valid_for`]) whatever the inputs, `prev`
    /// included.
    pub fn next(
        &self,
        prev: &CoreAllocation,
        load: GroupLoad,
        thresholds: Thresholds,
    ) -> CoreAllocation {
        let demand_vcpu = self.demand(load.vcpu_util, thresholds.vcpu);
        let demand_nq = self.demand(load.nq_util, thresholds.nq);
        let (vcpu_cores, nq_cores) = match self.mode {
            VspaceMode::Performance => self.performance(prev, demand_vcpu, demand_nq),
            // `new` refuses Off; it is listed only to keep the match total.
            VspaceMode::Energy | VspaceMode::Resource | VspaceMode::Off => {
                self.energy(prev, demand_vcpu, demand_nq)
            }
        };
        let spare = self.total_cores - vcpu_cores - nq_cores;
        let alloc = CoreAllocation {
            vcpu_cores,
            nq_cores,
            idle_cores: if self.mode == VspaceMode::Resource {
                0
            } else {
                spare
            },
            be_cores: if self.mode == VspaceMode::Resource {
                spare
            } else {
                0
            },
        };
        debug_assert!(alloc.is_valid_for(self.mode, self.total_cores), "{alloc:?}");
        alloc
    }

    /// Algorithm 1 (vSPACE-P): every core, in proportion to demand.
    fn performance(
        &self,
        prev: &CoreAllocation,
        demand_vcpu: f64,
        demand_nq: f64,
    ) -> (usize, usize) {
        // Line 4.
        if demand_vcpu + demand_nq > 0.0 {
            // Lines 5–6.
            return proportional_split(self.total_cores, demand_vcpu, demand_nq);
        }
        let prev_is_full_split = prev.vcpu_cores >= 1
            && prev.nq_cores >= 1
            && prev.vcpu_cores.checked_add(prev.nq_cores) == Some(self.total_cores);
        if prev_is_full_split {
            (prev.vcpu_cores, prev.nq_cores)
        } else {
            even_split(self.total_cores)
        }
    }

    /// Algorithm 2 (vSPACE-E; vSPACE-R's first step).
    fn energy(&self, prev: &CoreAllocation, demand_vcpu: f64, demand_nq: f64) -> (usize, usize) {
        // Lines 2–3, each group at least one core.
        let req_vcpu = ceil_cores(demand_vcpu).max(1);
        let req_nq = ceil_cores(demand_nq).max(1);
        // Lines 4–7.
        if req_vcpu + req_nq > self.total_cores {
            return proportional_split(self.total_cores, req_vcpu as f64, req_nq as f64);
        }
        // Lines 9–18.
        let next_vcpu = self.shrink_through_margin(prev.vcpu_cores, req_vcpu, demand_vcpu);
        let next_nq = self.shrink_through_margin(prev.nq_cores, req_nq, demand_nq);
        fit_margins(self.total_cores, (next_vcpu, req_vcpu), (next_nq, req_nq))
    }

    /// Lines 9–13 (and 14–18) of Algorithm 2 for one group: grow to `req` at
    /// once, shrink only to `ceil(MARGIN × demand)`, kept within
    /// `[req, prev]`.
    fn shrink_through_margin(&self, prev: usize, req: usize, demand: f64) -> usize {
        if prev > req {
            ceil_cores(self.margin * demand).clamp(req, prev)
        } else {
            req
        }
    }
}

/// `total` cores split evenly, the odd one to the vCPU group.
fn even_split(total: usize) -> (usize, usize) {
    (total - total / 2, total / 2)
}

/// Algorithm 1 lines 5–6 (and Algorithm 2 lines 6–7): `total` cores in
/// proportion to `vcpu : nq`, which are finite, non-negative and not both 0;
/// `total` is at least 2. The NQ group gets what the vCPU group leaves, and
/// each group at least one core.
fn proportional_split(total: usize, vcpu: f64, nq: f64) -> (usize, usize) {
    let share = total as f64 * vcpu / (vcpu + nq);
    let vcpu_cores = round_cores(share).clamp(1, total - 1);
    (vcpu_cores, total - vcpu_cores)
}

/// Lines 9–18 of Algorithm 2 can ask for more than `total` cores when one
/// group keeps margin cores while the other grows. Each pair is
/// `(next, req)` with `next >= req`, and `req_vcpu + req_nq <= total`. The
/// group holding the larger margin surplus gives back first, never below its
/// `req`.
fn fit_margins(total: usize, vcpu: (usize, usize), nq: (usize, usize)) -> (usize, usize) {
    let (next_vcpu, req_vcpu) = vcpu;
    let (next_nq, req_nq) = nq;
    let excess = next_vcpu.saturating_add(next_nq).saturating_sub(total);
    if excess == 0 {
        return (next_vcpu, next_nq);
    }
    let surplus_vcpu = next_vcpu - req_vcpu;
    let surplus_nq = next_nq - req_nq;
    // excess <= surplus_vcpu + surplus_nq because req_vcpu + req_nq <= total.
    let from_vcpu = if surplus_vcpu >= surplus_nq {
        surplus_vcpu.min(excess)
    } else {
        excess - surplus_nq.min(excess)
    };
    let from_nq = excess - from_vcpu;
    (next_vcpu - from_vcpu, next_nq - from_nq)
}

/// `ceil(x)` for a core count, ignoring float error below [`CORE_EPSILON`].
/// Saturates (`as` casts do) instead of overflowing; NaN gives 0.
fn ceil_cores(x: f64) -> usize {
    (x - CORE_EPSILON).ceil().max(0.0) as usize
}

/// `round(x)` for a core count, halves up, ignoring float error below
/// [`CORE_EPSILON`]. Saturates; NaN gives 0.
fn round_cores(x: f64) -> usize {
    (x + 0.5 + CORE_EPSILON).floor().max(0.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: usize = 20;

    fn alloc(mode: VspaceMode) -> CoreAllocator {
        CoreAllocator::new(mode, T, 1.1).unwrap()
    }

    fn th(vcpu: f64, nq: f64) -> Thresholds {
        Thresholds { vcpu, nq }
    }

    fn load(vcpu_util: f64, nq_util: f64) -> GroupLoad {
        GroupLoad { vcpu_util, nq_util }
    }

    fn groups(vcpu_cores: usize, nq_cores: usize) -> CoreAllocation {
        CoreAllocation {
            vcpu_cores,
            nq_cores,
            idle_cores: T - vcpu_cores - nq_cores,
            be_cores: 0,
        }
    }

    /// Algorithm 1, line by line, on the paper's 20-core host.
    #[test]
    fn vspace_p_replays_algorithm_1() {
        let a = alloc(VspaceMode::Performance);
        // Line 1: TotalCore = 20.
        // Line 2: ReqCore_vCPU = 7.0 / 0.7 = 10.
        // Line 3: ReqCore_NQ = 1.0 / 0.5 = 2.
        // Line 4: ReqCore_total = 12.
        // Line 5: NextCore_vCPU = round(20 × 10 / 12) = round(16.67) = 17.
        // Line 6: NextCore_NQ = round(20 × 2 / 12) = round(3.33) = 3.
        let next = a.next(&a.initial(), load(7.0, 1.0), th(0.7, 0.5));
        assert_eq!(next, groups(17, 3));
        assert!(!next.pause_be() || next.be_cores == 0);

        // Demand 1 : 1 at any load splits 10 / 10.
        let next = a.next(&next, load(3.5, 2.5), th(0.7, 0.5));
        assert_eq!(next, groups(10, 10));

        // The NQ group's demand is 0: line 5 gives round(20) = 20 and line 6
        // gives 0; each group keeps one core here (departure).
        let next = a.next(&next, load(4.0, 0.0), th(0.7, 0.5));
        assert_eq!(next, groups(19, 1));
    }

    /// Where the paper's two independent `round`s hand out a core too many,
    /// the NQ group takes what the vCPU group leaves (departure).
    #[test]
    fn vspace_p_split_sums_to_total_cores() {
        let a = CoreAllocator::new(VspaceMode::Performance, 3, 1.1).unwrap();
        // ReqCore 1 : 1 on 3 cores: the paper's round(1.5) + round(1.5) = 4.
        let next = a.next(&a.initial(), load(0.5, 0.5), th(0.5, 0.5));
        assert_eq!((next.vcpu_cores, next.nq_cores), (2, 1));
        assert_eq!(next.total(), 3);
    }

    /// With no demand at all the previous split stays.
    #[test]
    fn vspace_p_keeps_the_split_when_idle() {
        let a = alloc(VspaceMode::Performance);
        let prev = groups(15, 5);
        assert_eq!(a.next(&prev, load(0.0, 0.0), th(0.7, 0.7)), prev);
        // An allocation that did not use every core is no split to keep.
        let e_prev = groups(3, 2);
        assert_eq!(
            a.next(&e_prev, load(0.0, 0.0), th(0.7, 0.7)),
            groups(10, 10)
        );
    }

    /// Algorithm 2, line by line: growth, shrink held by the margin, shrink
    /// through the margin, overload, idle groups.
    #[test]
    fn vspace_e_replays_algorithm_2() {
        let a = alloc(VspaceMode::Energy);
        let th = th(0.5, 0.5);

        // Growth. Lines 2–3: ReqCore_vCPU = ceil(2.6 / 0.5) = ceil(5.2) = 6,
        // ReqCore_NQ = ceil(0.9 / 0.5) = ceil(1.8) = 2. Line 5: 8 <= 20.
        // Line 9: PrevCore_vCPU 4 > 6 is false, line 12: 6.
        // Line 14: PrevCore_NQ 2 > 2 is false, line 17: 2.
        let next = a.next(&groups(4, 2), load(2.6, 0.9), th);
        assert_eq!(next, groups(6, 2));
        assert_eq!(next.idle_cores, 12);

        // Shrink held. ReqCore_vCPU = ceil(2.3 / 0.5) = ceil(4.6) = 5.
        // Line 9: 6 > 5, line 10: ceil(1.1 × 4.6) = ceil(5.06) = 6.
        let next = a.next(&next, load(2.3, 0.9), th);
        assert_eq!(next, groups(6, 2));

        // Shrink. ReqCore_vCPU = ceil(2.0 / 0.5) = 4.
        // Line 9: 6 > 4, line 10: ceil(1.1 × 4) = ceil(4.4) = 5.
        let next = a.next(&next, load(2.0, 0.9), th);
        assert_eq!(next, groups(5, 2));

        // Overload. ReqCore = ceil(9 / 0.5) = 18 and ceil(3 / 0.5) = 6;
        // line 5: 24 > 20. Line 6: round(20 × 18 / 24) = 15.
        // Line 7: round(20 × 6 / 24) = 5.
        let next = a.next(&next, load(9.0, 3.0), th);
        assert_eq!(next, groups(15, 5));
        assert_eq!(next.idle_cores, 0);

        // Both idle. ReqCore 0 and 0 become 1 and 1 (departure). Line 10:
        // ceil(1.1 × 0) = 0, kept at ReqCore = 1.
        let next = a.next(&next, load(0.0, 0.0), th);
        assert_eq!(next, groups(1, 1));
        assert_eq!(next.idle_cores, 18);
    }

    /// The paper's line 10 would grow a group it shrinks once
    /// `0.1 × TotalUtil / Th > 1`; the margined value stays at most PrevCore.
    #[test]
    fn vspace_e_margin_never_grows_a_shrinking_group() {
        let a = alloc(VspaceMode::Energy);
        // TotalUtil / Th = 5.5 / 0.5 = 11: ReqCore 11 < PrevCore 12, and the
        // paper's ceil(1.1 × 11) = 13.
        let next = a.next(&groups(12, 2), load(5.5, 0.5), th(0.5, 0.5));
        assert_eq!(next.vcpu_cores, 12);
    }

    /// The paper's lines 9–18 can hand out more cores than exist when one
    /// group holds margin cores while the other grows; the margin gives way.
    #[test]
    fn vspace_e_margin_yields_to_the_other_groups_growth() {
        let a = CoreAllocator::new(VspaceMode::Energy, 4, 1.1).unwrap();
        let prev = CoreAllocation {
            vcpu_cores: 3,
            nq_cores: 1,
            idle_cores: 0,
            be_cores: 0,
        };
        // vCPU: ReqCore ceil(0.95 / 0.5) = ceil(1.9) = 2 < 3, line 10:
        // ceil(2.09) = 3. NQ: ReqCore ceil(0.75 / 0.5) = 2 > 1, line 17: 2.
        // The paper gives 3 + 2 = 5 cores of 4.
        let next = a.next(&prev, load(0.95, 0.75), th(0.5, 0.5));
        assert_eq!((next.vcpu_cores, next.nq_cores, next.idle_cores), (2, 2, 0));
    }

    /// vSPACE-R: vSPACE-E, then the spare cores go to BE VMs; with none spare
    /// they are paused.
    #[test]
    fn vspace_r_lends_spare_cores_to_best_effort_vms() {
        let a = alloc(VspaceMode::Resource);
        let th = th(0.5, 0.5);
        let prev = CoreAllocation {
            vcpu_cores: 4,
            nq_cores: 2,
            idle_cores: 0,
            be_cores: 14,
        };
        let next = a.next(&prev, load(2.6, 0.9), th);
        assert_eq!(
            next,
            CoreAllocation {
                vcpu_cores: 6,
                nq_cores: 2,
                idle_cores: 0,
                be_cores: 12
            }
        );
        assert!(!next.pause_be());

        let next = a.next(&next, load(9.0, 3.0), th);
        assert_eq!((next.vcpu_cores, next.nq_cores, next.be_cores), (15, 5, 0));
        assert!(next.pause_be());
    }

    /// `2.1 / 0.7` is 3.0000000000000004 in floating point: 3 cores, not 4.
    #[test]
    fn ceil_ignores_float_error() {
        assert_eq!((2.1_f64 / 0.7).ceil(), 4.0, "a plain ceil asks for 4");
        let a = alloc(VspaceMode::Energy);
        let next = a.next(&groups(1, 1), load(2.1, 0.7), th(0.7, 0.7));
        assert_eq!((next.vcpu_cores, next.nq_cores), (3, 1));
        assert_eq!(ceil_cores(0.0), 0);
        assert_eq!(ceil_cores(3.000_001), 4);
        assert_eq!(round_cores(2.5), 3);
        assert_eq!(round_cores(2.499_99), 2);
    }

    #[test]
    fn garbage_inputs_give_valid_allocations() {
        let bad = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            f64::MAX,
            1e300,
        ];
        let prevs = [
            CoreAllocation::default(),
            CoreAllocation {
                vcpu_cores: usize::MAX,
                nq_cores: usize::MAX,
                idle_cores: usize::MAX,
                be_cores: usize::MAX,
            },
            groups(10, 10),
        ];
        for mode in [
            VspaceMode::Performance,
            VspaceMode::Energy,
            VspaceMode::Resource,
        ] {
            for total in [2, 3, 20] {
                let a = CoreAllocator::new(mode, total, 1.1).unwrap();
                for &u in &bad {
                    for &t in &bad {
                        for prev in &prevs {
                            let next = a.next(prev, load(u, u), th(t, t));
                            assert!(next.is_valid_for(mode, total), "{mode} {u} {t} {next:?}");
                            let next = a.next(prev, load(u, 1.0), th(0.7, t));
                            assert!(next.is_valid_for(mode, total), "{mode} {u} {t} {next:?}");
                        }
                    }
                }
            }
        }
        // Infinite load reads as every core busy: all demand, split evenly.
        let a = alloc(VspaceMode::Energy);
        let next = a.next(
            &groups(1, 1),
            load(f64::INFINITY, f64::INFINITY),
            th(0.7, 0.7),
        );
        assert_eq!((next.vcpu_cores, next.nq_cores), (10, 10));
        // NaN load reads as idle.
        let next = a.next(&groups(1, 1), load(f64::NAN, f64::NAN), th(0.7, 0.7));
        assert_eq!((next.vcpu_cores, next.nq_cores), (1, 1));
        // A zero threshold reads as THRESHOLD_FLOOR: 0.1 / 0.01 = 10 cores.
        let next = a.next(&groups(1, 1), load(0.1, 0.1), th(0.0, 0.7));
        assert_eq!((next.vcpu_cores, next.nq_cores), (10, 1));
    }

    #[test]
    fn refuses_what_it_cannot_allocate() {
        for total in [0, 1, CoreAllocator::MAX_CORES + 1] {
            let err = CoreAllocator::new(VspaceMode::Energy, total, 1.1).unwrap_err();
            assert!(matches!(
                err,
                VspaceConfigError::InvalidParam {
                    param: "total_cores",
                    ..
                }
            ));
        }
        for margin in [0.9, f64::NAN, f64::INFINITY, 10.5] {
            let err = CoreAllocator::new(VspaceMode::Energy, 4, margin).unwrap_err();
            assert!(matches!(
                err,
                VspaceConfigError::InvalidParam {
                    param: "margin",
                    ..
                }
            ));
        }
        let err = CoreAllocator::new(VspaceMode::Off, 4, 1.1).unwrap_err();
        assert!(err.to_string().contains("`mode`"), "{err}");
    }

    #[test]
    fn initial_allocation_uses_every_core() {
        for total in [2, 3, 20, 21] {
            for mode in [
                VspaceMode::Performance,
                VspaceMode::Energy,
                VspaceMode::Resource,
            ] {
                let init = CoreAllocator::new(mode, total, 1.1).unwrap().initial();
                assert!(init.is_valid_for(mode, total));
                assert_eq!(init.vcpu_cores + init.nq_cores, total);
                assert!(init.vcpu_cores >= init.nq_cores);
            }
        }
    }

    #[test]
    fn mode_names() {
        for mode in VspaceMode::ALL {
            assert_eq!(mode.as_str().parse::<VspaceMode>().unwrap(), mode);
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
            assert_eq!(serde_json::from_str::<VspaceMode>(&json).unwrap(), mode);
        }
        assert_eq!(
            serde_json::from_str::<VspaceMode>("\"energy\"").unwrap(),
            VspaceMode::Energy
        );
        assert_eq!(
            "resource".parse::<VspaceMode>().unwrap(),
            VspaceMode::Resource
        );
        assert!("x".parse::<VspaceMode>().is_err());
        assert_eq!(VspaceMode::default(), VspaceMode::Off);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn managed_mode() -> impl Strategy<Value = VspaceMode> {
            prop_oneof![
                Just(VspaceMode::Performance),
                Just(VspaceMode::Energy),
                Just(VspaceMode::Resource),
            ]
        }

        /// Any f64, weighted towards the values that break arithmetic.
        fn any_util() -> impl Strategy<Value = f64> {
            prop_oneof![
                4 => 0.0f64..64.0,
                1 => any::<f64>(),
                1 => prop_oneof![
                    Just(f64::NAN),
                    Just(f64::INFINITY),
                    Just(f64::NEG_INFINITY),
                    Just(0.0),
                    Just(-1.0),
                ],
            ]
        }

        /// Reads one group's core count.
        type CoresOf = fn(&CoreAllocation) -> usize;

        fn sane_threshold() -> impl Strategy<Value = f64> {
            0.05f64..0.99
        }

        /// A valid allocation for `a`: what the allocator returns for some load.
        fn reachable(
            a: &CoreAllocator,
            vcpu_util: f64,
            nq_util: f64,
            t: Thresholds,
        ) -> CoreAllocation {
            a.next(&a.initial(), load(vcpu_util, nq_util), t)
        }

        proptest! {
            /// Whatever goes in, the allocation gives each group at least one
            /// core, accounts for every core and no more, and respects the
            /// mode: no idle core in P and R, no BE core in P and E.
            #[test]
            fn every_allocation_is_valid(
                mode in managed_mode(),
                total in 2usize..=64,
                margin in 1.0f64..=10.0,
                vcpu_util in any_util(),
                nq_util in any_util(),
                th_vcpu in any::<f64>(),
                th_nq in prop_oneof![any::<f64>(), sane_threshold()],
                prev in (any::<usize>(), 0usize..70, 0usize..70, any::<usize>()),
            ) {
                let a = CoreAllocator::new(mode, total, margin).unwrap();
                let prev = CoreAllocation {
                    vcpu_cores: prev.0 % 80,
                    nq_cores: prev.1,
                    idle_cores: prev.2,
                    be_cores: prev.3,
                };
                let next = a.next(&prev, load(vcpu_util, nq_util), th(th_vcpu, th_nq));
                prop_assert!(next.is_valid_for(mode, total), "{:?}", next);
                prop_assert!(next.vcpu_cores >= 1 && next.nq_cores >= 1);
                prop_assert!(next.vcpu_cores + next.nq_cores <= total);
                prop_assert_eq!(next.pause_be(), next.be_cores == 0);
            }

            /// Under constant load the allocation settles after one period
            /// and never moves again: no oscillation.
            #[test]
            fn constant_load_settles_in_one_period(
                mode in managed_mode(),
                total in 2usize..=64,
                margin in 1.0f64..=2.0,
                start in (0.0f64..64.0, 0.0f64..64.0),
                vcpu_util in 0.0f64..64.0,
                nq_util in 0.0f64..64.0,
                t in (sane_threshold(), sane_threshold()),
            ) {
                let a = CoreAllocator::new(mode, total, margin).unwrap();
                let t = th(t.0, t.1);
                let prev = reachable(&a, start.0, start.1, t);
                let first = a.next(&prev, load(vcpu_util, nq_util), t);
                let mut next = first;
                for _ in 0..5 {
                    next = a.next(&next, load(vcpu_util, nq_util), t);
                    prop_assert_eq!(next, first);
                }
            }

            /// More load on a group never takes a core from it and never gives
            /// one to the other group (from the same previous allocation and
            /// thresholds). In vSPACE-E and vSPACE-R more load never frees a
            /// core either: the cores in use do not fall, BE cores do not rise.
            #[test]
            fn response_to_load_is_monotone(
                mode in managed_mode(),
                total in 2usize..=64,
                margin in 1.0f64..=2.0,
                start in (0.0f64..64.0, 0.0f64..64.0),
                util in (0.0f64..64.0, 0.0f64..64.0),
                more in 0.0f64..16.0,
                on_vcpu in any::<bool>(),
                t in (sane_threshold(), sane_threshold()),
            ) {
                let a = CoreAllocator::new(mode, total, margin).unwrap();
                let t = th(t.0, t.1);
                let prev = reachable(&a, start.0, start.1, t);
                let low = a.next(&prev, load(util.0, util.1), t);
                let (high_load, own, other): (GroupLoad, CoresOf, CoresOf) =
                    if on_vcpu {
                        (load(util.0 + more, util.1), |c| c.vcpu_cores, |c| c.nq_cores)
                    } else {
                        (load(util.0, util.1 + more), |c| c.nq_cores, |c| c.vcpu_cores)
                    };
                let high = a.next(&prev, high_load, t);
                prop_assert!(own(&high) >= own(&low), "{:?} -> {:?}", low, high);
                prop_assert!(other(&high) <= other(&low), "{:?} -> {:?}", low, high);
                prop_assert!(
                    high.vcpu_cores + high.nq_cores >= low.vcpu_cores + low.nq_cores,
                    "{:?} -> {:?}", low, high
                );
                prop_assert!(high.be_cores <= low.be_cores);
            }

            /// vSPACE-P uses every core; vSPACE-E and vSPACE-R use the same
            /// cores for the groups whatever becomes of the rest.
            #[test]
            fn modes_agree_where_the_paper_says_they_do(
                total in 2usize..=64,
                start in (0.0f64..64.0, 0.0f64..64.0),
                util in (0.0f64..64.0, 0.0f64..64.0),
                t in (sane_threshold(), sane_threshold()),
            ) {
                let t = th(t.0, t.1);
                let p = CoreAllocator::new(VspaceMode::Performance, total, 1.1).unwrap();
                let e = CoreAllocator::new(VspaceMode::Energy, total, 1.1).unwrap();
                let r = CoreAllocator::new(VspaceMode::Resource, total, 1.1).unwrap();
                let next_p = p.next(&reachable(&p, start.0, start.1, t), load(util.0, util.1), t);
                prop_assert_eq!(next_p.vcpu_cores + next_p.nq_cores, total);
                let next_e = e.next(&reachable(&e, start.0, start.1, t), load(util.0, util.1), t);
                let next_r = r.next(&reachable(&r, start.0, start.1, t), load(util.0, util.1), t);
                prop_assert_eq!(
                    (next_e.vcpu_cores, next_e.nq_cores, next_e.idle_cores),
                    (next_r.vcpu_cores, next_r.nq_cores, next_r.be_cores)
                );
            }
        }
    }
}
