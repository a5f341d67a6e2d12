//! The switch between tenants (issue 37): port security, owned addresses
//! that no other port takes, a live migration's hand-over, and a table
//! bounded overall, per port and in each worker's copy, whatever sources a
//! guest sends from.

use super::learning_switch::REFRESHED_MAX;
use super::test_utils::{Counter, Recorder};
use super::*;
use crate::clock::coarse_now;
use crate::frames::FrameBatch;
use crate::metrics::{NotLearned, PortStats};
use std::sync::Arc;
use std::time::Duration;
use vadapt_wire::ethernet::ETHERTYPE_EXPERIMENTAL;
use vadapt_wire::test_frames::ethernet_frame;
use vadapt_wire::Mac;

const VM1: Mac = Mac([2, 0, 0, 0, 0, 0xa1]);
const VM2: Mac = Mac([2, 0, 0, 0, 0, 0xa2]);
const VM3: Mac = Mac([2, 0, 0, 0, 0, 0xa3]);

fn port(sw: &Switch, name: &str, rules: PortRules) -> (PortId, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    let id = sw.add_port_with(
        rec.clone(),
        Arc::new(PortStats::new(name, crate::metrics::PortKind::Vm, 1)),
        rules,
    );
    (id, rec)
}

fn owning(macs: &[Mac]) -> PortRules {
    PortRules {
        owned: macs.to_vec(),
        max_learned: Some(1024),
        ..PortRules::default()
    }
}

fn batch(dst: Mac, src: Mac, n: usize) -> FrameBatch {
    let mut b = FrameBatch::new(n);
    for i in 0..n {
        b.push(&ethernet_frame(
            dst,
            src,
            ETHERTYPE_EXPERIMENTAL,
            &[i as u8],
        ));
    }
    b
}

fn got(r: &Recorder) -> usize {
    r.0.lock().unwrap().len()
}

fn not_learned(f: &Forwarded, why: NotLearned) -> u64 {
    f.not_learned[why.index()]
}

#[test]
fn a_spoofed_source_is_dropped_counted_and_steals_nothing() {
    // The attack: vm3 sends with vm1's MAC while vm2 sends to it.
    let sw = Switch::new(Duration::from_secs(300));
    let (vm1, r1) = port(&sw, "vm1", owning(&[VM1]));
    let (vm2, r2) = port(&sw, "vm2", owning(&[VM2]));
    let (vm3, r3) = port(&sw, "vm3", owning(&[VM3]));
    let (mut c2, mut c3) = (FdbCache::default(), FdbCache::default());
    for _ in 0..10 {
        let f = sw.forward(vm3, 0, &batch(Mac::BROADCAST, VM1, 8), &mut c3);
        assert_eq!((f.spoofed, f.spoofed_src), (8, Some(VM1)));
        assert!(sw.forward(vm2, 0, &batch(VM1, VM2, 5), &mut c2).is_quiet());
    }
    assert_eq!(sw.lookup(VM1), Some(vm1), "vm1's address stays vm1's");
    assert_eq!(got(&r1), 50, "vm1 gets all of vm2's frames");
    assert_eq!((got(&r2), got(&r3)), (0, 0), "and nobody else anything");
    // The attacker's own address passes.
    let f = sw.forward(vm3, 0, &batch(VM2, VM3, 2), &mut c3);
    assert!(f.is_quiet(), "{f:?}");
    assert_eq!(got(&r2), 2);
    // A spoofed frame in the middle of a stream is dropped alone.
    let mut mixed = FrameBatch::new(3);
    mixed.push(&ethernet_frame(VM2, VM3, ETHERTYPE_EXPERIMENTAL, &[0]));
    mixed.push(&ethernet_frame(VM2, VM1, ETHERTYPE_EXPERIMENTAL, &[1]));
    mixed.push(&ethernet_frame(VM2, VM3, ETHERTYPE_EXPERIMENTAL, &[2]));
    assert_eq!(sw.forward(vm3, 0, &mixed, &mut c3).spoofed, 1);
    assert_eq!(got(&r2), 4);
    assert!(sw.counts_are_exact());
}

