//! The guest's own RSS (`VIRTIO_NET_F_RSS`, issue #27 item 4) through the
//! real daemon: a synthetic guest with four queue pairs sets its key and
//! indirection table on the control queue, a second guest sends frames of
//! many flows to it, and each flow must arrive on exactly the queue the
//! virtio spec's computation gives (worked out here, apart from the
//! daemon's code, with `vadapt_wire`'s Toeplitz hash, itself checked
//! against the RSS specification's vectors). A refused command leaves the
//! config in force; a port with `rss = false` keeps the default steering.
//!
//! QEMU 7.2 does not give a vhost-user backend `VIRTIO_NET_F_RSS` nor its
//! control queue (see `dataplane/src/queue/ctrl_queue.rs`), so the
//! synthetic guest is the frontend here.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, VmPortConfig};
use vadapt_dataplane::Daemon;
use vadapt_guest::driver::queue::QueuePair;
use vadapt_guest::frontend::{Connection, CtrlOutcome, RssRequest};
use vadapt_guest::{GuestConfig, Mode};
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_wire::rss_config::{encode, HASH_ALL_BUT_EX, HASH_IPV4};
use vadapt_wire::toeplitz::{toeplitz, DEFAULT_KEY};
use vadapt_wire::Mac;

mod common;
use common::tmpdir;

const RX_MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x01];
const TX_MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x02];
const SRC_IP: [u8; 4] = [10, 0, 0, 2];
const DST_IP: [u8; 4] = [10, 0, 0, 1];
/// Flows sent: UDP from these source ports to port 80.
const FLOWS: std::ops::Range<u16> = 5000..5024;
/// Frames per flow.
const PER_FLOW: usize = 3;

fn daemon(dir: &Path, rss: bool) -> Daemon {
    let vm = |name: &str, queues, mac, rss| VmPortConfig {
        queues,
        mac: Some(Mac(mac)),
        rss,
        ..VmPortConfig::new(name, dir.join(format!("{name}.sock")))
    };
    Daemon::start(DaemonConfig {
        vm: vec![vm("rx", 4, RX_MAC, rss), vm("tx", 1, TX_MAC, true)],
        policy: PolicyConfig::default_for(PolicyKind::Interrupt),
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    })
    .expect("daemon starts")
}

/// The RSS spec's key and table, run through the spec's rule by hand:
/// addresses and ports in network order, Toeplitz, `hash & mask` into the
/// table.
fn expected_queue(key: &[u8], table: &[u16], sport: u16) -> u16 {
    let mut input = Vec::new();
    input.extend_from_slice(&SRC_IP);
    input.extend_from_slice(&DST_IP);
    input.extend_from_slice(&sport.to_be_bytes());
    input.extend_from_slice(&80u16.to_be_bytes());
    let h = toeplitz(key, &input);
    table[h as usize & (table.len() - 1)]
}

/// virtio-net header (no offload) and the headers of a UDP/IPv4 frame of
/// flow `sport` carrying `payload` bytes.
fn udp_headers(sport: u16, payload: u16) -> Vec<u8> {
    let mut h = vec![0u8; 12];
    h.extend_from_slice(&RX_MAC);
    h.extend_from_slice(&TX_MAC);
    h.extend_from_slice(&[0x08, 0x00]);
    let total = 20 + 8 + payload;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&SRC_IP);
    ip[16..20].copy_from_slice(&DST_IP);
    let sum = vadapt_wire::checksum::checksum(&ip, 0);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    h.extend_from_slice(&ip);
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h.extend_from_slice(&(8 + payload).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h
}

/// The two guests' ends.
struct Guests {
    rx: Connection,
    rx_pairs: Vec<QueuePair>,
    tx: Connection,
    tx_pairs: Vec<QueuePair>,
}

