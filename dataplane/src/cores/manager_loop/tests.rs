//! The manager against fake QMP and guest-agent servers and real threads.

use super::placement::set_frequencies;
use super::*;
use crate::config::parse_vm_spec;
use crate::cores::CoresSnapshot;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::sync::mpsc;
use vadapt_host::affinity::cpus_allowed_list;

/// A QMP server on `path` answering `query-cpus-fast` with `tids`,
/// until `stop` (checked between connections).
fn fake_qmp(path: &Path, tids: Vec<u32>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    scripted_qmp(path, tids, Vec::new(), stop).1
}

/// As [`fake_qmp`], refusing the first `n` of each `(command, n)` with
/// a `GenericError`; every command received is recorded.
pub(super) fn scripted_qmp(
    path: &Path,
    tids: Vec<u32>,
    refusals: Vec<(&'static str, usize)>,
    stop: Arc<AtomicBool>,
) -> (Arc<std::sync::Mutex<Vec<String>>>, JoinHandle<()>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let mut refusals = refusals;
    let l = UnixListener::bind(path).unwrap();
    l.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            s.set_nonblocking(false).unwrap();
            let mut w = s.try_clone().unwrap();
            let _ = writeln!(w, r#"{{"QMP": {{"version": {{}}, "capabilities": []}}}}"#);
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                let command = v["execute"].as_str().unwrap_or("").to_string();
                log.lock().unwrap().push(command.clone());
                let refuse = refusals
                    .iter_mut()
                    .find(|(c, n)| *c == command && *n > 0)
                    .map(|(_, n)| *n -= 1)
                    .is_some();
                let answer = if refuse {
                    format!(
                        r#"{{"error": {{"class": "GenericError", "desc": "no {command} today"}}}}"#
                    )
                } else if line.contains("query-cpus-fast") {
                    let cpus: Vec<String> = tids
                        .iter()
                        .enumerate()
                        .map(|(i, t)| format!(r#"{{"cpu-index": {i}, "thread-id": {t}}}"#))
                        .collect();
                    format!(r#"{{"return": [{}]}}"#, cpus.join(","))
                } else {
                    r#"{"return": {}}"#.to_string()
                };
                if writeln!(w, "{answer}").is_err() {
                    break;
                }
            }
        }
    });
    (seen, server)
}

/// `n` threads of this process parked until the sender drops.
pub(super) fn parked(n: usize) -> (Vec<u32>, mpsc::Sender<()>, Vec<JoinHandle<()>>) {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let stop_rx = Arc::new(std::sync::Mutex::new(stop_rx));
    let (tid_tx, tid_rx) = mpsc::channel();
    let hs = (0..n)
        .map(|_| {
            let (rx, tx) = (Arc::clone(&stop_rx), tid_tx.clone());
            std::thread::spawn(move || {
                tx.send(vadapt_host::cputime::current_tid()).unwrap();
                let _ = rx.lock().unwrap().recv();
            })
        })
        .collect();
    (
        (0..n).map(|_| tid_rx.recv().unwrap()).collect(),
        stop_tx,
        hs,
    )
}

pub(super) fn port(spec: &str) -> Arc<VmPort> {
    let cfg = parse_vm_spec(spec).unwrap();
    VmPort::new(
        cfg,
        crate::config::default_policy(),
        64,
        None,
        Arc::new(CpuFreq::unavailable("test")),
        None,
    )
    .unwrap()
}

/// A manager of one VM port whose QMP socket is `qmp` (no cpufreq).
/// The fake QMP server is this test process, which a pidfile next to
/// the socket names as the VM's QEMU.
pub(super) fn manager(qmp: &Path, cfg: CoresConfig) -> (CoreManager, Arc<CoresStatus>) {
    let pidfile = qmp.with_extension("pid");
    std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
    let p = port(&format!(
        "name=vm1,socket=/nonexistent.sock,qmp={},qemu_pidfile={}",
        qmp.display(),
        pidfile.display()
    ));
    let status = Arc::new(CoresStatus::default());
    let m = CoreManager::new(
        cfg,
        Arc::new(Roster::new(vec![p])),
        Arc::clone(&status),
        Path::new("/proc"),
        Path::new("/nonexistent"),
    );
    (m, status)
}

fn allowed(tid: u32) -> Vec<usize> {
    let task = TaskId {
        pid: std::process::id(),
        tid,
        start: 0,
    };
    cpus_allowed_list(Path::new("/proc"), task).unwrap()
}

/// Step `m` a period at a time (simulated time from `t0`, 100 ms
/// apart; a real millisecond between them, for the peers' threads)
/// until `done` holds for its status; the status, and the time reached.
/// Panics after 2,000 periods: a bound on the test, not a timing.
pub(super) fn step_until(
    m: &mut CoreManager,
    status: &CoresStatus,
    t0: Instant,
    mut done: impl FnMut(&CoresSnapshot) -> bool,
) -> (CoresSnapshot, Instant) {
    let mut now = t0;
    for _ in 0..2000 {
        m.step(now);
        let s = status.snapshot();
        if done(&s) {
            return (s, now);
        }
        now += Duration::from_millis(100);
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("never reached: {:?}", status.snapshot());
}

/// A VM of two parked vCPU threads behind a fake QMP socket, and the
/// first two CPUs of this process to manage; `None` (test skipped) with
/// fewer than two.
struct TwoVcpuVm {
    cpus: Vec<usize>,
    qmp: PathBuf,
    tids: Vec<u32>,
    release: mpsc::Sender<()>,
    threads: Vec<JoinHandle<()>>,
    qstop: Arc<AtomicBool>,
    server: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl TwoVcpuVm {
    fn start() -> Option<TwoVcpuVm> {
        let own = vadapt_host::cputime::current_affinity().unwrap();
        if own.len() < 2 {
            eprintln!("skipped: needs 2 CPUs in this process's affinity, has {own:?}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let qmp = dir.path().join("qmp.sock");
        let (tids, release, threads) = parked(2);
        let qstop = Arc::new(AtomicBool::new(false));
        let server = fake_qmp(&qmp, tids.clone(), Arc::clone(&qstop));
        Some(TwoVcpuVm {
            cpus: own[..2].to_vec(),
            qmp,
            tids,
            release,
            threads,
            qstop,
            server,
            _dir: dir,
        })
    }

    /// The VM goes away: QMP closes, its socket goes, its threads exit.
    fn stop(self) {
        self.qstop.store(true, Ordering::Relaxed);
        self.server.join().unwrap();
        std::fs::remove_file(&self.qmp).unwrap();
        drop(self.release);
        for h in self.threads {
            h.join().unwrap();
        }
    }
}

#[test]
fn vcpu_threads_found_through_qmp_follow_the_allocation() {
    let Some(vm) = TwoVcpuVm::start() else { return };
    let (cpus, tids) = (vm.cpus.clone(), vm.tids.clone());
    let (mut m, status) = manager(
        &vm.qmp,
        CoresConfig {
            mode: VspaceMode::Performance,
            cpus: cpus.clone(),
            ..CoresConfig::default()
        },
    );
    let mut sorted = tids.clone();
    sorted.sort();
    let (_, t) = step_until(&mut m, &status, Instant::now(), |s| {
        s.vms[0].vcpu_tids == sorted
    });
    // One more period places them.
    m.step(t + Duration::from_millis(100));
    let s = status.snapshot();
    assert_eq!(s.vms[0].qemu_pid, Some(std::process::id()), "{s:?}");
    assert_eq!(s.apply, Placement::Affinity, "{s:?}");
    // vSPACE-P: every CPU in use, one per group here.
    assert_eq!(s.sets.vcpu.len() + s.sets.nq.len(), 2, "{s:?}");
    for &tid in &tids {
        assert_eq!(
            allowed(tid),
            s.sets.vcpu,
            "vCPU thread {tid} placed on the vCPU group"
        );
    }
    assert!(s.threads_moved >= 2, "{s:?}");

    // Off: the threads may run on every managed CPU again.
    status.request_mode(VspaceMode::Off);
    let t0 = t + Duration::from_millis(200);
    m.step(t0);
    for &tid in &tids {
        assert_eq!(allowed(tid), cpus);
    }
    assert_eq!(status.snapshot().mode, VspaceMode::Off);

    // The VM goes away (QMP closes, its threads exit): counted, no panic,
    // and the lookup is retried.
    vm.stop();
    status.request_mode(VspaceMode::Energy);
    // Rediscovery is due after REDISCOVER_EVERY, or at once if a thread
    // is seen gone.
    let (s, _) = step_until(&mut m, &status, t0 + Duration::from_millis(100), |s| {
        s.qmp_errors >= 1
    });
    assert!(
        s.vms[0].error.as_deref().unwrap_or("").contains("QMP"),
        "{s:?}"
    );
    assert!(s.vms[0].vcpu_tids.is_empty(), "{s:?}");
    assert_eq!(s.mode, VspaceMode::Energy);
}

#[test]
fn a_panic_in_a_period_stops_the_manager_and_frees_the_threads() {
    let Some(vm) = TwoVcpuVm::start() else { return };
    let (cpus, tids) = (vm.cpus.clone(), vm.tids.clone());
    let original: Vec<Vec<usize>> = tids.iter().map(|&t| allowed(t)).collect();
    let (m, status) = manager(
        &vm.qmp,
        CoresConfig {
            mode: VspaceMode::Performance,
            cpus: cpus.clone(),
            period_ms: 1,
            ..CoresConfig::default()
        },
    );
    let stop = AtomicBool::new(false);
    let mut placed_at = None;
    // Good periods until the vCPU threads are placed, then a fault;
    // `run` must return by itself.
    run(m, &stop, |m, now| {
        let s = status.snapshot();
        if let Some(periods) = placed_at {
            if s.periods > periods {
                panic!("injected fault");
            }
        } else if s.vms.first().is_some_and(|vm| vm.vcpu_tids.len() == 2)
            && s.sets.vcpu.len() < cpus.len()
            && tids.iter().all(|&t| allowed(t) == s.sets.vcpu)
        {
            placed_at = Some(s.periods);
        }
        assert!(s.periods < 10_000, "never placed: {s:?}");
        m.step(now);
    });
    let placed_at = placed_at.expect("the vCPU threads were placed before the fault");
    let s = status.snapshot();
    assert_eq!(s.periods, placed_at + 1, "{s:?}");
    let why = s.failed.as_deref().unwrap_or_default();
    assert!(
        why.contains(&format!("after {} periods", placed_at + 1)) && why.contains("injected fault"),
        "{why}"
    );
    assert!(s.to_table().starts_with("STOPPED: "), "{}", s.to_table());
    assert_eq!(s.mode, VspaceMode::Off);
    for (&tid, was) in tids.iter().zip(&original) {
        assert_eq!(&allowed(tid), was, "thread {tid} back to what it had");
    }
    assert!(s.threads_restored >= 2, "{s:?}");
    vm.stop();
}

/// A guest agent on `path` for a guest with `n` vCPUs (CPU 0 cannot go
/// offline) whose `ethtool` always succeeds; every request is recorded.
fn fake_qga(path: &Path, n: usize) -> Arc<std::sync::Mutex<Vec<serde_json::Value>>> {
    use serde_json::{json, Value};
    let l = UnixListener::bind(path).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut online = vec![true; n];
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let mut line = Vec::new();
            while r.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                let start = line.iter().rposition(|&b| b == 0xFF).map_or(0, |i| i + 1);
                let req: Value = serde_json::from_slice(&line[start..]).unwrap();
                line.clear();
                let args = &req["arguments"];
                let mut out = Vec::new();
                let ret = match req["execute"].as_str().unwrap() {
                    "guest-sync-delimited" => {
                        out.push(0xFF);
                        args["id"].clone()
                    }
                    "guest-get-vcpus" => json!(online
                        .iter()
                        .enumerate()
                        .map(|(i, &o)| json!({"logical-id": i, "online": o, "can-offline": i > 0}))
                        .collect::<Vec<_>>()),
                    "guest-set-vcpus" => {
                        let list = args["vcpus"].as_array().unwrap();
                        for e in list {
                            online[e["logical-id"].as_u64().unwrap() as usize] =
                                e["online"].as_bool().unwrap();
                        }
                        json!(list.len())
                    }
                    "guest-exec" => json!({"pid": 1}),
                    _ => json!({"exited": true, "exitcode": 0}),
                };
                log.lock().unwrap().push(req);
                out.extend_from_slice(format!("{}\n", json!({ "return": ret })).as_bytes());
                if w.write_all(&out).is_err() {
                    break;
                }
            }
        }
    });
    seen
}

#[test]
fn the_guest_agent_brings_vcpus_and_queue_pairs_to_the_groups_sizes() {
    let t = tempfile::tempdir().unwrap();
    let qga = t.path().join("vm1.qga");
    let seen = fake_qga(&qga, 2);
    let with_agent = port(&format!(
        "name=vm1,socket=/nonexistent.sock,queues=2,qga={}",
        qga.display()
    ));
    let without = port("name=vm2,socket=/nonexistent2.sock");
    let status = Arc::new(CoresStatus::default());
    let mut m = CoreManager::new(
        CoresConfig {
            mode: VspaceMode::Performance,
            cpus: vec![0, 1],
            apply: ApplyMethod::Advise,
            ..CoresConfig::default()
        },
        Arc::new(Roster::new(vec![with_agent, without])),
        Arc::clone(&status),
        Path::new("/proc"),
        Path::new("/nonexistent"),
    );
    let line = m.describe();
    assert!(line.contains("through the guest agent for vm1"), "{line}");
    assert!(line.contains("host side only (no qga) for vm2"), "{line}");
    let t0 = Instant::now();
    let (s, t) = step_until(&mut m, &status, t0, |s| {
        s.vms[0].guest_queue_pairs.is_some()
    });
    // vSPACE-P on 2 CPUs: one vCPU core, one NQ core.
    assert_eq!((s.sets.vcpu.len(), s.sets.nq.len()), (1, 1), "{s:?}");
    assert_eq!(s.vms[0].guest_vcpus, Some(1), "{s:?}");
    assert_eq!(s.vms[0].guest_queue_pairs, Some(1), "{s:?}");
    assert_eq!(s.vms[0].guest_error, None);
    assert_eq!(s.vms[1].guest_vcpus, None, "no agent: host side only");
    let requests = seen.lock().unwrap().clone();
    let set: Vec<_> = requests
        .iter()
        .filter(|r| r["execute"] == "guest-set-vcpus")
        .collect();
    assert_eq!(
        set[0]["arguments"]["vcpus"],
        serde_json::json!([{"logical-id": 1, "online": false}])
    );
    let exec: Vec<_> = requests
        .iter()
        .filter(|r| r["execute"] == "guest-exec")
        .collect();
    assert_eq!(
        exec[0]["arguments"]["arg"],
        serde_json::json!(["-L", "eth0", "combined", "1"])
    );
    // Nothing changed: the agent is not asked again.
    let n = requests.len();
    for i in 1..5 {
        m.step(t + Duration::from_millis(100 * i));
    }
    assert_eq!(seen.lock().unwrap().len(), n);
    assert_eq!(status.snapshot().qga_errors, 0);
}

#[test]
fn a_qmp_socket_that_answers_garbage_is_counted_not_fatal() {
    let t = tempfile::tempdir().unwrap();
    let qmp = t.path().join("qmp.sock");
    let l = UnixListener::bind(&qmp).unwrap();
    let h = std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(b"\x00\xffnot json at all\n");
        }
    });
    let (mut m, status) = manager(
        &qmp,
        CoresConfig {
            mode: VspaceMode::Off,
            cpus: vec![0, 1],
            apply: ApplyMethod::Advise,
            ..CoresConfig::default()
        },
    );
    let (s, _) = step_until(&mut m, &status, Instant::now(), |s| s.qmp_errors == 2);
    h.join().unwrap();
    assert!(
        s.vms[0]
            .error
            .as_deref()
            .unwrap()
            .contains("not a JSON object"),
        "{s:?}"
    );
    assert_eq!(s.apply, Placement::AdviseOnly);
    assert!(s.advise_reason.unwrap().contains("advise"));
}

