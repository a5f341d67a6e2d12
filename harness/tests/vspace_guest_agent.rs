//! vSPACE-Guest end to end: the daemon's core manager (vSPACE-P on 2 CPUs: one vCPU core,
//! one NQ core) reaches a synthetic guest's agent socket (`--qga`) and brings the guest to
//! one vCPU online and one queue pair. The guest has two sending threads ("vCPUs"): the
//! second goes offline and stops sending; `vadapt cores` reports what was applied.
//!
//! A real QEMU guest agent cannot be tested here: the busybox guest image carries no
//! `qemu-ga`. Nothing here is timed: the wait only bounds how long a failure takes to show.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::control::{self, Request, Response};
use vadapt_dataplane::cores::{ApplyMethod, CoresConfig};
use vadapt_dataplane::daemon::Daemon;
use vadapt_guest::{Guest, GuestConfig};
use vadapt_policy::vspace::VspaceMode;
use vadapt_wire::Mac;

const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x03]);

#[test]
fn the_core_manager_takes_a_guest_vcpu_offline_through_its_agent() {
    let dir = std::env::temp_dir().join(format!("nq-qga-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let qga = dir.join("vm1.qga");
    let cfg = DaemonConfig {
        vm: vec![VmPortConfig {
            qga: Some(qga.clone()),
            ..VmPortConfig::new("vm1", dir.join("vm1.sock"))
        }],
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
        control: dir.join("control.sock"),
        cores: CoresConfig {
            mode: VspaceMode::Performance,
            cpus: vec![0, 1],
            apply: ApplyMethod::Advise,
            ..CoresConfig::default()
        },
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg).expect("daemon starts");
    let mut g = GuestConfig::new(dir.join("vm1.sock"));
    g.threads = 2;
    g.queues = Some(1);
    g.dst_mac = SINK.0;
    g.exit_cost_ns = 0;
    g.load = vadapt_guest::Load::Rate { pps: 2000.0 };
    g.duration = Duration::from_secs(600);
    g.qga = Some(qga);
    let guest = Guest::connect(g).expect("guest connects");
    let vcpus = guest.vcpus();
    let counters = guest.counters();
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let h = std::thread::spawn(move || guest.run(st).expect("guest runs"));

    let start = Instant::now();
    while vcpus.online_states() != [(0, true), (1, false)] {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "vCPU 1 still online: {:?}",
            vcpus.online_states()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Offline: its thread stops at its pause point, thread 0 goes on.
    std::thread::sleep(Duration::from_millis(300));
    let before = [
        counters.threads[0].snapshot().sent_packets,
        counters.threads[1].snapshot().sent_packets,
    ];
    let start = Instant::now();
    while counters.threads[0].snapshot().sent_packets < before[0] + 50 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "thread 0 stopped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        counters.threads[1].snapshot().sent_packets <= before[1] + 1,
        "the offline vCPU's thread went on sending"
    );
    let snap = match control::request(&dir.join("control.sock"), &Request::Cores).unwrap() {
        Response::Cores { cores } => *cores,
        other => panic!("{other:?}"),
    };
    stop.store(true, Ordering::Relaxed);
    let report = h.join().unwrap();
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(report.error, None);
    let vm = &snap.vms[0];
    assert_eq!(vm.guest_vcpus, Some(1), "{snap:?}");
    assert_eq!(vm.guest_queue_pairs, Some(1), "{snap:?}");
    assert_eq!(vm.guest_error, None, "{snap:?}");
    // The manager's first period may come before the guest (which needs the daemon's
    // vhost-user socket first) has its agent socket: that attempt fails, is counted, and
    // is retried after `guest_side::RETRY_AFTER` (10 s), which is most of this test's time.
    assert!(snap.qga_errors <= 1, "{snap:?}");
}
