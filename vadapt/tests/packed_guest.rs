//! The synthetic guest over packed virtqueues (`VIRTIO_F_RING_PACKED`)
//! against the daemon: under every policy frames go both ways, guest to
//! guest on two queue pairs, and into a sink, with every one counted on
//! both sides; a ring of a size that is no power of two; busy polling
//! suppressing transmit kicks on either ring kind; a port with
//! `packed = false` gives an `auto` guest split rings and an `on` guest a
//! clear refusal.
//!
//! No timing assertions: counts and negotiated features only.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, GuestReport, Load, Mode, PackedRing, RingKind};
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_wire::Mac;

mod common;
use common::{settled, tmpdir, total};

const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x01]);
/// `VIRTIO_F_RING_PACKED`.
const RING_PACKED: u64 = 1 << 34;

fn vm_mac(n: u8) -> Mac {
    Mac([0x52, 0x54, 0, 0, 0, n])
}

fn vm(dir: &Path, name: &str, queues: u16, mac: u8, packed: bool) -> VmPortConfig {
    VmPortConfig {
        queues,
        mac: Some(vm_mac(mac)),
        packed,
        ..VmPortConfig::new(name, dir.join(format!("{name}.sock")))
    }
}

fn daemon(dir: &Path, vms: Vec<VmPortConfig>, policy: PolicyKind) -> Daemon {
    let cfg = DaemonConfig {
        vm: vms,
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
        policy: PolicyConfig::default_for(policy),
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    };
    Daemon::start(cfg).expect("daemon starts")
}

fn guest_cfg(socket: &Path, threads: u32, load: Load, mode: Mode, dst: Mac) -> GuestConfig {
    let mut g = GuestConfig::new(socket);
    g.threads = threads;
    g.load = load;
    g.mode = mode;
    g.dst_mac = dst.0;
    g.duration = Duration::from_millis(500);
    g.exit_cost_ns = 0;
    g.packed = PackedRing::On;
    g
}

fn run(cfg: GuestConfig) -> GuestReport {
    let g = Guest::connect(cfg).expect("guest connects");
    let r = g.run(Arc::new(AtomicBool::new(false))).expect("guest runs");
    assert!(r.error.is_none(), "guest error: {:?}", r.error);
    r
}

#[test]
fn every_policy_moves_frames_both_ways_on_packed_rings_with_nothing_lost() {
    for kind in [
        PolicyKind::Interrupt,
        PolicyKind::BusyPoll,
        PolicyKind::Eekbp,
        PolicyKind::Netap,
    ] {
        let tmp = tmpdir(&format!("packed-{kind}"));
        let dir = tmp.path();
        let d = daemon(
            dir,
            vec![vm(dir, "vm1", 2, 1, true), vm(dir, "vm2", 2, 2, true)],
            kind,
        );
        // Guest to guest on two queue pairs each: requests one way,
        // replies the other.
        let server = Guest::connect(GuestConfig {
            duration: Duration::from_secs(5),
            ..guest_cfg(&dir.join("vm2.sock"), 2, Load::ClosedLoop, Mode::Echo, SINK)
        })
        .expect("server connects");
        assert_eq!(server.features() & RING_PACKED, RING_PACKED, "{kind}");
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        let srv = std::thread::spawn(move || server.run(st));
        let r = run(guest_cfg(
            &dir.join("vm1.sock"),
            2,
            Load::Rate { pps: 4000.0 },
            Mode::RequestResponse,
            vm_mac(2),
        ));
        stop.store(true, Ordering::Relaxed);
        let sr = srv.join().unwrap().unwrap();
        assert_eq!(r.ring, RingKind::Packed, "{kind}");
        assert_eq!(sr.ring, RingKind::Packed, "{kind}");
        assert_eq!(r.queue_pairs, 2, "{kind}");
        let sent = r.totals.sent_packets;
        // Some each way is the point, not a rate: the machine is shared.
        assert!(sent > 20, "{kind}: {:?}", r.totals);
        assert_eq!(r.totals.lost_requests, 0, "{kind}: {:?}", r.totals);
        assert_eq!(
            r.totals.recv_packets, sent,
            "{kind}: every request answered"
        );
        assert_eq!(sr.totals.recv_packets, sent, "{kind}: server saw every one");
        assert_eq!(
            sr.totals.sent_packets, sent,
            "{kind}: server answered every one"
        );
        let s = d.registry().snapshot();
        assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent, "{kind}");
        assert_eq!(total(&s, "vm2", |q| q.rx_packets), sent, "{kind}");
        assert_eq!(total(&s, "vm2", |q| q.tx_packets), sent, "{kind}");
        assert_eq!(total(&s, "vm1", |q| q.rx_packets), sent, "{kind}");
        for port in ["vm1", "vm2"] {
            let drops = total(&s, port, |q| q.dropped.values().sum());
            assert_eq!(drops, 0, "{kind} {port}");
        }
        let vm1 = s.ports.iter().find(|p| p.name == "vm1").unwrap();
        assert!(
            vm1.queues.iter().all(|q| q.tx_packets > 0),
            "{kind}: both pairs used: {vm1:?}"
        );

        // A closed-loop stream into the sink: every frame arrives.
        let r = run(guest_cfg(
            &dir.join("vm1.sock"),
            2,
            Load::ClosedLoop,
            Mode::Stream,
            SINK,
        ));
        assert_eq!(r.ring, RingKind::Packed, "{kind}");
        let streamed = r.totals.sent_packets;
        assert!(streamed > 1000, "{kind}: {:?}", r.totals);
        let s = settled(&d, |s| total(s, "sink0", |q| q.rx_packets) == streamed);
        assert_eq!(total(&s, "sink0", |q| q.rx_packets), streamed, "{kind}");
        assert_eq!(
            total(&s, "sink0", |q| q.rx_bytes),
            r.totals.sent_bytes,
            "{kind}"
        );
        d.shutdown();
    }
}

