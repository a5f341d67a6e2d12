//! An uplink's NIC queue on every path a worker runs — a thread of its
//! own, the NQ pool, stepped on the caller's thread — as a VM port's rings
//! are in `queue/fault_paths_tests.rs`: the real [`UplinkQueue`] over a
//! real AF_XDP socket on a veth wire (`super::tests::Wire`), wrapped in the
//! [`FaultInjector`], under every policy, with the far end sending frames
//! to an echo port behind the uplink.
//!
//! * Through every fault (timers late, wake-ups spurious, kicks lost,
//!   passes short), nothing stalls, and every frame the far end offers is
//!   taken and comes back through the TX ring, or is counted as dropped
//!   with its reason (802.3 frames whose length field lies: `undersize`).
//! * The executor's steps on the NIC queue are the simulator's: the passes
//!   the worker made (what ended each wait and how long it lasted, what
//!   the pass moved, the time after it) fed to an executor as the
//!   simulator feeds it (`vadapt-sim`'s `end_pass`: `woke`, then `served`)
//!   give the very steps the worker got, and the worker carried each out
//!   (its next wait begun as the step asked, its frequency hint applied).
//!   `tests/executor_parity.rs` checks the other direction: the
//!   simulator's passes replayed through a [`crate::worker::QueueSet`].
//!
//! They need root and AF_XDP on veth; where they cannot make a wire they
//! say so and do nothing (as the other uplink tests do).

use super::tests::{hex, uplink_and_echo, Wire, SEND_AND_COUNT};
use super::worker::UplinkQueue;
use super::xsk::{XskMode, XskQueue};
use crate::config::UplinkPortConfig;
use crate::metrics::{Dir, DropReason, WorkerStats};
use crate::worker::fault_injector::{FaultInjector, Faults, Injected};
use crate::worker::pool::NqWorkers;
use crate::worker::{Control, PendingWait, QueueIo, RingBases, Runtime, Wait};
use std::os::fd::RawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use vadapt_host::cpufreq::CpuFreq;
use vadapt_policy::{
    Budget, Executor, FreqHint, Instant, PassStats, Policy, PolicyConfig, PolicyKind, PolicyStatus,
    Retune, RetuneError, Step, Wake,
};
use vadapt_sim::TracedPass;
use vadapt_wire::Mac;

/// Frames the far end sends per run, and 802.3 frames among them whose
/// length field lies.
const FRAMES: u32 = 400;
const LIARS: u32 = 40;

/// What the worker did with its executor, in the simulator's trace format.
#[derive(Debug, Default)]
struct Recording {
    /// The time the set started at, and the executor's first step.
    first: Option<(Instant, Step)>,
    /// Every pass after it, with the step the executor answered.
    passes: Vec<TracedPass>,
    /// The wake each wait was begun with, in order.
    waits_begun: Vec<Wake>,
    /// The frequency hints applied, in order.
    freq: Vec<FreqHint>,
    /// What the injector did, once the set is finished.
    injected: Option<Injected>,
}

/// The NIC queue in its fault injector, recording what the set's executor
/// is told and answers into a [`Recording`] the test keeps (the set owns
/// the world until it is finished).
struct Recorder {
    inner: FaultInjector<UplinkQueue>,
    rec: Arc<Mutex<Recording>>,
    /// The last time handed to the set.
    now: Instant,
    /// How the last wait ended, as the set was told.
    ended: Option<Wait>,
    /// What the last pass did.
    stats: Option<PassStats>,
}

impl Recorder {
    fn rec(&self) -> std::sync::MutexGuard<'_, Recording> {
        self.rec.lock().unwrap()
    }
}

