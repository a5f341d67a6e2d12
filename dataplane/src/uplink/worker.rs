//! An uplink queue's worker: one NIC queue's AF_XDP socket as a
//! [`QueueIo`], so that a [`crate::worker::QueueSet`] runs the same
//! policies on it as on a VM ring, on a thread of its own or in the pool.
//!
//! What each policy's waits mean on a NIC queue (see `waits`):
//! * waiting for a kick: epoll on the socket (readable when the RX ring
//!   has frames: the NIC's interrupt, through the kernel's
//!   `XDP_USE_NEED_WAKEUP` protocol) and on the queue's wake eventfd
//!   (frames from the switch to transmit). This is interrupt mode's and
//!   EE-KBP's sleep on an empty queue;
//! * a timed sleep: the socket is not watched, so the NIC's interrupt
//!   wakes nobody: NetAP's periodic service with the notification
//!   suppressed;
//! * no wait: busy-poll, and EE-KBP while passes find frames. Under
//!   EE-KBP the socket has the kernel's preferred busy polling on
//!   (`super::busy_poll`), and each pass starts with a `recvfrom` that
//!   runs the queue's NAPI poll in this thread.
//!
//! Frames for the wire that the TX ring cannot take wait for a later pass
//! (see `transmit`): a full ring pushes back on the switch.

use super::busy_poll::{self, SocketBusyPoll};
use super::port::Uplink;
use super::xsk::{self, XskQueue, MAX_XSK_FRAME};
use crate::clock::{cycles, PassClock};
use crate::frames::FrameBatch;
use crate::log_limit::LogLimit;
use crate::metrics::{Dir, DropReason, PassTally, WorkerStats};
use crate::net::MIN_FRAME;
use crate::offload::Cutter;
use crate::queue::policy_slot::WorkerView;
use crate::queue::rx::RxPending;
use crate::queue::waiting::Waiter;
use crate::switch::{FdbCache, Sender};
use crate::worker::{Control, PendingWait, QueueIo, RingBases, Wait};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vadapt_host::cpufreq::CpuFreq;
use vadapt_policy::{Budget, Duration, FreqHint, Instant, PassStats, Policy, Wake};

/// True for an IEEE 802.3 frame (a length, not an EtherType, after the
/// addresses) shorter than that length says: the wire cut it, or its
/// sender lied; counted as undersize. (Longer is fine: the minimum frame
/// pads short payloads.)
fn lies_about_its_length(frame: &[u8]) -> bool {
    let field = u16::from_be_bytes([frame[12], frame[13]]);
    field <= 1500 && MIN_FRAME + usize::from(field) > frame.len()
}

mod waits;

/// Frames forwarded into the switch at once.
const BATCH: usize = 64;

/// One NIC queue's world.
pub struct UplinkQueue {
    port: Arc<Uplink>,
    q: usize,
    /// `<port>/<queue>`, as the NQ pool shows it.
    label: String,
    xsk: XskQueue,
    /// Waits on the socket (unwatched while the queue sleeps), the wake
    /// eventfd and a timer.
    waiter: Waiter,
    stop: Arc<AtomicBool>,
    sender: Option<Sender>,
    /// Frames from the wire, on their way into the switch.
    batch: FrameBatch,
    /// Frames taken from the backlog, on their way to the TX ring (the
    /// VM ports' receive-side mechanism: see [`RxPending`]).
    pending: RxPending,
    /// (frame of `pending`, segment of it) to write, this pass.
    plan: Vec<(u32, u16)>,
    cache: FdbCache,
    freq: Arc<CpuFreq>,
    /// The worker's counters (`<port>/<queue>`).
    stats: Arc<WorkerStats>,
    /// Passes, busy cycles, packets and bytes not yet in the counters.
    tally: PassTally,
    /// The policy's time, from the TSC where it can be (a `clock_gettime`
    /// a pass had been a sixth of the worker's time in B10's profile).
    clock: PassClock,
    log: LogLimit,
    /// What the worker has seen of its queue's policy slot (set by `run`).
    policy_view: Option<WorkerView>,
    /// The socket's busy-poll options: on while the queue runs EE-KBP
    /// (set when the worker takes its policy, see `busy_poll`), when
    /// each pass's `recvfrom` runs the queue's NAPI poll.
    busy_poll: SocketBusyPoll,
    /// Whether the socket's NAPI id was looked at since busy polling
    /// came on (once, after the first frames: see `check_napi`).
    napi_checked: bool,
}

