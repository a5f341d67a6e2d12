//! How a queue worker waits between passes: one epoll set over the port's
//! wake eventfd, a timerfd and the rings' kick eventfds ([`Waiter`]),
//! looked at without blocking (the worker blocks on its own epoll set,
//! which watches this one); the early-wake
//! compensation that keeps short timed sleeps on time ([`EarlyWake`]); and
//! draining kick eventfds, which is how kicks are counted ([`drain_kicks`]).

use super::ring::Pair;

use std::io;
use std::os::fd::AsRawFd;
use vadapt_policy::{Duration, Instant};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

/// epoll tokens: 0 = wake eventfd, 1 = timer, 2 + ring index = kicks.
const TOKEN_WAKE: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_KICK0: u64 = 2;

/// What a [`Waiter::poll`] found; several may have happened at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Woken {
    /// The port's wake eventfd (a producer or the control plane wants the
    /// worker up); it was drained.
    pub wake: bool,
    /// The timer fired; it was drained.
    pub timer: bool,
    /// A ring's kick eventfd is readable (left undrained: see
    /// [`drain_kicks`]).
    pub kick: bool,
}

/// The epoll set a worker blocks in, and its one timer.
#[derive(Debug)]
pub struct Waiter {
    epoll: Epoll,
    timer: TimerFd,
    events: Vec<EpollEvent>,
    /// The kick descriptors, for [`Waiter::watch_kicks`].
    kicks: Vec<std::os::fd::RawFd>,
}

impl Waiter {
    /// An epoll set over `wake`, a new timerfd (disarmed) and the kick
    /// eventfd of every running ring of `pairs`.
    pub fn new(wake: &EventFd, pairs: &[Pair]) -> io::Result<Self> {
        let kicks: Vec<_> = pairs
            .iter()
            .flat_map(|p| [&p.rx, &p.tx])
            .flatten()
            .map(|r| r.kick.as_raw_fd())
            .collect();
        Self::over(wake, &kicks)
    }