#[test]
fn idle_cpus_get_the_lowest_frequency_and_the_others_the_highest() {
    let t = tempfile::tempdir().unwrap();
    for cpu in 0..3 {
        let d = t
            .path()
            .join(format!("devices/system/cpu/cpu{cpu}/cpufreq"));
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("scaling_available_governors", "ondemand userspace"),
            ("scaling_governor", "ondemand"),
            ("scaling_min_freq", "800000"),
            ("scaling_max_freq", "3000000"),
            ("scaling_setspeed", "<unsupported>"),
        ] {
            std::fs::write(d.join(f), v).unwrap();
        }
    }
    let read = |cpu: usize, f: &str| {
        std::fs::read_to_string(
            t.path()
                .join(format!("devices/system/cpu/cpu{cpu}/cpufreq/{f}")),
        )
        .unwrap()
    };
    let freqs: Vec<CpuFreq> = (0..3).map(|c| CpuFreq::probe(t.path(), c)).collect();
    assert_eq!(read(0, "scaling_governor"), "userspace");
    let sets = CoreSets {
        vcpu: vec![0],
        nq: vec![1],
        be: vec![],
        idle: vec![2],
    };
    set_frequencies(&sets, &freqs);
    assert_eq!(read(0, "scaling_setspeed"), "3000000");
    assert_eq!(read(1, "scaling_setspeed"), "3000000");
    assert_eq!(read(2, "scaling_setspeed"), "800000");
    // CPU 2 gets work again.
    let sets = CoreSets {
        vcpu: vec![0, 2],
        idle: vec![],
        ..sets
    };
    set_frequencies(&sets, &freqs);
    assert_eq!(read(2, "scaling_setspeed"), "3000000");
    drop(freqs);
    assert_eq!(
        read(2, "scaling_governor"),
        "ondemand",
        "the governor is put back"
    );
}