#[test]
fn an_owned_address_is_never_taken_by_a_port_that_sends_from_it() {
    let sw = Switch::new(Duration::from_secs(300));
    let (vm1, r1) = port(&sw, "vm1", owning(&[VM1]));
    // A port without security (`port_security=off`, or no `mac=`).
    let (open, r_open) = port(&sw, "open", PortRules::open());
    let (other, r_other) = port(&sw, "other", owning(&[VM2]));
    assert_eq!(sw.lookup(VM1), Some(vm1), "static from the port's creation");
    let mut c = FdbCache::default();
    let mut refused = Forwarded::default();
    for _ in 0..5 {
        refused.merge(sw.forward(open, 0, &batch(Mac::BROADCAST, VM1, 4), &mut c));
    }
    assert_eq!(refused.spoofed, 0, "a port without security may send");
    assert_eq!(
        not_learned(&refused, NotLearned::OwnedElsewhere),
        1,
        "refused once (then not asked again for a second), not per frame"
    );
    assert_eq!(sw.lookup(VM1), Some(vm1), "not by learning");
    sw.learn_if_unknown(VM1, open);
    assert_eq!(sw.lookup(VM1), Some(vm1), "not by learn_if_unknown");
    // Frames to vm1 from anywhere reach vm1 alone, even before it spoke.
    let f = sw.forward(other, 0, &batch(VM1, VM2, 3), &mut FdbCache::default());
    assert!(f.is_quiet());
    assert_eq!((got(&r1), got(&r_open), got(&r_other)), (23, 0, 20));
    assert!(sw.counts_are_exact());
}

#[test]
fn a_migrating_vms_destination_takes_its_address_when_its_guest_speaks() {
    let sw = Switch::new(Duration::from_secs(300));
    let (src, r_src) = port(&sw, "vma", owning(&[VM1]));
    let (peer, _) = port(&sw, "vmb", owning(&[VM2]));
    // The destination port, configured with the VM's MAC while it still
    // runs behind the source port.
    let (dst, r_dst) = port(&sw, "vma2", owning(&[VM1]));
    let mut c_peer = FdbCache::default();
    assert_eq!(sw.lookup(VM1), Some(src), "the source keeps it");
    sw.learn_if_unknown(VM1, dst); // the destination's frontend connects
    assert_eq!(sw.lookup(VM1), Some(src));
    let _ = sw.forward(peer, 0, &batch(VM1, VM2, 3), &mut c_peer);
    assert_eq!((got(&r_src), got(&r_dst)), (3, 0));
    // A third port, owning something else, cannot take it.
    let (third, _) = port(&sw, "vm3", owning(&[VM3]));
    let f = sw.forward(third, 0, &batch(VM2, VM1, 2), &mut FdbCache::default());
    assert_eq!(f.spoofed, 2);
    assert_eq!(sw.lookup(VM1), Some(src));
    // The switch-over: the destination's guest speaks (its announcement).
    let f = sw.forward(
        dst,
        0,
        &batch(Mac::BROADCAST, VM1, 1),
        &mut FdbCache::default(),
    );
    assert!(f.is_quiet(), "{f:?}");
    assert_eq!(sw.lookup(VM1), Some(dst));
    assert_eq!(got(&r_src), 4, "the announcement, flooded");
    let _ = sw.forward(peer, 0, &batch(VM1, VM2, 4), &mut c_peer);
    assert_eq!(
        (got(&r_src), got(&r_dst)),
        (4, 4),
        "to the destination only"
    );
    // The source port is deleted: the address stays where it is.
    sw.remove_port(src);
    assert_eq!(sw.lookup(VM1), Some(dst));
    assert!(sw.counts_are_exact());
}

#[test]
fn a_source_port_removed_before_the_destination_spoke_hands_it_over() {
    let sw = Switch::new(Duration::from_secs(300));
    let (src, _) = port(&sw, "vma", owning(&[VM1, VM3]));
    let (dst, _) = port(&sw, "vma2", owning(&[VM1]));
    assert_eq!(sw.lookup(VM1), Some(src));
    sw.remove_port(src);
    assert_eq!(sw.lookup(VM1), Some(dst), "its other owner");
    assert_eq!(sw.lookup(VM3), None, "owned by nobody else: gone");
    let l = sw.listing(coarse_now());
    assert_eq!(l.entries.len(), 1);
    assert_eq!(
        (l.entries[0].port.as_str(), l.entries[0].kind),
        ("vma2", EntryKind::Static)
    );
}

