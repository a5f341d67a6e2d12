//! A sending thread: what a netperf thread plus the Linux virtio-net driver do on one vCPU.
//!
//! # Design
//!
//! Each thread owns one queue pair (or shares one, round-robin, under a mutex, when the
//! backend offers fewer pairs than there are threads). There is no separate receive thread:
//! as on a guest vCPU, the thread that sends also takes the "interrupts" of its pair.
//!
//! * **TX** follows `start_xmit` with `napi_tx` off: free completed buffers
//!   (`free_old_xmit_skbs`), add one buffer per packet (virtio-net header + frame; in TCP
//!   stream one per segment, built by [`TcpSender`]),
//!   publish, and kick only when [`DriverQueue::kick_prepare`] says so (`NO_NOTIFY` flag or
//!   EVENT_IDX `avail_event`). When fewer than `2 + MAX_SKB_FRAGS` (19) descriptors remain,
//!   the queue stops (a *ring-full stall*) and asks for a completion call with
//!   `enable_cb_delayed`; the thread then sleeps on the TX call eventfd. A stop whose call
//!   is owed (the backend used buffers past the event point) and does not come within 10 ms
//!   is ended by the guest and counted (`tx_wake_timeouts`): a Linux guest would wait for its
//!   watchdog instead, but a synthetic guest must not hang. A backend that has not reached
//!   the event point yet is waited for (in 10 ms slices, up to the end of the run).
//! * **RX** is NAPI: RX calls are enabled; when the RX call eventfd is found signalled the
//!   thread pays the exit cost, disables callbacks and polls up to the budget (64); under
//!   budget it re-enables callbacks and, if entries arrived meanwhile (`enable_cb` false),
//!   polls again; at budget it stays scheduled and polls again on its next pass. Buffers
//!   are reposted when more than half the budget is free, as `try_fill_recv`.
//! * **Where interrupts are taken.** A vCPU takes an interrupt between any two
//!   instructions; this thread looks at its RX call eventfd once per burst of up to 64
//!   packets (one non-blocking `read`), and whenever it waits (for a TX completion, for the
//!   pacer, for a reply) it sleeps in `ppoll` on the call eventfds. The delay this adds is at
//!   most one burst (tens of microseconds at worst).
//! * **Pacing.** A paced stream sends each frame at its time, sleeping through gaps of
//!   100 µs or more and spinning through shorter ones ([`Pacing::Exact`], as pktgen); or,
//!   under [`Pacing::Burst`], sleeps until 100 µs worth of frames (at most a burst of 64)
//!   are due and sends them together, so the vCPU idles between bursts instead of spinning
//!   at 100 % — which on a host core shared with another guest keeps that guest off the
//!   core for up to a scheduler tick.
//! * **Exit cost.** Every kick and every handled call busy-waits [`ExitCost`] on this thread.
//! * **Write cost.** In TCP stream each application write busy-waits the emulated cost of a
//!   `send()` on this thread ([`TcpSender::write_messages`]); in closed loop the thread then
//!   writes one message at a time and transmits after each write (`Worker::tcp_writer`).
//! * **A vCPU to the host.** The thread registers its thread id in [`Vcpus`] while it runs
//!   (QMP `query-cpus-fast`), and blocks at the top of each send loop while the guest is
//!   paused (QMP `stop`), re-checking the end of the run every 10 ms. A reply already on its
//!   way is still waited for; nothing new is sent until `cont`.
//!
//! [`DriverQueue::kick_prepare`]: vadapt_virtq::driver::DriverQueue::kick_prepare

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::{thread_cpu_ns, Clock, ExitCost};
use crate::config::Mode;
use crate::frontend::QueuePair;
use crate::load::{Load, Pacer, Pacing};
use crate::metrics::{GuestCounters, LatencyHistogram, ThreadCounters};
use crate::period_latency::PeriodLatency;
use crate::queue::{QueueError, RxPacket, TxQueue};
use crate::tcp_stream::{SegmentAdd, TcpSender};
use vadapt_qemu::server::vcpus::Vcpus;
use vadapt_wire::stamped_frame::{self as frame, Stamp};
use vadapt_wire::tcp_build::{TcpFlow, TxOffloads};