/// An uplink's queue workers are NQ threads: the manager places them on
/// the NQ group, as it places VM ports' workers (vSPACE's network-queue
/// cores serve NIC queues too).
#[test]
fn uplink_queue_workers_are_placed_on_the_nq_group() {
    let cpus = vadapt_host::cputime::current_affinity().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let (tids, stop, hs) = parked(1);
    let roster = Arc::new(Roster::new(vec![port("name=vm1,socket=/nonexistent.sock")]));
    let w = Arc::new(crate::metrics::WorkerStats::new("up0/0"));
    w.tid.store(tids[0] as i32, Ordering::Release);
    let cfg = crate::config::parse_uplink_spec("iface=up0,name=up0").unwrap();
    let up =
        crate::uplink::Uplink::new(cfg, 8, vadapt_policy::PolicyConfig::BusyPoll, None).unwrap();
    roster.add(crate::port::RunningPort::uplink(up, &[w]));
    let status = Arc::new(CoresStatus::default());
    let mut m = CoreManager::new(
        CoresConfig {
            mode: VspaceMode::Performance,
            cpus: cpus[..2].to_vec(),
            ..CoresConfig::default()
        },
        Arc::clone(&roster),
        Arc::clone(&status),
        Path::new("/proc"),
        Path::new("/nonexistent"),
    );
    let (s, _) = step_until(&mut m, &status, Instant::now(), |s| {
        !s.sets.nq.is_empty() && s.worker_tids.contains(&tids[0])
    });
    m.step(Instant::now() + Duration::from_millis(100));
    assert_eq!(allowed(tids[0]), status.snapshot().sets.nq, "{s:?}");
    roster.remove("up0");
    drop(m);
    drop(stop);
    for h in hs {
        h.join().unwrap();
    }
}
