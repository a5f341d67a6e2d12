//! The synthetic guest's TCP-stream mode against the daemon, in one process: the guest posts
//! TSO segments of up to 64 KiB with partial checksums, the daemon's transmit path checks them
//! and hands them to the switch whole, and a port attached to the switch that takes no offload
//! cuts them into MSS frames as every such egress does (`offload::Cutter`) and checks every
//! frame with `etherparse`'s own parser and checksum code (not the guest's nor the daemon's,
//! through `vadapt_wire::test_frames::verify_segment`): IPv4 and TCP checksums verify, no frame carries more than one MSS, each flow's sequence
//! numbers follow on, and the payload bytes add up to what the guest reports.
//!
//! No timing assertions: counts and contents only.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etherparse::NetSlice;
use vadapt_dataplane::config::{DaemonConfig, VmPortConfig};
use vadapt_dataplane::frames::FrameBatch;
use vadapt_dataplane::metrics::PortStats;
use vadapt_dataplane::net::MAX_FRAME;
use vadapt_dataplane::offload::Cutter;
use vadapt_dataplane::switch::Egress;
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, Load, Mode};
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_wire::tcp_build::{ip_for_mac, MSS};
use vadapt_wire::test_frames::verify_segment;
use vadapt_wire::{Mac, Offload};

mod common;
use common::total;

const RECEIVER: Mac = Mac([0x02, 0, 0, 0, 0x7c, 0x01]);
const GUEST: Mac = Mac([0x52, 0x54, 0, 0, 0, 1]);

/// What the checking port saw.
#[derive(Debug, Default)]
struct Seen {
    /// Frames the switch delivered (a GSO frame counts once).
    delivered: u64,
    /// GSO frames cut, and frames whose partial checksum was completed.
    cut: u64,
    completed: u64,
    /// Frames checked, after cutting.
    frames: u64,
    payload_bytes: u64,
    /// Frames that failed a check, with the reason.
    bad: Vec<String>,
    /// Per source port: the sequence number expected next.
    next_seq: HashMap<u16, u32>,
}

/// A port that checks every frame delivered to it.
#[derive(Debug, Default)]
struct Checker {
    seen: Mutex<Seen>,
}

impl Checker {
    fn check(&self, frame: &[u8]) -> Result<(u16, u32, usize), String> {
        let (p, tcp) = verify_segment(frame, MSS as usize)?;
        let Some(NetSlice::Ipv4(ip)) = &p.net else {
            return Err("not IPv4".into());
        };
        let h = ip.header();
        if h.source() != ip_for_mac(GUEST.0) || h.destination() != ip_for_mac(RECEIVER.0) {
            return Err("addresses".into());
        }
        let len = tcp.payload().len();
        if frame.len() > 1514 {
            return Err(format!(
                "{len}-byte payload in a {}-byte frame",
                frame.len()
            ));
        }
        if !tcp.ack() || tcp.options().len() != 12 {
            return Err("ACK and the timestamps option".into());
        }
        Ok((tcp.source_port(), tcp.sequence_number(), len))
    }
}

impl Egress for Checker {
    fn deliver(&self, frames: &FrameBatch, which: &[u16], _flow: u16) {
        let mut seen = self.seen.lock().unwrap();
        let mut buf = vec![0u8; MAX_FRAME];
        for &i in which {
            let i = usize::from(i);
            seen.delivered += 1;
            let whole = frames.get(i);
            let cutter = match frames.offloaded(i) {
                None => Cutter::Whole(whole, Offload::None),
                Some(k) => match Cutter::new(whole, k.offload) {
                    Ok(c) => c,
                    Err(e) => {
                        seen.bad.push(format!("cannot cut: {e}"));
                        continue;
                    }
                },
            };
            match frames.offloaded(i).map(|k| k.offload) {
                Some(Offload::Tcp(..)) => seen.cut += 1,
                Some(Offload::Checksum(_)) => seen.completed += 1,
                _ => {}
            }
            for s in 0..cutter.count() {
                let n = cutter.write(s, &mut buf);
                let frame = &buf[..n];
                seen.frames += 1;
                match self.check(frame) {
                    Ok((port, seq, len)) => {
                        if let Some(&want) = seen.next_seq.get(&port) {
                            if want != seq {
                                seen.bad
                                    .push(format!("port {port}: seq {seq}, want {want}"));
                            }
                        }
                        seen.next_seq.insert(port, seq.wrapping_add(len as u32));
                        seen.payload_bytes += len as u64;
                    }
                    Err(e) => seen.bad.push(e),
                }
            }
        }
    }
}

/// What one guest run against a fresh daemon left.
struct Outcome {
    guest: vadapt_guest::Counts,
    /// Per sender thread.
    threads: Vec<vadapt_guest::Counts>,
    seen: Seen,
}

