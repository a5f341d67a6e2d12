//! The worker's view of a VM port: its running rings as a [`QueueIo`].
//!
//! This is glue: the ring service is [`crate::queue::tx`] and
//! [`crate::queue::rx`], the waiting [`crate::queue::waiting`], the rings
//! themselves [`crate::queue::ring`]; here they are wired to the port (its
//! switch, backlogs, counters, policy slot) and the results counted and
//! logged.
//!
//! The control queue is not among these rings. QEMU and DPDK virtio-user
//! keep it and translate `VQ_PAIRS_SET` into `SET_VRING_ENABLE`, which
//! [`super::handler`] honours; a frontend that gives it to the backend has
//! it served beside the worker ([`super::ctrl_thread`]).

use super::vm_port::VmPort;
use crate::clock::{cycles, monotonic_now, PassClock};
use crate::metrics::{Dir, DropReason, PassTally, QueueStats};
use crate::policing::PortPolicers;
use crate::queue::policy_slot::WorkerView;
use crate::queue::ring::Pair;
use crate::queue::ring_pass::RingPass;
use crate::queue::rx::{RxPending, RxService};
use crate::queue::tx::{Policing, TxService, TX_BATCH};
use crate::queue::waiting::{drain_kicks, EarlyWake, Waiter, Woken};
use crate::switch::{FdbCache, Forwarded, Ingress, Sender};
use crate::worker::{Control, PassStats, PendingWait, QueueIo, RingBases, Wait};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vadapt_policy::wait_protocol::{self, Begun, KickThreshold, Notifications, WaitKind, Woke};
use vadapt_policy::{
    Budget, Duration, FreqHint, Instant, PolicyStatus, Retune, Step, Wake, WakeCause,
};
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::DeviceRing;

/// How often (passes) a busy-polling worker drains kick eventfds to count kicks.
const KICK_DRAIN_EVERY: u64 = 4096;

/// Spin-loop hints (x86 `PAUSE`) after a pass that moved nothing. Once an
/// empty pass cost ~340 instructions, busy-poll looked at the driver's
/// `avail.idx` cache line so often that it took 1.3 frames a pass and its
/// share of that line's traffic grew; eight pauses (a few hundred ns at
/// most) let bursts gather: 6.4 frames a pass, 66.6 against 68.8 busy
/// cycles a packet and 17.80 against 17.37 Mpps, medians of 5 rounds of
/// `scripts/ab_tx.py` (B1's DPDK sender, 64 B, in order), one run.
const EMPTY_PASS_PAUSES: u32 = 8;

