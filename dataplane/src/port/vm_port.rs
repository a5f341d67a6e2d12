//! A VM port's state that outlives a frontend connection: its counters,
//! its frames waiting for the guest, its policy, and the notification
//! between the switch and its worker. The vhost-user side ([`super::handler`])
//! and the worker ([`super::port_queues`]) both work on it.
//!
//! Frames from other ports arrive through [`Egress::deliver`] into a
//! per-queue-pair [`Backlog`]; the worker copies them into the guest's receive
//! buffers during its passes, so a policy that sleeps delays receive as well
//! as transmit processing, exactly like the papers' vhost thread.

use crate::config::{PortLimits, VmPortConfig};
use crate::frames::{Backlog, FrameBatch};
use crate::log_limit::LogLimits;
use crate::metrics::{DropReason, PortStats, WorkerStats};
use crate::migration::MappedLog;
use crate::policing::LimitsSlot;
use crate::queue::guest_offloads;
use crate::queue::policy_slot::{PolicyRequestError, PolicySlot};
use crate::switch::{Egress, Ingress, PortId};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use vadapt_policy::{PolicyConfig, Retune};
use vadapt_wire::Mac;
use vmm_sys_util::eventfd::EventFd;

/// Everything about a VM port that outlives a frontend connection.
#[derive(Debug)]
pub struct VmPort {
    /// Configuration.
    pub cfg: VmPortConfig,
    /// MAC offered in the config space.
    pub mac: Mac,
    /// Port counters.
    pub stats: Arc<PortStats>,
    /// Worker counters.
    pub worker_stats: Arc<WorkerStats>,
    /// Our way into the switch, once attached ([`VmPort::attach`]).
    ingress: OnceLock<Ingress>,
    /// Frames waiting for each queue pair's receive ring.
    pub(crate) backlogs: Vec<Backlog>,
    /// Guest-side offloads the receiver takes now.
    pub guest_offloads: guest_offloads::GuestOffloadState,
    /// The guest's RSS config (`VIRTIO_NET_F_RSS`), once it set one.
    pub rss: crate::queue::rss::RssState,
    /// Queue pairs whose receive ring is running (flows are spread over them).
    pub(crate) rx_pairs: AtomicU16,
    /// Wakes a worker blocked waiting for kicks.
    pub(crate) wake: EventFd,
    /// True while the worker is blocked waiting for kicks.
    pub(crate) waiting: AtomicBool,
    /// The port's policy: asked for, switched, retuned, parked between
    /// worker incarnations.
    pub(crate) policy: PolicySlot,
    /// The port's rate limits (`cfg.limits` at first; `vadapt set-limits`
    /// changes them here), and its worker's policers between incarnations.
    pub(crate) limits: LimitsSlot,
    /// The connected frontend's socket (a clone), so that a shutdown or a
    /// misbehaving frontend can end the connection from any thread.
    pub(crate) live: Arc<Mutex<Option<UnixStream>>>,
    /// SIGBUS guards of the connected frontend's unsealed guest memory.
    /// By the guest-physical address of the region each covers.
    pub(crate) mem_guards: Mutex<Vec<(u64, crate::sigbus_guard::Guard)>>,
    /// Limits of the lines this port's frontend and guest can cause, per
    /// reason, for as long as the port lives: workers, control-queue
    /// threads and connections come and go at the peer's will, this does
    /// not (see [`crate::log_limit`]).
    peer_lines: LogLimits,
    /// CPU to pin the worker to.
    pub(crate) cpu: Option<usize>,
    /// CPU-frequency control of the worker's core.
    pub(crate) freq: Arc<vadapt_host::cpufreq::CpuFreq>,
    /// TSC cycles per ns for the worker's pass clock (`None`: no invariant TSC).
    pub(crate) tsc_per_ns: Option<f64>,
}

