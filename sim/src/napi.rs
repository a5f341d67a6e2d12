//! A NAPI-like receive path: Linux's interrupt + softIRQ receive, the
//! baseline (a) of the EE-KBP paper (`ee-kbp.txt` §2–3, Fig. 1).
//!
//! With `[host.napi]` in a scenario, a request/response load's packets do
//! not reach the queue worker straight from the wire. They land in the NIC's
//! RX ring, and:
//!
//! 1. **hardIRQ.** A packet that arrives while the NIC queue's interrupt is
//!    enabled raises it on the core of the queue's worker (the IRQ's
//!    affinity: one NIC queue per queue pair, RSS), no sooner than
//!    [`NapiSpec::irq_gap_us`] after the last (the NIC's interrupt
//!    moderation). The interrupt costs
//!    [`NapiSpec::irq_ns`] of that core and disables itself
//!    (`napi_schedule`), and the softIRQ runs on its exit.
//! 2. **softIRQ** (`net_rx_action`). It polls the ring, at most
//!    [`NapiSpec::weight`] packets a poll (the driver's NAPI weight, 64),
//!    each costing the calibration's `nic_packet_ns` (the host's hand-off
//!    of a packet between the NIC and the VM's port: under NAPI it is
//!    softIRQ work, under a polling policy the worker's), and hands them to
//!    the VM's port (a tap socket queue of [`NapiSpec::socket_queue`]
//!    packets), waking the worker if it waits. A round ends when it has
//!    taken [`NapiSpec::budget`] packets (`netdev_budget`) or run
//!    [`NapiSpec::budget_us`] (`netdev_budget_usecs`). A poll that empties
//!    the ring completes NAPI and re-enables the interrupt.
//! 3. **Softirq context takes the core.** While it runs the softIRQ
//!    preempts whatever thread had the core: the worker (or, in a
//!    time-shared group, a vCPU). In the model its group has one core
//!    fewer for its threads meanwhile.
//! 4. **Deferral to ksoftirqd** (`__do_softirq`). A round that ran out of
//!    budget with packets left restarts in softIRQ context, at most
//!    [`NapiSpec::max_restart`] rounds and [`NapiSpec::max_softirq_us`]
//!    in all, and not when a thread of the core is waiting to run
//!    (`need_resched()`: here, the worker woken by the softIRQ's own
//!    delivery). Past that, the rest goes to `ksoftirqd`, a normal
//!    SCHED_OTHER thread: one more runnable thread processor-shared with
//!    the worker (and the vCPUs, in a time-shared group) by the same
//!    [`Scheduler`](crate::sched::Scheduler). Since Linux 4.9 ("softirq:
//!    Let ksoftirqd do its job", the paper's kernel is 4.15) NET_RX work
//!    stays with ksoftirqd until it has emptied the ring.
//! 5. **Loss.** A packet that finds the RX ring full, or the socket queue
//!    full when a poll hands it on, is dropped (after the softIRQ paid for
//!    it: receive livelock's waste, Mogul & Ramakrishnan, USENIX ATC 1996).
//!
//! What EE-KBP's paper credits for its 1.4–3.1× throughput over NAPI
//! (§5.3) is what this adds to a polling policy's path: interrupts, the
//! softIRQ's preemption of the worker on its core, ksoftirqd sharing that
//! core with it, and the drops that follow. Its latency comes from
//! polling: under NAPI every packet waits for an interrupt, a softIRQ and
//! a wake-up of the worker.
//!
//! Not modelled: the guest's own NAPI (the paper's VM runs one too, on its
//! vCPUs, and KBP replaces both; the model's guest is a server thread),
//! GRO, other softIRQs (timers, RCU)
//! competing with NET_RX, and the scheduler tick setting `need_resched`.
//!
//! This module is the pure part (the constants and the round's decisions,
//! tested here); the engine (`engine/softirq.rs`) runs it against the
//! rings, cores and events.

use serde::Deserialize;