/// Everything a worker incarnation owns.
pub struct PortQueues {
    port: Arc<VmPort>,
    /// The port's way into the switch for this worker's life (`None`: the
    /// port was never attached, or the switch is gone; transmitted frames
    /// then go nowhere).
    sender: Option<Sender>,
    mem: GuestMemory,
    pairs: Vec<Pair>,
    stop: Arc<AtomicBool>,
    /// What this worker has seen of the port's policy slot (set when the
    /// worker takes its policy).
    pub(crate) policy_view: Option<WorkerView>,
    /// Why the frontend must be disconnected, once something it controls
    /// failed (a notification descriptor, guest memory).
    frontend_failed: Option<String>,
    /// [`crate::sigbus_guard::total_faults`] when last looked at.
    seen_faults: u64,
    waiter: Waiter,
    tx: TxService,
    rx: RxService,
    /// Per queue pair: frames taken from its backlog, not yet delivered.
    rx_pending: Vec<RxPending>,
    fdb: FdbCache,
    /// The port's rate limits as this worker applies them (taken from the
    /// port's limits slot at start, parked there at the end).
    policers: PortPolicers,
    /// The slot's change count the policers stand for.
    limits_seen: u64,
    passes: u64,
    /// Passes, busy cycles and packets not yet in the port's counters.
    tally: PassTally,
    /// How late timed sleeps woke, ns; merged into the port's histogram
    /// about once a second. Made at the first timed wake: a worker starts
    /// at every ring message of a frontend's start-up, and most of those
    /// never sleep on a timer (the histogram is ~300 KB to zero).
    overshoot: Option<hdrhistogram::Histogram<u64>>,
    last_merge: Instant,
    clock: PassClock,
    early_wake: EarlyWake,
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

impl Drop for PortQueues {
    fn drop(&mut self) {
        self.drop_undelivered();
        self.publish_counts();
        self.port.limits.park(std::mem::take(&mut self.policers));
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
        let waiter = Waiter::new(&port.wake, &pairs)?;
        let mut pairs = pairs;
        // Workers start with guest notifications off; a wait for a kick
        // turns them on.
        for pair in &mut pairs {
            for r in [&mut pair.rx, &mut pair.tx].into_iter().flatten() {
                r.q.disable_notifications();
            }
        }
        let pair_count = pairs.len();
        let hdr_len = crate::net::hdr_len(features);
        let max_frame = crate::net::max_frame(port.cfg.mtu.unwrap_or(crate::net::DEFAULT_MTU));
        let mut clock = PassClock::new(port.tsc_per_ns);
        let (policers, limits_seen) = port.limits.take(clock.now());
        Ok(PortQueues {
            sender: port.ingress().and_then(Ingress::sender),
            mem,
            stop,
            policy_view: None,
            frontend_failed: None,
            seen_faults: crate::sigbus_guard::total_faults(),
            waiter,
            tx: TxService::with_offloads(
                hdr_len,
                TX_BATCH,
                crate::net::HostOffloads::from_features(features),
            )
            .with_max_frame(max_frame),
            rx: RxService::new(hdr_len, features & crate::net::VIRTIO_NET_F_MRG_RXBUF != 0)
                .with_max_frame(max_frame),
            rx_pending: port.backlogs[..pairs.len()]
                .iter()
                .map(RxPending::for_backlog)
                .collect(),
            pairs,
            fdb: FdbCache::default(),
            policers,
            limits_seen,
            passes: 0,
            tally: PassTally::new(pair_count),
            overshoot: None,
            last_merge: Instant(0),
            clock,
            early_wake: EarlyWake::default(),
            last_interval_us: u64::MAX,
            port,
        })
    }

    /// With dirty-page logging on, mark every running ring's used ring:
    /// after notifications changed, and when the worker stops (so a ring's
    /// log is complete before `GET_VRING_BASE` is answered). The ring
    /// service marks what a pass writes itself (`tx`, `rx`).
    fn log_used_rings(&self) {
        for pair in &self.pairs {
            for r in pair.rings() {
                r.log_used();
            }
        }
    }

    /// After a SIGBUS survived somewhere: if it was in the frontend's
    /// dirty-page log (its file shrank), logging ends for the port. The
    /// rings stop marking at once ([`crate::migration::RingLog`] looks
    /// before each mark); here they drop the log, and the port says so
    /// once. Guest memory that faulted is [`Self::control`]'s.
    fn end_dead_log(&mut self) {
        for pair in &mut self.pairs {
            for r in [pair.rx.as_mut(), pair.tx.as_mut()].into_iter().flatten() {
                if let Some(l) = r.log.take_if(|l| !l.log.is_live()) {
                    self.port.end_dirty_log(&l.log);
                }
            }
        }
    }

    /// Give the rings back (for `GET_VRING_BASE`).
    pub fn into_bases(self) -> RingBases {
        self.log_used_rings();
        let mut v = RingBases::default();
        for (p, pair) in self.pairs.iter().enumerate() {
            if let Some(r) = &pair.rx {
                v.push(2 * p, r.q.last_avail());
            }
            if let Some(r) = &pair.tx {
                v.push(2 * p + 1, r.q.last_avail());
            }
        }
        v
    }

