//! The daemon estimates NetAP-ML's workload from its counters and hands it
//! to every `netap-ml` port: two VM ports run `netap-ml` with no features
//! configured, one synthetic guest streams with one thread, the other with
//! two (one queue pair each), both to a sink, at a fixed rate. `vadapt
//! stats` then shows, on both ports, 2 VMs, 2 threads per VM (1.5 rounded
//! half up) and 1000 B (frames of 14 + 1040 B, less the 54 B the estimate
//! takes for Ethernet, IPv4 and TCP headers), and a prediction.
//!
//! Nothing here is timed: the wait only bounds how long a failure takes to
//! show.
//!
//! A third `netap-ml` port, with no guest, pins `vms = 6` in its
//! configuration: it keeps that and takes the other two features.
//!
//! The search range is not checked against the prediction: a workload
//! retune narrows NetAP's *next* search, so for a while the running range
//! may not contain the new prediction.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::daemon::Daemon;
use vadapt_dataplane::metrics::{PortKind, StatsSnapshot};
use vadapt_guest::{Guest, GuestConfig, GuestReport, Load};
use vadapt_policy::netap_ml::NetapMlParams;
use vadapt_policy::PolicyConfig;
use vadapt_wire::Mac;

const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x07]);
const BOUND: Duration = Duration::from_secs(30);

fn vm(name: &str, dir: &Path, queues: u16, vms: u32) -> VmPortConfig {
    let p = NetapMlParams {
        vms,
        ..NetapMlParams::default()
    };
    VmPortConfig {
        queues,
        policy: Some(PolicyConfig::NetapMl(p)),
        ..VmPortConfig::new(name, dir.join(format!("{name}.sock")))
    }
}

fn guest(
    dir: &Path,
    name: &str,
    threads: u32,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<GuestReport> {
    let mut g = GuestConfig::new(dir.join(format!("{name}.sock")));
    g.threads = threads;
    g.size = 1040;
    g.load = Load::Rate { pps: 4000.0 };
    g.dst_mac = SINK.0;
    g.exit_cost_ns = 0;
    g.duration = Duration::from_secs(600);
    let guest = Guest::connect(g).expect("guest connects");
    let st = Arc::clone(stop);
    std::thread::spawn(move || guest.run(st).expect("guest runs"))
}

fn workloads(s: &StatsSnapshot) -> Vec<[u64; 3]> {
    s.ports
        .iter()
        .filter(|p| p.kind == PortKind::Vm)
        .map(|p| p.workload)
        .collect()
}

#[test]
fn active_ports_queues_and_frame_size_reach_the_netap_ml_ports() {
    let dir = std::env::temp_dir().join(format!("mlest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = DaemonConfig {
        vm: vec![
            vm("vm1", &dir, 1, 0),
            vm("vm2", &dir, 2, 0),
            vm("vm3", &dir, 1, 6),
        ],
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg).expect("daemon starts");
    let before = daemon.registry().snapshot();
    // Only what the config gives, nothing estimated yet.
    assert_eq!(workloads(&before), vec![[0; 3], [0; 3], [6, 0, 0]]);
    let stop = Arc::new(AtomicBool::new(false));
    let g1 = guest(&dir, "vm1", 1, &stop);
    let g2 = guest(&dir, "vm2", 2, &stop);
    let start = Instant::now();
    let snap = loop {
        let s = daemon.registry().snapshot();
        if workloads(&s).iter().all(|w| w[1] != 0) || start.elapsed() > BOUND {
            break s;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    stop.store(true, Ordering::Relaxed);
    let reports = [g1.join().unwrap(), g2.join().unwrap()];
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    for r in &reports {
        assert_eq!(r.error, None);
    }
    assert_eq!(
        workloads(&snap),
        vec![[2, 2, 1000], [2, 2, 1000], [6, 2, 1000]],
        "{}",
        snap.to_table()
    );
    for p in snap
        .ports
        .iter()
        .filter(|p| p.kind == PortKind::Vm && p.connected)
    {
        // Only a running worker reports its policy's status.
        assert!(p.predicted_us > 0, "{}", snap.to_table());
        assert!(
            p.search_range_us.0 < p.search_range_us.1,
            "{}",
            snap.to_table()
        );
    }
}