/// Packets sent per lock hold / interrupt check in closed loop.
const BURST: u32 = 64;
/// Linux stops a TX queue when fewer than `2 + MAX_SKB_FRAGS` descriptors are free.
const LINUX_STOP_THRESHOLD: u16 = 2 + 17;
/// Longest sleep of a stopped TX queue before the guest checks the ring itself (ns).
const TX_WAKE_TIMEOUT_NS: u64 = 10_000_000;
/// Longest single sleep while waiting for a reply or the pacer (ns), so that stop requests
/// and deadlines are noticed.
const MAX_SLEEP_NS: u64 = 10_000_000;
/// Longest sleep waiting for a reply when other threads share the queue pair (ns).
const SHARED_PAIR_SLEEP_NS: u64 = 100_000;
/// Below this much idle time the thread spins instead of sleeping (ns): a sleep costs a
/// scheduler round trip of tens of microseconds on these machines. Under [`Pacing::Burst`]
/// a burst spans this much time, so that the thread sleeps instead.
const SPIN_BELOW_NS: u64 = 100_000;
/// Longest block at a pause point before the thread checks the stop conditions (ns).
const PAUSE_SLICE: Duration = Duration::from_millis(10);
/// How long the end-of-run drain waits for the backend to consume what was posted (ns).
const DRAIN_TIMEOUT_NS: u64 = 1_000_000_000;

/// What all threads of a guest share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub clock: Clock,
    /// Set by the caller to end the run.
    pub stop: Arc<AtomicBool>,
    /// Set by the guest when the backend went away (skip the drain, end at once).
    pub abort: AtomicBool,
    /// End of the sending phase (ns on `clock`).
    pub deadline_ns: u64,
    /// Per thread: 1 + sequence number of the newest request answered.
    pub answered: Vec<AtomicU64>,
    pub counters: Arc<GuestCounters>,
    pub mac: [u8; 6],
    /// Destination MAC of every frame.
    pub dst_mac: [u8; 6],
    pub mode: Mode,
    pub load: Load,
    pub pacing: Pacing,
    pub threads: u32,
    /// Queue pairs in use (fewer than `threads` means pairs are shared).
    pub pairs: u16,
    pub exit: ExitCost,
    pub napi_budget: u32,
    pub tx_batch: u16,
    pub rr_timeout_ns: u64,
    pub frame_len: u64,
    /// Message size (bytes of L2 payload for raw frames, of application data in TCP stream).
    pub size: u32,
    /// TCP stream: the offloads the device took and the payload every segment carries.
    pub tcp: Option<TcpStreamShared>,
    /// Where each thread registers as a vCPU, and the pause (QMP `stop` / `cont`).
    pub vcpus: Arc<Vcpus>,
    /// Request/response: each period's round trips, for `--cores-control`.
    pub period_latency: Option<Arc<PeriodLatency>>,
}

/// What the TCP-stream senders of a guest share.
#[derive(Debug)]
pub(crate) struct TcpStreamShared {
    pub offloads: TxOffloads,
    pub pattern: Arc<[u8]>,
    /// Emulated cost of one application write (ns); 0 = free writes.
    pub write_ns: u64,
}

/// What one add to the TX ring did.
enum Added {
    /// A buffer went on the ring.
    Buffer {
        /// Ethernet bytes (headers + payload).
        frame_bytes: u64,
        /// Application payload bytes.
        payload_bytes: u64,
        /// Application messages completed.
        messages: u64,
    },
    /// No slot or descriptor free: the queue must stop.
    RingFull,
    /// Nothing to send (TCP stream, send queue empty).
    NothingQueued,
}

