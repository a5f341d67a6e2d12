//! Host CPU scheduler: processor sharing of the physical cores.
//!
//! Every runnable thread (a vCPU running a sender or a server, a queue worker
//! in a service pass) gets an equal share of the cores, at most one core:
//! the fluid limit of CFS at time scales above its slice. When more threads
//! are runnable than there are cores, each core switches thread once per
//! slice, and each switch costs a context switch, so the usable capacity
//! shrinks by `context_switch / slice`.
//!
//! One `Scheduler` serves each core group ([`crate::cores`]): the engine
//! builds one per group with the group's cores. Wake-up preemption of a
//! request's vCPU by a queue worker is modelled there, on top of these
//! shares. Left out (stated in the crate docs): per-core run queues, SMT.

/// The processor-sharing scheduler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scheduler {
    /// Physical cores.
    pub cores: f64,
    /// Time slice when oversubscribed, ns.
    pub slice_ns: f64,
    /// Context switch cost, ns.
    pub context_switch_ns: f64,
}

impl Scheduler {
    /// Fraction of one core that each of `runnable` threads gets (≤ 1).
    /// `runnable` may be fractional (a VM's sender threads are spread over its
    /// queues).
    pub fn share(&self, runnable: f64) -> f64 {
        if runnable <= self.cores {
            1.0
        } else {
            let usable = 1.0 - (self.context_switch_ns / self.slice_ns).min(1.0);
            self.cores * usable / runnable
        }
    }

    /// Cores kept busy when `runnable` threads compete.
    pub fn busy_cores(&self, runnable: f64) -> f64 {
        (runnable * self.share(runnable)).min(self.cores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s() -> Scheduler {
        Scheduler {
            cores: 2.0,
            slice_ns: 3_000_000.0,
            context_switch_ns: 3_000.0,
        }
    }

    #[test]
    fn undersubscribed_threads_get_a_whole_core() {
        assert_eq!(s().share(1.0), 1.0);
        assert_eq!(s().share(2.0), 1.0);
    }

    #[test]
    fn oversubscribed_cores_are_time_shared_minus_switch_cost() {
        let share = s().share(4.0);
        // Two cores for four threads, less 0.1 % for a switch per 3 ms slice.
        assert!((share - 0.5 * 0.999).abs() < 1e-12, "{share}");
        assert!(s().busy_cores(4.0) < 2.0);
        // More threads, smaller shares; the sum never exceeds the cores.
        assert!(s().share(8.0) < share);
        assert!(s().busy_cores(8.0) <= 2.0);
    }
}
