//! Which queue worker serves which queue set, when the NQ group has `k`
//! workers (one per NQ core).
//!
//! OVS-DPDK assigns receive queues to its PMD threads round-robin or by
//! measured cycles (`other_config:pmd-rxq-assign`), and reassigns them all
//! when the PMD set changes. Here the unit is a *queue set* (the queue pairs
//! of one VM port, which share one policy instance), and the assignment is
//! **count-balanced and stable**:
//!
//! 1. Every worker serves `⌊n/k⌋` or `⌈n/k⌉` of the `n` queue sets.
//! 2. A queue set stays with its previous worker whenever that worker still
//!    exists and keeping it does not break rule 1 (sets are considered in id
//!    order).
//! 3. The others go, in id order, to the worker serving the fewest (the
//!    lowest index on a tie).
//!
//! So growing from `k` to `k + 1` workers moves only the sets the new worker
//! needs to be balanced, shrinking moves only the removed workers' sets (and
//! those needed to rebalance), and assigning again with nothing changed
//! moves nothing. Balancing by count rather than by measured cycles is a
//! departure from OVS's default `cycles` mode: the workers' policies make
//! their CPU time follow load, but a cheap, predictable count is what the
//! handoff tests check.

use std::collections::BTreeMap;

/// Queue set id → worker index.
pub type QueueAssignment = BTreeMap<u64, usize>;

/// Assigns `sets` (ids; duplicates are ignored) to `workers` workers, keeping
/// what `previous` says where rules 1-2 allow (see the module docs). With no
/// worker, nothing is assigned (the map is empty).
pub fn assign_queue_sets(
    sets: &[u64],
    workers: usize,
    previous: &QueueAssignment,
) -> QueueAssignment {
    let mut ids: Vec<u64> = sets.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = QueueAssignment::new();
    if workers == 0 {
        return out;
    }
    let n = ids.len();
    let (q, r) = (n / workers, n % workers);
    let mut count = vec![0usize; workers];
    let mut big = 0; // workers already holding q + 1
    let mut rest = Vec::new();
    for &id in &ids {
        let kept = match previous.get(&id) {
            Some(&w) if w < workers && count[w] < q => Some(w),
            Some(&w) if w < workers && count[w] == q && big < r => {
                big += 1;
                Some(w)
            }
            _ => None,
        };
        match kept {
            Some(w) => {
                count[w] += 1;
                out.insert(id, w);
            }
            None => rest.push(id),
        }
    }
    for id in rest {
        let w = (0..workers)
            .min_by_key(|&w| (count[w], w))
            .expect("at least one worker");
        count[w] += 1;
        out.insert(id, w);
    }
    debug_assert!(is_balanced(&out, workers));
    out
}

/// Whether every worker of `0..workers` serves `⌊n/k⌋` or `⌈n/k⌉` sets.
pub fn is_balanced(a: &QueueAssignment, workers: usize) -> bool {
    if workers == 0 {
        return a.is_empty();
    }
    let mut count = vec![0usize; workers];
    for &w in a.values() {
        match count.get_mut(w) {
            Some(c) => *c += 1,
            None => return false,
        }
    }
    let (min, max) = (count.iter().min(), count.iter().max());
    matches!((min, max), (Some(lo), Some(hi)) if hi - lo <= 1)
}

/// How many sets changed worker from `before` to `after` (sets only in one
/// of them do not count).
pub fn moved(before: &QueueAssignment, after: &QueueAssignment) -> usize {
    after
        .iter()
        .filter(|(id, w)| before.get(id).is_some_and(|b| b != *w))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(pairs: &[(u64, usize)]) -> QueueAssignment {
        pairs.iter().copied().collect()
    }

    #[test]
    fn first_assignment_is_round_robin_in_id_order() {
        let out = assign_queue_sets(&[7, 3, 5, 9, 3], 2, &QueueAssignment::new());
        assert_eq!(out, a(&[(3, 0), (5, 1), (7, 0), (9, 1)]));
    }

    #[test]
    fn growing_moves_only_what_the_new_worker_needs() {
        let one = assign_queue_sets(&[1, 2, 3, 4], 1, &QueueAssignment::new());
        assert_eq!(one, a(&[(1, 0), (2, 0), (3, 0), (4, 0)]));
        let two = assign_queue_sets(&[1, 2, 3, 4], 2, &one);
        assert_eq!(two, a(&[(1, 0), (2, 0), (3, 1), (4, 1)]));
        assert_eq!(moved(&one, &two), 2);
        let three = assign_queue_sets(&[1, 2, 3, 4], 3, &two);
        assert_eq!(moved(&two, &three), 1, "{three:?}");
        assert!(is_balanced(&three, 3));
    }

    #[test]
    fn shrinking_moves_the_removed_workers_sets_only() {
        let two = a(&[(1, 0), (2, 1), (3, 0), (4, 1)]);
        let one = assign_queue_sets(&[1, 2, 3, 4], 1, &two);
        assert_eq!(moved(&two, &one), 2);
        assert!(one.values().all(|&w| w == 0));
    }

    #[test]
    fn a_new_set_goes_to_the_least_loaded_worker_and_moves_nobody() {
        let before = a(&[(1, 0), (2, 1), (3, 0)]);
        let after = assign_queue_sets(&[1, 2, 3, 4], 2, &before);
        assert_eq!(moved(&before, &after), 0);
        assert_eq!(after[&4], 1);
    }

    #[test]
    fn no_worker_assigns_nothing() {
        assert!(assign_queue_sets(&[1, 2], 0, &QueueAssignment::new()).is_empty());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn balanced_complete_and_stable(
                ids in proptest::collection::vec(0u64..40, 0..30),
                prev in proptest::collection::btree_map(0u64..40, 0usize..6, 0..30),
                k in 1usize..6,
            ) {
                let out = assign_queue_sets(&ids, k, &prev);
                prop_assert!(is_balanced(&out, k));
                let mut want = ids.clone();
                want.sort_unstable();
                want.dedup();
                prop_assert_eq!(out.keys().copied().collect::<Vec<_>>(), want);
                // Assigning again with nothing changed moves nothing.
                prop_assert_eq!(assign_queue_sets(&ids, k, &out), out.clone());
                // A set moves only off a removed worker or to rebalance:
                // each surviving worker keeps at least min(had, n / k).
                let q = out.len() / k;
                let mut had = vec![0usize; k];
                for (id, &w) in &prev {
                    if out.contains_key(id) && w < k {
                        had[w] += 1;
                    }
                }
                let floor: usize = had.iter().map(|&c| c.min(q)).sum();
                let kept = out.iter().filter(|(id, w)| prev.get(id) == Some(w)).count();
                prop_assert!(kept >= floor, "kept {} < {}", kept, floor);
            }
        }
    }
}
