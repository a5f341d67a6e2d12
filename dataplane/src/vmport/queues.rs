//! The worker's view of a VM port: its running rings as a [`QueueIo`].
//!
//! The ring service is [`super::tx`] and [`super::rx`], the rings
//! themselves [`super::ring`]; here they are wired to the port (its switch,
//! backlogs, counters, policy slot) and the results counted and logged, and
//! the worker waits.
//!
//! The control queue never reaches a vhost-user backend: QEMU and DPDK
//! virtio-user handle it and translate `VQ_PAIRS_SET` into
//! `SET_VRING_ENABLE`, which [`super::handler`] honours.

use super::policy_slot::WorkerView;
use super::ring::Pair;
use super::ring_pass::RingPass;
use super::rx::{RxPending, RxService};
use super::tx::{TxService, TX_BATCH};
use super::VmPort;
use crate::clock::{cycles, monotonic_now, PassClock};
use crate::metrics::{Dir, QueueStats};
use crate::switch::FdbCache;
use crate::worker::{Control, PassStats, QueueIo, Wait};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vadapt_policy::{Budget, Duration, FreqHint, Instant, PolicyStatus, Retune, Step, WakeCause};
use vadapt_virtq::mem::GuestMemory;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::timerfd::TimerFd;

/// How often (passes) a busy-polling worker drains kick eventfds to count kicks.
const KICK_DRAIN_EVERY: u64 = 4096;
/// Warnings a worker may log per budget, refilled every
/// [`KICK_DRAIN_EVERY`] passes; the counters have the totals.
const LOG_BUDGET: u32 = 10;

/// Everything a worker incarnation owns.
pub struct PortQueues {
    port: Arc<VmPort>,
    mem: GuestMemory,
    pairs: Vec<Pair>,
    stop: Arc<AtomicBool>,
    /// What this worker has seen of the port's policy slot (set when the
    /// worker takes its policy).
    pub(crate) policy_view: Option<WorkerView>,
    epoll: Epoll,
    timer: TimerFd,
    tx: TxService,
    rx: RxService,
    /// Per queue pair: frames taken from its backlog, not yet delivered.
    rx_pending: Vec<RxPending>,
    fdb: FdbCache,
    events: Vec<EpollEvent>,
    passes: u64,
    /// How late timed sleeps woke, ns; merged into the port's histogram
    /// about once a second.
    overshoot: hdrhistogram::Histogram<u64>,
    last_merge: Instant,
    /// Warnings left before the next refill.
    log_budget: u32,
    clock: PassClock,
    /// Mean lateness of timed wake-ups, ns (EWMA), subtracted from sleeps.
    late_ns: u64,
    /// Last interval published to the port's gauge, µs (`u64::MAX`: none yet).
    last_interval_us: u64,
}

impl std::fmt::Debug for PortQueues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortQueues")
            .field("port", &self.port.name())
            .field("pairs", &self.pairs)
            .finish_non_exhaustive()
    }
}

/// epoll tokens: 0 = wake eventfd, 1 = timer, 2 + ring index = kicks.
const TOKEN_WAKE: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_KICK0: u64 = 2;

fn read_eventfd(f: &File) -> u64 {
    let mut buf = [0u8; 8];
    match (&*f).read(&mut buf) {
        Ok(8) => u64::from_ne_bytes(buf),
        _ => 0,
    }
}