/// What a thread hands back when it ends.
#[derive(Debug)]
pub(crate) struct WorkerResult {
    pub thread: u32,
    pub queue_pair: u16,
    pub hist: LatencyHistogram,
    /// End of the sending phase (ns on the shared clock).
    pub end_ns: u64,
    /// CPU time the thread used in the sending phase (ns).
    pub cpu_ns: u64,
    pub error: Option<String>,
}

pub(crate) struct Worker {
    id: u32,
    pair: Arc<Mutex<QueuePair>>,
    pair_index: u16,
    shared: Arc<Shared>,
    hist: LatencyHistogram,
    seq: u64,
    stop_threshold: u16,
    error: Option<String>,
    /// Echo mode: replies owed from the current NAPI poll (destination, request stamp).
    echo: Vec<([u8; 6], Stamp)>,
    /// Other threads use the same queue pair.
    shared_pair: bool,
    /// TCP stream: this thread's connection.
    tcp: Option<TcpSender>,
}

impl Worker {
    pub(crate) fn new(id: u32, pair: Arc<Mutex<QueuePair>>, shared: Arc<Shared>) -> Worker {
        let (pair_index, size) = {
            let p = lock(&pair);
            (p.index, p.tx.vq.layout().size)
        };
        Worker {
            id,
            pair,
            pair_index,
            hist: LatencyHistogram::new(),
            seq: 0,
            // Small rings (tests) stop at half the ring instead of never starting.
            stop_threshold: LINUX_STOP_THRESHOLD.min(size / 2).max(1),
            error: None,
            echo: Vec::new(),
            shared_pair: shared.threads > u32::from(shared.pairs),
            tcp: shared.tcp.as_ref().map(|t| {
                TcpSender::new(
                    TcpFlow::new(id, shared.mac, shared.dst_mac),
                    t.offloads,
                    shared.size,
                    shared.load == Load::ClosedLoop,
                    t.write_ns,
                    Arc::clone(&t.pattern),
                )
            }),
            shared,
        }
    }

    fn c(&self) -> &ThreadCounters {
        &self.shared.counters.threads[self.id as usize]
    }

    fn should_stop(&self) -> bool {
        self.error.is_some()
            || self.shared.stop.load(Ordering::Relaxed)
            || self.shared.abort.load(Ordering::Relaxed)
            || self.shared.clock.now_ns() >= self.shared.deadline_ns
    }

    /// The vCPU's pause point (QMP `stop`, or this vCPU offline through the guest agent):
    /// blocks while held, for at most one slice. Returns whether it is still held; the
    /// caller re-checks its stop conditions.
    fn paused(&self) -> bool {
        self.shared.vcpus.wait_while_held(self.id, PAUSE_SLICE)
    }

    pub(crate) fn run(mut self) -> WorkerResult {
        // This thread plays vCPU `id`: make it visible to `query-cpus-fast`.
        self.shared
            .vcpus
            .register(self.id, vadapt_host::cputime::current_tid());
        let cpu_start = thread_cpu_ns();
        let tcp_writes_cost = self.tcp.as_ref().is_some_and(TcpSender::writes_cost);
        match (self.shared.mode, self.shared.load) {
            (Mode::TcpStream, Load::ClosedLoop) if tcp_writes_cost => self.tcp_writer(),
            (Mode::Stream | Mode::TcpStream, Load::ClosedLoop) => self.stream(None),
            (Mode::Stream | Mode::TcpStream, Load::Rate { pps }) => {
                self.stream(Some(self.pacer(pps, 1024)))
            }
            (Mode::RequestResponse, Load::ClosedLoop) => self.request_response(None),
            (Mode::Echo, _) => self.respond(),
            (Mode::RequestResponse, Load::Rate { pps }) => {
                let p = self.pacer(pps, 1);
                self.request_response(Some(p))
            }
        }
        let end_ns = self.shared.clock.now_ns().min(self.shared.deadline_ns);
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
        if !self.shared.abort.load(Ordering::Relaxed) {
            self.drain();
        }
        self.shared.vcpus.unregister(self.id);
        WorkerResult {
            thread: self.id,
            queue_pair: self.pair_index,
            hist: self.hist,
            end_ns,
            cpu_ns,
            error: self.error,
        }
    }

