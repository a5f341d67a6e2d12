//! The locks whose order the daemon checks.
//!
//! The daemon's shared state is behind a few locks, taken in one order
//! (`docs/reliability.md`, "Lock order"): the port book, then the roster,
//! then the switch's tables, then the counters' registry. A thread holding a
//! later lock never waits for an earlier one. A broken order is a deadlock
//! waiting for the wrong interleaving (a port deletion beside a worker
//! refreshing its table deadlocked this way), which no test finds by
//! running it often enough.
//!
//! So in debug builds (`cargo test`) these are `tracing_mutex`'s locks:
//! every acquisition made while another of them is held adds an edge to a
//! process-wide graph, and the first acquisition that would close a cycle
//! panics, naming both places, whether or not the threads happened to
//! deadlock. Release builds use `std::sync`'s locks unchanged.

pub use tracing_mutex::stdsync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn a_broken_order_panics_in_debug_builds() {
        let a = Mutex::new(());
        let b = Mutex::new(());
        {
            let _a = a.lock().unwrap();
            let _b = b.lock().unwrap();
        }
        let inverted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _b = b.lock().unwrap();
            let _a = a.lock().unwrap();
        }));
        assert!(inverted.is_err(), "b then a after a then b must panic");
    }
}