impl std::fmt::Debug for UplinkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UplinkQueue")
            .field("port", &self.port.name())
            .field("q", &self.q)
            .finish_non_exhaustive()
    }
}

impl UplinkQueue {
    /// The worker's world for queue `q` of `port`, over `xsk`, on a CPU
    /// whose frequency `freq` controls, counting into `stats`.
    pub fn new(
        port: Arc<Uplink>,
        q: usize,
        xsk: XskQueue,
        stop: Arc<AtomicBool>,
        freq: Arc<CpuFreq>,
        stats: Arc<WorkerStats>,
    ) -> std::io::Result<Self> {
        let waiter = Waiter::over(&port.queues[q].wake, &[xsk.fd()])?;
        let sender = port.ingress().and_then(|i| i.sender());
        let pending = RxPending::for_backlog(&port.queues[q].backlog);
        Ok(UplinkQueue {
            label: format!("{}/{q}", port.name()),
            q,
            xsk,
            waiter,
            stop,
            sender,
            batch: FrameBatch::new(BATCH),
            plan: Vec::with_capacity(xsk::RING_SIZE as usize),
            pending,
            cache: FdbCache::default(),
            freq,
            stats,
            tally: PassTally::new(port.stats.queues.len()),
            clock: PassClock::new(port.tsc_per_ns),
            log: LogLimit::per_second(),
            policy_view: None,
            busy_poll: SocketBusyPoll::OFF,
            napi_checked: false,
            port,
        })
    }

    /// Publishes the tallied counts (before every wait, at the end, and
    /// every [`crate::metrics::PUBLISH_EVERY`] passes).
    pub(super) fn publish_counts(&mut self) {
        self.tally.publish(&self.stats, &self.port.stats.queues);
    }

    fn emit(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        self.tally
            .moved(self.q, Dir::Tx, self.batch.len() as u64, self.batch.bytes());
        if let Some(s) = &self.sender {
            // Storm control: a token from the port's shared bucket for
            // each frame the switch would flood (no lock without limits).
            let (limits, clock) = (&self.port.limits, &mut self.clock);
            let may_flood =
                |_| limits.with_shared(|| clock.now(), |p| p.is_none_or(|p| p.admit_flood()));
            s.forward_gated(self.q as u16, &self.batch, &mut self.cache, may_flood)
                .count_into(&self.port.stats, self.q);
        }
        self.batch.clear();
    }

    /// Wire → switch: up to `max` frames off the RX ring.
    fn receive(&mut self, max: u32) -> (u64, u64, bool) {
        let port = Arc::clone(&self.port);
        let qs = &port.stats.queues[self.q];
        if self.xsk.fill_level() == 0 {
            qs.fill_ring_empty.fetch_add(1, Ordering::Relaxed);
        }
        if self.busy_poll.is_on() {
            // Preferred busy polling: this call runs the queue's NAPI poll
            // here, filling the RX ring read below (xdpsock's recipe).
            self.xsk.wake_rx();
        }
        let max_frame = self.port.max_frame();
        let (mut n, mut bytes, mut runts, mut over, mut foreign) = (0u64, 0u64, 0u64, 0u64, 0u32);
        let (mut taken, mut policed) = (0u32, 0u64);
        // In chunks of a batch: each chunk goes into the switch whole.
        while taken < max {
            let (batch, xsk, clock) = (&mut self.batch, &mut self.xsk, &mut self.clock);
            // Policing, under the port's shared buckets' lock for the
            // chunk (no lock without limits): a frame over the rate is
            // not copied into the batch.
            let got = port.limits.with_shared(
                || clock.now(),
                |mut policers| {
                    let mut policer = policers.as_mut().and_then(|p| p.parts().0);
                    xsk.receive((max - taken).min(BATCH as u32), |f| {
                        if f.len() < MIN_FRAME || lies_about_its_length(f) {
                            runts += 1;
                        } else if f.len() > max_frame {
                            over += 1;
                        } else if policer.as_mut().is_some_and(|p| !p.admit(f.len())) {
                            policed += 1;
                        } else {
                            batch.push(f);
                            n += 1;
                            bytes += f.len() as u64;
                        }
                    })
                },
            );
            taken += got.frames;
            foreign += got.foreign;
            self.emit();
            if got.frames < BATCH as u32 {
                break;
            }
        }
        if runts > 0 {
            qs.drop(DropReason::Undersize, runts);
        }
        if policed > 0 {
            qs.drop(DropReason::Policed, policed);
        }
        if over > 0 {
            qs.drop(DropReason::OverMtu, over);
            if let Some(held_back) = self.log.allow(std::time::Instant::now()) {
                tracing::warn!(
                    port = self.port.name(),
                    queue = self.q,
                    max_frame,
                    held_back,
                    "dropped frames from the wire longer than the uplink's MTU + 18 bytes"
                );
            }
        }
        if foreign > 0 {
            qs.drop(DropReason::BadAddress, u64::from(foreign));
        }
        if self.xsk.fill_needs_wakeup() {
            self.xsk.wake_rx();
        }
        if taken > 0 && !self.napi_checked && self.busy_poll.is_on() {
            self.check_napi();
        }
        (n, bytes, taken == max)
    }