    fn pacer(&self, pps: f64, max_backlog: u64) -> Pacer {
        let per_thread = pps / f64::from(self.shared.threads);
        Pacer::new(per_thread, self.shared.clock.now_ns(), max_backlog)
    }

    // ---- closed loop and rate: one-way stream -------------------------------------------

    /// Raw frames: one message per frame, `want` frames a pass; paced, the frames due go out
    /// one at a time or, under [`Pacing::Burst`], a burst at a time. TCP stream: the messages
    /// due are written to the send queue, and a pass sends up to a burst of segments from it;
    /// in closed loop with free writes, every segment is full.
    fn stream(&mut self, mut pacer: Option<Pacer>) {
        let pair = Arc::clone(&self.pair);
        // Frames the pacer must have due before a pass sends them (1: each at its time).
        let pace_burst = match (&pacer, self.shared.pacing) {
            (Some(p), Pacing::Burst) => p.burst_len(SPIN_BELOW_NS, u64::from(BURST)),
            _ => 1,
        };
        while !self.should_stop() {
            if self.paused() {
                continue;
            }
            let want = match (pacer.as_mut(), self.tcp.is_some()) {
                (None, _) => BURST,
                (Some(p), true) => {
                    self.write_messages(p.due(self.shared.clock.now_ns()));
                    if !self.tcp.as_ref().is_some_and(TcpSender::has_data) {
                        let next = p.next_due_ns();
                        self.idle_until(next);
                        continue;
                    }
                    BURST
                }
                (Some(p), false) => match p.due(self.shared.clock.now_ns()) {
                    n if n < pace_burst => {
                        // Not a whole burst yet: give them back and wait for the rest.
                        p.unsend(n);
                        if pace_burst == 1 {
                            self.idle_until(p.next_due_ns());
                        } else {
                            self.sleep_until(p.burst_due_ns(pace_burst));
                        }
                        continue;
                    }
                    n => {
                        // Take one burst now; the rest stays due for the next pass.
                        let want = n.min(u64::from(BURST));
                        p.unsend(n - want);
                        want as u32
                    }
                },
            };
            // Raw frames not sent are given back to the pacer; TCP keeps them queued.
            let raw_pacer = pacer.as_mut().filter(|_| self.tcp.is_none());
            let mut qp = lock(&pair);
            self.softirq(&mut qp, true);
            if qp.tx.stopped {
                if let Some(p) = raw_pacer {
                    p.unsend(u64::from(want));
                }
                self.wait_tx_wake(qp, true);
                continue;
            }
            let sent = self.xmit(&mut qp, want);
            drop(qp);
            if let Some(p) = raw_pacer {
                p.unsend(u64::from(want - sent));
            }
        }
        if let Some(p) = pacer {
            self.c().paced_skipped.add(p.skipped());
        }
    }

    /// TCP stream in closed loop with a write cost (the rule in [`crate::tcp_stream`]): the
    /// application writes one message at a time, and after each write the driver sends what
    /// is queued if the ring has room. While the queue is stopped the writes go on until a
    /// segment's worth is queued; then the thread sleeps until the TX call. Interrupts (and a
    /// TX call that restarts the queue) are looked at once per burst of writes.
    fn tcp_writer(&mut self) {
        let pair = Arc::clone(&self.pair);
        let queue_full = |w: &Worker| w.tcp.as_ref().is_none_or(TcpSender::send_queue_full);
        while !self.should_stop() {
            if self.paused() {
                continue;
            }
            let mut qp = lock(&pair);
            self.softirq(&mut qp, true);
            if qp.tx.stopped {
                // Sleep for the call only when the writer can write no more.
                let full = queue_full(self);
                self.wait_tx_wake(qp, full);
                if full {
                    continue;
                }
            } else {
                drop(qp);
            }
            for _ in 0..BURST {
                let full = queue_full(self);
                if !full {
                    self.write_messages(1);
                }
                let mut qp = lock(&pair);
                if qp.tx.stopped {
                    if full {
                        break;
                    }
                    continue;
                }
                self.xmit(&mut qp, BURST);
                if self.error.is_some() {
                    break;
                }
            }
        }
    }