impl QueueIo for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn now(&mut self) -> Instant {
        self.now = self.inner.now();
        self.now
    }
    fn service(&mut self, budget: Budget) -> PassStats {
        let stats = self.inner.service(budget);
        self.stats = Some(stats);
        stats
    }
    fn waiter_fd(&self) -> Option<RawFd> {
        self.inner.waiter_fd()
    }
    fn begin_wait(&mut self, wake: Wake) -> PendingWait {
        self.rec().waits_begun.push(wake);
        self.inner.begin_wait(wake)
    }
    fn poll_wait(&mut self, w: &mut PendingWait) {
        self.inner.poll_wait(w);
    }
    fn end_wait(&mut self, w: PendingWait) -> Wait {
        let wait = self.inner.end_wait(w);
        self.ended = Some(wait);
        wait
    }
    fn set_freq(&mut self, hint: FreqHint) {
        self.rec().freq.push(hint);
        self.inner.set_freq(hint);
    }
    fn control(&mut self) -> Control {
        self.inner.control()
    }
    fn retune_refused(&mut self, retune: &Retune, error: &RetuneError) {
        self.inner.retune_refused(retune, error);
    }
    /// Every step the executor answers comes here before its wait.
    fn observe(&mut self, status: &PolicyStatus, step: &Step) {
        self.inner.observe(status, step);
        let (now, ended, stats) = (self.now, self.ended.take(), self.stats.take());
        let mut rec = self.rec();
        match (rec.first, ended, stats) {
            (None, _, _) => rec.first = Some((now, *step)),
            (Some(_), Some(wait), Some(stats)) => rec.passes.push(TracedPass {
                now,
                wake: wait.cause,
                waited: wait.waited,
                stats,
                step: *step,
            }),
            _ => panic!("a step after the first without a pass before it"),
        }
    }
    fn take_policy(&mut self) -> Box<dyn Policy> {
        self.inner.take_policy()
    }
    fn park_policy(&mut self, policy: Box<dyn Policy>) {
        self.inner.park_policy(policy);
    }
    fn into_bases(self: Box<Self>) -> RingBases {
        self.rec().injected = Some(self.inner.injected);
        Box::new(self.inner).into_bases()
    }
    fn worker_stats(&self) -> Option<&WorkerStats> {
        self.inner.worker_stats()
    }
}

/// One run's outcome.
struct Run {
    /// Frames the far end sent, got back, and 802.3 liars it sent.
    sent: u64,
    back: u64,
    liars: u64,
    /// The uplink queue's drops, by reason (every reason, in
    /// [`DropReason::ALL`]'s order).
    drops: Vec<u64>,
    /// Frames it took from the wire and put on it.
    from_wire: u64,
    to_wire: u64,
    rec: Recording,
}

impl Run {
    /// The counts, for a failure's message.
    fn counts(&self) -> String {
        format!(
            "far end sent {} got back {} liars {}; uplink from wire {} to wire {} drops {:?}",
            self.sent, self.back, self.liars, self.from_wire, self.to_wire, self.drops
        )
    }

    fn dropped(&self, reason: DropReason) -> u64 {
        let i = DropReason::ALL.iter().position(|r| *r == reason).unwrap();
        self.drops[i]
    }
}

