//! From core counts to CPU ids: which CPUs each group gets, moving as few as
//! possible from the previous placement.
//!
//! The allocator counts cores ([`CoreAllocation`]); the caller (the core
//! manager loop) needs CPU ids to write cpusets, pin threads and set idle
//! cores' frequency. [`CoreSets::place`] turns counts and the list of managed
//! CPUs into four disjoint sets, deterministically:
//!
//! 1. Each group keeps as many of its previous CPUs as its new count allows,
//!    the first ones in the CPU list's order.
//! 2. The CPUs left over go, in the list's order, to the groups still short
//!    of their count, in the order NQ, vCPU, best-effort, idle. On a first
//!    placement the NQ group therefore gets the first CPUs of the list (the
//!    paper's CPU 0 served packet processing, §5.2), the vCPU group the next.
//!
//! Step 1 is minimal movement: a group of `new` cores that had `old` of the
//! listed CPUs can keep at most `min(new, old)` of them, so no placement
//! moves fewer than `cpus − Σ min(new, old)` CPUs to another group, and
//! `place` moves exactly that many ([`CoreSets::moved_from`]).

use super::core_alloc::CoreAllocation;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// Why CPUs could not be placed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    /// The CPU list's length is not the allocation's total.
    #[error("{cpus} CPUs listed for an allocation of {cores} cores")]
    CountMismatch {
        /// CPUs listed.
        cpus: usize,
        /// Cores in the allocation ([`CoreAllocation::total`]).
        cores: usize,
    },
    /// A CPU id appears twice in the list.
    #[error("CPU {0} is listed twice")]
    DuplicateCpu(usize),
}

/// The CPUs of each group, each set in the order of the CPU list it was
/// placed from. Disjoint when built by [`CoreSets::place`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CoreSets {
    /// CPUs of the vCPU group.
    pub vcpu: Vec<usize>,
    /// CPUs of the NQ group.
    pub nq: Vec<usize>,
    /// CPUs lent to best-effort VMs.
    pub be: Vec<usize>,
    /// Idle CPUs (lowest frequency where cpufreq exists).
    pub idle: Vec<usize>,
}

/// Group order for both steps of a placement: NQ, vCPU, best-effort, idle.
const GROUPS: usize = 4;

impl CoreSets {
    /// The sets in placement order (NQ, vCPU, best-effort, idle).
    fn in_order(&self) -> [&Vec<usize>; GROUPS] {
        [&self.nq, &self.vcpu, &self.be, &self.idle]
    }

    /// Place `alloc` on `cpus` (the managed CPU ids, as many as
    /// `alloc.total()`, no repeats), moving as few CPUs as possible from
    /// `prev`. `prev` may be anything: CPUs it names that are not listed are
    /// ignored, and a CPU it names in two groups is kept by the first in the
    /// order NQ, vCPU, best-effort, idle. Pass `CoreSets::default()` for a
    /// first placement.
    pub fn place(
        alloc: &CoreAllocation,
        cpus: &[usize],
        prev: &CoreSets,
    ) -> Result<CoreSets, PlacementError> {
        if cpus.len() != alloc.total() {
            return Err(PlacementError::CountMismatch {
                cpus: cpus.len(),
                cores: alloc.total(),
            });
        }
        let mut seen = HashSet::with_capacity(cpus.len());
        if let Some(&dup) = cpus.iter().find(|&&c| !seen.insert(c)) {
            return Err(PlacementError::DuplicateCpu(dup));
        }
        let want = [
            alloc.nq_cores,
            alloc.vcpu_cores,
            alloc.be_cores,
            alloc.idle_cores,
        ];
        // The group each CPU was in before (the first, if prev names it twice).
        let mut before: HashMap<usize, usize> = HashMap::new();
        for (g, set) in prev.in_order().into_iter().enumerate() {
            for &cpu in set {
                before.entry(cpu).or_insert(g);
            }
        }
        let mut owner: Vec<Option<usize>> = vec![None; cpus.len()];
        let mut have = [0usize; GROUPS];
        // Step 1: keep previous CPUs, in list order, up to the new count.
        for (i, cpu) in cpus.iter().enumerate() {
            if let Some(&g) = before.get(cpu) {
                if have[g] < want[g] {
                    owner[i] = Some(g);
                    have[g] += 1;
                }
            }
        }
        // Step 2: the rest, in list order, to the groups still short.
        let mut g = 0;
        for slot in owner.iter_mut().filter(|o| o.is_none()) {
            while have[g] == want[g] {
                g += 1;
            }
            *slot = Some(g);
            have[g] += 1;
        }
        let mut sets: [Vec<usize>; GROUPS] = Default::default();
        for (cpu, g) in cpus.iter().zip(owner) {
            // Every slot was filled: step 2 covered the rest, and the counts
            // add up to cpus.len().
            if let Some(g) = g {
                sets[g].push(*cpu);
            }
        }
        let [nq, vcpu, be, idle] = sets;
        Ok(CoreSets { vcpu, nq, be, idle })
    }