    /// TCP stream: the application writes `n` messages, paying the write cost; counted.
    fn write_messages(&mut self, n: u64) {
        let Some(tcp) = self.tcp.as_mut() else {
            return;
        };
        let ns = tcp.write_messages(n);
        let c = &self.shared.counters.threads[self.id as usize];
        c.written_messages.add(n);
        c.write_ns.add(ns);
    }

    // ---- request / response -----------------------------------------------------------

    fn request_response(&mut self, mut pacer: Option<Pacer>) {
        let pair = Arc::clone(&self.pair);
        while !self.should_stop() {
            if self.paused() {
                continue;
            }
            if let Some(p) = pacer.as_mut() {
                if p.due(self.shared.clock.now_ns()) == 0 {
                    let next = p.next_due_ns();
                    self.idle_until(next);
                    continue;
                }
            }
            let req = self.seq;
            let mut qp = lock(&pair);
            self.softirq(&mut qp, true);
            if qp.tx.stopped {
                self.wait_tx_wake(qp, true);
                continue;
            }
            if self.xmit(&mut qp, 1) == 0 {
                self.wait_tx_wake(qp, true);
                continue;
            }
            drop(qp);
            let limit = self.shared.clock.now_ns() + self.shared.rr_timeout_ns;
            loop {
                if self.shared.answered[self.id as usize].load(Ordering::Acquire) > req {
                    break;
                }
                if self.error.is_some()
                    || self.shared.stop.load(Ordering::Relaxed)
                    || self.shared.abort.load(Ordering::Relaxed)
                {
                    return;
                }
                let now = self.shared.clock.now_ns();
                if now >= limit {
                    self.c().lost_requests.add(1);
                    break;
                }
                // On a shared pair another thread may take the call that carries our reply;
                // nothing wakes us then, so sleep in short slices.
                let slice = if self.shared_pair {
                    SHARED_PAIR_SLEEP_NS
                } else {
                    MAX_SLEEP_NS
                };
                self.wait_rx(limit.min(now + slice));
            }
        }
    }

    // ---- echo responder ---------------------------------------------------------------

    /// Answers requests (from another guest in request/response mode) until the end: sleeps
    /// on the RX call, replies from NAPI, restarts a stopped TX queue.
    fn respond(&mut self) {
        let pair = Arc::clone(&self.pair);
        while !self.should_stop() {
            if self.paused() {
                continue;
            }
            let qp = lock(&pair);
            if qp.tx.stopped {
                self.wait_tx_wake(qp, true);
                continue;
            }
            drop(qp);
            let now = self.shared.clock.now_ns();
            self.wait_rx((now + MAX_SLEEP_NS).min(self.shared.deadline_ns));
        }
    }

    /// Sends the replies collected by the last NAPI poll, with one publish and kick decision
    /// for the lot (as a NAPI poll's transmissions share `xmit_more`). Replies that find the
    /// queue stopped are dropped and counted, as a full qdisc would drop them.
    fn xmit_echo(&mut self, qp: &mut QueuePair) {
        qp.tx.reap();
        let mut added = 0u64;
        let mut dropped = 0u64;
        for (dst, stamp) in std::mem::take(&mut self.echo) {
            if qp.tx.stopped {
                dropped += 1;
                continue;
            }
            match qp.tx.add(stamp, Some(dst)) {
                Ok(true) => added += 1,
                Ok(false) => {
                    dropped += 1;
                    self.stop_queue(qp);
                }
                Err(e) => {
                    self.error = Some(e.to_string());
                    break;
                }
            }
        }
        let c = self.c();
        c.sent_packets.add(added);
        c.sent_bytes.add(added * self.shared.frame_len);
        c.sent_messages.add(added);
        c.sent_payload_bytes
            .add(added * u64::from(self.shared.size));
        c.tx_dropped.add(dropped);
        if added == 0 {
            return;
        }
        let kick = qp.tx.publish();
        if !qp.tx.stopped && qp.tx.num_free() < self.stop_threshold {
            self.stop_queue(qp);
        }
        if kick {
            qp.tx.notify.kick();
            self.c().tx_kicks.add(1);
            self.shared.exit.pay();
        }
    }