#[test]
fn learning_is_bounded_per_port_and_in_the_table_and_what_is_known_keeps_working() {
    let sw = Switch::with_table_size(Duration::from_secs(300), 100);
    let (guest, r_guest) = port(
        &sw,
        "guest",
        PortRules {
            owned: Vec::new(),
            max_learned: Some(10),
            ..PortRules::default()
        },
    );
    let (uplink, r_uplink) = port(&sw, "uplink", PortRules::open());
    let (watcher, r_watcher) = port(&sw, "watcher", owning(&[VM3]));
    let mac = |p: u8, i: u32| {
        let b = i.to_be_bytes();
        Mac([2, p, b[0], b[1], b[2], b[3]])
    };
    let mut c = FdbCache::default();
    let mut refused = Forwarded::default();
    for i in 0..50 {
        refused.merge(sw.forward(guest, 0, &batch(VM3, mac(1, i), 1), &mut c));
    }
    assert_eq!(not_learned(&refused, NotLearned::PortLimit), 40);
    let mut refused = Forwarded::default();
    for i in 0..200 {
        refused.merge(sw.forward(uplink, 0, &batch(VM3, mac(2, i), 1), &mut c));
    }
    assert_eq!(not_learned(&refused, NotLearned::TableFull), 110);
    let l = sw.listing(coarse_now());
    assert_eq!((l.learned, l.table_size), (100, 100));
    assert_eq!(l.entries.len(), 101, "and vm3's static address");
    assert_eq!(got(&r_watcher), 250, "every frame forwarded all the same");
    // What was learned keeps working; what was not is flooded.
    let mut cw = FdbCache::default();
    let _ = sw.forward(watcher, 0, &batch(mac(1, 0), VM3, 1), &mut cw);
    assert_eq!((got(&r_guest), got(&r_uplink)), (1, 0));
    let _ = sw.forward(watcher, 0, &batch(mac(1, 49), VM3, 1), &mut cw);
    assert_eq!((got(&r_guest), got(&r_uplink)), (2, 1));
    // Static addresses do not count: a port owning some joins a full table.
    let (late, _) = port(&sw, "late", owning(&[VM1]));
    sw.add_static(VM2, late);
    assert_eq!((sw.lookup(VM1), sw.lookup(VM2)), (Some(late), Some(late)));
    // Ageing frees room, and a refused source is learned once it asks again.
    assert_eq!(
        sw.age(coarse_now() + vadapt_policy::Duration::from_secs(301)),
        100
    );
    let f = sw.forward(uplink, 0, &batch(VM3, mac(3, 0), 1), &mut c);
    assert!(f.is_quiet(), "{f:?}");
    assert_eq!(sw.lookup(mac(3, 0)), Some(uplink));
    assert!(sw.counts_are_exact());
}

/// A guest sprays random source addresses, as an attacker would to fill
/// the root daemon's memory: the table stops at its size, each worker's
/// copy and record stay bounded, and a victim's traffic still goes where
/// it should. The process's RSS is printed (`--nocapture`), not asserted:
/// other tests share the process.
#[test]
fn a_random_source_flood_leaves_the_table_and_the_caches_bounded() {
    const FRAMES: u64 = 1_000_000;
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
            })
            .unwrap_or_default()
    };
    let before = rss();
    let sw = Switch::new(Duration::from_secs(300));
    let (attacker, _) = port(
        &sw,
        "attacker",
        PortRules {
            owned: Vec::new(),
            max_learned: None, // the table's bound alone: the worst case
            ..PortRules::default()
        },
    );
    let (victim, r_victim) = port(&sw, "victim", owning(&[VM1]));
    // The flood's destination counts what it gets and keeps none of it.
    let to_peer = Arc::new(Counter::default());
    let peer = sw.add_port_with(
        to_peer.clone(),
        Arc::new(PortStats::new("peer", crate::metrics::PortKind::Vm, 1)),
        owning(&[VM2]),
    );
    let mut c = FdbCache::default();
    let mut seed = 37u64;
    let mut next = || {
        // splitmix64: a seeded, repeatable flood.
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut refused = Forwarded::default();
    let mut b = FrameBatch::new(32);
    let (mut max_table, mut max_refreshed) = (0, 0);
    let mut at_tenth = String::new();
    for round in 0..FRAMES / 32 {
        if round == FRAMES / 320 {
            at_tenth = rss();
        }
        b.clear();
        for _ in 0..32 {
            let r = next().to_be_bytes();
            // Unicast, locally administered: every one a learnable source.
            let src = Mac([(r[0] & 0xfc) | 0x02, r[1], r[2], r[3], r[4], r[5]]);
            b.push(&ethernet_frame(VM2, src, ETHERTYPE_EXPERIMENTAL, &[0]));
        }
        refused.merge(sw.forward(attacker, 0, &b, &mut c));
        let (t, r) = c.sizes();
        (max_table, max_refreshed) = (max_table.max(t), max_refreshed.max(r));
    }
    let l = sw.listing(coarse_now());
    println!(
        "random-source flood: {FRAMES} frames, table {} learned of {} ({} entries), \
         worker copy at most {max_table}, record at most {max_refreshed}, \
         not learned (table full) {}, RSS {before} kB before, {at_tenth} kB after {} frames, \
         {} kB after all",
        l.learned,
        l.table_size,
        l.entries.len(),
        not_learned(&refused, NotLearned::TableFull),
        FRAMES / 10,
        rss()
    );
    assert_eq!(l.learned, DEFAULT_TABLE_SIZE);
    assert!(l.entries.len() <= DEFAULT_TABLE_SIZE + 2);
    assert!(max_table <= DEFAULT_TABLE_SIZE + 2 + 32, "{max_table}");
    assert!(max_refreshed <= REFRESHED_MAX, "{max_refreshed}");
    assert!(not_learned(&refused, NotLearned::TableFull) > 900_000);
    assert_eq!(to_peer.0.load(std::sync::atomic::Ordering::Relaxed), FRAMES);
    // The victim is unaffected: its address is static, its traffic its own.
    let _ = sw.forward(peer, 0, &batch(VM1, VM2, 10), &mut FdbCache::default());
    assert_eq!(got(&r_victim), 10);
    assert_eq!(sw.lookup(VM1), Some(victim));
    assert!(sw.counts_are_exact());
}