    /// CPUs of `self` that were not in the same group in `prev` (a CPU
    /// `prev` does not name counts as moved).
    pub fn moved_from(&self, prev: &CoreSets) -> usize {
        self.in_order()
            .into_iter()
            .zip(prev.in_order())
            .map(|(now, before)| {
                let before: HashSet<&usize> = before.iter().collect();
                now.iter().filter(|c| !before.contains(c)).count()
            })
            .sum()
    }

    /// Every CPU of the four sets.
    pub fn all(&self) -> impl Iterator<Item = usize> + '_ {
        self.in_order().into_iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(vcpu: usize, nq: usize, be: usize, idle: usize) -> CoreAllocation {
        CoreAllocation {
            vcpu_cores: vcpu,
            nq_cores: nq,
            idle_cores: idle,
            be_cores: be,
        }
    }

    #[test]
    fn first_placement_fills_nq_then_vcpu_then_the_rest() {
        let cpus = [2, 3, 4, 5, 6, 7];
        let s = CoreSets::place(&alloc(3, 1, 0, 2), &cpus, &CoreSets::default()).unwrap();
        assert_eq!(s.nq, [2]);
        assert_eq!(s.vcpu, [3, 4, 5]);
        assert_eq!(s.idle, [6, 7]);
        assert!(s.be.is_empty());
    }

    /// vSPACE-E grows the vCPU group into an idle CPU and shrinks the NQ
    /// group: only the CPUs that must move do.
    #[test]
    fn later_placements_move_only_what_they_must() {
        let cpus = [0, 1, 2, 3, 4, 5];
        let prev = CoreSets {
            nq: vec![0, 1],
            vcpu: vec![2, 3],
            be: vec![],
            idle: vec![4, 5],
        };
        let s = CoreSets::place(&alloc(3, 1, 0, 2), &cpus, &prev).unwrap();
        // NQ keeps 0, vCPU keeps 2 and 3, idle keeps 4 and 5; CPU 1 is the
        // only one left and goes to the vCPU group.
        assert_eq!(s.nq, [0]);
        assert_eq!(s.vcpu, [1, 2, 3]);
        assert_eq!(s.idle, [4, 5]);
        assert_eq!(s.moved_from(&prev), 1);
        // Same allocation again: nothing moves.
        let again = CoreSets::place(&alloc(3, 1, 0, 2), &cpus, &s).unwrap();
        assert_eq!(again, s);
        assert_eq!(again.moved_from(&s), 0);
    }

    #[test]
    fn refuses_bad_cpu_lists() {
        let a = alloc(1, 1, 0, 0);
        assert_eq!(
            CoreSets::place(&a, &[0, 1, 2], &CoreSets::default()),
            Err(PlacementError::CountMismatch { cpus: 3, cores: 2 })
        );
        assert_eq!(
            CoreSets::place(&a, &[4, 4], &CoreSets::default()),
            Err(PlacementError::DuplicateCpu(4))
        );
    }

