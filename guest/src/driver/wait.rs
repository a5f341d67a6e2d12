//! Where the thread sleeps, and takes its interrupts while it does: on the TX completion call
//! of a stopped queue, on the RX call until a time, and the idle of a paced load (sleep when
//! the next send is far, spin when it is near). Every sleep is a `ppoll` on call eventfds.

use std::sync::{Arc, MutexGuard};

use super::queue::QueuePair;
use super::{lock, Driver, Stack, SPIN_BELOW_NS};

/// Longest sleep of a stopped TX queue before the guest checks the ring itself (ns).
const TX_WAKE_TIMEOUT_NS: u64 = 10_000_000;

impl Driver {
    /// Sleeps until the TX completion call (or the timeout) when `block`, else only looks
    /// whether it came; then restarts the queue if it did.
    pub(crate) fn wait_tx_wake(
        &mut self,
        qp: MutexGuard<'_, QueuePair>,
        block: bool,
        stack: &mut impl Stack,
    ) {
        let fds = [qp.tx.notify.call_fd(), qp.rx.notify.call_fd()];
        let napi = qp.rx.napi_scheduled;
        drop(qp);
        let now = self.shared.clock.now_ns();
        let (timeout_at, until) = tx_wake_deadlines(now, self.shared.deadline_ns);
        if !napi && block {
            ppoll(&fds, until.saturating_sub(now));
        }
        let pair = Arc::clone(&self.pair);
        let mut qp = lock(&pair);
        self.counters()
            .stall_ns
            .add(self.shared.clock.now_ns().saturating_sub(now));
        self.softirq(&mut qp, true, stack);
        self.take_tx_call(&mut qp, timeout_at);
    }

    /// Waits (bounded by `until`, ns) for an RX call and handles it.
    pub(crate) fn wait_rx(&mut self, until: u64, stack: &mut impl Stack) {
        let pair = Arc::clone(&self.pair);
        let qp = lock(&pair);
        let fd = qp.rx.notify.call_fd();
        let napi = qp.rx.napi_scheduled;
        drop(qp);
        if !napi {
            let now = self.shared.clock.now_ns();
            ppoll(&[fd], until.saturating_sub(now));
        }
        let mut qp = lock(&pair);
        self.softirq(&mut qp, true, stack);
    }

    /// Sleeps until `t` (ns), taking RX interrupts meanwhile; never spins, so it may wake a
    /// scheduler round trip (and the timer slack) late.
    pub(crate) fn sleep_until(&mut self, t: u64, stack: &mut impl Stack) {
        let t = t.min(self.shared.deadline_ns);
        while self.shared.clock.now_ns() < t && !self.should_stop() {
            self.wait_rx(t, stack);
        }
    }

    /// Idles until `t` (ns), taking RX interrupts meanwhile: sleeps when far, spins when near.
    pub(crate) fn idle_until(&mut self, t: u64, stack: &mut impl Stack) {
        let t = t.min(self.shared.deadline_ns);
        loop {
            let now = self.shared.clock.now_ns();
            if now >= t || self.should_stop() {
                return;
            }
            if t - now > SPIN_BELOW_NS {
                self.wait_rx(t - SPIN_BELOW_NS / 2, stack);
            } else {
                let pair = Arc::clone(&self.pair);
                let mut qp = lock(&pair);
                self.softirq(&mut qp, true, stack);
                drop(qp);
                std::hint::spin_loop();
            }
        }
    }
}

/// When a stopped TX queue that starts waiting at `now` gives up on its call
/// (`timeout_at`), and when its sleep ends (`until`: the timeout, cut short by the end of
/// the run at `deadline`, which is not a missing call). Both in ns.
fn tx_wake_deadlines(now: u64, deadline: u64) -> (u64, u64) {
    let timeout_at = now + TX_WAKE_TIMEOUT_NS;
    (timeout_at, timeout_at.min(deadline.max(now)))
}

/// Sleeps until one of `fds` is readable or `timeout_ns` passed (0 = just check).
fn ppoll(fds: &[i32], timeout_ns: u64) {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs that outlives the call;
    // `ts` is a valid timespec; a null sigmask leaves the signal mask unchanged. The result
    // (ready count, 0 on timeout, -1 on EINTR) needs no handling: callers re-check the state.
    unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::time::Instant;
    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

    #[test]
    fn tx_wake_sleeps_the_timeout_or_until_the_end_of_the_run() {
        assert_eq!(
            tx_wake_deadlines(1_000, u64::MAX),
            (1_000 + TX_WAKE_TIMEOUT_NS, 1_000 + TX_WAKE_TIMEOUT_NS)
        );
        // The run ends first: the sleep ends with it, the timeout stays.
        assert_eq!(
            tx_wake_deadlines(1_000, 5_000),
            (1_000 + TX_WAKE_TIMEOUT_NS, 5_000)
        );
        // The run is over: no sleep at all.
        assert_eq!(
            tx_wake_deadlines(9_000, 5_000),
            (9_000 + TX_WAKE_TIMEOUT_NS, 9_000)
        );
    }

    #[test]
    fn ppoll_returns_on_a_signalled_fd_and_after_the_timeout() {
        let fd = EventFd::new(EFD_NONBLOCK).unwrap();
        let t = Instant::now();
        ppoll(&[fd.as_raw_fd()], 1_000_000);
        assert!(t.elapsed().as_nanos() >= 1_000_000);
        fd.write(1).unwrap();
        let t = Instant::now();
        ppoll(&[fd.as_raw_fd()], 10_000_000_000);
        assert!(t.elapsed().as_secs() < 5);
    }
}