    /// Switch → wire: frames from the backlog into the TX ring, offloads
    /// done in software (AF_XDP carries plain frames), as many as the ring
    /// has room for after its completions were reaped. The rest wait (in
    /// `pending`, then in the backlog, which fills meanwhile: the switch is
    /// pushed back as by a VM port whose guest posts no buffers) for a
    /// later pass; only what overflows the backlog is dropped, counted at
    /// [`Uplink`]'s `deliver`. A pass that had to leave frames waiting
    /// counts one `tx_ring_full`. Returns (frames, bytes) sent.
    fn transmit(&mut self) -> (u64, u64) {
        let port = Arc::clone(&self.port);
        let qs = &port.stats.queues[self.q];
        let room = self.xsk.tx_room();
        self.pending.refill(&port.queues[self.q].backlog);
        if self.pending.remaining() == 0 || room == 0 {
            if self.xsk.flush_tx() {
                qs.calls.fetch_add(1, Ordering::Relaxed);
            }
            if self.pending.remaining() > 0 {
                qs.tx_ring_full.fetch_add(1, Ordering::Relaxed);
            }
            return (0, 0);
        }
        let max = self.port.max_frame().min(MAX_XSK_FRAME);
        self.plan.clear();
        let (mut next, mut cut) = self.pending.cursor();
        let frames = self.pending.frames();
        let (mut over, mut refused) = (0u64, 0u64);
        // Walk from where the last pass stopped until the ring's room is
        // planned; frames dropped on the way are passed for good.
        while next < frames.len() && self.plan.len() < room {
            let f = frames.get(next);
            let Some(kept) = frames.offloaded(next) else {
                if f.len() > max {
                    over += 1;
                } else {
                    self.plan.push((next as u32, 0));
                }
                next += 1;
                continue;
            };
            let Ok(c) = Cutter::new(f, kept.offload) else {
                refused += 1;
                next += 1;
                continue;
            };
            if cut == 0 {
                if c.segments() {
                    qs.gso_frames.fetch_add(1, Ordering::Relaxed);
                } else {
                    qs.csum_completed.fetch_add(1, Ordering::Relaxed);
                }
            }
            while cut < c.count() && self.plan.len() < room {
                if c.len(cut) > max {
                    over += 1;
                } else {
                    self.plan.push((next as u32, cut as u16));
                }
                cut += 1;
            }
            if cut == c.count() {
                cut = 0;
                next += 1;
            }
        }
        let plan = &self.plan;
        let mut bytes = 0u64;
        let (sent, kicked) = self.xsk.transmit(plan.len(), |k, buf| {
            let (i, s) = plan[k];
            let (i, s) = (i as usize, usize::from(s));
            let f = frames.get(i);
            let len = match frames.offloaded(i) {
                None => {
                    buf[..f.len()].copy_from_slice(f);
                    f.len()
                }
                Some(kept) => match Cutter::new(f, kept.offload) {
                    Ok(c) => c.write(s, buf),
                    Err(_) => 0, // checked above: not reached
                },
            };
            bytes += len as u64;
            len
        });
        self.pending.set_cursor(next, cut);
        if kicked {
            qs.calls.fetch_add(1, Ordering::Relaxed);
        }
        if sent < self.plan.len() {
            // Not reached: the plan is no longer than the free frames. Were
            // it, the frames passed are dropped, counted, not sent twice.
            qs.drop(DropReason::BacklogFull, (self.plan.len() - sent) as u64);
        }
        if sent < self.plan.len() || self.pending.remaining() > 0 {
            qs.tx_ring_full.fetch_add(1, Ordering::Relaxed);
        }
        if over > 0 {
            qs.drop(DropReason::OverMtu, over);
        }
        if refused > 0 {
            qs.drop(DropReason::BadVnetHdr, refused);
        }
        self.tally.moved(self.q, Dir::Rx, sent as u64, bytes);
        (sent as u64, bytes)
    }