impl PortQueues {
    /// Build the worker's world. `pairs` hold the rings that are running.
    pub fn new(
        port: Arc<VmPort>,
        mem: GuestMemory,
        pairs: Vec<Pair>,
        features: u64,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<Self> {
        let epoll = Epoll::new()?;
        let timer = TimerFd::new()?;
        epoll.ctl(
            ControlOperation::Add,
            port.wake.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TOKEN_WAKE),
        )?;
        epoll.ctl(
            ControlOperation::Add,
            timer.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TOKEN_TIMER),
        )?;
        for (p, pair) in pairs.iter().enumerate() {
            for (i, ring) in [(2 * p, &pair.rx), (2 * p + 1, &pair.tx)] {
                if let Some(r) = ring {
                    epoll.ctl(
                        ControlOperation::Add,
                        r.kick.as_raw_fd(),
                        EpollEvent::new(EventSet::IN, TOKEN_KICK0 + i as u64),
                    )?;
                }
            }
        }
        let mut pairs = pairs;
        // Workers start with guest notifications off; `wait_kick` turns them on.
        for pair in &mut pairs {
            for r in [&mut pair.rx, &mut pair.tx].into_iter().flatten() {
                r.q.disable_notifications();
            }
        }
        let hdr_len = crate::net::hdr_len(features);
        let npairs = pairs.len();
        Ok(PortQueues {
            mem,
            stop,
            policy_view: None,
            epoll,
            timer,
            tx: TxService::new(hdr_len, TX_BATCH),
            rx: RxService::new(hdr_len, features & crate::net::VIRTIO_NET_F_MRG_RXBUF != 0),
            rx_pending: port.backlogs[..pairs.len()]
                .iter()
                .map(RxPending::for_backlog)
                .collect(),
            pairs,
            fdb: FdbCache::default(),
            events: vec![EpollEvent::default(); 2 + 2 * npairs + 2],
            passes: 0,
            overshoot: crate::metrics::new_overshoot_histogram(),
            last_merge: Instant(0),
            log_budget: LOG_BUDGET,
            clock: PassClock::new(port.tsc_per_ns),
            late_ns: 0,
            last_interval_us: u64::MAX,
            port,
        })
    }

    /// Give the rings back (for `GET_VRING_BASE`): (ring index, next avail).
    pub fn into_bases(self) -> Vec<(usize, u16)> {
        let mut v = Vec::new();
        for (p, pair) in self.pairs.iter().enumerate() {
            if let Some(r) = &pair.rx {
                v.push((2 * p, r.q.last_avail()));
            }
            if let Some(r) = &pair.tx {
                v.push((2 * p + 1, r.q.last_avail()));
            }
        }
        v
    }

    fn qstats(&self, pair: usize) -> &QueueStats {
        &self.port.stats.queues[pair.min(self.port.stats.queues.len() - 1)]
    }

    fn rate_limited_warn(&mut self, pair: usize, dir: &str, what: &str) {
        // At most ~10 lines a second per worker; the counters have the totals.
        if self.log_budget > 0 {
            self.log_budget -= 1;
            tracing::warn!(
                port = self.port.name(),
                queue = pair,
                dir,
                reason = what,
                "dropped a bad descriptor chain from the guest"
            );
        }
    }

    /// Counts a pass over pair `p`'s ring in direction `dir` and logs its
    /// bad chains (rate-limited); `wrong_direction` names the bad chains
    /// the pass counts in `drops.wrong_direction`, if they are worth a line.
    fn count_pass(&mut self, p: usize, dir: Dir, pass: &RingPass, wrong_direction: Option<&str>) {
        pass.count_into(self.qstats(p), dir);
        let dir = match dir {
            Dir::Tx => "tx",
            Dir::Rx => "rx",
        };
        if let Some(what) = wrong_direction.filter(|_| pass.drops.wrong_direction > 0) {
            self.rate_limited_warn(p, dir, what);
        }
        for k in &pass.drops.chain_errors {
            self.rate_limited_warn(p, dir, k.name());
        }
    }

    /// Guest → host: take up to `budget` frames from pair `p`'s TX ring into
    /// host buffers and forward them. Returns (packets, bytes, more_work, fill‰).
    fn service_tx(&mut self, p: usize, budget: Budget) -> (u64, u64, bool, u16) {
        let Some(ring) = self.pairs[p].tx.as_mut().filter(|r| !r.broken) else {
            return (0, 0, false, 0);
        };
        let (port, fdb) = (&self.port, &mut self.fdb);
        let pass = self.tx.serve(ring, &self.mem, budget, |batch| {
            port.switch.forward(port.port_id(), p as u16, batch, fdb);
        });
        if pass.broke_ring {
            tracing::error!(
                port = self.port.name(),
                queue = p,
                "guest corrupted its transmit ring (avail index ran ahead); queue stopped until the frontend resets it"
            );
        }
        self.count_pass(
            p,
            Dir::Tx,
            &pass,
            Some("writable descriptor in a transmit chain"),
        );
        (pass.packets, pass.bytes, pass.more_work, pass.fill_permille)
    }

    /// Host → guest: copy up to `budget` backlog frames of pair `p` into the
    /// guest's receive buffers. Returns (packets, bytes, more_work).
    fn service_rx(&mut self, p: usize, budget: Budget) -> (u64, u64, bool) {
        let ring = self.pairs[p].rx.as_mut().filter(|r| !r.broken);
        let pass = self.rx.serve(
            ring,
            &self.mem,
            &self.port.backlogs[p],
            &mut self.rx_pending[p],
            budget,
        );
        self.count_pass(p, Dir::Rx, &pass, None);
        (pass.packets, pass.bytes, pass.more_work)
    }

    fn rx_waiting(&self, p: usize) -> bool {
        self.rx_pending[p].frames_waiting(&self.port.backlogs[p])
    }

    fn drain_kicks(&mut self) -> u64 {
        let mut total = 0;
        for (p, pair) in self.pairs.iter().enumerate() {
            let mut n = 0;
            for r in pair.rings() {
                n += read_eventfd(&r.kick);
            }
            if n > 0 {
                self.port.stats.queues[p]
                    .kicks
                    .fetch_add(n, Ordering::Relaxed);
            }
            total += n;
        }
        total
    }

    fn set_notifications(&mut self, on: bool) -> bool {
        let mut work = false;
        for p in 0..self.pairs.len() {
            let rx_wants = self.rx_waiting(p);
            work |= self.pairs[p].set_notifications(on, rx_wants);
        }
        work
    }

    fn epoll_wait(&mut self, timeout_ms: i32) -> (bool, bool, bool) {
        let (mut wake, mut timer, mut kick) = (false, false, false);
        match self.epoll.wait(timeout_ms, &mut self.events) {
            Ok(n) => {
                for ev in &self.events[..n] {
                    match ev.data() {
                        TOKEN_WAKE => wake = true,
                        TOKEN_TIMER => timer = true,
                        _ => kick = true,
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::error!(port = self.port.name(), error = %e, "epoll_wait failed");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if wake {
            let _ = self.port.wake.read();
        }
        if timer {
            let _ = self.timer.wait();
        }
        (wake, timer, kick)
    }

    fn arm_timer(&mut self, d: Duration) {
        let d = std::time::Duration::from_nanos(d.as_nanos().max(1));
        if let Err(e) = self.timer.reset(d, None) {
            tracing::error!(port = self.port.name(), error = %e, "timerfd_settime failed");
        }
    }

    fn disarm_timer(&mut self) {
        let _ = self.timer.clear();
    }

    fn note_wake(&self, cause: WakeCause) {
        let i = match cause {
            WakeCause::Timer => 0,
            WakeCause::Kick => 1,
            WakeCause::Recheck => 2,
            WakeCause::Timeout => 3,
            WakeCause::Immediate => return,
        };
        self.port.worker_stats.wakeups[i].fetch_add(1, Ordering::Relaxed);
    }

    fn merge_overshoot(&mut self, now: Instant) {
        if now.saturating_since(self.last_merge) >= Duration::from_secs(1)
            && !self.overshoot.is_empty()
        {
            if let Ok(mut h) = self.port.worker_stats.overshoot_ns.lock() {
                let _ = h.add(&self.overshoot);
            }
            self.overshoot.reset();
            self.last_merge = now;
        }
    }
}

/// Sleep until `deadline` on `CLOCK_MONOTONIC` (absolute, so no drift).
fn sleep_until(deadline: Instant) {
    let ts = libc::timespec {
        tv_sec: (deadline.0 / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline.0 % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` is valid; the remainder pointer may be null with TIMER_ABSTIME.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if r != libc::EINTR {
            break;
        }
    }
}

impl QueueIo for PortQueues {
    fn now(&mut self) -> Instant {
        self.clock.now()
    }

    fn service(&mut self, budget: Budget) -> PassStats {
        let t0 = cycles();
        let mut s = PassStats::default();
        for p in 0..self.pairs.len() {
            let (n, b, more, fill) = self.service_tx(p, budget);
            s.packets += n;
            s.bytes += b;
            s.more_work |= more;
            s.max_fill_permille = s.max_fill_permille.max(fill);
            let (n, b, more) = self.service_rx(p, budget);
            s.packets += n;
            s.bytes += b;
            s.more_work |= more;
        }
        let ws = &self.port.worker_stats;
        ws.passes.fetch_add(1, Ordering::Relaxed);
        if s.packets > 0 {
            ws.busy_cycles
                .fetch_add(cycles().wrapping_sub(t0), Ordering::Relaxed);
            ws.busy_packets.fetch_add(s.packets, Ordering::Relaxed);
        }
        self.passes += 1;
        if self.passes % KICK_DRAIN_EVERY == 0 {
            self.drain_kicks();
            self.log_budget = LOG_BUDGET;
        }
        s
    }

    fn sleep(&mut self, duration: Duration, kick_threshold: Option<u16>) -> Wait {
        let start = monotonic_now();
        let deadline = start + duration;
        // Early-wake compensation: the kernel wakes us, on average, `late_ns`
        // after the time we ask for (hrtimer and scheduling latency; tens of
        // µs in these VMs even with 1 ns timer slack). Asking that much
        // earlier keeps a 100 µs interval at 100 µs instead of 135.
        let comp = self.late_ns.min(duration.as_nanos() / 2);
        let target = Instant(deadline.0 - comp);
        let mut armed = false;
        if let Some(t) = kick_threshold {
            for pair in &mut self.pairs {
                if let Some(r) = pair.tx.as_mut().filter(|r| !r.broken) {
                    let n = vadapt_policy::kick_fill(t, r.q.size());
                    armed |= r.q.set_kick_threshold(n);
                }
            }
        }
        let cause = if armed {
            self.arm_timer(target.saturating_since(start));
            let mut cause = WakeCause::Timer;
            loop {
                let (wake, timer, kick) = self.epoll_wait(-1);
                if kick {
                    cause = WakeCause::Kick;
                    break;
                }
                if timer || wake || monotonic_now() >= target {
                    break;
                }
            }
            self.disarm_timer();
            cause
        } else {
            sleep_until(target);
            WakeCause::Timer
        };
        let end = monotonic_now();
        if cause == WakeCause::Timer {
            let late = end.saturating_since(target).as_nanos();
            // EWMA with weight 1/8, like TCP's SRTT.
            self.late_ns = self.late_ns - self.late_ns / 8 + late / 8;
            let _ = self
                .overshoot
                .record(end.saturating_since(deadline).as_nanos().max(1));
        }
        self.drain_kicks();
        if armed {
            for pair in &mut self.pairs {
                if let Some(r) = pair.tx.as_mut() {
                    r.q.disable_notifications();
                }
            }
        }
        self.note_wake(cause);
        self.merge_overshoot(end);
        Wait {
            cause,
            waited: end.saturating_since(start),
        }
    }

    fn wait_kick(&mut self, timeout: Option<Duration>) -> Wait {
        let start = monotonic_now();
        // Re-enable notifications, then re-check: a guest that added work
        // between our last look and the enable would otherwise never kick.
        let mut work = self.set_notifications(true);
        if !work {
            self.port.waiting.store(true, Ordering::SeqCst);
            // Pairs with the fence in `VmPort::deliver`: either the producer
            // sees `waiting` and wakes us, or we see its frames here.
            std::sync::atomic::fence(Ordering::SeqCst);
            work = (0..self.pairs.len()).any(|p| {
                self.rx_waiting(p)
                    && self.pairs[p]
                        .rx
                        .as_ref()
                        .is_some_and(|r| r.q.avail_pending().map(|n| n > 0).unwrap_or(false))
            });
        }
        let cause = if work {
            WakeCause::Recheck
        } else {
            if let Some(t) = timeout {
                self.arm_timer(t);
            }
            let (_wake, timer, kick) = self.epoll_wait(-1);
            if timeout.is_some() {
                self.disarm_timer();
            }
            if kick || !timer {
                WakeCause::Kick
            } else {
                WakeCause::Timeout
            }
        };
        self.port.waiting.store(false, Ordering::SeqCst);
        self.drain_kicks();
        self.set_notifications(false);
        self.note_wake(cause);
        Wait {
            cause,
            waited: monotonic_now().saturating_since(start),
        }
    }

    fn set_freq(&mut self, hint: FreqHint) {
        if let Err(e) = self.port.freq.apply(hint) {
            if self.log_budget > 0 {
                self.log_budget -= 1;
                tracing::warn!(port = self.port.name(), error = %e, "CPU-frequency hint failed");
            }
        }
    }

    fn control(&mut self) -> Control {
        if self.stop.load(Ordering::Relaxed) {
            return Control::Stop;
        }
        let Some(view) = self.policy_view.as_mut() else {
            return Control::Continue;
        };
        match self.port.policy.control(view, self.port.name()) {
            Some(c) => {
                if matches!(c, Control::Switch(_)) {
                    // set_policy zeroed the gauge: write the new policy's value.
                    self.last_interval_us = u64::MAX;
                }
                c
            }
            None => Control::Continue,
        }
    }

    fn retune_refused(&mut self, retune: &Retune, error: &vadapt_policy::RetuneError) {
        tracing::warn!(port = self.port.name(), ?retune, %error, "retune refused by the running policy");
    }

    fn observe(&mut self, status: &PolicyStatus, _step: &Step) {
        let us = status.interval.map_or(0, |d| d.as_micros());
        // Only on change: this runs every pass, the gauge is read by others.
        if us != self.last_interval_us {
            self.last_interval_us = us;
            self.port
                .stats
                .poll_interval_us
                .store(us, Ordering::Relaxed);
        }
    }
}
