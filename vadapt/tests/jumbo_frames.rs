//! Jumbo frames (issue 26, item 4): ports with `mtu = 9000` and the
//! synthetic guest as their frontend, in one process. 9014-byte frames go
//! guest → sink, guest → echo → guest and guest → guest (over several
//! mergeable RX buffers); a frame over a port's MTU is a counted drop.
//! Every frame and byte is accounted for on both sides.
//!
//! No timing assertions: counts and protocol outcomes only.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, GuestReport, Load, Mode};
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_wire::Mac;

mod common;
use common::{settled, tmpdir, total};

const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x09]);
const ECHO: Mac = Mac([0x02, 0, 0, 0, 0xec, 0x09]);
/// Ethernet frame of a 9000-byte message: the guest's L2 payload plus the header.
const JUMBO: u64 = 14 + 9000;

fn mac(n: u8) -> Mac {
    Mac([0x52, 0x54, 0, 0, 9, n])
}

fn vm(dir: &Path, name: &str, n: u8, mtu: Option<u16>) -> VmPortConfig {
    VmPortConfig {
        mac: Some(mac(n)),
        mtu,
        ..VmPortConfig::new(name, dir.join(format!("{name}.sock")))
    }
}

fn daemon(dir: &Path, vms: Vec<VmPortConfig>) -> Daemon {
    Daemon::start(DaemonConfig {
        vm: vms,
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
        echo: vec![LocalPortConfig::new("echo0", Some(ECHO))],
        // Interrupt mode: a missed call stalls a request/response guest, so
        // every answer also proves the calls.
        policy: PolicyConfig::default_for(PolicyKind::Interrupt),
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    })
    .expect("daemon starts")
}

fn guest(dir: &Path, port: &str, mode: Mode, dst: Mac, size: u32, ms: u64) -> GuestConfig {
    let mut g = GuestConfig::new(dir.join(format!("{port}.sock")));
    g.mode = mode;
    g.dst_mac = dst.0;
    g.size = size;
    g.load = Load::Rate { pps: 2000.0 };
    g.duration = Duration::from_millis(ms);
    g.exit_cost_ns = 0;
    g
}

/// Connects `cfg`'s guest; checks the MTU it read from the config space.
fn connect(cfg: GuestConfig, mtu: Option<u16>) -> Guest {
    let g = Guest::connect(cfg).expect("guest connects");
    assert_eq!(g.mtu(), mtu, "the MTU the guest read from config space");
    g
}

fn run(g: Guest) -> GuestReport {
    let r = g.run(Arc::new(AtomicBool::new(false))).expect("guest runs");
    assert!(r.error.is_none(), "guest error: {:?}", r.error);
    assert_eq!(r.totals.rx_errors, 0, "{:?}", r.totals);
    r
}

fn dropped(s: &StatsSnapshot, port: &str, reason: &str) -> u64 {
    total(s, port, |q| q.dropped.get(reason).copied().unwrap_or(0))
}

/// Every drop of `port`, by reason, that is not zero.
fn drops(s: &StatsSnapshot, port: &str) -> Vec<(String, u64)> {
    let p = s.ports.iter().find(|p| p.name == port).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for q in &p.queues {
        for (k, v) in &q.dropped {
            *out.entry(k.clone()).or_insert(0) += v;
        }
    }
    out.into_iter().filter(|(_, v)| *v > 0).collect()
}

#[test]
fn jumbo_frames_reach_a_sink_and_come_back_from_an_echo_port() {
    let tmp = tmpdir("local");
    let dir = tmp.path();
    let d = daemon(dir, vec![vm(dir, "vm1", 1, Some(9000))]);

    let r = run(connect(
        guest(dir, "vm1", Mode::Stream, SINK, 9000, 500),
        Some(9000),
    ));
    let sent = r.totals.sent_packets;
    assert!(sent > 50, "{:?}", r.totals);
    assert_eq!(r.totals.sent_bytes, sent * JUMBO);
    let s = settled(&d, |s| total(s, "sink0", |q| q.rx_packets) == sent);
    assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent);
    assert_eq!(total(&s, "vm1", |q| q.tx_bytes), sent * JUMBO);
    assert_eq!(total(&s, "sink0", |q| q.rx_packets), sent);
    assert_eq!(total(&s, "sink0", |q| q.rx_bytes), sent * JUMBO);
    assert_eq!(drops(&s, "vm1"), vec![], "nothing dropped");
    eprintln!("vm1 -> sink0: {sent} frames, {} bytes", sent * JUMBO);

    // Request/response through the echo port: each reply spans several RX buffers.
    let r = run(connect(
        guest(dir, "vm1", Mode::RequestResponse, ECHO, 9000, 500),
        Some(9000),
    ));
    let sent = r.totals.sent_packets;
    assert!(sent > 50, "{:?}", r.totals);
    assert_eq!(r.totals.lost_requests, 0);
    assert_eq!(r.totals.recv_packets, sent, "every request answered");
    assert_eq!(r.totals.recv_bytes, sent * JUMBO);
    let s = settled(&d, |s| total(s, "echo0", |q| q.tx_packets) == sent);
    assert_eq!(total(&s, "echo0", |q| q.rx_packets), sent);
    assert_eq!(total(&s, "echo0", |q| q.rx_bytes), sent * JUMBO);
    assert_eq!(total(&s, "echo0", |q| q.tx_bytes), sent * JUMBO);
    assert_eq!(drops(&s, "vm1"), vec![]);
    assert_eq!(drops(&s, "echo0"), vec![]);
    eprintln!(
        "vm1 -> echo0 -> vm1: {sent} frames, {} bytes each way",
        sent * JUMBO
    );
    d.shutdown();
}