    /// An epoll set over `wake`, a new timerfd (disarmed) and `kicks`:
    /// descriptors whose readability is a kick (a ring's kick eventfd, an
    /// AF_XDP socket with frames), borrowed for the waiter's life.
    pub fn over(wake: &EventFd, kicks: &[std::os::fd::RawFd]) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        let timer = TimerFd::new()?;
        let add = |fd: std::os::fd::RawFd, token: u64| {
            epoll.ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(EventSet::IN, token),
            )
        };
        add(wake.as_raw_fd(), TOKEN_WAKE)?;
        add(timer.as_raw_fd(), TOKEN_TIMER)?;
        for (i, &fd) in kicks.iter().enumerate() {
            add(fd, TOKEN_KICK0 + i as u64)?;
        }
        Ok(Waiter {
            epoll,
            timer,
            events: vec![EpollEvent::default(); 2 + kicks.len() + 2],
            kicks: kicks.to_vec(),
        })
    }

    /// Watch the kick descriptors (`true`, as made) or not: an uplink queue
    /// served by a pool worker unwatches its AF_XDP socket during a timed
    /// sleep (the NIC's interrupt suppressed), since the pool's epoll set
    /// would otherwise wake on it over and over.
    pub fn watch_kicks(&self, on: bool) {
        let events = if on { EventSet::IN } else { EventSet::empty() };
        for (i, &fd) in self.kicks.iter().enumerate() {
            let ev = EpollEvent::new(events, TOKEN_KICK0 + i as u64);
            if let Err(e) = self.epoll.ctl(ControlOperation::Modify, fd, ev) {
                tracing::error!(fd, error = %e, "epoll_ctl on a kick descriptor failed");
            }
        }
    }

    /// Blocks until the wake eventfd, the timer or a kick is readable, and
    /// drains the first two (`wake` must be the eventfd given to
    /// [`new`](Self::new)). A signal ends the wait with nothing woken.
    /// (Workers never block here: they block on their own epoll set.)
    #[cfg(test)]
    pub fn wait(&mut self, wake: &EventFd) -> io::Result<Woken> {
        self.wait_for(wake, -1)
    }

    /// What is readable now, without blocking; the wake eventfd and the
    /// timer drained (`wake` must be the eventfd given to [`new`](Self::new)).
    /// A queue worker serving several ports polls each port's waiter this
    /// way after its own epoll set (which holds [`Waiter::as_raw_fd`]) woke.
    pub fn poll(&mut self, wake: &EventFd) -> io::Result<Woken> {
        self.wait_for(wake, 0)
    }

    fn wait_for(&mut self, wake: &EventFd, timeout_ms: i32) -> io::Result<Woken> {
        let mut woken = Woken::default();
        match self.epoll.wait(timeout_ms, &mut self.events) {
            Ok(n) => {
                for ev in &self.events[..n] {
                    match ev.data() {
                        TOKEN_WAKE => woken.wake = true,
                        TOKEN_TIMER => woken.timer = true,
                        _ => woken.kick = true,
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if woken.wake {
            let _ = wake.read();
        }
        if woken.timer {
            let _ = self.timer.wait();
        }
        Ok(woken)
    }

    /// Arms the timer to fire once, `after` from now (at least 1 ns: a zero
    /// duration would disarm it).
    pub fn arm_timer(&mut self, after: Duration) -> vmm_sys_util::errno::Result<()> {
        let d = std::time::Duration::from_nanos(after.as_nanos().max(1));
        self.timer.reset(d, None)
    }

    /// Disarms the timer (an expiry not yet waited for is forgotten).
    pub fn disarm_timer(&mut self) {
        let _ = self.timer.clear();
    }
}

impl AsRawFd for Waiter {
    /// The epoll set itself: readable while a kick, the wake eventfd or the
    /// timer is, so another epoll set can watch this one.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.epoll.as_raw_fd()
    }
}

/// Drains the kick eventfds of `pair`'s running rings without blocking: the
/// kicks received since the last drain, or an error if a descriptor is
/// unusable (the port must be reset then).
pub fn drain_kicks(pair: &Pair) -> io::Result<u64> {
    let mut n = 0;
    for r in pair.rings() {
        n += super::eventfd_io::drain(&r.kick)?;
    }
    Ok(n)
}

/// Early-wake compensation: the kernel wakes us, on average, some time
/// after the time we ask for (hrtimer and scheduling latency; tens of µs in
/// these VMs even with 1 ns timer slack). Asking that much earlier keeps a
/// 100 µs interval at 100 µs instead of 135.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EarlyWake {
    /// Mean lateness of timed wake-ups, ns (EWMA).
    late_ns: u64,
}

impl EarlyWake {
    /// When to ask to be woken for a sleep of `duration` that should end at
    /// `deadline`: earlier by the mean lateness, but by at most half the
    /// sleep.
    pub fn target(&self, deadline: Instant, duration: Duration) -> Instant {
        let comp = self.late_ns.min(duration.as_nanos() / 2);
        Instant(deadline.0 - comp)
    }

    /// Records that a timed wake-up came `late` after its target.
    pub fn record(&mut self, late: Duration) {
        // EWMA with weight 1/8, like TCP's SRTT.
        self.late_ns = self.late_ns - self.late_ns / 8 + late.as_nanos() / 8;
    }

    /// The mean lateness so far.
    pub fn mean_lateness(&self) -> Duration {
        Duration::from_nanos(self.late_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::monotonic_now;
    use crate::queue::ring::test_utils::ring;
    use std::fs::File;
    use std::io::Write;
    use vadapt_virtq::RingFeatures;

    /// (wake, timer, kick) of a wait.
    fn causes(w: Woken) -> (bool, bool, bool) {
        (w.wake, w.timer, w.kick)
    }

    fn kick(f: &File, n: u64) {
        (&*f).write_all(&n.to_ne_bytes()).unwrap();
    }

    /// A wake eventfd and one queue pair with both rings running.
    fn setup() -> (EventFd, Vec<Pair>) {
        let (rx, _) = ring(8, RingFeatures::default());
        let (tx, _) = ring(8, RingFeatures::default());
        let wake = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let pair = Pair {
            rx: Some(rx),
            tx: Some(tx),
        };
        (wake, vec![pair])
    }

    #[test]
    fn a_kick_ends_a_wait_and_is_counted_by_draining() {
        let (wake, pairs) = setup();
        let mut w = Waiter::new(&wake, &pairs).unwrap();
        kick(&pairs[0].tx.as_ref().unwrap().kick, 1);
        kick(&pairs[0].rx.as_ref().unwrap().kick, 2);
        let woken = w.wait(&wake).unwrap();
        assert_eq!(causes(woken), (false, false, true));
        assert_eq!(drain_kicks(&pairs[0]).unwrap(), 3);
        assert_eq!(drain_kicks(&pairs[0]).unwrap(), 0, "drained");
    }

    #[test]
    fn the_timer_and_the_wake_eventfd_end_a_wait_and_are_drained() {
        let (wake, pairs) = setup();
        let mut w = Waiter::new(&wake, &pairs).unwrap();
        wake.write(1).unwrap();
        let woken = w.wait(&wake).unwrap();
        assert_eq!(causes(woken), (true, false, false));
        let start = monotonic_now();
        w.arm_timer(Duration::from_millis(1)).unwrap();
        let woken = w.wait(&wake).unwrap();
        assert_eq!(causes(woken), (false, true, false), "wake was drained");
        assert!(monotonic_now().saturating_since(start) >= Duration::from_millis(1));
        // Disarmed before it fires: only the wake eventfd can end the wait.
        w.arm_timer(Duration::from_millis(1)).unwrap();
        w.disarm_timer();
        std::thread::sleep(std::time::Duration::from_millis(3));
        wake.write(1).unwrap();
        assert!(!w.wait(&wake).unwrap().timer);
    }

    #[test]
    fn early_wake_follows_the_mean_lateness_and_is_capped_at_half_the_sleep() {
        let mut e = EarlyWake::default();
        let d = Duration::from_micros(100);
        let deadline = Instant(1_000_000);
        assert_eq!(e.target(deadline, d), deadline, "no history: no correction");
        e.record(Duration::from_nanos(8_000));
        assert_eq!(e.mean_lateness(), Duration::from_nanos(1_000), "weight 1/8");
        e.record(Duration::from_nanos(8_000));
        assert_eq!(e.mean_lateness(), Duration::from_nanos(1_000 - 125 + 1_000));
        for _ in 0..200 {
            e.record(Duration::from_nanos(40_000));
        }
        let late = e.mean_lateness().as_nanos();
        assert!((39_900..=40_000).contains(&late), "converges: {late}");
        assert_eq!(e.target(deadline, d), Instant(deadline.0 - late));
        let short = Duration::from_micros(10);
        assert_eq!(
            e.target(deadline, short),
            Instant(deadline.0 - 5_000),
            "capped"
        );
    }
}
