//! Threads of a set's own, as the daemon's default arrangement gives them
//! ([`super::Runtime::Thread`]): never more busy threads than CPUs.
//!
//! Two busy-polling threads on one CPU do not share it: the scheduler
//! alternates them by its ticks (4 ms at 250 Hz), and each port's guest
//! waits a whole tick for its worker; B8's per-port leg lost 89.7 % of its
//! frames at saturation so, where one worker serving both ports lost
//! nothing. So, as the NQ pool does:
//! * sets pinned to one CPU share one thread, pinned there;
//! * unpinned sets get a thread each while there are fewer such threads
//!   than CPUs the daemon may run on, then join the thread serving the
//!   fewest.
//!
//! A thread is a pool of one ([`NqWorkers::dedicated`]); it ends when the
//! last set it serves is stopped.

use super::pool::{NqWorkers, NqWorkersError};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The threads serving sets now (weak: a thread ends with its last set).
#[derive(Default)]
struct Threads {
    /// One per CPU sets are pinned to.
    pinned: BTreeMap<usize, Weak<NqWorkers>>,
    /// Unpinned sets' threads.
    unpinned: Vec<Weak<NqWorkers>>,
}

static THREADS: Mutex<Threads> = Mutex::new(Threads {
    pinned: BTreeMap::new(),
    unpinned: Vec::new(),
});

/// A set id no other set served by these threads has (never the pool's
/// epoll token for its inbox, `u64::MAX`).
pub(crate) fn set_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// How many CPUs this process may run on.
fn cpus_allowed() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The thread to serve a set on: pinned to `cpu` if given. A new one is
/// named `name`.
pub(crate) fn thread_for(name: &str, cpu: Option<usize>) -> Result<Arc<NqWorkers>, NqWorkersError> {
    let mut t = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(cpu) = cpu {
        if let Some(pool) = t.pinned.get(&cpu).and_then(Weak::upgrade) {
            return Ok(pool);
        }
        let pool = NqWorkers::dedicated(name.to_string(), Some(cpu))?;
        t.pinned.insert(cpu, Arc::downgrade(&pool));
        return Ok(pool);
    }
    t.unpinned.retain(|w| w.strong_count() > 0);
    if t.unpinned.len() >= cpus_allowed() {
        let least = t
            .unpinned
            .iter()
            .filter_map(Weak::upgrade)
            .min_by_key(|p| p.attached());
        if let Some(pool) = least {
            return Ok(pool);
        }
    }
    let pool = NqWorkers::dedicated(name.to_string(), None)?;
    t.unpinned.push(Arc::downgrade(&pool));
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_pinned_to_one_cpu_share_its_thread() {
        let a = thread_for("vadapt-w-a", Some(0)).unwrap();
        let b = thread_for("vadapt-w-b", Some(0)).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one thread for CPU 0");
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn unpinned_sets_never_have_more_threads_than_cpus() {
        let n = cpus_allowed();
        let pools: Vec<_> = (0..n + 2)
            .map(|i| thread_for(&format!("vadapt-w-{i}"), None).unwrap())
            .collect();
        let mut distinct: Vec<&Arc<NqWorkers>> = Vec::new();
        for p in &pools {
            if !distinct.iter().any(|d| Arc::ptr_eq(d, p)) {
                distinct.push(p);
            }
        }
        assert!(
            distinct.len() <= n,
            "{} threads for {n} CPUs",
            distinct.len()
        );
    }
}