fn connect(dir: &Path, rss: Option<RssRequest>) -> Guests {
    let mut rc = GuestConfig::new(dir.join("rx.sock"));
    rc.queues = Some(4);
    rc.threads = 4;
    rc.rss = rss;
    let (rx, rx_pairs) = Connection::connect(&rc).expect("receiver connects");
    // TCP-stream mode only for its transmit queue, which takes any headers.
    let mut tc = GuestConfig::new(dir.join("tx.sock"));
    tc.mode = Mode::TcpStream;
    let (tx, tx_pairs) = Connection::connect(&tc).expect("sender connects");
    assert_eq!(rx_pairs.len(), 4);
    Guests {
        rx,
        rx_pairs,
        tx,
        tx_pairs,
    }
}

impl Guests {
    /// Sends `PER_FLOW` frames of every flow, then a non-IP frame, and
    /// returns, per flow source port (0 for the non-IP frame), the RX
    /// queues its frames arrived on.
    fn send_and_collect(&mut self) -> BTreeMap<u16, Vec<u16>> {
        let want = FLOWS.len() * PER_FLOW + 1;
        let tx = &mut self.tx_pairs[0].tx;
        for _ in 0..PER_FLOW {
            for sport in FLOWS {
                assert!(tx.add_segment(&udp_headers(sport, 32), 32).unwrap());
            }
        }
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&RX_MAC);
        arp.extend_from_slice(&TX_MAC);
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        assert!(tx.add_segment(&arp, 1).unwrap());
        if tx.publish() {
            self.tx_pairs[0].tx.notify.kick();
        }
        let mut seen: BTreeMap<u16, Vec<u16>> = BTreeMap::new();
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while got < want && Instant::now() < deadline {
            for (q, pair) in self.rx_pairs.iter_mut().enumerate() {
                pair.rx.poll(256, |p| {
                    let f = &p.head[..p.head_len];
                    let sport = if f[12..14] == [0x08, 0x00] {
                        u16::from_be_bytes([f[34], f[35]])
                    } else {
                        0
                    };
                    seen.entry(sport).or_default().push(q as u16);
                    got += 1;
                });
                if pair.rx.refill().unwrap() {
                    pair.rx.notify.kick();
                }
            }
            let tx = &mut self.tx_pairs[0].tx;
            tx.reap();
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(got, want, "every frame arrived: {seen:?}");
        seen
    }

    fn stop(self) {
        let _ = self.rx.stop_rings();
        let _ = self.tx.stop_rings();
    }
}

/// Every flow's frames on the queue `expect` gives it; the non-IP frame on
/// `unclassified`.
fn assert_steered(seen: &BTreeMap<u16, Vec<u16>>, unclassified: u16, expect: impl Fn(u16) -> u16) {
    let mut queues_used = std::collections::BTreeSet::new();
    for sport in FLOWS {
        let want = expect(sport);
        assert_eq!(
            seen.get(&sport),
            Some(&vec![want; PER_FLOW]),
            "flow {sport}: all {PER_FLOW} frames on queue {want}"
        );
        queues_used.insert(want);
    }
    assert!(queues_used.len() > 2, "flows spread: {queues_used:?}");
    assert_eq!(seen.get(&0), Some(&vec![unclassified]), "non-IP frame");
}