/// The NAPI path's constants (`[host.napi]`); every default is Linux's or
/// the paper's NIC's, cited by field.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NapiSpec {
    /// Packets one poll takes at most: the driver's NAPI weight
    /// (`NAPI_POLL_WEIGHT` 64, `include/linux/netdevice.h`; ixgbe's
    /// weight; the EE-KBP paper's Q = 64, §4.1).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Packets one softIRQ round (`net_rx_action`) takes before it stops:
    /// `net.core.netdev_budget`, 300 (Documentation/admin-guide/sysctl/net.rst).
    #[serde(default = "default_budget")]
    pub budget: u32,
    /// Time one softIRQ round runs at most, µs: `net.core.netdev_budget_usecs`,
    /// 2000 (since Linux 4.12; sysctl/net.rst).
    #[serde(default = "default_budget_us")]
    pub budget_us: f64,
    /// Rounds `__do_softirq` runs in softIRQ context before it wakes
    /// ksoftirqd: `MAX_SOFTIRQ_RESTART`, 10 (`kernel/softirq.c`).
    #[serde(default = "default_max_restart")]
    pub max_restart: u32,
    /// Time `__do_softirq` runs in softIRQ context before it wakes
    /// ksoftirqd, µs: `MAX_SOFTIRQ_TIME`, 2 ms (`kernel/softirq.c`).
    #[serde(default = "default_max_softirq_us")]
    pub max_softirq_us: f64,
    /// NIC RX ring, descriptors: ixgbe's default (`IXGBE_DEFAULT_RXD`, 512;
    /// the paper's NIC is an Intel X520, ixgbe, Table 1).
    #[serde(default = "default_rx_ring")]
    pub rx_ring: u32,
    /// Packets the VM's port (a tap) queues for its backend:
    /// `TUN_READQ_SIZE`, 500 (`drivers/net/tun.c`, the tap's `tx_queue_len`).
    #[serde(default = "default_socket_queue")]
    pub socket_queue: u32,
    /// Shortest time between two interrupts of a NIC queue, µs: the
    /// NIC's interrupt moderation. ixgbe's dynamic ITR never goes faster
    /// than its lowest-latency class, 100 000 interrupts/s
    /// (`IXGBE_100K_ITR`, 10 µs, `drivers/net/ethernet/intel/ixgbe/ixgbe.h`);
    /// under bulk load it slows to 20 000/s, which the model does not
    /// follow (it keeps the fastest class: the most interrupts and the
    /// least added latency).
    #[serde(default = "default_irq_gap_us")]
    pub irq_gap_us: f64,
    /// CPU of one hardIRQ (entry, the driver's handler, `napi_schedule`,
    /// exit), ns. Not measurable on these machines (no NIC, no
    /// /dev/vhost-net); default: the calibration's interrupt cost
    /// `call_ns` (an interrupt's entry, handler and exit, charged to the
    /// vCPU for a call), the one interrupt cost the model has.
    #[serde(default)]
    pub irq_ns: Option<f64>,
}

fn default_weight() -> u32 {
    64
}
fn default_budget() -> u32 {
    300
}
fn default_budget_us() -> f64 {
    2000.0
}
fn default_max_restart() -> u32 {
    10
}
fn default_max_softirq_us() -> f64 {
    2000.0
}
fn default_irq_gap_us() -> f64 {
    10.0
}
fn default_rx_ring() -> u32 {
    512
}
fn default_socket_queue() -> u32 {
    500
}

impl Default for NapiSpec {
    fn default() -> Self {
        NapiSpec {
            weight: default_weight(),
            budget: default_budget(),
            budget_us: default_budget_us(),
            max_restart: default_max_restart(),
            max_softirq_us: default_max_softirq_us(),
            rx_ring: default_rx_ring(),
            socket_queue: default_socket_queue(),
            irq_gap_us: default_irq_gap_us(),
            irq_ns: None,
        }
    }
}

impl NapiSpec {
    /// Whether every value is in range: counts ≥ 1, times finite and > 0,
    /// `irq_ns` finite and ≥ 0.
    pub fn is_valid(&self) -> bool {
        self.weight >= 1
            && self.budget >= 1
            && self.max_restart >= 1
            && self.rx_ring >= 1
            && self.socket_queue >= 1
            && self.budget_us.is_finite()
            && self.budget_us > 0.0
            && self.max_softirq_us.is_finite()
            && self.max_softirq_us > 0.0
            && self.irq_gap_us.is_finite()
            && self.irq_gap_us >= 0.0
            && self.irq_ns.is_none_or(|x| x.is_finite() && x >= 0.0)
    }
}

/// What the receive path did over a run, all NIC queues together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NapiTotals {
    /// hardIRQs raised.
    pub interrupts: u64,
    /// Polls run (softIRQ context and ksoftirqd).
    pub polls: u64,
    /// Times softIRQ context handed the rest of its work to ksoftirqd.
    pub deferrals: u64,
    /// Packets dropped on a full RX ring.
    pub dropped_ring: u64,
    /// Packets dropped on a full socket queue, after the softIRQ's work.
    pub dropped_socket: u64,
    /// CPU used in softIRQ context and ksoftirqd, s.
    pub cpu_s: f64,
}