    #[test]
    fn tolerates_a_messy_previous_placement() {
        // CPU 9 is not listed; CPU 1 is in two groups (NQ keeps it).
        let prev = CoreSets {
            nq: vec![9, 1],
            vcpu: vec![1, 0],
            be: vec![],
            idle: vec![],
        };
        let s = CoreSets::place(&alloc(1, 1, 0, 0), &[0, 1], &prev).unwrap();
        assert_eq!((s.nq.as_slice(), s.vcpu.as_slice()), (&[1][..], &[0][..]));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// An allocation of 4 counts and a shuffled list of distinct CPU ids
        /// as long as their sum.
        fn counts_and_cpus() -> impl Strategy<Value = ([usize; 4], Vec<usize>)> {
            (0usize..6, 0usize..6, 0usize..6, 0usize..6).prop_flat_map(|(a, b, c, d)| {
                let n = a + b + c + d;
                (
                    Just([a, b, c, d]),
                    proptest::sample::subsequence((0..64).collect::<Vec<_>>(), n).prop_shuffle(),
                )
            })
        }

        fn counts(n: usize) -> impl Strategy<Value = [usize; 4]> {
            // Four counts adding up to n.
            proptest::collection::vec(0..=n, 3).prop_map(move |mut cuts| {
                cuts.sort_unstable();
                [cuts[0], cuts[1] - cuts[0], cuts[2] - cuts[1], n - cuts[2]]
            })
        }

        fn to_alloc(c: [usize; 4]) -> CoreAllocation {
            alloc(c[0], c[1], c[2], c[3])
        }

        proptest! {
            /// A placement partitions the CPU list into sets of the asked
            /// sizes; the same inputs give the same placement; placing the
            /// same counts again moves nothing.
            #[test]
            fn placement_partitions_the_cpus((c, cpus) in counts_and_cpus()) {
                let a = to_alloc(c);
                let s = CoreSets::place(&a, &cpus, &CoreSets::default()).unwrap();
                prop_assert_eq!(
                    [s.vcpu.len(), s.nq.len(), s.be.len(), s.idle.len()],
                    [a.vcpu_cores, a.nq_cores, a.be_cores, a.idle_cores]
                );
                let mut all: Vec<usize> = s.all().collect();
                let mut listed = cpus.clone();
                all.sort_unstable();
                listed.sort_unstable();
                prop_assert_eq!(all, listed);
                prop_assert_eq!(&CoreSets::place(&a, &cpus, &CoreSets::default()).unwrap(), &s);
                let again = CoreSets::place(&a, &cpus, &s).unwrap();
                prop_assert_eq!(&again, &s);
            }

            /// From any earlier placement on the same CPUs, a new one moves
            /// exactly `cpus − Σ min(new, old)` CPUs: the fewest possible.
            #[test]
            fn placement_moves_the_fewest_cpus(
                (c, cpus) in counts_and_cpus(),
                next in counts(24),
            ) {
                let n = cpus.len();
                let prev = CoreSets::place(&to_alloc(c), &cpus, &CoreSets::default()).unwrap();
                // Rescale `next` to n CPUs, keeping four counts that add up to n.
                let mut scaled = next.map(|x| x * n / 24);
                let short = n - scaled.iter().sum::<usize>();
                scaled[1] += short;
                let a = to_alloc(scaled);
                let s = CoreSets::place(&a, &cpus, &prev).unwrap();
                let old = [prev.vcpu.len(), prev.nq.len(), prev.be.len(), prev.idle.len()];
                let keepable: usize = scaled.iter().zip(old).map(|(&new, old)| new.min(old)).sum();
                prop_assert_eq!(s.moved_from(&prev), n - keepable);
            }
        }
    }
}
