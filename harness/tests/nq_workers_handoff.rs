//! Queue sets move between the NQ workers while three synthetic guests run
//! request/response traffic through an echo port: the pool goes 1 → 2 → 1
//! workers ten times, each change moves one port's queues with its policy
//! (interrupt, EE-KBP and NetAP: waits for kicks, busy polls and timed
//! sleeps are all caught mid-move), and
//!
//! * no request and no reply is lost (the guests count replies that do not
//!   come back within 5 s, far beyond any handoff), and no frame is
//!   dropped by the daemon;
//! * no ring is left unserved: after every move every port goes on receiving.
//!
//! Nothing here is timed: the waits for progress only bound how long a
//! failure takes to show.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::cores::QueueWorkers;
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::cores::{ApplyMethod, CoresConfig};
use vadapt_dataplane::daemon::Daemon;
use vadapt_guest::config::Mode;
use vadapt_guest::{Guest, GuestConfig, GuestReport};
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_wire::Mac;

const ECHO: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x02]);
/// How long a port may go without receiving before it counts as unserved.
const PROGRESS_BOUND: Duration = Duration::from_secs(20);

fn vm(name: &str, dir: &Path, policy: PolicyConfig) -> VmPortConfig {
    VmPortConfig {
        policy: Some(policy),
        ..VmPortConfig::new(name, dir.join(format!("{name}.sock")))
    }
}

fn rx_packets(d: &Daemon, port: &str) -> u64 {
    d.registry()
        .snapshot()
        .port_total(port, |q| q.rx_packets)
        .unwrap_or(0)
}

const PORTS: [&str; 3] = ["vm1", "vm2", "vm3"];

/// Waits until every port received more than they had; panics after
/// [`PROGRESS_BOUND`].
fn all_progress(d: &Daemon, what: &str) {
    let rx = || PORTS.map(|p| rx_packets(d, p));
    let before = rx();
    let start = Instant::now();
    loop {
        let now = rx();
        if now.iter().zip(&before).all(|(n, b)| *n > b + 100) {
            return;
        }
        assert!(
            start.elapsed() < PROGRESS_BOUND,
            "{what}: a port stopped being served (received {before:?} -> {now:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn guest(socket: PathBuf, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<GuestReport> {
    let mut g = GuestConfig::new(socket);
    g.threads = 1;
    g.mode = Mode::RequestResponse;
    g.dst_mac = ECHO.0;
    g.exit_cost_ns = 0;
    g.rr_timeout = Duration::from_secs(5);
    g.duration = Duration::from_secs(600);
    let guest = Guest::connect(g).expect("guest connects");
    let st = Arc::clone(stop);
    std::thread::spawn(move || guest.run(st).expect("guest runs"))
}

#[test]
fn queue_sets_move_between_workers_without_loss() {
    let dir = std::env::temp_dir().join(format!("nq-handoff-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = DaemonConfig {
        vm: vec![
            vm("vm1", &dir, PolicyConfig::Interrupt),
            vm("vm2", &dir, PolicyConfig::default_for(PolicyKind::Eekbp)),
            vm("vm3", &dir, PolicyConfig::default_for(PolicyKind::Netap)),
        ],
        echo: vec![LocalPortConfig::new("echo0", Some(ECHO))],
        control: dir.join("control.sock"),
        cores: CoresConfig {
            cpus: vec![0, 1],
            apply: ApplyMethod::Advise,
            queue_workers: QueueWorkers::PerNqCore,
            ..CoresConfig::default()
        },
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg).expect("daemon starts");
    let pool = Arc::clone(daemon.nq_workers().expect("per-nq-core pool"));
    let stop = Arc::new(AtomicBool::new(false));
    let g1 = guest(dir.join("vm1.sock"), &stop);
    let g2 = guest(dir.join("vm2.sock"), &stop);
    let g3 = guest(dir.join("vm3.sock"), &stop);
    all_progress(&daemon, "start");
    let mut moves = pool.moves();
    for round in 0..10 {
        for cpus in [&[0usize][..], &[0, 1][..]] {
            let moved = pool.resize(cpus).expect("resize");
            assert_eq!(pool.len(), cpus.len());
            assert_eq!(
                moved,
                1,
                "round {round}, {} workers: one port moves",
                cpus.len()
            );
            moves += 1;
            let st = pool.status();
            let serving: Vec<usize> = st.iter().map(|w| w.ports.len()).collect();
            assert_eq!(serving.iter().sum::<usize>(), 3, "{st:?}");
            assert!(serving.iter().all(|&n| n >= 1), "balanced: {st:?}");
            all_progress(&daemon, &format!("round {round}, {} workers", cpus.len()));
        }
    }
    assert_eq!(pool.moves(), moves);
    stop.store(true, Ordering::Relaxed);
    let reports = [g1.join().unwrap(), g2.join().unwrap(), g3.join().unwrap()];
    let snap = daemon.registry().snapshot();
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    for r in &reports {
        assert_eq!(r.error, None);
        assert_eq!(r.totals.lost_requests, 0, "{:?}", r.totals);
        assert!(r.totals.recv_packets > 1000, "{:?}", r.totals);
        // At most the one request outstanding when the guest stopped.
        assert!(
            r.totals.sent_packets - r.totals.recv_packets <= 1,
            "{:?}",
            r.totals
        );
    }
    for p in &snap.ports {
        for q in &p.queues {
            let dropped: u64 = q.dropped.values().sum();
            assert_eq!(dropped, 0, "port {} dropped {:?}", p.name, q.dropped);
        }
    }
}
