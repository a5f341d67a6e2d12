//! A port's rate limits between the control socket and the threads that
//! apply them: the limits asked for, and the port's policers, kept between
//! a worker's incarnations or shared by several senders.
//!
//! Two ways to hold the policers:
//!
//! * **One sender at a time** (a VM port's worker, a TAP port's reader):
//!   it takes them when it starts ([`LimitsSlot::take`]), holds them with
//!   no lock, and parks them when it stops ([`LimitsSlot::park`]). A VM
//!   port's worker restarts with the frontend's rings (a vring change, a
//!   queue count set from the guest); were its buckets built anew each
//!   time, they would start full, and a guest that makes its rings change
//!   would get a fresh burst every time. Between the two they earn what
//!   the time earns them, no more. A change from the control socket
//!   ([`LimitsSlot::set`]) reaches a running sender after its current pass
//!   ([`LimitsSlot::changed`], lock-free while nothing changed), and a
//!   parked one when it is taken.
//! * **Several senders at once** (an uplink's queue workers, one a NIC
//!   queue): they share one set of buckets behind the slot's lock
//!   ([`LimitsSlot::with_shared`]), as OVS-DPDK's queues share one meter
//!   behind a spinlock (`netdev-dpdk.c`, `ingress_policer_run`), so the port
//!   gets its rate however RSS spreads its frames. Without limits no lock
//!   is taken (one atomic load).
//!
//! Its two locks are leaves of the daemon's lock order
//! (`docs/reliability.md`): each is held for a copy, a swap or (shared
//! mode) the policing of one chunk of frames, nothing else is locked or
//! called while it is held, and they are never held together.
//! `set-limits` takes one under the port book's lock.

use super::port_policers::PortPolicers;
use crate::config::PortLimits;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use vadapt_policy::Instant;

/// See the module documentation.
#[derive(Debug)]
pub struct LimitsSlot {
    /// The limits asked for (the configuration's, or the last change's).
    limits: Mutex<PortLimits>,
    /// Bumped by every change.
    gen: AtomicU64,
    /// True while the limits asked for limit something.
    limited: AtomicBool,
    /// The last worker's policers, until the next one takes them; in
    /// shared mode, the policers every sender uses.
    parked: Mutex<Option<PortPolicers>>,
    /// Shared mode: 1 + the change count the shared policers stand for
    /// (0: none built yet). Written only with `parked` locked.
    shared_gen: AtomicU64,
}

impl LimitsSlot {
    /// A slot starting with `limits` (already checked).
    pub fn new(limits: PortLimits) -> Self {
        LimitsSlot {
            limits: Mutex::new(limits),
            gen: AtomicU64::new(0),
            limited: AtomicBool::new(!limits.is_unlimited()),
            parked: Mutex::new(None),
            shared_gen: AtomicU64::new(0),
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
        self.limited
            .store(!limits.is_unlimited(), Ordering::Release);
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

    /// Shared mode: `f` with the port's policers, brought to the limits
    /// asked for and refilled to `now()`, the slot's lock held while `f`
    /// runs (it must lock nothing and call nothing that does). `f` gets
    /// `None`, and neither the lock is taken nor `now` read, while nothing
    /// is limited. The senders' clocks need only roughly agree: a `now`
    /// behind the buckets' last one earns nothing, so the buckets follow
    /// the latest of them and never earn a stretch of time twice.
    pub fn with_shared<R>(
        &self,
        now: impl FnOnce() -> Instant,
        f: impl FnOnce(Option<&mut PortPolicers>) -> R,
    ) -> R {
        if !self.limited.load(Ordering::Acquire) {
            return f(None);
        }
        let now = now();
        // The limits are read before `parked` is locked (the two locks are
        // never held together); a reader that lost a race to a newer
        // change does not apply its older limits (`shared_gen` only grows).
        let gen = self.gen.load(Ordering::Acquire);
        let fresh = gen + 1 > self.shared_gen.load(Ordering::Acquire);
        let limits = fresh.then(|| self.get());
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(limits) = limits.filter(|_| gen + 1 > self.shared_gen.load(Ordering::Acquire)) {
            match parked.as_mut() {
                Some(p) => p.update(limits, now),
                None => *parked = Some(PortPolicers::new(limits, now)),
            }
            self.shared_gen.store(gen + 1, Ordering::Release);
        }
        let p = parked.as_mut().expect("built on the first call");
        p.refill(now);
        f(Some(p))
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

    #[test]
    fn shared_policers_are_one_set_of_buckets_and_follow_changes() {
        let s = LimitsSlot::new(PortLimits::NONE);
        // Nothing limited: no policers, no clock read.
        s.with_shared(|| panic!("clock read"), |p| assert!(p.is_none()));
        s.set(storm(10));
        let flood = |t: u64| s.with_shared(|| Instant(t), |p| p.expect("limited").admit_flood());
        // Two senders drawing on one bucket: ten floods between them.
        assert_eq!((0..20).filter(|_| flood(0)).count(), 10);
        // 100 ms later: one more token (10/s), the bucket not rebuilt.
        assert_eq!((0..5).filter(|_| flood(100_000_000)).count(), 1);
        s.set(storm(50));
        assert_eq!((0..60).filter(|_| flood(100_000_000)).count(), 50);
        s.set(PortLimits::NONE);
        s.with_shared(|| panic!("clock read"), |p| assert!(p.is_none()));
    }
}