    // ---- driver pieces ------------------------------------------------------------------

    /// Adds up to `want` buffers (publishing and deciding on a kick every `tx_batch`
    /// buffers); stops the queue when the ring runs low. Returns buffers sent.
    fn xmit(&mut self, qp: &mut QueuePair, want: u32) -> u32 {
        qp.tx.reap();
        // One clock read per call, not per packet: in a VM `clock_gettime` took 60 % of the
        // guest's time at one read per packet (perf). A request is sent alone, so its stamp
        // is exact; stream packets of one burst share a stamp.
        let now = self.shared.clock.now_ns();
        let mut sent = 0;
        let mut nothing_queued = false;
        while sent < want && !qp.tx.stopped && !nothing_queued {
            let batch = u32::from(self.shared.tx_batch).min(want - sent);
            let (mut added, mut frame_bytes, mut payload_bytes, mut messages) = (0, 0, 0, 0);
            let mut ring_full = false;
            for _ in 0..batch {
                match self.add_one(&mut qp.tx, now) {
                    Ok(Added::Buffer {
                        frame_bytes: f,
                        payload_bytes: p,
                        messages: m,
                    }) => {
                        added += 1;
                        frame_bytes += f;
                        payload_bytes += p;
                        messages += m;
                    }
                    Ok(Added::RingFull) => {
                        ring_full = true;
                        break;
                    }
                    Ok(Added::NothingQueued) => {
                        nothing_queued = true;
                        break;
                    }
                    Err(e) => {
                        self.error = Some(e.to_string());
                        break;
                    }
                }
            }
            let kick = if added > 0 { qp.tx.publish() } else { false };
            sent += added;
            let c = self.c();
            c.sent_packets.add(u64::from(added));
            c.sent_bytes.add(frame_bytes);
            c.sent_payload_bytes.add(payload_bytes);
            c.sent_messages.add(messages);
            if qp.tx.num_free() < self.stop_threshold || ring_full {
                self.stop_queue(qp);
            }
            // Linux kicks after the stop check, and always when the queue stopped.
            if kick {
                qp.tx.notify.kick();
                self.c().tx_kicks.add(1);
                self.shared.exit.pay();
            }
            if self.error.is_some() {
                break;
            }
        }
        sent
    }

    /// Adds the next buffer: a stamped raw frame, or this thread's next TCP segment.
    fn add_one(&mut self, tx: &mut TxQueue, now_ns: u64) -> Result<Added, QueueError> {
        if let Some(tcp) = self.tcp.as_mut() {
            // TCP timestamps tick in milliseconds (Linux's `tcp_time_stamp_ts`).
            let ts_ms = (now_ns / 1_000_000) as u32;
            return Ok(match tcp.add_next(tx, ts_ms)? {
                SegmentAdd::Added {
                    frame_bytes,
                    payload_bytes,
                    messages,
                } => Added::Buffer {
                    frame_bytes,
                    payload_bytes,
                    messages,
                },
                SegmentAdd::RingFull => Added::RingFull,
                SegmentAdd::NothingQueued => Added::NothingQueued,
            });
        }
        let stamp = Stamp {
            seq: self.seq,
            sent_ns: now_ns,
            thread: self.id,
        };
        if !tx.add(stamp, None)? {
            return Ok(Added::RingFull);
        }
        self.seq += 1;
        Ok(Added::Buffer {
            frame_bytes: self.shared.frame_len,
            payload_bytes: u64::from(self.shared.size),
            messages: 1,
        })
    }

