//! A VM port's rate limits between the control socket and its worker: the
//! limits asked for, and the worker's policers kept between its
//! incarnations.
//!
//! The worker restarts with the frontend's rings (a vring change, a queue
//! count set from the guest). Were its buckets built anew each time, they
//! would start full, and a guest that makes its rings change would get a
//! fresh burst every time. So a stopping worker parks its
//! [`PortPolicers`] here ([`LimitsSlot::park`]) and the next one takes them
//! ([`LimitsSlot::take`]); between the two they earn what the time earns
//! them, no more. A change from the control socket ([`LimitsSlot::set`])
//! reaches a running worker after its current pass
//! ([`LimitsSlot::changed`], lock-free while nothing changed), and a
//! parked one when it is taken.
//!
//! Its two locks are leaves of the daemon's lock order
//! (`docs/reliability.md`): each is held for a copy or a swap, nothing is
//! locked or called while it is held, and they are never held together.
//! `set-limits` takes one under the port book's lock.

use crate::config::PortLimits;
use crate::policing::PortPolicers;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use vadapt_policy::Instant;

/// See the module documentation.
#[derive(Debug)]
pub struct LimitsSlot {
    /// The limits asked for (the configuration's, or the last change's).
    limits: Mutex<PortLimits>,
    /// Bumped by every change.
    gen: AtomicU64,
    /// The last worker's policers, until the next one takes them.
    parked: Mutex<Option<PortPolicers>>,
}

impl LimitsSlot {
    /// A slot starting with `limits` (already checked).
    pub fn new(limits: PortLimits) -> Self {
        LimitsSlot {
            limits: Mutex::new(limits),
            gen: AtomicU64::new(0),
            parked: Mutex::new(None),
        }
    }

    /// The limits asked for.
    pub fn get(&self) -> PortLimits {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for `limits` instead (checked by the caller against the port);
    /// a running worker applies them after its current pass.
    pub fn set(&self, limits: PortLimits) {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = limits;
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// The policers a starting worker holds, as of `now`: the parked ones,
    /// brought to the limits asked for, or new ones; with the change count
    /// they stand for (for [`LimitsSlot::changed`]).
    pub fn take(&self, now: Instant) -> (PortPolicers, u64) {
        let gen = self.gen.load(Ordering::Acquire);
        let limits = self.get();
        let parked = self.parked.lock().unwrap_or_else(|e| e.into_inner()).take();
        let policers = match parked {
            Some(mut p) => {
                p.update(limits, now);
                p
            }
            None => PortPolicers::new(limits, now),
        };
        (policers, gen)
    }

    /// A stopping worker hands its policers back.
    pub fn park(&self, policers: PortPolicers) {
        *self.parked.lock().unwrap_or_else(|e| e.into_inner()) = Some(policers);
    }

    /// The limits asked for if they changed since `seen`, which follows;
    /// `None` (one atomic load) when they did not.
    pub fn changed(&self, seen: &mut u64) -> Option<PortLimits> {
        let gen = self.gen.load(Ordering::Acquire);
        if gen == *seen {
            return None;
        }
        *seen = gen;
        Some(self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storm(pps: u32) -> PortLimits {
        PortLimits {
            storm_control_pps: pps,
            ..PortLimits::NONE
        }
    }

    #[test]
    fn a_restarted_worker_gets_its_buckets_back_not_full_ones() {
        let s = LimitsSlot::new(storm(10));
        let (mut p, mut seen) = s.take(Instant(0));
        assert!(s.changed(&mut seen).is_none());
        assert!(p.parts().1.unwrap().take(10));
        s.park(p);
        // Taken again at once: still empty.
        let (mut p, _) = s.take(Instant(0));
        assert_eq!(p.parts().1.unwrap().tokens(), 0);
        s.park(p);
        // A change meanwhile reaches the next worker.
        s.set(storm(50));
        let (mut p, _) = s.take(Instant(0));
        assert_eq!(p.limits(), storm(50));
        assert_eq!(p.parts().1.unwrap().tokens(), 50);
    }

    #[test]
    fn a_running_worker_sees_each_change_once() {
        let s = LimitsSlot::new(PortLimits::NONE);
        let (_p, mut seen) = s.take(Instant(0));
        assert!(s.changed(&mut seen).is_none());
        s.set(storm(5));
        assert_eq!(s.changed(&mut seen), Some(storm(5)));
        assert!(s.changed(&mut seen).is_none());
        assert_eq!(s.get(), storm(5));
    }
}