/// A gratuitous ARP from `sha` claiming `spa`.
fn garp(sha: Mac, spa: [u8; 4]) -> Vec<u8> {
    let mut p = vec![0, 1, 8, 0, 6, 4, 0, 2];
    p.extend_from_slice(&sha.0);
    p.extend_from_slice(&spa);
    p.extend_from_slice(&[0xff; 6]);
    p.extend_from_slice(&spa);
    ethernet_frame(Mac::BROADCAST, sha, 0x0806, &p)
}

#[test]
fn the_ip_source_guard_drops_spoofed_arp_per_frame_of_one_flow() {
    let sw = Switch::new(Duration::from_secs(300));
    let (vm1, r1) = port(&sw, "vm1", owning(&[VM1]));
    let mut guarded = owning(&[VM3]);
    guarded.ip_guard = Some(SourceGuard::new(&["10.0.0.3".parse().unwrap()], &[VM3]));
    let (vm3, _r3) = port(&sw, "vm3", guarded);
    let (_, r2) = port(&sw, "vm2", owning(&[VM2]));
    let mut c3 = FdbCache::default();
    // One flow by MAC (broadcast from VM3): its own ARP, a spoofed one
    // (vm1's 10.0.0.1), its own again. The cached route does not let the
    // spoofed frame through.
    let mut b = FrameBatch::new(4);
    b.push(&garp(VM3, [10, 0, 0, 3]));
    b.push(&garp(VM3, [10, 0, 0, 1]));
    b.push(&garp(VM3, [10, 0, 0, 3]));
    b.push(&ethernet_frame(VM1, VM3, ETHERTYPE_EXPERIMENTAL, &[1])); // not IP: passes
    let f = sw.forward(vm3, 0, &b, &mut c3);
    assert_eq!(f.spoofed_ip, 1);
    assert_eq!(
        f.spoofed_ip_first.map(|w| (w.rule, w.addr)),
        Some((GuardRule::ArpSenderIp, Some("10.0.0.1".parse().unwrap())))
    );
    assert_eq!(
        (got(&r1), got(&r2)),
        (3, 2),
        "two ARPs flooded, one unicast"
    );
    // A spoofed MAC counts as spoofed_src first, not as spoofed_ip too.
    let mut b = FrameBatch::new(1);
    b.push(&garp(VM1, [10, 0, 0, 1]));
    let f = sw.forward(vm3, 0, &b, &mut c3);
    assert_eq!((f.spoofed, f.spoofed_ip), (1, 0));
    // A port without a guard sends any ARP.
    let mut b = FrameBatch::new(1);
    b.push(&garp(VM1, [10, 9, 9, 9]));
    assert!(sw.forward(vm1, 0, &b, &mut FdbCache::default()).is_quiet());
}