#[test]
fn a_port_without_packed_gives_auto_split_rings_and_on_a_clear_refusal() {
    let tmp = tmpdir("packed-off");
    let dir = tmp.path();
    let d = daemon(
        dir,
        vec![vm(dir, "split", 1, 1, false), vm(dir, "packed", 1, 2, true)],
        PolicyKind::Interrupt,
    );
    let auto = |name: &str| GuestConfig {
        packed: PackedRing::Auto,
        ..guest_cfg(
            &dir.join(format!("{name}.sock")),
            1,
            Load::Rate { pps: 5000.0 },
            Mode::Stream,
            SINK,
        )
    };

    // `auto` falls back to split rings on the port that does not offer
    // packed ones, and traffic flows.
    let r = run(auto("split"));
    assert_eq!(r.ring, RingKind::Split);
    assert_eq!(r.features & RING_PACKED, 0);
    assert!(r.totals.sent_packets > 100, "{:?}", r.totals);
    let sent = r.totals.sent_packets;
    let s = settled(&d, |s| total(s, "sink0", |q| q.rx_packets) == sent);
    assert_eq!(total(&s, "split", |q| q.tx_packets), sent);
    assert_eq!(total(&s, "sink0", |q| q.rx_packets), sent);

    // `on` refuses it, naming the feature.
    let e = Guest::connect(guest_cfg(
        &dir.join("split.sock"),
        1,
        Load::ClosedLoop,
        Mode::Stream,
        SINK,
    ))
    .expect_err("--packed on against a split-only port");
    let msg = vadapt_guest::guest::error_chain(&e);
    assert!(msg.contains("VIRTIO_F_RING_PACKED"), "{msg}");

    // `off` keeps split rings where packed ones are offered; `auto` takes them.
    let r = run(GuestConfig {
        packed: PackedRing::Off,
        ..auto("packed")
    });
    assert_eq!(r.ring, RingKind::Split);
    let r2 = run(auto("packed"));
    assert_eq!(r2.ring, RingKind::Packed);
    let both = r.totals.sent_packets + r2.totals.sent_packets;
    let s = settled(&d, |s| total(s, "packed", |q| q.tx_packets) == both);
    assert_eq!(total(&s, "packed", |q| q.tx_packets), both);
    d.shutdown();
}

#[test]
fn a_packed_ring_of_a_size_no_power_of_two_carries_frames_both_ways() {
    let tmp = tmpdir("packed-100");
    let dir = tmp.path();
    let d = daemon(
        dir,
        vec![vm(dir, "vm1", 1, 1, true), vm(dir, "vm2", 1, 2, true)],
        PolicyKind::Eekbp,
    );
    let odd = |cfg: GuestConfig| GuestConfig {
        ring_size: 100,
        ..cfg
    };
    let server = Guest::connect(odd(GuestConfig {
        duration: Duration::from_secs(5),
        ..guest_cfg(&dir.join("vm2.sock"), 1, Load::ClosedLoop, Mode::Echo, SINK)
    }))
    .expect("server connects");
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let srv = std::thread::spawn(move || server.run(st));
    // Closed loop: requests go round both rings many laps.
    let r = run(odd(GuestConfig {
        duration: Duration::from_secs(1),
        ..guest_cfg(
            &dir.join("vm1.sock"),
            1,
            Load::ClosedLoop,
            Mode::RequestResponse,
            vm_mac(2),
        )
    }));
    stop.store(true, Ordering::Relaxed);
    let sr = srv.join().unwrap().unwrap();
    assert_eq!(r.ring, RingKind::Packed);
    let sent = r.totals.sent_packets;
    assert!(
        sent > 300,
        "three laps of a 100-entry ring at least: {:?}",
        r.totals
    );
    assert_eq!(r.totals.lost_requests, 0);
    assert_eq!(r.totals.recv_packets, sent);
    assert_eq!(sr.totals.recv_packets, sent);
    let s = d.registry().snapshot();
    assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent);
    assert_eq!(total(&s, "vm1", |q| q.rx_packets), sent);
    d.shutdown();
}

#[test]
fn busy_poll_leaves_the_guest_no_transmit_kick_on_either_ring_kind() {
    // The daemon's tests elsewhere run whatever `auto` gives (packed): this
    // keeps both kinds' kick suppression in view, the split ring's
    // `NO_NOTIFY` / `avail_event` and the packed ring's device event `DISABLE`.
    for (packed, ring) in [
        (PackedRing::Off, RingKind::Split),
        (PackedRing::On, RingKind::Packed),
    ] {
        let tmp = tmpdir(&format!("kicks-{}", ring.name()));
        let dir = tmp.path();
        let d = daemon(dir, vec![vm(dir, "vm1", 1, 1, true)], PolicyKind::BusyPoll);
        let r = run(GuestConfig {
            packed,
            ..guest_cfg(
                &dir.join("vm1.sock"),
                1,
                Load::ClosedLoop,
                Mode::Stream,
                SINK,
            )
        });
        assert_eq!(r.ring, ring);
        let sent = r.totals.sent_packets;
        assert!(sent > 1000, "{ring:?}: {:?}", r.totals);
        let s = settled(&d, |s| total(s, "sink0", |q| q.rx_packets) == sent);
        assert_eq!(total(&s, "vm1", |q| q.tx_packets), sent, "{ring:?}");
        assert_eq!(total(&s, "sink0", |q| q.rx_packets), sent, "{ring:?}");
        assert_eq!(r.totals.tx_kicks, 0, "{ring:?}: {:?}", r.totals);
        d.shutdown();
    }
}