    /// Counts the frames this worker took from its backlogs and never
    /// delivered as dropped (`port_down`): they go with it when it stops
    /// (the frontend went, or its rings changed), as the receive ring they
    /// waited for no longer runs here.
    fn drop_undelivered(&mut self) {
        for p in 0..self.rx_pending.len() {
            let n = self.rx_pending[p].discard();
            if n > 0 {
                self.qstats(p).drop(DropReason::PortDown, n);
            }
        }
    }

    /// Publishes the tallied counts (before every wait and at the end,
    /// and every [`crate::metrics::PUBLISH_EVERY`] passes).
    fn publish_counts(&mut self) {
        self.tally
            .publish(&self.port.worker_stats, &self.port.stats.queues);
    }

    fn qstats(&self, pair: usize) -> &QueueStats {
        &self.port.stats.queues[pair.min(self.port.stats.queues.len() - 1)]
    }

    /// The line for a bad chain or frame from the guest: `reason` keys the
    /// port's limit (10 lines a second per reason, whichever worker writes
    /// them), `what` says it; the counters have the totals.
    fn rate_limited_warn(&mut self, pair: usize, dir: &str, reason: &'static str, what: &str) {
        if let Some(held_back) = self.port.may_log(reason) {
            tracing::warn!(
                port = self.port.name(),
                queue = pair,
                dir,
                reason = what,
                held_back,
                "dropped a bad descriptor chain or frame from the guest"
            );
        }
    }

    /// Counts what the switch refused of pair `p`'s frames, and logs a
    /// spoofed source, MAC or IP (through the port's limit for the lines
    /// its guest causes, as every other).
    fn count_refused(&mut self, p: usize, refused: &Forwarded) {
        refused.count_into(&self.port.stats, p);
        if let Some(why) = refused.spoofed_ip_first {
            if let Some(held_back) = self.port.may_log("spoofed IP address") {
                tracing::warn!(
                    port = self.port.name(),
                    queue = p,
                    refused = %why,
                    dropped = refused.spoofed_ip,
                    held_back,
                    "dropped frames from the guest whose IP sender is not the port's \
                     (IP source guard: its allowed_ips=)"
                );
            }
        }
        let Some(src) = refused.spoofed_src else {
            return;
        };
        if let Some(held_back) = self.port.may_log("spoofed source address") {
            tracing::warn!(
                port = self.port.name(),
                queue = p,
                src = %src,
                dropped = refused.spoofed,
                held_back,
                "dropped frames from the guest whose source address is not the port's \
                 (port security: its mac= and allowed_macs=)"
            );
        }
    }

    /// Counts a pass over pair `p`'s ring in direction `dir` and logs its
    /// bad chains (rate-limited); `wrong_direction` names the bad chains
    /// the pass counts in `drops.wrong_direction`, if they are worth a line.
    fn count_pass(&mut self, p: usize, dir: Dir, pass: &RingPass, wrong_direction: Option<&str>) {
        if pass.is_quiet() {
            return;
        }
        self.tally.moved(p, dir, pass.packets, pass.bytes);
        pass.count_events_into(self.qstats(p));
        let dir = match dir {
            Dir::Tx => "tx",
            Dir::Rx => "rx",
        };
        if let Some(what) = wrong_direction.filter(|_| pass.drops.wrong_direction > 0) {
            self.rate_limited_warn(p, dir, "chain in the wrong direction", what);
        }
        for k in &pass.drops.chain_errors {
            self.rate_limited_warn(p, dir, k.name(), k.name());
        }
        if pass.drops.undersize > 0 {
            let what = "frame shorter than an Ethernet header";
            self.rate_limited_warn(p, dir, what, what);
        }
        if pass.drops.oversize > 0 {
            let what = "GSO frame longer than 64 KiB";
            self.rate_limited_warn(p, dir, what, what);
        }
        if let Some(len) = pass.drops.first_over_mtu {
            // Sent by the guest (tx) or on its way to it (rx); the same
            // 10 lines a second as the rest.
            if let Some(held_back) = self.port.may_log("frame over the MTU") {
                let mtu = self.port.cfg.mtu.unwrap_or(crate::net::DEFAULT_MTU);
                tracing::warn!(
                    port = self.port.name(),
                    queue = p,
                    dir,
                    bytes = len,
                    mtu,
                    max_frame = crate::net::max_frame(mtu),
                    dropped = pass.drops.over_mtu,
                    held_back,
                    "dropped a frame over the port's MTU"
                );
            }
        }
        if let Some(e) = &pass.drops.first_bad_vnet_hdr {
            let what = vadapt_host::error_chain::error_chain(e);
            self.rate_limited_warn(p, dir, "bad virtio-net header", &what);
        }
    }

