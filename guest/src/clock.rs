//! The guest's clock and the CPU time it spends on purpose: the emulated cost of a VM exit
//! ([`ExitCost`]) and, through [`spin_ns`], of an application write in TCP-stream mode
//! ([`crate::tcp_stream::TcpSender::write_messages`]).
//!
//! All threads of one guest read the same [`Clock`] (nanoseconds since the guest connected), so
//! a send time stamped by one thread can be subtracted from a receive time read by another.

use std::time::{Duration, Instant};

/// Monotonic nanoseconds since an epoch shared by all threads of a guest.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        // u64 nanoseconds overflow after 584 years.
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The epoch plus `ns` as an [`Instant`].
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(ns)
    }
}

/// Emulated CPU cost of a kick (a VM exit on a KVM host) or of a handled call (an interrupt
/// injection and the guest's interrupt entry/exit), paid by busy-waiting on the thread that
/// caused it. This is an emulation: nothing exits, the thread only burns the time a vCPU
/// would have lost. See the crate documentation for the default's justification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitCost {
    /// Busy-wait per event (ns); 0 disables the emulation.
    pub ns: u64,
}

impl ExitCost {
    /// Busy-waits `self.ns` nanoseconds (returns at once when 0).
    #[inline]
    pub fn pay(&self) {
        spin_ns(self.ns);
    }
}

/// Busy-waits `ns` nanoseconds on the calling thread (returns at once when 0): every emulated
/// CPU cost of the guest is spent here.
///
/// A spin, not a sleep: the work it stands for (a VM exit, a `send()` system call) keeps the
/// CPU busy, and sleeping for microseconds would cost a scheduler round trip far longer than
/// the work itself. The time is wall-clock time on this thread, so a thread preempted during
/// the spin pays less CPU than asked, as a vCPU preempted during an exit would.
#[inline]
pub fn spin_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    let start = Instant::now();
    let cost = Duration::from_nanos(ns);
    while start.elapsed() < cost {
        std::hint::spin_loop();
    }
}

/// CPU time consumed by the calling thread (ns); 0 if the clock is unavailable.
pub fn thread_cpu_ns() -> u64 {
    vadapt_host::cputime::current_thread_cpu_time().map_or(0, |d| d.as_nanos() as u64)
}