/// Runs a two-thread TCP-stream guest with `load` and rings of `ring` against a daemon whose
/// switch delivers the guest's frames to a [`Checker`]; waits until the checker has seen the
/// payload the guest reports (bounded).
fn run(load: Load, ring: u16) -> Outcome {
    let dir = tempfile::Builder::new()
        .prefix("vadapt-it-tcp-")
        .tempdir()
        .unwrap();
    let socket = dir.path().join("vm1.sock");
    let d = Daemon::start(DaemonConfig {
        vm: vec![VmPortConfig {
            queues: 2,
            mac: Some(GUEST),
            ..VmPortConfig::new("vm1", &socket)
        }],
        policy: PolicyConfig::default_for(PolicyKind::Interrupt),
        control: dir.path().join("control.sock"),
        ..DaemonConfig::default()
    })
    .expect("daemon starts");
    let checker = Arc::new(Checker::default());
    let sw = d.switch();
    let id = sw.add_port(
        Arc::clone(&checker) as Arc<dyn Egress>,
        Arc::new(PortStats::new(
            "checker",
            vadapt_dataplane::metrics::PortKind::Sink,
            1,
        )),
    );
    sw.add_static(RECEIVER, id);

    let mut cfg = GuestConfig::new(&socket);
    cfg.mode = Mode::TcpStream;
    cfg.threads = 2;
    cfg.load = load;
    cfg.ring_size = ring;
    cfg.dst_mac = RECEIVER.0;
    cfg.duration = Duration::from_millis(300);
    cfg.exit_cost_ns = 0;
    // Free writes: a closed-loop writer is always a full segment ahead, so every segment is
    // the size goal (the write cost's own behaviour is the guest crate's to test).
    cfg.write_cost_ns = 0;
    cfg.write_cost_ns_per_kib = 0;
    let g = Guest::connect(cfg).expect("guest connects");
    let r = g.run(Arc::new(AtomicBool::new(false))).expect("guest runs");
    assert!(r.error.is_none(), "guest error: {:?}", r.error);
    let guest = r.totals;
    let threads = r.threads.iter().map(|t| t.counts).collect();
    assert!(guest.sent_packets > 0, "{guest:?}");
    // The worker may still be handing over the last segments the guest saw consumed.
    for _ in 0..500 {
        if checker.seen.lock().unwrap().payload_bytes >= guest.sent_payload_bytes {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = d.registry().snapshot();
    d.shutdown();
    let seen = std::mem::take(&mut *checker.seen.lock().unwrap());
    assert!(
        seen.bad.is_empty(),
        "{} bad frames: {:?}",
        seen.bad.len(),
        &seen.bad[..seen.bad.len().min(5)]
    );
    assert_eq!(
        seen.payload_bytes, guest.sent_payload_bytes,
        "payload bytes add up"
    );
    assert_eq!(seen.next_seq.len(), 2, "one flow per sender thread");
    // The sender's port counts a GSO frame as the MSS frames it stands for.
    assert_eq!(total(&stats, "vm1", |q| q.tx_packets), seen.frames);
    let drops: u64 = stats
        .ports
        .iter()
        .flat_map(|p| &p.queues)
        .map(|q| q.dropped.values().sum::<u64>())
        .sum();
    assert_eq!(drops, 0, "no drops, bad_vnet_hdr or other: {stats:?}");
    Outcome {
        guest,
        threads,
        seen,
    }
}

#[test]
fn closed_loop_tso_segments_arrive_as_mss_frames_that_verify_and_add_up() {
    // A small ring: what is in flight when the run ends must be cut by an unoptimised
    // daemon within the guest's drain time.
    let o = run(Load::ClosedLoop, 32);
    // Closed loop: every segment is a full TSO segment, which crosses the switch whole and
    // is cut into 45 MSS frames at the egress.
    assert_eq!(o.seen.frames, o.guest.sent_packets * 45);
    assert_eq!(o.seen.delivered, o.guest.sent_packets);
    assert_eq!(o.seen.cut, o.guest.sent_packets);
    // Each thread's stream: a message counts once its last byte is out.
    for t in &o.threads {
        assert_eq!(t.sent_messages, t.sent_payload_bytes / 64, "{t:?}");
    }
}

#[test]
fn fixed_rate_segments_of_any_size_on_1024_rings_verify_and_add_up() {
    // 100 k messages/s of 64 bytes over two threads: each pass finds a few messages queued,
    // so segments of one MSS or less (no GSO, partial checksum only) and larger ones mix.
    let o = run(Load::Rate { pps: 100_000.0 }, 1024);
    let g = o.guest;
    assert_eq!(g.sent_payload_bytes, g.sent_messages * 64, "whole messages");
    assert_eq!(
        o.seen.cut + o.seen.completed,
        g.sent_packets,
        "every segment cut or checksummed at the egress"
    );
    assert!(o.seen.frames >= g.sent_packets);
}