    /// Guest → host: take up to `budget` frames from pair `p`'s TX ring into
    /// host buffers and forward them. Returns (packets, bytes, more_work, fill‰).
    fn service_tx(&mut self, p: usize, budget: Budget) -> (u64, u64, bool, u16) {
        let Some(ring) = self.pairs[p].tx.as_mut().filter(|r| !r.broken) else {
            return (0, 0, false, 0);
        };
        if !ring.q.has_avail() {
            // Most passes of a polling worker: one load of the driver's
            // index, and nothing to flush, log, call for or count (a pass
            // that moved something did all of that before it ended).
            return (0, 0, false, 0);
        }
        if self.policers.is_active() {
            self.policers.refill(self.clock.now());
        }
        let (policer, mut storm) = self.policers.parts();
        let (sender, fdb, clock) = (&self.sender, &mut self.fdb, &mut self.clock);
        let mut now = || clock.now();
        let policing = policer.map(|policer| Policing {
            policer,
            now: &mut now,
        });
        let mut refused = Forwarded::default();
        let pass = self
            .tx
            .serve_policed(ring, &self.mem, budget, policing, |batch| {
                let Some(s) = sender else { return };
                refused.merge(match storm.as_deref_mut() {
                    None => s.forward(p as u16, batch, fdb),
                    Some(bucket) => s.forward_gated(p as u16, batch, fdb, |_| bucket.take(1)),
                });
            });
        self.count_refused(p, &refused);
        if pass.broke_ring {
            if let Some(held_back) = self.port.may_log("transmit ring corrupted") {
                tracing::error!(
                    port = self.port.name(),
                    queue = p,
                    held_back,
                    "guest corrupted its transmit ring (avail index ran ahead); queue stopped until the frontend resets it"
                );
            }
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
        if self.rx_pending[p].remaining() == 0 && self.port.backlogs[p].held() == 0 {
            // Nothing for the guest (one load, as for an empty transmit ring).
            return (0, 0, false);
        }
        let ring = self.pairs[p].rx.as_mut().filter(|r| !r.broken);
        let pass = self.rx.serve(
            ring,
            &self.mem,
            &self.port.backlogs[p],
            &mut self.rx_pending[p],
            budget,
            self.port.guest_offloads.accepted(),
        );
        self.count_pass(p, Dir::Rx, &pass, None);
        (pass.packets, pass.bytes, pass.more_work)
    }

    fn drain_kicks(&mut self) -> u64 {
        let mut total = 0;
        for (p, pair) in self.pairs.iter().enumerate() {
            let n = match drain_kicks(pair) {
                Ok(n) => n,
                Err(e) => {
                    // Never spin on it: stop this worker and end the connection.
                    self.frontend_failed = Some(format!("kick descriptor unusable: {e}"));
                    0
                }
            };
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
            let rx_wants = self.rx_pending[p].buffers_wanted(&self.port.backlogs[p]);
            work |= self.pairs[p].set_notifications(on, rx_wants);
        }
        self.log_used_rings();
        work
    }

    fn arm_timer(&mut self, d: Duration) {
        if let Err(e) = self.waiter.arm_timer(d) {
            tracing::error!(port = self.port.name(), error = %e, "timerfd_settime failed");
        }
    }

    /// The end of a sleep that ended at `end` (both wait paths), before
    /// [`wait_protocol::end_wait`]: how early or late the timer fired, and
    /// the kicks that came meanwhile drained.
    fn finish_sleep(&mut self, cause: WakeCause, end: Instant, target: Instant, deadline: Instant) {
        if cause == WakeCause::Timer {
            self.early_wake.record(end.saturating_since(target));
            let _ = self
                .overshoot
                .get_or_insert_with(crate::metrics::new_overshoot_histogram)
                .record(end.saturating_since(deadline).as_nanos().max(1));
        }
        self.drain_kicks();
    }

    /// What a wake-up of the port's waiter says to a wait of `kind` whose
    /// timer was asked to fire at `target`: a sleep also ends once `target`
    /// has passed, whatever woke it.
    fn woke(kind: WaitKind, woken: Woken, target: Instant) -> Woke {
        let sleeping = matches!(kind, WaitKind::Sleep { .. });
        Woke {
            kick: woken.kick,
            timer: woken.timer || (sleeping && monotonic_now() >= target),
            signal: woken.wake,
        }
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
        let Some(overshoot) = self.overshoot.as_mut().filter(|o| !o.is_empty()) else {
            return;
        };
        if now.saturating_since(self.last_merge) >= Duration::from_secs(1) {
            if let Ok(mut h) = self.port.worker_stats.overshoot_ns.lock() {
                let _ = h.add(&*overshoot);
            }
            overshoot.reset();
            self.last_merge = now;
        }
    }
}

/// The port's waits, which never block (see
/// [`crate::worker::pending_wait`]).
impl PortQueues {
    /// The port served.
    pub fn port(&self) -> &Arc<VmPort> {
        &self.port
    }