#[test]
fn jumbo_frames_go_guest_to_guest_and_over_an_mtu_they_are_counted_drops() {
    let tmp = tmpdir("g2g");
    let dir = tmp.path();
    let d = daemon(
        dir,
        vec![
            vm(dir, "vm1", 1, Some(9000)),
            vm(dir, "vm2", 2, Some(9000)),
            vm(dir, "vm3", 3, None),
        ],
    );
    // vm2 answers vm1's requests with replies of its own message size;
    // vm3 (MTU 1500) is up to receive.
    let stop = Arc::new(AtomicBool::new(false));
    let servers: Vec<_> = [("vm2", Some(9000), 9000), ("vm3", None, 64)]
        .into_iter()
        .map(|(port, mtu, size)| {
            let g = connect(guest(dir, port, Mode::Echo, SINK, size, 30_000), mtu);
            let st = Arc::clone(&stop);
            std::thread::spawn(move || g.run(st))
        })
        .collect();

    let r = run(connect(
        guest(dir, "vm1", Mode::RequestResponse, mac(2), 9000, 600),
        Some(9000),
    ));
    let sent = r.totals.sent_packets;
    assert!(sent > 50, "{:?}", r.totals);
    assert_eq!(r.totals.lost_requests, 0);
    assert_eq!(r.totals.recv_packets, sent, "every request answered");
    assert_eq!(r.totals.recv_bytes, sent * JUMBO);
    let s = settled(&d, |s| total(s, "vm2", |q| q.tx_packets) == sent);
    for port in ["vm1", "vm2"] {
        assert_eq!(total(&s, port, |q| q.tx_packets), sent, "{port}");
        assert_eq!(total(&s, port, |q| q.tx_bytes), sent * JUMBO, "{port}");
        assert_eq!(total(&s, port, |q| q.rx_packets), sent, "{port}");
        assert_eq!(total(&s, port, |q| q.rx_bytes), sent * JUMBO, "{port}");
        assert_eq!(drops(&s, port), vec![], "{port}");
    }
    eprintln!(
        "vm1 -> vm2 -> vm1: {sent} frames, {} bytes each way",
        sent * JUMBO
    );

    // vm1 → vm3: vm3's port has the default MTU, so each frame is dropped
    // on its way to vm3's guest, and counted there.
    let r = run(connect(
        guest(dir, "vm1", Mode::Stream, mac(3), 9000, 400),
        Some(9000),
    ));
    let to_vm3 = r.totals.sent_packets;
    assert!(to_vm3 > 50, "{:?}", r.totals);
    let s = settled(&d, |s| dropped(s, "vm3", "over_mtu") == to_vm3);
    assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent + to_vm3);
    assert_eq!(dropped(&s, "vm3", "over_mtu"), to_vm3);
    assert_eq!(total(&s, "vm3", |q| q.rx_packets), 0);
    assert_eq!(drops(&s, "vm3"), vec![("over_mtu".into(), to_vm3)]);
    eprintln!("vm1 -> vm3 (MTU 1500): {to_vm3} frames, all dropped over_mtu at vm3");

    stop.store(true, Ordering::Relaxed);
    for srv in servers {
        let sr = srv.join().unwrap().unwrap();
        assert_eq!(sr.totals.rx_errors, 0, "{:?}", sr.totals);
    }
    d.shutdown();
}

#[test]
fn a_guest_over_its_ports_mtu_is_refused_or_dropped() {
    let tmp = tmpdir("over");
    let dir = tmp.path();
    let d = daemon(
        dir,
        vec![vm(dir, "vm1", 1, Some(4000)), vm(dir, "vm2", 2, None)],
    );
    // The guest reads the MTU and will not send over it.
    let Err(e) = Guest::connect(guest(dir, "vm1", Mode::Stream, SINK, 4001, 100)) else {
        panic!("a message over the offered MTU is refused");
    };
    assert!(e.to_string().contains("4000-byte MTU"), "{e}");
    let r = run(connect(
        guest(dir, "vm1", Mode::Stream, SINK, 4000, 300),
        Some(4000),
    ));
    let sent = r.totals.sent_packets;
    let s = settled(&d, |s| total(s, "sink0", |q| q.rx_packets) == sent);
    assert_eq!(total(&s, "sink0", |q| q.rx_bytes), sent * 4014);

    // A port without an MTU offers none; a guest that sends 4000-byte
    // messages anyway (it may, with mergeable buffers) has each frame
    // dropped as over the port's 1500-byte MTU, none reaching the sink.
    let r = run(connect(
        guest(dir, "vm2", Mode::Stream, SINK, 4000, 300),
        None,
    ));
    let over = r.totals.sent_packets;
    assert!(over > 50, "{:?}", r.totals);
    let s = settled(&d, |s| dropped(s, "vm2", "over_mtu") == over);
    assert_eq!(dropped(&s, "vm2", "over_mtu"), over);
    assert_eq!(total(&s, "vm2", |q| q.tx_packets), 0);
    assert_eq!(total(&s, "sink0", |q| q.rx_packets), sent, "none of them");
    eprintln!("vm1 (MTU 4000) -> sink0: {sent} frames; vm2 (no MTU) 4014-byte frames: {over} dropped over_mtu");
    d.shutdown();
}
