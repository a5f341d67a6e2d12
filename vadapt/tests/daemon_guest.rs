//! The daemon with the synthetic guest as its frontend, in one process:
//! every packet accounted for on both sides, notification suppression,
//! request/response through an echo port and guest to guest, metrics that
//! move, reconnects, and malformed vhost-user input.
//!
//! No timing assertions: counts and protocol outcomes only.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, GuestReport, Load, Mode};
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_wire::Mac;

mod common;
use common::{settled, tmpdir, total};

const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x01]);
const ECHO: Mac = Mac([0x02, 0, 0, 0, 0xec, 0x01]);

fn vm(dir: &Path, name: &str, queues: u16, mac: u8) -> VmPortConfig {
    VmPortConfig {
        queues,
        mac: Some(Mac([0x52, 0x54, 0, 0, 0, mac])),
        ..VmPortConfig::new(name, dir.join(format!("{name}.sock")))
    }
}

fn daemon(dir: &Path, vms: Vec<VmPortConfig>, policy: PolicyKind) -> Daemon {
    let cfg = DaemonConfig {
        vm: vms,
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
        echo: vec![LocalPortConfig::new("echo0", Some(ECHO))],
        policy: PolicyConfig::default_for(policy),
        control: dir.join("control.sock"),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..DaemonConfig::default()
    };
    Daemon::start(cfg).expect("daemon starts")
}

fn guest_cfg(
    socket: &Path,
    threads: u32,
    load: Load,
    mode: Mode,
    dst: Mac,
    ms: u64,
) -> GuestConfig {
    let mut g = GuestConfig::new(socket);
    g.threads = threads;
    g.load = load;
    g.mode = mode;
    g.dst_mac = dst.0;
    g.duration = Duration::from_millis(ms);
    g.exit_cost_ns = 0;
    g
}

fn run(cfg: GuestConfig) -> GuestReport {
    let g = Guest::connect(cfg).expect("guest connects");
    let r = g.run(Arc::new(AtomicBool::new(false))).expect("guest runs");
    assert!(r.error.is_none(), "guest error: {:?}", r.error);
    r
}

#[test]
fn closed_loop_stream_every_packet_counted_and_busy_poll_suppresses_tx_kicks() {
    let tmp = tmpdir("stream");
    let dir = tmp.path();
    let d = daemon(dir, vec![vm(dir, "vm1", 1, 1)], PolicyKind::BusyPoll);
    let r = run(guest_cfg(
        &dir.join("vm1.sock"),
        1,
        Load::ClosedLoop,
        Mode::Stream,
        SINK,
        600,
    ));
    let sent = r.totals.sent_packets;
    assert!(sent > 1000, "guest sent only {sent}");
    let s = settled(&d, |s| total(s, "sink0", |q| q.rx_packets) == sent);
    assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent);
    assert_eq!(total(&s, "sink0", |q| q.rx_packets), sent);
    assert_eq!(total(&s, "sink0", |q| q.rx_bytes), r.totals.sent_bytes);
    // Busy polling keeps guest notifications off: the guest never had to kick
    // its transmit queue (it kicks RX once after posting its first buffers, as
    // Linux does).
    assert_eq!(r.totals.tx_kicks, 0, "{:?}", r.totals);
    d.shutdown();
}