    /// The port's waiter: readable when this port needs its worker.
    pub fn waiter_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.waiter.as_raw_fd()
    }

    /// Begins the wait `wake` asks for ([`QueueIo::begin_wait`]).
    pub fn begin_wait(&mut self, wake: Wake) -> PendingWait {
        self.publish_counts();
        let start = monotonic_now();
        match wait_protocol::begin_wait(wake, self) {
            Begun::Ready { kind, cause } => PendingWait::ended_at_once(kind, cause, start),
            Begun::Blocked { kind, until } => {
                // A sleep's timer fires early by the mean lateness; a wait
                // for a kick's at its deadline.
                let target = match kind {
                    WaitKind::Sleep { .. } => {
                        self.early_wake.target(until, until.saturating_since(start))
                    }
                    WaitKind::Poll | WaitKind::Kick { .. } => until,
                };
                self.arm_timer(target.saturating_since(start));
                PendingWait::blocked(kind, target, start)
            }
        }
    }

    /// Looks, without blocking, whether the wait `w` has ended, and records
    /// why in `w.ready`. Kicks that cannot end a sleep are drained (and
    /// counted) here, so that the port's waiter does not stay readable.
    pub fn poll_wait(&mut self, w: &mut PendingWait) {
        if w.ready.is_some() {
            return;
        }
        let woken = match self.waiter.poll(&self.port.wake) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(port = self.port.name(), error = %e, "epoll_wait failed");
                Woken {
                    wake: true,
                    ..Woken::default()
                }
            }
        };
        w.ready = w.kind.cause(Self::woke(w.kind, woken, w.target));
        if w.ready.is_none() && woken.kick {
            self.drain_kicks();
        }
    }

    /// Ends the wait `w` ([`QueueIo::end_wait`]).
    pub fn end_wait(&mut self, w: PendingWait) -> Wait {
        let cause = w.ready.unwrap_or(WakeCause::Recheck);
        let end = monotonic_now();
        match w.kind {
            WaitKind::Poll => {
                return Wait {
                    cause: WakeCause::Immediate,
                    waited: Duration::ZERO,
                }
            }
            WaitKind::Sleep {
                until: deadline, ..
            } => {
                self.waiter.disarm_timer();
                self.finish_sleep(cause, end, w.target, deadline);
                wait_protocol::end_wait(w.kind, self);
                self.merge_overshoot(end);
            }
            WaitKind::Kick { .. } => {
                // Disarming a timer that was not armed does nothing.
                self.waiter.disarm_timer();
                wait_protocol::end_wait(w.kind, self);
            }
        }
        self.note_wake(cause);
        Wait {
            cause,
            waited: end.saturating_since(w.start),
        }
    }

    /// Whether a receive ring has frames waiting in its backlog and guest
    /// buffers to take them (the re-check after notifications went on).
    fn rx_recheck(&self) -> bool {
        (0..self.pairs.len()).any(|p| {
            self.rx_pending[p]
                .buffers_wanted(&self.port.backlogs[p])
                .is_some_and(|want| {
                    self.pairs[p].rx.as_ref().is_some_and(|r| {
                        r.q.avail_pending()
                            .map(|n| n > 0 && n >= want)
                            .unwrap_or(false)
                    })
                })
        })
    }
}