    /// `netif_stop_subqueue` + `virtqueue_enable_cb_delayed`, as `start_xmit` does.
    fn stop_queue(&mut self, qp: &mut QueuePair) {
        qp.tx.stopped = true;
        self.c().ring_full_stalls.add(1);
        if !qp.tx.vq.enable_cb_delayed() {
            // Completions already past the event point: free them and maybe restart at once.
            qp.tx.reap();
            if qp.tx.num_free() >= self.stop_threshold {
                qp.tx.stopped = false;
                qp.tx.vq.disable_cb();
            }
        }
    }

    /// Sleeps until the TX completion call (or the timeout) when `block`, else only looks
    /// whether it came; then restarts the queue if it did.
    fn wait_tx_wake(&mut self, qp: MutexGuard<'_, QueuePair>, block: bool) {
        let fds = [qp.tx.notify.call_fd(), qp.rx.notify.call_fd()];
        let napi = qp.rx.napi_scheduled;
        drop(qp);
        let now = self.shared.clock.now_ns();
        let timeout_at = now + TX_WAKE_TIMEOUT_NS;
        // The end of the run cuts the wait short; that is not a missing call.
        let until = timeout_at.min(self.shared.deadline_ns.max(now));
        if !napi && block {
            ppoll(&fds, until.saturating_sub(now));
        }
        let pair = Arc::clone(&self.pair);
        let mut qp = lock(&pair);
        self.c()
            .stall_ns
            .add(self.shared.clock.now_ns().saturating_sub(now));
        self.softirq(&mut qp, true);
        let calls = qp.tx.notify.take_calls();
        if calls > 0 {
            let c = self.c();
            c.tx_calls.add(1);
            c.call_signals.add(calls);
            self.shared.exit.pay();
        }
        if !qp.tx.stopped {
            return; // another thread on this pair restarted it
        }
        if calls > 0 {
            // skb_xmit_done: callbacks off, queue woken; start_xmit frees the rest.
            qp.tx.vq.disable_cb();
            qp.tx.reap();
            qp.tx.stopped = false;
        } else if self.shared.clock.now_ns() >= timeout_at && qp.tx.vq.call_owed() {
            // The backend used buffers past the point we asked to be called at, and did not
            // call. (If it has not got there yet, it is slow, not silent: keep waiting for the
            // call, as Linux does; 64 KiB TSO segments on a 1024-entry ring take longer than
            // the timeout to consume.)
            qp.tx.reap();
            if qp.tx.num_free() >= self.stop_threshold {
                qp.tx.vq.disable_cb();
                qp.tx.stopped = false;
                self.c().tx_wake_timeouts.add(1);
            }
        }
    }

    /// The RX "interrupt": when `check_irq`, consume the RX call eventfd; run NAPI when a call
    /// came or NAPI is still scheduled.
    fn softirq(&mut self, qp: &mut QueuePair, check_irq: bool) {
        if check_irq {
            let n = qp.rx.notify.take_calls();
            if n > 0 {
                let c = self.c();
                c.rx_calls.add(1);
                c.call_signals.add(n);
                self.shared.exit.pay();
                qp.rx.vq.disable_cb();
                qp.rx.napi_scheduled = true;
            }
        }
        if qp.rx.napi_scheduled {
            self.napi_poll(qp);
        }
    }

    fn napi_poll(&mut self, qp: &mut QueuePair) {
        let budget = self.shared.napi_budget;
        let refill_at = (budget.min(u32::from(qp.rx.vq.layout().size)) / 2).max(1) as usize;
        loop {
            let mut bytes = 0u64;
            let res = {
                let shared = &self.shared;
                let hist = &mut self.hist;
                let echo = &mut self.echo;
                qp.rx.poll(budget, |pkt| {
                    bytes += u64::from(pkt.frame_len);
                    if let Some(reply) = on_packet(shared, hist, pkt) {
                        echo.push(reply);
                    }
                })
            };
            let c = self.c();
            c.recv_packets.add(u64::from(res.packets));
            c.recv_bytes.add(bytes);
            c.rx_errors.add(u64::from(res.errors));
            if qp.rx.unposted() >= refill_at {
                match qp.rx.refill() {
                    Ok(true) => {
                        qp.rx.notify.kick();
                        self.c().rx_kicks.add(1);
                        self.shared.exit.pay();
                    }
                    Ok(false) => {}
                    Err(e) => self.error = Some(e.to_string()),
                }
            }
            if !self.echo.is_empty() {
                self.xmit_echo(qp);
            }
            if res.packets + res.errors >= budget {
                qp.rx.napi_scheduled = true; // budget spent: poll again on the next pass
                return;
            }
            // napi_complete: re-enable, and poll again if entries slipped in meanwhile.
            if qp.rx.vq.enable_cb() {
                qp.rx.napi_scheduled = false;
                return;
            }
            qp.rx.vq.disable_cb();
        }
    }