#[test]
fn fixed_rate_multiqueue_guest_to_guest_request_response_returns_everything() {
    let tmp = tmpdir("g2g");
    let dir = tmp.path();
    // Interrupt mode: a missing call would stall the requester, so returning
    // every request also proves calls follow the rules.
    let d = daemon(
        dir,
        vec![vm(dir, "vm1", 3, 1), vm(dir, "vm2", 3, 2)],
        PolicyKind::Interrupt,
    );
    let vm2_mac = Mac([0x52, 0x54, 0, 0, 0, 2]);
    let server = Guest::connect(guest_cfg(
        &dir.join("vm2.sock"),
        3,
        Load::ClosedLoop,
        Mode::Echo,
        SINK,
        5_000,
    ))
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let srv = std::thread::spawn(move || server.run(st));
    let r = run(guest_cfg(
        &dir.join("vm1.sock"),
        3,
        Load::Rate { pps: 3000.0 },
        Mode::RequestResponse,
        vm2_mac,
        800,
    ));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sr = srv.join().unwrap().unwrap();
    let sent = r.totals.sent_packets;
    assert!(sent > 100, "{:?}", r.totals);
    assert_eq!(
        r.totals.recv_packets, sent,
        "every request answered: {:?} server {:?}",
        r.totals, sr.totals
    );
    assert_eq!(r.totals.lost_requests, 0);
    assert_eq!(sr.totals.recv_packets, sent, "server saw every request");
    let lat = r.latency.expect("latency recorded");
    assert_eq!(lat.count, sent);
    let s = d.registry().snapshot();
    assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent);
    assert_eq!(total(&s, "vm2", |q| q.rx_packets), sent);
    assert_eq!(total(&s, "vm1", |q| q.rx_packets), sent);
    // Three threads spread over three queue pairs.
    let vm1 = s.ports.iter().find(|p| p.name == "vm1").unwrap();
    assert!(vm1.queues.iter().all(|q| q.tx_packets > 0), "{vm1:?}");
    assert!(
        total(&s, "vm1", |q| q.calls) > 0,
        "interrupt mode must call the guest"
    );
    d.shutdown();
}

#[test]
fn request_response_through_echo_port_under_every_policy() {
    for kind in [PolicyKind::Eekbp, PolicyKind::Netap, PolicyKind::Growshrink] {
        let tmp = tmpdir(&format!("echo-{kind}"));
        let dir = tmp.path();
        let d = daemon(dir, vec![vm(dir, "vm1", 1, 1)], kind);
        let r = run(guest_cfg(
            &dir.join("vm1.sock"),
            1,
            Load::ClosedLoop,
            Mode::RequestResponse,
            ECHO,
            500,
        ));
        assert!(r.totals.sent_packets > 10, "{kind}: {:?}", r.totals);
        assert_eq!(r.totals.recv_packets, r.totals.sent_packets, "{kind}");
        let s = d.registry().snapshot();
        assert_eq!(
            total(&s, "echo0", |q| q.rx_packets),
            r.totals.sent_packets,
            "{kind}"
        );
        d.shutdown();
    }
}

fn scrape(addr: std::net::SocketAddr) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{text}"))
}