    /// True while frames for the wire wait: in the backlog, taken from it,
    /// or in the TX ring for a kick.
    fn tx_waiting(&mut self) -> bool {
        self.pending.remaining() > 0
            || self.port.queues[self.q].backlog.has_frames()
            || self.xsk.tx_pending() > 0
    }

    /// The socket's busy-poll options for `policy`: preferred busy
    /// polling with its quota for EE-KBP, off for every other policy
    /// (interrupt mode stays on epoll alone). A refusal is one WARN line:
    /// the queue is served either way.
    fn set_busy_poll(&mut self, policy: &dyn Policy) {
        let to = if policy.name() == vadapt_policy::PolicyKind::Eekbp.as_str() {
            SocketBusyPoll::preferred(policy.budget().packets)
        } else {
            SocketBusyPoll::OFF
        };
        if to == self.busy_poll {
            return;
        }
        match busy_poll::set_socket(self.xsk.fd(), to) {
            Ok(()) => {
                self.busy_poll = to;
                self.napi_checked = false;
            }
            Err(e) => {
                // What was set of it is cleared again.
                let _ = busy_poll::set_socket(self.xsk.fd(), SocketBusyPoll::OFF);
                self.busy_poll = SocketBusyPoll::OFF;
                tracing::warn!(
                    port = self.port.name(),
                    queue = self.q,
                    error = %vadapt_host::error_chain::error_chain(&e),
                    "the AF_XDP socket refuses busy polling: EE-KBP sleeps and wakes in epoll as interrupt mode"
                );
            }
        }
    }

    /// Once frames came in under busy polling: a socket that knows no NAPI
    /// instance (`SO_INCOMING_NAPI_ID` 0) cannot busy-poll, and says so.
    fn check_napi(&mut self) {
        self.napi_checked = true;
        match busy_poll::napi_id(self.xsk.fd()) {
            Ok(0) => tracing::warn!(
                port = self.port.name(),
                queue = self.q,
                driver = super::channels::driver(&self.port.cfg.iface).as_str(),
                "the AF_XDP socket knows no NAPI instance (SO_INCOMING_NAPI_ID 0; from kernel 6.13 only zero-copy sockets do, and veth has no zero-copy): the kernel cannot busy-poll this queue, EE-KBP's recvfrom runs no NAPI poll, and only the NIC's IRQ deferral acts (docs/uplink.md)"
            ),
            Ok(id) => tracing::info!(
                port = self.port.name(),
                queue = self.q,
                napi_id = id,
                "EE-KBP busy-polls the queue's NAPI instance through the AF_XDP socket"
            ),
            Err(e) => tracing::warn!(port = self.port.name(), queue = self.q, error = %e, "cannot read the socket's NAPI id"),
        }
    }

    /// Frames for the wire wait and the next pass can move them: not when
    /// the last kick moved none ([`XskQueue::tx_stalled`]).
    fn tx_work(&mut self) -> bool {
        self.tx_waiting() && !self.xsk.tx_stalled()
    }

    /// How long a wait may last when frames for the wire wait on a
    /// stalled TX ring: [`super::xsk::TX_STALL_RETRY`] (nothing would wake
    /// the worker when the ring moves again), else `left`.
    fn tx_retry(&mut self, left: Duration) -> Duration {
        if self.tx_waiting() && self.xsk.tx_stalled() {
            left.min(super::xsk::TX_STALL_RETRY)
        } else {
            left
        }
    }
}