/// The port's rings as the wait protocol drives them
/// ([`vadapt_policy::wait_protocol`]).
impl Notifications for PortQueues {
    /// Transmit kicks on; receive kicks where frames wait for buffers.
    fn enable_kicks(&mut self) -> bool {
        self.set_notifications(true)
    }

    /// Frames that reached a backlog meanwhile, with the buffers to take
    /// them. Producers are asked to signal the worker from now on.
    fn has_work(&mut self) -> bool {
        self.port.waiting.store(true, Ordering::SeqCst);
        // Pairs with the fence in `VmPort::deliver`: either the producer
        // sees `waiting` and wakes us, or we see its frames here.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.rx_recheck()
    }

    /// Producers need not signal any more; the kicks that came are drained
    /// and counted; kicks off on every ring.
    fn disable_kicks(&mut self) {
        self.port.waiting.store(false, Ordering::SeqCst);
        self.drain_kicks();
        self.set_notifications(false);
    }

    /// On every unbroken transmit ring (the ring-full safety net); only
    /// rings with EVENT_IDX can take it.
    fn arm_kick_threshold(&mut self, threshold: KickThreshold) -> bool {
        let mut armed = false;
        for pair in &mut self.pairs {
            if let Some(r) = pair.tx.as_mut().filter(|r| !r.broken) {
                armed |= r.q.set_kick_threshold(threshold.descriptors(r.q.size()));
            }
        }
        self.log_used_rings();
        armed
    }

    fn disarm_kick_threshold(&mut self) {
        for pair in &mut self.pairs {
            if let Some(r) = pair.tx.as_mut() {
                r.q.disable_notifications();
            }
        }
        self.log_used_rings();
    }
}