#[test]
fn the_guests_key_and_table_steer_each_flow_and_a_refused_config_changes_nothing() {
    // The hash itself, against the RSS specification's first IPv4 row.
    let spec_input = [66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6];
    assert_eq!(toeplitz(&DEFAULT_KEY, &spec_input), 0x51cc_c178);
    assert_eq!(toeplitz(&DEFAULT_KEY, &spec_input[..8]), 0x323e_8fc2);

    let tmp = tmpdir("rss");
    let dir = tmp.path();
    let d = daemon(dir, true);
    // A table vadapt's default (entry i -> i % 4) would never be.
    let table: Vec<u16> = vec![3, 1, 2, 0, 2, 3, 0, 1];
    let first = RssRequest {
        key: DEFAULT_KEY.to_vec(),
        table: table.clone(),
        hash_types: HASH_ALL_BUT_EX,
        unclassified_queue: 2,
    };
    let mut g = connect(dir, Some(first));
    assert_eq!(g.rx.ctrl_mq, CtrlOutcome::Acked, "VQ_PAIRS_SET");
    assert_eq!(g.rx.ctrl_rss, CtrlOutcome::Acked, "RSS_CONFIG");
    let seen = g.send_and_collect();
    assert_steered(&seen, 2, |sport| {
        expected_queue(&DEFAULT_KEY, &table, sport)
    });

    // A new key (the spec's, reversed) and table: the flows move with them.
    let key2: Vec<u8> = DEFAULT_KEY.iter().rev().copied().collect();
    let table2: Vec<u16> = (0..128).map(|i| ((i * 7 + 1) % 4) as u16).collect();
    let second = RssRequest {
        key: key2.clone(),
        table: table2.clone(),
        hash_types: HASH_ALL_BUT_EX,
        unclassified_queue: 1,
    };
    assert_eq!(g.rx.set_rss(&second).unwrap(), CtrlOutcome::Acked);
    let seen = g.send_and_collect();
    assert_steered(&seen, 1, |sport| expected_queue(&key2, &table2, sport));
    assert!(
        FLOWS
            .clone()
            .any(|s| expected_queue(&key2, &table2, s) != expected_queue(&DEFAULT_KEY, &table, s)),
        "the second config moves some flow"
    );

    // Refused: a table of 3 entries, a queue beyond the 4 pairs, a key
    // over 40 bytes, an _EX hash type, a truncated config, an unknown
    // command. Each is VIRTIO_NET_ERR and the second config stays.
    let refused = [
        encode(HASH_IPV4, &[0, 1, 2], 0, 4, &key2),
        encode(HASH_IPV4, &[0, 4], 0, 4, &key2),
        encode(HASH_IPV4, &[0, 1], 0, 4, &[1; 41]),
        encode(1 << 7, &[0, 1], 0, 4, &key2),
        encode(HASH_IPV4, &[0, 1], 0, 4, &key2)[..9].to_vec(),
    ];
    for data in &refused {
        assert_eq!(
            g.rx.ctrl_command(4, 1, data).unwrap(),
            CtrlOutcome::Refused(1)
        );
    }
    assert_eq!(
        g.rx.ctrl_command(9, 9, &[]).unwrap(),
        CtrlOutcome::Refused(1)
    );
    assert_eq!(
        g.rx.ctrl_command(4, 0, &9u16.to_le_bytes()).unwrap(),
        CtrlOutcome::Refused(1),
        "VQ_PAIRS_SET beyond the pairs"
    );
    let seen = g.send_and_collect();
    assert_steered(&seen, 1, |sport| expected_queue(&key2, &table2, sport));

    let s = d.registry().snapshot();
    let rx = s.ports.iter().find(|p| p.name == "rx").unwrap();
    assert_eq!(rx.ctrl_accepted, 3, "VQ_PAIRS_SET and two RSS configs");
    assert_eq!(rx.ctrl_refused, refused.len() as u64 + 2);
    g.stop();
    d.shutdown();
}

#[test]
fn a_port_with_rss_off_keeps_the_default_steering() {
    let tmp = tmpdir("rss-off");
    let dir = tmp.path();
    let d = daemon(dir, false);
    let mut g = connect(
        dir,
        Some(RssRequest {
            key: DEFAULT_KEY.to_vec(),
            table: vec![3, 3],
            hash_types: HASH_ALL_BUT_EX,
            unclassified_queue: 0,
        }),
    );
    assert_eq!(g.rx.ctrl_rss, CtrlOutcome::NotNeeded, "RSS not offered");
    assert_eq!(g.rx.ctrl_mq, CtrlOutcome::Acked);
    assert_eq!(
        g.rx.ctrl_command(4, 1, &encode(HASH_IPV4, &[3, 3], 0, 4, &DEFAULT_KEY))
            .unwrap(),
        CtrlOutcome::Refused(1),
        "RSS_CONFIG without VIRTIO_NET_F_RSS"
    );
    let seen = g.send_and_collect();
    // vadapt's default: the same Toeplitz hash, table entry h % 128 -> (h % 128) % 4;
    // a frame with no flow on the sender's queue (0).
    assert_steered(&seen, 0, |sport| {
        let table: Vec<u16> = (0..128).map(|i| (i % 4) as u16).collect();
        expected_queue(&DEFAULT_KEY, &table, sport)
    });
    g.stop();
    d.shutdown();
}