impl VmPort {
    /// A port for `cfg`, not yet attached to the switch.
    pub fn new(
        cfg: VmPortConfig,
        default_policy: PolicyConfig,
        backlog: usize,
        cpu: Option<usize>,
        freq: Arc<vadapt_host::cpufreq::CpuFreq>,
        tsc_per_ns: Option<f64>,
    ) -> std::io::Result<Arc<Self>> {
        let pairs = usize::from(cfg.queues);
        let policy = cfg.policy.unwrap_or(default_policy);
        let stats = Arc::new(PortStats::new(
            &cfg.name,
            crate::metrics::PortKind::Vm,
            pairs,
        ));
        *stats.policy.lock().unwrap_or_else(|e| e.into_inner()) = policy.kind().to_string();
        Ok(Arc::new(VmPort {
            mac: cfg.mac.unwrap_or_else(|| Mac::from_name(&cfg.name)),
            worker_stats: Arc::new(WorkerStats::new(&cfg.name)),
            stats,
            ingress: OnceLock::new(),
            backlogs: (0..pairs).map(|_| Backlog::new(backlog)).collect(),
            guest_offloads: Default::default(),
            rss: Default::default(),
            rx_pairs: AtomicU16::new(0),
            wake: EventFd::new(libc::EFD_NONBLOCK)?,
            waiting: AtomicBool::new(false),
            policy: PolicySlot::new(policy),
            limits: LimitsSlot::new(cfg.limits),
            live: Arc::new(Mutex::new(None)),
            mem_guards: Mutex::new(Vec::new()),
            peer_lines: LogLimits::default(),
            cpu,
            freq,
            tsc_per_ns,
            cfg,
        }))
    }

    /// Port name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Our switch port id (`usize::MAX` before [`VmPort::attach`]).
    pub fn port_id(&self) -> PortId {
        self.ingress.get().map_or(usize::MAX, Ingress::port)
    }

    /// Our way into the switch: set once, right after the switch attached
    /// us (later calls are ignored).
    pub fn attach(&self, ingress: Ingress) {
        let _ = self.ingress.set(ingress);
    }

    /// Our way into the switch (`None` before [`VmPort::attach`]).
    pub fn ingress(&self) -> Option<&Ingress> {
        self.ingress.get()
    }

    /// Ask the worker to switch to `policy` (takes effect after its current pass).
    pub fn set_policy(&self, policy: PolicyConfig) -> Result<(), PolicyRequestError> {
        self.policy.switch(policy)?;
        *self.stats.policy.lock().unwrap_or_else(|e| e.into_inner()) = policy.kind().to_string();
        // The old policy's interval is not the new one's: a running worker
        // writes the new value after the switch; with no frontend connected
        // there is none yet.
        self.stats.poll_interval_us.store(0, Ordering::Relaxed);
        self.kick_worker();
        Ok(())
    }

    /// Change a parameter of the port's policy in place (see
    /// [`vadapt_policy::Retune`]): refused now if the policy has no such
    /// parameter or the value is invalid, else applied by the worker after
    /// its current pass (or by the next worker, if none runs).
    pub fn retune(&self, r: Retune) -> Result<(), PolicyRequestError> {
        self.policy.retune(r)?;
        self.kick_worker();
        Ok(())
    }

    /// The policy asked for.
    pub fn policy_config(&self) -> PolicyConfig {
        self.policy.config()
    }

    /// Change the port's rate limits (checked by the caller against its
    /// configuration: [`PortLimits::check`]); its worker applies them after
    /// its current pass, the frontend stays connected.
    pub fn set_limits(&self, limits: PortLimits) {
        self.limits.set(limits);
        // A worker blocked waiting for a kick applies them when it wakes;
        // one sleeping on a timer, when the timer ends.
        self.kick_worker();
    }

    /// The port's rate limits now.
    pub fn limits(&self) -> PortLimits {
        self.limits.get()
    }