/// Serves queue 0 of an uplink on `w` with policy `cfg` under `faults` by
/// `runtime` while the far end sends [`FRAMES`] frames (and [`LIARS`]) to
/// the echo port behind it; stops the set once the far end is done.
fn run(w: &Wire, runtime: &Runtime, cfg: PolicyConfig, faults: Faults, seed: u64) -> Run {
    let kind = cfg.kind();
    let mut ucfg = UplinkPortConfig::new("up0", w.host.clone());
    ucfg.policy = Some(cfg);
    let (_sw, up) = uplink_and_echo(ucfg);
    let xsk = XskQueue::open(&w.host, 0, XskMode::Copy).expect("an AF_XDP socket on veth");
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(WorkerStats::new("up0/0"));
    let freq = Arc::new(CpuFreq::unavailable("test"));
    let queue = UplinkQueue::new(Arc::clone(&up), 0, xsk, stop, freq, stats).unwrap();
    let rec = Arc::new(Mutex::new(Recording::default()));
    let io = Recorder {
        inner: FaultInjector::new(queue, faults, seed),
        rec: Arc::clone(&rec),
        now: Instant(0),
        ended: None,
        stats: None,
    };
    let mut served = runtime.serve(1 << 48, io, "vadapt-x-test", None).unwrap();
    let mut far = Command::new("ip")
        .args(["netns", "exec", &w.ns, "python3", "-c", SEND_AND_COUNT])
        .args([&w.peer, &hex(Mac::from_name("echo"))])
        .args([FRAMES.to_string(), "60".into(), LIARS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec");
    // A stall guard only: the far end gives up 2 s after sending.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while far.try_wait().expect("the far end").is_none() {
        assert!(
            std::time::Instant::now() < give_up,
            "{runtime:?} {kind}: the far end never finished"
        );
        if !served.step(false) {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    let out = far.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bases = served.stop().expect("the worker did not die");
    assert!(bases.is_empty(), "a NIC queue has no guest rings");
    let v: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let q = &up.stats.queues[0];
    let rec = std::mem::take(&mut *rec.lock().unwrap());
    Run {
        sent: v[0],
        back: v[1],
        liars: v[2],
        drops: q.drops.iter().map(|d| d.load(Ordering::Relaxed)).collect(),
        from_wire: q.packets[Dir::Tx as usize].load(Ordering::Relaxed),
        to_wire: q.packets[Dir::Rx as usize].load(Ordering::Relaxed),
        rec,
    }
}

/// Every frame offered was taken, or counted as dropped with its reason.
fn assert_every_frame_accounted_for(r: &Run, what: &str) {
    let counts = r.counts();
    assert_eq!(
        (r.sent, r.liars),
        (u64::from(FRAMES), u64::from(LIARS)),
        "{what}: {counts}"
    );
    assert_eq!(r.back, r.sent, "{what}: every frame came back; {counts}");
    assert_eq!(
        r.dropped(DropReason::Undersize),
        r.liars,
        "{what}: every liar was counted; {counts}"
    );
    let all: u64 = r.drops.iter().sum();
    assert_eq!(all, r.liars, "{what}: nothing else was dropped; {counts}");
    assert!(
        r.from_wire >= r.sent && r.to_wire >= r.sent,
        "{what}: {counts}"
    );
}

/// The worker's steps are what an executor fed its passes as the simulator
/// feeds one answers, and the worker carried each out.
fn assert_simulator_parity(r: &Run, cfg: PolicyConfig, what: &str) {
    let rec = &r.rec;
    let (t0, first) = rec.first.expect("the set started");
    let (mut exec, step) = Executor::start(cfg.build().unwrap(), t0);
    assert_eq!(step, first, "{what}: the first step");
    let mut steps = vec![first];
    for (i, p) in rec.passes.iter().enumerate() {
        exec.woke(p.wake, p.waited);
        let step = exec.served(p.now, p.stats);
        assert_eq!(
            step, p.step,
            "{what}: step {i} differs (worker vs simulator)"
        );
        steps.push(step);
    }
    assert!(rec.passes.len() > 10, "{what}: {} passes", rec.passes.len());
    let asked: Vec<Wake> = steps.iter().map(|s| s.wake).collect();
    assert_eq!(rec.waits_begun, asked, "{what}: the waits begun");
    let hints: Vec<FreqHint> = steps.iter().filter_map(|s| s.freq).collect();
    assert_eq!(rec.freq, hints, "{what}: the frequency hints applied");
}

/// The three paths a set is served on (the pool's worker on CPU 0).
fn runtimes(pool: &Arc<NqWorkers>) -> [Runtime; 3] {
    [
        Runtime::Thread,
        Runtime::Pool(Arc::clone(pool)),
        Runtime::Stepped,
    ]
}

#[test]
fn every_path_serves_a_nic_queue_through_every_fault_without_stall_or_loss() {
    let Some(w) = Wire::new("f", 1) else { return };
    let pool = NqWorkers::new(&[0], false).unwrap();
    for runtime in runtimes(&pool) {
        let mut total = Injected::default();
        for (i, kind) in PolicyKind::ALL.iter().enumerate() {
            let cfg = PolicyConfig::default_for(*kind);
            let r = run(&w, &runtime, cfg, Faults::ROUGH, i as u64);
            let what = format!("{runtime:?} {kind}");
            assert_every_frame_accounted_for(&r, &what);
            // Faults or none, the executor's steps are the simulator's.
            assert_simulator_parity(&r, cfg, &what);
            let inj = r.rec.injected.expect("the set finished");
            total.late_timers += inj.late_timers;
            total.spurious_wakes += inj.spurious_wakes;
            total.lost_kicks += inj.lost_kicks;
            total.short_passes += inj.short_passes;
        }
        // Each fault met the NIC queue on this path (NetAP's timed sleeps
        // are late, interrupt mode's kicks lost).
        assert!(total.late_timers > 0, "{runtime:?}: {total:?}");
        assert!(total.spurious_wakes > 0, "{runtime:?}: {total:?}");
        assert!(total.lost_kicks > 0, "{runtime:?}: {total:?}");
        assert!(total.short_passes > 0, "{runtime:?}: {total:?}");
    }
    pool.shutdown();
}

#[test]
fn every_path_steps_the_executor_on_a_nic_queue_as_the_simulator_does() {
    let Some(w) = Wire::new("x", 1) else { return };
    let pool = NqWorkers::new(&[0], false).unwrap();
    for runtime in runtimes(&pool) {
        for kind in PolicyKind::ALL {
            let cfg = PolicyConfig::default_for(kind);
            let r = run(&w, &runtime, cfg, Faults::NONE, 0);
            let what = format!("{runtime:?} {kind}");
            assert_every_frame_accounted_for(&r, &what);
            assert_simulator_parity(&r, cfg, &what);
            assert_eq!(r.rec.injected, Some(Injected::default()), "{what}");
        }
    }
    pool.shutdown();
}