impl NapiTotals {
    /// Sum of `self` and `other`.
    pub fn plus(self, other: NapiTotals) -> NapiTotals {
        NapiTotals {
            interrupts: self.interrupts + other.interrupts,
            polls: self.polls + other.polls,
            deferrals: self.deferrals + other.deferrals,
            dropped_ring: self.dropped_ring + other.dropped_ring,
            dropped_socket: self.dropped_socket + other.dropped_socket,
            cpu_s: self.cpu_s + other.cpu_s,
        }
    }

    /// The result file's `params` (`napi_interrupts`, `napi_polls`,
    /// `napi_deferrals`, `napi_dropped_ring`, `napi_dropped_socket`,
    /// `napi_cpu_s`).
    pub fn params(&self) -> [(&'static str, f64); 6] {
        [
            ("napi_interrupts", self.interrupts as f64),
            ("napi_polls", self.polls as f64),
            ("napi_deferrals", self.deferrals as f64),
            ("napi_dropped_ring", self.dropped_ring as f64),
            ("napi_dropped_socket", self.dropped_socket as f64),
            ("napi_cpu_s", self.cpu_s),
        ]
    }
}

/// Where a NIC queue's receive work runs now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NapiContext {
    /// NAPI is not scheduled: the interrupt is enabled.
    #[default]
    Idle,
    /// Polling in softIRQ context, which preempts the core's threads.
    SoftIrq,
    /// Polling in ksoftirqd, a normal thread sharing the core.
    Ksoftirqd,
}

/// What the receive path does after a poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterPoll {
    /// Poll again, in the same context.
    Poll,
    /// The ring is empty: NAPI completes, the interrupt is enabled again.
    Complete,
    /// Packets are left and softIRQ context has used its rounds, its time,
    /// or a thread waits for the core: ksoftirqd polls on.
    Defer,
}

/// One NIC queue's NAPI state: the context and the current round's and
/// softIRQ invocation's account.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NapiRound {
    /// Where the receive work runs.
    pub context: NapiContext,
    /// Packets taken in the current round.
    pub round_packets: u32,
    /// When the current round began, ns.
    pub round_start: u64,
    /// When the current softIRQ-context invocation began, ns.
    pub softirq_start: u64,
    /// Rounds run in the current softIRQ-context invocation.
    pub rounds: u32,
}

impl NapiRound {
    /// The interrupt fired at `now`: softIRQ context, a first round.
    ///
    /// # Panics
    /// In debug builds, if NAPI was already scheduled (its interrupt is
    /// disabled then).
    pub fn interrupt(&mut self, now: u64) {
        debug_assert_eq!(self.context, NapiContext::Idle, "interrupt while scheduled");
        *self = NapiRound {
            context: NapiContext::SoftIrq,
            round_packets: 0,
            round_start: now,
            softirq_start: now,
            rounds: 1,
        };
    }

    /// Packets the next poll takes from a ring holding `ring` packets: at
    /// most the weight (`net_rx_action` checks its budget after a poll, so
    /// a round can end up to a weight past it).
    pub fn poll_size(&self, spec: &NapiSpec, ring: u64) -> u64 {
        ring.min(u64::from(spec.weight))
    }