    /// Waits (bounded by `until`, ns) for an RX call and handles it.
    fn wait_rx(&mut self, until: u64) {
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
        self.softirq(&mut qp, true);
    }

    /// Sleeps until `t` (ns), taking RX interrupts meanwhile; never spins, so it may wake a
    /// scheduler round trip (and the timer slack) late.
    fn sleep_until(&mut self, t: u64) {
        let t = t.min(self.shared.deadline_ns);
        while self.shared.clock.now_ns() < t && !self.should_stop() {
            self.wait_rx(t);
        }
    }

    /// Idles until `t` (ns), taking RX interrupts meanwhile: sleeps when far, spins when near.
    fn idle_until(&mut self, t: u64) {
        let t = t.min(self.shared.deadline_ns);
        loop {
            let now = self.shared.clock.now_ns();
            if now >= t || self.should_stop() {
                return;
            }
            if t - now > SPIN_BELOW_NS {
                self.wait_rx(t - SPIN_BELOW_NS / 2);
            } else {
                let pair = Arc::clone(&self.pair);
                let mut qp = lock(&pair);
                self.softirq(&mut qp, true);
                drop(qp);
                std::hint::spin_loop();
            }
        }
    }

    /// Waits (bounded) until the backend consumed everything posted, so that counts taken
    /// after the run agree on both sides.
    fn drain(&mut self) {
        let start = self.shared.clock.now_ns();
        let pair = Arc::clone(&self.pair);
        loop {
            {
                let mut qp = lock(&pair);
                qp.tx.reap();
                if qp.tx.in_flight() == 0 {
                    return;
                }
            }
            if self.shared.abort.load(Ordering::Relaxed)
                || self.shared.clock.now_ns() - start > DRAIN_TIMEOUT_NS
            {
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// What a received packet means to the guest: in request/response mode, a reply to one of
/// its threads' requests; in echo mode, a request to answer (returned: destination, stamp).
fn on_packet(
    shared: &Shared,
    hist: &mut LatencyHistogram,
    pkt: &RxPacket,
) -> Option<([u8; 6], Stamp)> {
    if matches!(shared.mode, Mode::Stream | Mode::TcpStream) {
        return None;
    }
    let f = frame::parse_frame(&pkt.head[..pkt.head_len])?;
    let stamp = f.stamp?;
    if f.dst != shared.mac {
        return None;
    }
    if shared.mode == Mode::Echo {
        return Some((f.src, stamp));
    }
    if stamp.thread >= shared.threads {
        return None;
    }
    let slot = &shared.answered[stamp.thread as usize];
    if stamp.seq + 1 > slot.load(Ordering::Acquire) {
        let rtt = shared.clock.now_ns().saturating_sub(stamp.sent_ns);
        hist.record(rtt);
        if let Some(p) = &shared.period_latency {
            p.record(stamp.thread, rtt);
        }
        slot.store(stamp.seq + 1, Ordering::Release);
    }
    None
}

fn lock(pair: &Mutex<QueuePair>) -> MutexGuard<'_, QueuePair> {
    // A thread that panicked while holding the pair left it mid-update; the run is lost
    // anyway, and the report should still come out, so take the data as it is.
    pair.lock().unwrap_or_else(|e| e.into_inner())
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