impl QueueIo for PortQueues {
    fn name(&self) -> &str {
        self.port.name()
    }

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
        let busy = if s.packets > 0 {
            cycles().wrapping_sub(t0)
        } else {
            // Back off before the next look at the rings: a poller that
            // finds them empty every ~60 ns keeps taking the driver's index
            // line from its core (see EMPTY_PASS_PAUSES).
            for _ in 0..EMPTY_PASS_PAUSES {
                std::hint::spin_loop();
            }
            0
        };
        if self.tally.pass(s.packets, busy) {
            self.publish_counts();
        }
        self.passes += 1;
        if self.passes % KICK_DRAIN_EVERY == 0 {
            self.drain_kicks();
        }
        s
    }

    fn waiter_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(PortQueues::waiter_fd(self))
    }

    fn begin_wait(&mut self, wake: Wake) -> PendingWait {
        PortQueues::begin_wait(self, wake)
    }

    fn poll_wait(&mut self, w: &mut PendingWait) {
        PortQueues::poll_wait(self, w)
    }

    fn end_wait(&mut self, w: PendingWait) -> Wait {
        PortQueues::end_wait(self, w)
    }

    fn set_freq(&mut self, hint: FreqHint) {
        if let Err(e) = self.port.freq.apply(hint) {
            if let Some(held_back) = self.port.may_log("CPU-frequency hint failed") {
                tracing::warn!(port = self.port.name(), error = %e, held_back, "CPU-frequency hint failed");
            }
        }
    }

    fn control(&mut self) -> Control {
        if self.stop.load(Ordering::Relaxed) {
            return Control::Stop;
        }
        // Guest memory that shrank under us (an unsealed file the port
        // accepted), or a notification descriptor gone bad: this port only
        // is reset; the daemon and every other port go on.
        let faults = crate::sigbus_guard::total_faults();
        if faults != self.seen_faults {
            self.seen_faults = faults;
            if self.port.guest_memory_faults() > 0 {
                self.frontend_failed =
                    Some("guest memory shrank under the daemon (SIGBUS survived)".into());
            }
            self.end_dead_log();
        }
        if let Some(why) = self.frontend_failed.take() {
            self.port.disconnect(&why);
            self.stop.store(true, Ordering::Relaxed);
            return Control::Stop;
        }
        if let Some(limits) = self.port.limits.changed(&mut self.limits_seen) {
            let now = self.clock.now();
            self.policers.update(limits, now);
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
            let stats = &self.port.stats;
            stats.poll_interval_us.store(us, Ordering::Relaxed);
            // Range and prediction change at a search restart, which almost
            // always moves the interval; one that does not shows a round later.
            let (lo, hi) = status.search_range_us.unwrap_or((0, 0));
            stats.search_lo_us.store(lo, Ordering::Relaxed);
            stats.search_hi_us.store(hi, Ordering::Relaxed);
            stats
                .predicted_us
                .store(status.predicted_us.unwrap_or(0), Ordering::Relaxed);
        }
    }

    fn take_policy(&mut self) -> Box<dyn vadapt_policy::Policy> {
        let (policy, view) = self.port.policy.take(self.port.name());
        self.policy_view = Some(view);
        policy
    }

    fn park_policy(&mut self, policy: Box<dyn vadapt_policy::Policy>) {
        // The view as the port's control last updated it.
        if let Some(view) = self.policy_view {
            self.port.policy.park(policy, &view);
        }
    }

    fn into_bases(self: Box<Self>) -> RingBases {
        PortQueues::into_bases(*self)
    }

    fn worker_stats(&self) -> Option<&crate::metrics::WorkerStats> {
        Some(&self.port.worker_stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::VmPortConfig;
    use crate::frames::FrameBatch;
    use crate::queue::ring::test_utils::{frame, ring, UNLIMITED};
    use crate::queue::ring_pass::test_utils::dropped;
    use vadapt_host::cpufreq::CpuFreq;
    use vadapt_policy::PolicyConfig;
    use vadapt_virtq::RingFeatures;

    /// Frames a worker took from the backlog for a guest that posted no
    /// receive buffers are counted as dropped when the worker goes.
    #[test]
    fn frames_taken_and_never_delivered_are_counted_when_the_worker_stops() {
        let port = VmPort::new(
            VmPortConfig::new("vm", "/nonexistent/vm.sock"),
            PolicyConfig::BusyPoll,
            16,
            None,
            Arc::new(CpuFreq::unavailable("test")),
            None,
        )
        .unwrap();
        let (rx, guest) = ring(16, RingFeatures::default());
        let pair = Pair {
            rx: Some(rx),
            tx: None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let mut q =
            PortQueues::new(Arc::clone(&port), guest.mem.clone(), vec![pair], 0, stop).unwrap();
        let mut batch = FrameBatch::new(16);
        for i in 0..5 {
            assert!(batch.push(&frame(i, 60)));
        }
        assert_eq!(port.backlogs[0].push(&batch, &[0, 1, 2, 3, 4]), (5, 0));
        // No buffers: the pass takes the frames, and they wait.
        assert_eq!(q.service_rx(0, UNLIMITED), (0, 0, false));
        assert_eq!(q.rx_pending[0].remaining(), 5);
        assert_eq!(port.backlogs[0].held(), 0);
        drop(q);
        assert_eq!(dropped(&port.stats.queues[0], DropReason::PortDown), 5);
    }
}