#[test]
fn prometheus_endpoint_serves_the_names_and_values_move() {
    let tmp = tmpdir("prom");
    let dir = tmp.path();
    let d = daemon(dir, vec![vm(dir, "vm1", 1, 1)], PolicyKind::Netap);
    let addr = d.metrics_addr().unwrap();
    let before = scrape(addr);
    assert!(before.starts_with("HTTP/1.1 200"), "{before}");
    for name in [
        "vadapt_queue_packets_total{",
        "vadapt_queue_bytes_total{",
        "vadapt_queue_kicks_total{",
        "vadapt_queue_calls_total{",
        "vadapt_queue_dropped_total{",
        "vadapt_worker_cpu_seconds_total{",
        "vadapt_queue_poll_interval_seconds{",
    ] {
        assert!(before.contains(name), "{name} missing");
    }
    let pk = r#"vadapt_queue_packets_total{port="vm1",queue="0",dir="tx"}"#;
    assert_eq!(metric(&before, pk), 0.0);
    let r = run(guest_cfg(
        &dir.join("vm1.sock"),
        1,
        Load::Rate { pps: 20_000.0 },
        Mode::Stream,
        SINK,
        1_500,
    ));
    let after = settled(&d, |s| {
        total(s, "vm1", |q| q.tx_packets) == r.totals.sent_packets
    });
    let _ = after;
    let text = scrape(addr);
    assert_eq!(metric(&text, pk), r.totals.sent_packets as f64);
    assert!(metric(&text, r#"vadapt_worker_cpu_seconds_total{worker="vm1"}"#) > 0.0);
    assert!(
        metric(
            &text,
            r#"vadapt_queue_poll_interval_seconds{port="vm1",queue="0"}"#
        ) >= 100e-6
    );
    d.shutdown();
}

#[test]
fn reconnect_resets_the_port_and_other_ports_keep_forwarding() {
    let tmp = tmpdir("reconnect");
    let dir = tmp.path();
    let d = daemon(
        dir,
        vec![vm(dir, "vm1", 1, 1), vm(dir, "vm2", 1, 2)],
        PolicyKind::Eekbp,
    );
    // vm2 streams for the whole test while vm1 comes and goes.
    let other = Guest::connect(guest_cfg(
        &dir.join("vm2.sock"),
        1,
        Load::Rate { pps: 5_000.0 },
        Mode::Stream,
        SINK,
        3_000,
    ))
    .unwrap();
    let o = std::thread::spawn(move || other.run(Arc::new(AtomicBool::new(false))));
    let mut sent = 0;
    for _ in 0..3 {
        let r = run(guest_cfg(
            &dir.join("vm1.sock"),
            1,
            Load::ClosedLoop,
            Mode::RequestResponse,
            ECHO,
            300,
        ));
        assert!(r.totals.sent_packets > 0);
        assert_eq!(r.totals.recv_packets, r.totals.sent_packets);
        sent += r.totals.sent_packets;
    }
    let or = o.join().unwrap().unwrap();
    let s = settled(&d, |s| {
        total(s, "vm2", |q| q.tx_packets) == or.totals.sent_packets
    });
    assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent);
    assert_eq!(total(&s, "vm2", |q| q.tx_packets), or.totals.sent_packets);
    assert!(or.totals.sent_packets > 1000);
    d.shutdown();
}

#[test]
fn malformed_vhost_user_messages_close_only_that_connection() {
    let tmp = tmpdir("garbage");
    let dir = tmp.path();
    let d = daemon(dir, vec![vm(dir, "vm1", 1, 1)], PolicyKind::Interrupt);
    let sock = dir.join("vm1.sock");
    // Unknown request code and absurd size: the connection is dropped.
    for junk in [
        &[
            0xffu8, 0xff, 0xff, 0x7f, 0x01, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f,
        ][..],
        &[0u8; 3][..],
        &[5u8, 0, 0, 0, 1, 0, 0, 0, 200, 0, 0, 0][..], // SET_FEATURES with a 200-byte body that never comes
    ] {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(junk);
        drop(s);
        std::thread::sleep(Duration::from_millis(100));
    }
    // The daemon still serves a real frontend on the same socket.
    let r = run(guest_cfg(
        &sock,
        1,
        Load::ClosedLoop,
        Mode::RequestResponse,
        ECHO,
        300,
    ));
    assert!(r.totals.sent_packets > 0);
    assert_eq!(r.totals.recv_packets, r.totals.sent_packets);
    d.shutdown();
}

#[test]
fn set_policy_at_run_time_takes_effect() {
    let tmp = tmpdir("setpolicy");
    let dir = tmp.path();
    let d = daemon(dir, vec![vm(dir, "vm1", 1, 1)], PolicyKind::Interrupt);
    d.set_policy("vm1", PolicyConfig::default_for(PolicyKind::Netap))
        .unwrap();
    assert!(d
        .set_policy("vm9", PolicyConfig::BusyPoll)
        .unwrap_err()
        .to_string()
        .contains("vm9"));
    let r = run(guest_cfg(
        &dir.join("vm1.sock"),
        1,
        Load::Rate { pps: 10_000.0 },
        Mode::Stream,
        SINK,
        1_200,
    ));
    let s = settled(&d, |s| {
        total(s, "vm1", |q| q.tx_packets) == r.totals.sent_packets
    });
    let p = s.ports.iter().find(|p| p.name == "vm1").unwrap();
    assert_eq!(p.policy, "netap");
    assert!(p.poll_interval_us >= 100, "{p:?}");
    assert_eq!(total(&s, "sink0", |q| q.rx_packets), r.totals.sent_packets);
    // With the frontend gone, a switch to a policy without an interval
    // must not show the old one.
    d.set_policy("vm1", PolicyConfig::default_for(PolicyKind::Eekbp))
        .unwrap();
    let s = d.registry().snapshot();
    let p = s.ports.iter().find(|p| p.name == "vm1").unwrap();
    assert_eq!((p.policy.as_str(), p.poll_interval_us), ("eekbp", 0));
    assert!(s
        .to_table()
        .lines()
        .any(|l| l.starts_with("vm1") && l.contains("eekbp") && !l.contains(" us)")));
    d.shutdown();
}