    /// End the frontend's connection (the port is reset and waits for a new
    /// one); `why` goes to the log. Other ports are not affected.
    pub fn disconnect(&self, why: &str) {
        if let Some(s) = self.live.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if let Some(held_back) = self.may_log("frontend failed") {
                tracing::warn!(
                    port = self.name(),
                    reason = why,
                    held_back,
                    "closing the frontend's connection"
                );
            }
            // The serve loop's read returns; it stops the worker before the
            // socket closes (see `Daemon::shutdown`).
            let _ = s.shutdown(std::net::Shutdown::Read);
        }
    }

    /// May a line that this port's frontend or guest caused, for `reason`,
    /// be written now? `Some(n)`: yes, and `n` lines of that reason were
    /// held back since the last one (say so in the line). Every such line
    /// goes through here, whichever thread writes it.
    pub fn may_log(&self, reason: &'static str) -> Option<u64> {
        self.peer_lines.allow(reason, std::time::Instant::now())
    }

    /// Lines of `reason` this port's peers caused: written, and held back.
    pub fn log_totals(&self, reason: &str) -> (u64, u64) {
        self.peer_lines.totals(reason)
    }

    /// When the frontend's dirty-page log `log` shrank under the daemon
    /// (its guard survived a fault), logging has ended for the port: the
    /// one ERROR line and the count (`dirty_log_shrank`), by whichever of
    /// the port's threads sees it first. Nothing when the log is fine, or
    /// was reported already.
    pub(crate) fn end_dirty_log(&self, log: &MappedLog) {
        if !log.end() {
            return;
        }
        self.stats
            .dirty_log_shrank
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(held_back) = self.may_log("dirty log shrank") {
            tracing::error!(
                port = self.name(),
                held_back,
                "the frontend's dirty-page log shrank under the daemon (SIGBUS survived): \
                 logging ended for this port, the pages it writes from now on are not marked, \
                 and a migration that goes on may corrupt the guest; the port keeps forwarding"
            );
        }
    }

    /// Faults survived in the frontend's guest memory since it was mapped
    /// (see [`crate::sigbus_guard`]).
    pub fn guest_memory_faults(&self) -> u64 {
        self.mem_guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, g)| g.faults())
            .sum()
    }

    /// Drops every frame waiting in the port's backlogs (the frontend
    /// went), counted as `port_down` on their queues; returns how many.
    pub(crate) fn clear_backlogs(&self) -> u64 {
        let mut total = 0;
        for (q, b) in self.backlogs.iter().enumerate() {
            let n = b.clear() as u64;
            if n > 0 {
                self.stats.queues[q].drop(DropReason::PortDown, n);
            }
            total += n;
        }
        total
    }

    /// Wake the worker if it is blocked waiting for kicks.
    pub(crate) fn kick_worker(&self) {
        let _ = self.wake.write(1);
    }
}

impl Egress for VmPort {
    /// Frames onto the backlogs of the receive queues they are steered
    /// to: with more than one queue pair, by the guest's RSS config when
    /// it set one ([`crate::queue::rss::RssConfig::queue_of`]: its key, hash
    /// types and indirection table), else by the Toeplitz hash of each
    /// frame's addresses and ports ([`rss_queue`]), so one flow stays on
    /// one queue as on a NIC, and a frame with no flow (not IP) by the
    /// sender's queue `flow`. A queue the guest named whose receive ring
    /// is not running (it broke the spec's rule) is taken modulo the
    /// running ones.
    fn deliver(&self, frames: &FrameBatch, which: &[u16], flow: u16) {
        let pairs = self.rx_pairs.load(Ordering::Acquire);
        if pairs == 0 {
            self.stats.queues[0].drop(DropReason::PortDown, which.len() as u64);
            return;
        }
        if pairs == 1 {
            self.push(0, frames, which);
            return;
        }
        let mut by_queue: Vec<Vec<u16>> = vec![Vec::new(); usize::from(pairs)];
        let guest = self.rss.get();
        for &i in which {
            let frame = frames.get(usize::from(i));
            let q = match &guest {
                Some(c) => c.queue_of(frame) % pairs,
                None => rss_queue(frame, pairs).unwrap_or(flow % pairs),
            };
            by_queue[usize::from(q)].push(i);
        }
        for (q, which) in by_queue.iter().enumerate() {
            if !which.is_empty() {
                self.push(q, frames, which);
            }
        }
    }
}

/// Entries of the default RSS indirection table (a NIC's usual 128):
/// entry `h % 128` holds queue `(h % 128) % pairs`.
const RSS_TABLE: u32 = 128;

/// The receive queue of `frame` among `pairs` by receive-side scaling:
/// the Toeplitz hash of its flow under the default key, through the
/// default indirection table; `None` for a frame with no flow.
pub fn rss_queue(frame: &[u8], pairs: u16) -> Option<u16> {
    use vadapt_wire::toeplitz::{toeplitz, RssInput, DEFAULT_KEY};
    let input = RssInput::of_frame(frame)?;
    let entry = toeplitz(&DEFAULT_KEY, input.as_bytes()) % RSS_TABLE;
    Some((entry % u32::from(pairs)) as u16)
}