    /// A poll that took `done` packets ended at `now`, leaving `left` in
    /// the ring; `need_resched` says whether a thread of the core waits to
    /// run. Updates the account and says what follows.
    pub fn after_poll(
        &mut self,
        spec: &NapiSpec,
        done: u64,
        left: u64,
        now: u64,
        need_resched: bool,
    ) -> AfterPoll {
        debug_assert!(done <= u64::from(spec.weight), "a poll exceeded the weight");
        self.round_packets = self
            .round_packets
            .saturating_add(u32::try_from(done).unwrap_or(u32::MAX));
        // The driver completes NAPI when a poll finds less than its weight;
        // here, when the ring is empty.
        if left == 0 {
            *self = NapiRound::default();
            return AfterPoll::Complete;
        }
        let round_over = self.round_packets >= spec.budget
            || now.saturating_sub(self.round_start) as f64 >= spec.budget_us * 1e3;
        if !round_over {
            return AfterPoll::Poll;
        }
        // `net_rx_action` ran out (time_squeeze) and raised itself again.
        self.round_packets = 0;
        self.round_start = now;
        match self.context {
            NapiContext::Ksoftirqd => AfterPoll::Poll,
            NapiContext::Idle | NapiContext::SoftIrq => {
                let in_time =
                    (now.saturating_sub(self.softirq_start) as f64) < spec.max_softirq_us * 1e3;
                if self.rounds < spec.max_restart && in_time && !need_resched {
                    self.rounds += 1;
                    AfterPoll::Poll
                } else {
                    self.context = NapiContext::Ksoftirqd;
                    AfterPoll::Defer
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Poll a ring of `ring` packets to the end from an interrupt at 0,
    /// each poll `poll_ns` long; returns (poll sizes, what each poll led to).
    fn drain(
        spec: &NapiSpec,
        mut ring: u64,
        poll_ns: u64,
        need_resched: bool,
    ) -> (Vec<u64>, Vec<AfterPoll>) {
        let mut r = NapiRound::default();
        r.interrupt(0);
        let (mut sizes, mut next) = (Vec::new(), Vec::new());
        let mut now = 0;
        loop {
            let n = r.poll_size(spec, ring);
            ring -= n;
            now += poll_ns;
            sizes.push(n);
            let a = r.after_poll(spec, n, ring, now, need_resched);
            next.push(a);
            if a == AfterPoll::Complete {
                return (sizes, next);
            }
        }
    }

    #[test]
    fn a_poll_never_takes_more_than_the_weight() {
        let spec = NapiSpec::default();
        let (sizes, next) = drain(&spec, 1000, 1000, false);
        assert!(sizes.iter().all(|&n| n <= 64), "{sizes:?}");
        assert_eq!(sizes.iter().sum::<u64>(), 1000);
        assert_eq!(*next.last().unwrap(), AfterPoll::Complete);
        let r = NapiRound::default();
        assert_eq!(r.poll_size(&spec, 10), 10);
    }

    #[test]
    fn a_round_ends_at_the_budget_and_softirq_restarts_it_up_to_ten_times() {
        let spec = NapiSpec::default();
        let mut r = NapiRound::default();
        r.interrupt(0);
        // Five polls of 64 = 320 >= 300: the fifth ends the round.
        for i in 1..=4 {
            assert_eq!(r.after_poll(&spec, 64, 1000, i, false), AfterPoll::Poll);
            assert_eq!(r.rounds, 1);
        }
        assert_eq!(r.after_poll(&spec, 64, 1000, 5, false), AfterPoll::Poll);
        assert_eq!((r.rounds, r.round_packets), (2, 0), "a new round");
        // Fast polls: rounds 2..=10 restart, the 10th round's end defers.
        let mut now = 5;
        let mut got = AfterPoll::Poll;
        for _ in 0..9 * 5 {
            now += 1;
            got = r.after_poll(&spec, 64, 1000, now, false);
        }
        assert_eq!(got, AfterPoll::Defer);
        assert_eq!(r.context, NapiContext::Ksoftirqd);
        // ksoftirqd polls on, round after round, until the ring is empty.
        for _ in 0..20 {
            now += 1;
            assert_eq!(r.after_poll(&spec, 64, 1000, now, false), AfterPoll::Poll);
        }
        assert_eq!(
            r.after_poll(&spec, 40, 0, now + 1, false),
            AfterPoll::Complete
        );
        assert_eq!(r.context, NapiContext::Idle);
    }

    #[test]
    fn softirq_defers_when_its_time_is_up_or_a_thread_waits_for_the_core() {
        let spec = NapiSpec::default();
        // 700 µs a poll: the round's 2 ms run out at the third poll, the
        // softIRQ's 2 ms with it.
        let (sizes, next) = drain(&spec, 1000, 700_000, false);
        assert_eq!(next[2], AfterPoll::Defer, "{next:?}");
        assert_eq!(sizes.len(), 16);
        // A woken worker waits: the first exhausted round defers.
        let (_, next) = drain(&spec, 1000, 1_000, true);
        assert_eq!(next[4], AfterPoll::Defer, "{next:?}");
        assert!(next[..4].iter().all(|&a| a == AfterPoll::Poll));
        // A ring emptied within the budget never defers.
        let (_, next) = drain(&spec, 200, 1_000, true);
        assert!(!next.contains(&AfterPoll::Defer));
    }

    #[test]
    fn defaults_are_valid_and_bad_values_are_not() {
        assert!(NapiSpec::default().is_valid());
        let bad = NapiSpec {
            weight: 0,
            ..NapiSpec::default()
        };
        assert!(!bad.is_valid());
        let bad = NapiSpec {
            irq_ns: Some(-1.0),
            ..NapiSpec::default()
        };
        assert!(!bad.is_valid());
    }
}