impl Drop for UplinkQueue {
    fn drop(&mut self) {
        self.publish_counts();
    }
}

impl QueueIo for UplinkQueue {
    fn name(&self) -> &str {
        &self.label
    }

    fn now(&mut self) -> Instant {
        self.clock.now()
    }

    fn service(&mut self, budget: Budget) -> PassStats {
        let t0 = cycles();
        let slot = &self.port.queues[self.q];
        let backlog_permille = (slot.backlog.held() * 1000 / slot.backlog.capacity().max(1)) as u16;
        let fill = self.xsk.rx_fill_permille().max(backlog_permille);
        let (rn, rb, rx_more) = self.receive(budget.packets.max(1));
        let (tn, tb) = self.transmit();
        let tx_more = self.tx_work();
        let busy = if rn + tn > 0 {
            cycles().wrapping_sub(t0)
        } else {
            0
        };
        if self.tally.pass(rn + tn, busy) {
            self.publish_counts();
        }
        PassStats {
            packets: rn + tn,
            bytes: rb + tb,
            more_work: rx_more || tx_more,
            max_fill_permille: fill,
        }
    }

    fn waiter_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.waiter.as_raw_fd())
    }

    fn begin_wait(&mut self, wake: Wake) -> PendingWait {
        self.begin(wake)
    }

    fn poll_wait(&mut self, w: &mut PendingWait) {
        self.poll(w)
    }

    fn end_wait(&mut self, w: PendingWait) -> Wait {
        self.end(w)
    }

    fn set_freq(&mut self, hint: FreqHint) {
        if let Err(e) = self.freq.apply(hint) {
            if let Some(held_back) = self.log.allow(std::time::Instant::now()) {
                tracing::warn!(port = self.port.name(), error = %e, held_back, "CPU-frequency hint failed");
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
        let port = Arc::clone(&self.port);
        let c = port.queues[self.q]
            .policy
            .control(view, port.name())
            .unwrap_or(Control::Continue);
        // The socket follows the policy: busy polling on for EE-KBP, off
        // for the rest; a new quota is the poll's budget.
        match &c {
            Control::Switch(p) => self.set_busy_poll(p.as_ref()),
            Control::Retune(vadapt_policy::Retune::Quota { packets }) if self.busy_poll.is_on() => {
                let to = SocketBusyPoll::preferred(*packets);
                if busy_poll::set_socket(self.xsk.fd(), to).is_ok() {
                    self.busy_poll = to;
                }
            }
            _ => {}
        }
        c
    }

    fn retune_refused(
        &mut self,
        retune: &vadapt_policy::Retune,
        error: &vadapt_policy::RetuneError,
    ) {
        tracing::warn!(port = self.port.name(), queue = self.q, ?retune, %error, "retune refused by the running policy");
    }

    fn take_policy(&mut self) -> Box<dyn Policy> {
        let port = Arc::clone(&self.port);
        let (policy, view) = port.queues[self.q].policy.take(port.name());
        self.policy_view = Some(view);
        self.set_busy_poll(policy.as_ref());
        policy
    }

    fn park_policy(&mut self, policy: Box<dyn Policy>) {
        if let Some(view) = self.policy_view.take() {
            self.port.queues[self.q].policy.park(policy, &view);
        }
    }

    fn into_bases(self: Box<Self>) -> RingBases {
        // No guest rings: closing the socket (on drop) is all.
        RingBases::default()
    }

    fn worker_stats(&self) -> Option<&WorkerStats> {
        Some(&self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::lies_about_its_length;

    #[test]
    fn an_8023_length_beyond_the_frame_is_a_lie_and_ethertypes_are_not_lengths() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&46u16.to_be_bytes());
        assert!(
            !lies_about_its_length(&f),
            "46 bytes after the header: true"
        );
        f[12..14].copy_from_slice(&1000u16.to_be_bytes());
        assert!(lies_about_its_length(&f), "1000 said, 46 there");
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert!(!lies_about_its_length(&f), "an EtherType");
    }
}