impl VmPort {
    /// Frames `which` onto queue `q`'s backlog; the worker woken if it waits.
    fn push(&self, q: usize, frames: &FrameBatch, which: &[u16]) {
        let (_, dropped) = self.backlogs[q].push(frames, which);
        if dropped > 0 {
            self.stats.queues[q].drop(DropReason::BacklogFull, dropped);
        }
        // Pairs with the worker's store of `waiting` before its final re-check.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) {
            self.kick_worker();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::queue::ring_pass::test_utils::dropped;
    use vadapt_host::cpufreq::CpuFreq;

    /// A port of `queues` pairs with backlogs of 1024 frames, on no
    /// switch (unit tests of the port and what serves it).
    pub(crate) fn port(name: &str, queues: u16) -> Arc<VmPort> {
        let mut cfg = VmPortConfig::new(name, "/nonexistent/vm.sock");
        cfg.queues = queues;
        VmPort::new(
            cfg,
            PolicyConfig::BusyPoll,
            1024,
            None,
            Arc::new(CpuFreq::unavailable("test")),
            None,
        )
        .unwrap()
    }

    /// Frames waiting in the backlogs when the frontend goes are counted
    /// as dropped, on the queue each waited for.
    #[test]
    fn clearing_the_backlogs_counts_what_they_held() {
        let port = port("clear", 2);
        let mut b = FrameBatch::new(4);
        for _ in 0..3 {
            assert!(b.push(&[0u8; 60]));
        }
        assert_eq!(port.backlogs[0].push(&b, &[0, 1]), (2, 0));
        assert_eq!(port.backlogs[1].push(&b, &[2]), (1, 0));
        assert_eq!(port.clear_backlogs(), 3);
        assert!(!port.backlogs[0].has_frames() && !port.backlogs[1].has_frames());
        assert_eq!(dropped(&port.stats.queues[0], DropReason::PortDown), 2);
        assert_eq!(dropped(&port.stats.queues[1], DropReason::PortDown), 1);
        assert_eq!(port.clear_backlogs(), 0, "nothing counted twice");
    }

    /// Issue 36, finding 4: when the frontend's dirty-page log shrinks
    /// under the daemon (the SIGBUS guard took the fault), the port says so
    /// once and counts it once, whichever of its threads sees it.
    #[test]
    fn a_log_that_shrank_is_reported_and_counted_once() {
        use crate::migration::MappedLog;
        use std::os::fd::FromRawFd;
        use vadapt_virtq::{DirtyLog, LOG_PAGE};
        let bytes = 4 * LOG_PAGE;
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"vadapt-dirty-log".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nothing else owns.
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.set_len(bytes).unwrap();
        let mapped = DirtyLog::map(&f, 0, bytes).unwrap();
        let (start, len) = mapped.mapping();
        let guard = crate::sigbus_guard::guard(start, len, None).unwrap();
        let log = MappedLog::new(mapped, Some(guard));
        let port = port("shrunk-log", 1);
        port.end_dirty_log(&log);
        assert_eq!(
            port.stats.dirty_log_shrank.load(Ordering::Relaxed),
            0,
            "still live"
        );
        f.set_len(0).unwrap();
        log.log().mark(0, 1);
        assert!(!log.is_live(), "the guard took the fault");
        port.end_dirty_log(&log);
        port.end_dirty_log(&log);
        assert_eq!(
            port.stats.dirty_log_shrank.load(Ordering::Relaxed),
            1,
            "counted once"
        );
        assert_eq!(port.log_totals("dirty log shrank"), (1, 0), "one line");
    }

    /// An IPv4 UDP frame of flow (`sport`, `dport`).
    fn udp(sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 10];
        f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[14 + 12..14 + 16].copy_from_slice(&[10, 0, 0, 1]);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    /// With four queue pairs, each flow's frames all land on the queue
    /// its Toeplitz hash picks, whatever queue they came from, and the
    /// flows spread over more than one queue; a frame with no flow follows
    /// the sender's queue.
    #[test]
    fn frames_are_steered_by_flow_not_by_the_senders_queue() {
        let port = port("rss", 4);
        port.rx_pairs.store(4, Ordering::Release);
        let mut used = std::collections::BTreeSet::new();
        for sport in 1000..1016u16 {
            let f = udp(sport, 80);
            let want = rss_queue(&f, 4).expect("an IP flow");
            used.insert(want);
            let mut b = FrameBatch::new(4);
            for _ in 0..4 {
                assert!(b.push(&f));
            }
            for (sender_queue, i) in (0..4u16).zip(0..4u16) {
                port.deliver(&b, &[i], sender_queue);
            }
            let mut out = FrameBatch::new(1024);
            for q in 0..4 {
                let n = port.backlogs[q].take_into(&mut out);
                assert_eq!(
                    n,
                    if q == usize::from(want) { 4 } else { 0 },
                    "flow {sport}, queue {q}"
                );
                out.clear();
            }
        }
        assert!(used.len() > 1, "16 flows all on one queue: {used:?}");
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut b = FrameBatch::new(1);
        assert!(b.push(&arp));
        port.deliver(&b, &[0], 6);
        assert!(
            port.backlogs[2].has_frames(),
            "no flow: the sender's queue 6 % 4"
        );
    }
}
