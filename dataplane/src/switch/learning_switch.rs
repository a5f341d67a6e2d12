//! The learning switch itself: the ports, the forwarding table with
//! ageing, and each worker's lock-free copy of it ([`FdbCache`]).
//!
//! # Locks
//!
//! The ports and the forwarding table are one [`Tables`] behind one lock,
//! so no order between two switch locks can be broken: removing a port
//! (which forgets its addresses) and refreshing a worker's cache (which
//! reads both) each take that lock once. Nothing is called with it held:
//! frames are delivered from a worker's [`FdbCache`] after the lock is
//! released, so a port that delivers back into the switch (echo) never
//! re-enters it. The daemon-wide order of locks is in
//! `docs/reliability.md` ("Lock order"); in debug builds the locks are
//! `tracing_mutex`'s, which panic at the first acquisition that closes a
//! cycle in the order, deadlock or not.
//!
//! # Tenants
//!
//! A port's [`PortRules`] come with it: the addresses it owns are static on
//! it from its creation, its frames must come from them (port security),
//! and what it learns is bounded, as the whole table is (see `fdb.rs`).
//! The rules are copied into each worker's cache with the ports, and a
//! frame's check is part of its flow's cached [`Route`]: a stream of frames
//! with one pair of addresses is checked once, not per frame.
//!
//! # VLANs
//!
//! The table is keyed by (VLAN, MAC). Each frame's VLAN is read from its
//! ingress port's [`PortVlan`](super::vlan::PortVlan) (a tagged frame on
//! an access port is dropped there), and it leaves only by ports of that
//! VLAN: in the form it came in, delivered from the batch as before, or,
//! when the egress wants the other form (a trunk's tagged VLAN, an access
//! port's untagged one), copied with its tag pushed or popped and
//! delivered from a scratch batch (see `vlan.rs`).
//!
//! # Captures
//!
//! A port being captured (`vadapt capture`, `capture.rs`) has a
//! [`CaptureTap`] in its entry, which each worker's cache copies with the
//! ports. Forwarding hands the tap the batch as it enters through the
//! port, and the frames handed to the port's egress, in the form the port
//! gets them (retagged ones after their retag). Whether any port is
//! captured is a flag of the worker's own cache, read once a batch.
//!
//! Its times come from [`coarse_now`]: learning and ageing count in
//! seconds, and `forward` reads the clock once a batch, where a precise
//! read had cost a busy-poll pass of a few frames several nanoseconds a
//! frame.

use super::capture_tap::CaptureTap;
use super::egress::{Egress, PortId};
use super::fdb::VlanMac;
use super::fdb::{Fdb, DEFAULT_TABLE_SIZE};
use super::fdb_listing::{EntryKind, FdbListing, FdbRow};
use super::forwarded::Forwarded;
use super::frame_fate::{decide, egress_form, Fate, Target};
use super::port_rules::PortRules;
use super::vlan::{Entered, Retag, Vid};
use crate::clock::coarse_now;
use crate::frames::FrameBatch;
use crate::lock_order::{Mutex, MutexGuard};
use crate::metrics::{NotLearned, PortStats};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vadapt_policy::{Duration, Instant};
use vadapt_wire::Mac;

#[derive(Debug)]
pub(super) struct PortEntry {
    egress: Arc<dyn Egress>,
    /// Its counters (and its name).
    pub(super) stats: Arc<PortStats>,
    /// Its rules.
    pub(super) rules: Arc<PortRules>,
    /// Its capture's tap, while one runs (`capture.rs`).
    pub(super) capture: Option<Arc<CaptureTap>>,
}

/// What the switch's one lock guards.
#[derive(Debug)]
pub(super) struct Tables {
    /// By [`PortId`]; `None`: a removed port's slot, free for the next.
    pub(super) ports: Vec<Option<PortEntry>>,
    /// The forwarding table.
    pub(super) fdb: Fdb,
}

impl Tables {
    /// Port `id`'s rules, if it is there.
    fn rules(&self, id: PortId) -> Option<&PortRules> {
        self.ports.get(id)?.as_ref().map(|p| &*p.rules)
    }
}

/// The switch.
#[derive(Debug)]
pub struct Switch {
    /// The ports and the forwarding table, under one lock (see the module
    /// docs: one lock, so no lock order to break).
    tables: Mutex<Tables>,
    /// Moves at every change of ports or table. Each switch counts in its
    /// own range of 2^32 ([`Switch::new`]): a worker's cache is
    /// thread-local, and a cache filled from one switch must never look
    /// current to another (two switches in one process: tests, fuzzing).
    generation: AtomicU64,
    ageing: Duration,
}

/// A worker's lock-free view of the forwarding table.
///
/// Its memory is bounded whatever sources a guest sends from: `table` is
/// a copy of the bounded shared table (plus what the frames of one batch
/// taught), `refreshed` holds at most 4,096 addresses (`REFRESHED_MAX`), and the
/// rest is per port.
#[derive(Debug, Default)]
pub struct FdbCache {
    generation: u64,
    table: HashMap<VlanMac, PortId>,
    /// When each source this worker sees was last asserted in the shared
    /// table, and whether it was learned then.
    refreshed: HashMap<VlanMac, Asserted>,
    nports: usize,
    /// Frames of the batch being forwarded, by egress port, that leave in
    /// the form they entered.
    groups: Vec<Vec<u16>>,
    /// Those that leave with a VLAN tag pushed or popped, by egress port.
    retagged: Vec<Vec<(u16, Retag)>>,
    /// Where retagged frames are copied to be delivered (made at the
    /// first).
    scratch: Option<FrameBatch>,
    /// The ports at `generation` (`None`: a free slot), so that delivery
    /// takes no lock: a port that delivers back into the switch (echo) does
    /// not take the ports' lock inside itself, and a port added or removed
    /// meanwhile waits for no delivery.
    egress: Vec<Option<Arc<dyn Egress>>>,
    /// Each port's rules at `generation` (`None`: a free slot), so that a
    /// frame's source is checked without a lock.
    rules: Vec<Option<Arc<PortRules>>>,
    /// The last flow routed, reused while the table stands (see [`Route`]).
    last_route: Option<Route>,
    /// Each port's capture tap at `generation` (`None`: no capture, or a
    /// free slot).
    captures: Vec<Option<Arc<CaptureTap>>>,
    /// Whether any port of `captures` has one: the one question a batch
    /// asks about captures when none runs.
    capturing: bool,
}

impl FdbCache {
    /// Addresses in its copy of the table, and sources it remembers
    /// asserting (tests: both are bounded).
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize) {
        (self.table.len(), self.refreshed.len())
    }
}

/// A source's last assertion in the shared table, by one worker.
#[derive(Clone, Copy, Debug)]
struct Asserted {
    at: Instant,
    /// Whether the table took it then. A source that was refused (table
    /// full, port limit, owned elsewhere) is not asked again for
    /// [`LEARN_REFRESH`], so that a guest's refused sources cost a lock
    /// once a second each, not once a flow.
    learned: bool,
}

/// Most sources a worker's [`FdbCache`] remembers asserting; past it the
/// record starts again (each source then costs one more lock), so a guest
/// spraying source addresses cannot grow it.
pub(super) const REFRESHED_MAX: usize = 4096;

/// Where frames with one pair of addresses entering on one port go, and
/// until when that answer holds: until the table changes (the cache's
/// generation moves, which clears it) or the source is due to be learned
/// again. A stream's frames all carry the same addresses, so most frames
/// are switched by comparing their first 12 bytes, without hashing a MAC.
#[derive(Clone, Copy, Debug)]
struct Route {
    ingress: PortId,
    /// Destination and source MAC, as they lie at the start of the frame.
    addrs: [u8; 12],
    /// The VLAN the frames entered in.
    vid: Vid,
    target: Target,
    /// When the source must be re-asserted in the shared table.
    until: Instant,
}

/// How often a worker re-asserts a source MAC it keeps seeing.
const LEARN_REFRESH: Duration = Duration::from_secs(1);

impl Switch {
    /// A switch whose learned entries expire after `ageing`, with room for
    /// [`DEFAULT_TABLE_SIZE`] learned addresses.
    pub fn new(ageing: std::time::Duration) -> Self {
        Self::with_table_size(ageing, DEFAULT_TABLE_SIZE)
    }

    /// A switch whose learned entries expire after `ageing`, with room for
    /// `table_size` learned addresses (`mac_table_size`).
    pub fn with_table_size(ageing: std::time::Duration, table_size: usize) -> Self {
        static SWITCHES: AtomicU64 = AtomicU64::new(0);
        let first = (SWITCHES.fetch_add(1, Ordering::Relaxed) << 32) | 1;
        Switch {
            tables: Mutex::new(Tables {
                ports: Vec::new(),
                fdb: Fdb::new(table_size),
            }),
            generation: AtomicU64::new(first),
            ageing: Duration::from_nanos(u64::try_from(ageing.as_nanos()).unwrap_or(u64::MAX)),
        }
    }

    /// Attach a port with no rules ([`PortRules::open`]): in the first free
    /// slot a removed port left, or a new one.
    pub fn add_port(&self, egress: Arc<dyn Egress>, stats: Arc<PortStats>) -> PortId {
        self.add_port_with(egress, stats, PortRules::open())
    }

    /// Attach a port with `rules`: in the first free slot a removed port
    /// left, or a new one. The addresses it owns are static on it from now
    /// on, except one static on another port already: a migrating VM's
    /// source port keeps its address until the destination port's guest
    /// sends from it (see [`Switch::learn_if_unknown`]).
    pub fn add_port_with(
        &self,
        egress: Arc<dyn Egress>,
        stats: Arc<PortStats>,
        rules: PortRules,
    ) -> PortId {
        let mut t = self.tables();
        let p = &mut t.ports;
        let id = p.iter().position(Option::is_none).unwrap_or(p.len());
        let now = coarse_now();
        let home = rules.vlan.home();
        for &mac in &rules.owned {
            t.fdb.pin(VlanMac::new(home, mac), id, now, false);
        }
        let entry = Some(PortEntry {
            egress,
            stats,
            rules: Arc::new(rules),
            capture: None,
        });
        match t.ports.get_mut(id) {
            Some(free) => *free = entry,
            None => t.ports.push(entry),
        }
        self.moved();
        id
    }

    /// Detach port `id`: every address on it, learned or static, is
    /// forgotten, except a static one another port owns too, which goes to
    /// that port (a migrating VM's source port removed before the
    /// destination's guest spoke); and no frame is handed to it after the
    /// forwarding that runs now. Its slot is free for the next port. The
    /// caller stops whatever sends as `id` first (an
    /// [`Ingress`](super::Ingress) of a removed port sends as whichever
    /// port takes its slot next).
    pub fn remove_port(&self, id: PortId) {
        let mut t = self.tables();
        if let Some(slot) = t.ports.get_mut(id) {
            if let Some(tap) = slot.take().and_then(|e| e.capture) {
                tap.detach();
            }
        }
        let Tables { ports, fdb } = &mut *t;
        fdb.remove_port(id, |a| {
            ports.iter().position(|p| {
                p.as_ref()
                    .is_some_and(|p| p.rules.owns(a.mac) && p.rules.vlan.home() == a.vid)
            })
        });
        self.moved();
    }

    /// Tell every worker's cache that the ports or the table changed.
    pub(super) fn moved(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The one lock (poisoning ignored: every change to [`Tables`] is a
    /// single insert, remove or retain, never left half done).
    pub(super) fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters of port `id`.
    pub fn port_stats(&self, id: PortId) -> Option<Arc<PortStats>> {
        self.tables()
            .ports
            .get(id)
            .and_then(|e| e.as_ref())
            .map(|e| Arc::clone(&e.stats))
    }

    /// Pin `mac` to `port` (sink/echo addresses) in the port's VLAN
    /// ([`PortVlan::home`](super::vlan::PortVlan::home)), taking it from
    /// any other port; never ages.
    pub fn add_static(&self, mac: Mac, port: PortId) {
        let mut t = self.tables();
        let Some(home) = t.rules(port).map(|r| r.vlan.home()) else {
            return;
        };
        t.fdb.pin(VlanMac::new(home, mac), port, coarse_now(), true);
        drop(t);
        self.moved();
    }

    /// Forget every learned MAC of `port` (its frontend went away); its
    /// static ones stay.
    pub fn forget_port(&self, port: PortId) {
        if self.tables().fdb.forget_learned(port) {
            self.moved();
        }
    }

    /// Drop learned entries older than the ageing time; returns how many.
    pub fn age(&self, now: Instant) -> usize {
        let n = self.tables().fdb.age(now, self.ageing);
        if n > 0 {
            self.moved();
        }
        n
    }

    /// Port a MAC of the untagged domain is known on (tests).
    pub fn lookup(&self, mac: Mac) -> Option<PortId> {
        self.lookup_in(0, mac)
    }

    /// Port a MAC of VLAN `vid` is known on (tests).
    pub fn lookup_in(&self, vid: Vid, mac: Mac) -> Option<PortId> {
        self.tables()
            .fdb
            .get(&VlanMac::new(vid, mac))
            .map(|e| e.port)
    }

    /// The table as `vadapt fdb` lists it, ages at `now`.
    pub fn listing(&self, now: Instant) -> FdbListing {
        // Copied under the lock, named and sorted after it: a full table's
        // strings are not built while workers wait to refresh.
        let (raw, names, learned, table_size) = {
            let t = self.tables();
            let raw: Vec<_> = t
                .fdb
                .iter()
                .map(|(a, e)| (*a, e.port, e.is_static, e.seen))
                .collect();
            let names: Vec<Option<String>> = t
                .ports
                .iter()
                .map(|p| p.as_ref().map(|p| p.stats.name.clone()))
                .collect();
            (raw, names, t.fdb.learned(), t.fdb.capacity())
        };
        let mut entries: Vec<FdbRow> = raw
            .into_iter()
            .map(|(a, port, is_static, seen)| FdbRow {
                port: names
                    .get(port)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| format!("#{port}")),
                vlan: a.vid,
                mac: a.mac,
                kind: if is_static {
                    EntryKind::Static
                } else {
                    EntryKind::Learned
                },
                age_s: now.saturating_since(seen).as_nanos() / 1_000_000_000,
            })
            .collect();
        entries.sort_by(|a, b| (&a.port, a.vlan, a.mac).cmp(&(&b.port, b.vlan, b.mac)));
        FdbListing {
            entries,
            learned,
            table_size,
        }
    }

    /// Learn `mac` on `port` now, unless it is known on another port. Used
    /// for a VM port's configured MAC when its frontend connects, so the
    /// first frames towards a guest that has not sent yet are not flooded.
    /// Within the table's bounds, as learning from a frame; not counted
    /// when refused (it is a hint, not a frame).
    ///
    /// A configured MAC is a hint and a frame is the proof: a MAC known
    /// elsewhere stays there until a frame from `port` moves it. The
    /// destination port of a live migration, configured with the VM's MAC,
    /// connects while the guest still runs behind the source port; taking
    /// the MAC then would send the guest's traffic to a port with no guest
    /// until the switch-over. With port security the MAC is the port's own
    /// and static from its creation ([`Switch::add_port_with`]): this changes
    /// nothing then, and the first frame from the destination's guest moves
    /// it as it moves a learned one.
    pub fn learn_if_unknown(&self, mac: Mac, port: PortId) {
        let mut t = self.tables();
        let Some((limit, home)) = t.rules(port).map(|r| (r.learn_limit(), r.vlan.home())) else {
            return; // removed meanwhile
        };
        let at = VlanMac::new(home, mac);
        if t.fdb.learn_if_unknown(at, port, coarse_now(), limit) {
            self.moved();
        }
    }

    /// A frame from `port` carried `mac` as its source at `now`: learn it
    /// there (or refresh it, or move it), within the table's bounds and
    /// never taking an address another port owns. `Ok`: the table has it
    /// on `port` now (or `port` was removed meanwhile, and learns nothing).
    fn learn(&self, mac: VlanMac, port: PortId, now: Instant) -> Result<(), NotLearned> {
        let mut t = self.tables();
        let Some(rules) = t.rules(port) else {
            return Ok(());
        };
        let (limit, owner) = (rules.learn_limit(), rules.owns(mac.mac));
        if t.fdb.learn(mac, port, now, limit, owner)? {
            self.moved();
        }
        Ok(())
    }

    /// Whether the table's counts of learned addresses are exact (tests).
    #[cfg(test)]
    pub(super) fn counts_are_exact(&self) -> bool {
        self.tables().fdb.counts_are_exact()
    }

    fn refresh_cache(&self, cache: &mut FdbCache) {
        let gen = self.generation.load(Ordering::Acquire);
        if gen == cache.generation {
            return;
        }
        let t = self.tables();
        cache.table.clear();
        cache.table.extend(t.fdb.iter().map(|(m, e)| (*m, e.port)));
        cache.egress.clear();
        cache.egress.extend(
            t.ports
                .iter()
                .map(|e| e.as_ref().map(|e| Arc::clone(&e.egress))),
        );
        cache.rules.clear();
        cache.rules.extend(
            t.ports
                .iter()
                .map(|e| e.as_ref().map(|e| Arc::clone(&e.rules))),
        );
        cache.captures.clear();
        cache.captures.extend(
            t.ports
                .iter()
                .map(|e| e.as_ref().and_then(|e| e.capture.clone())),
        );
        cache.capturing = cache.captures.iter().any(Option::is_some);
        cache.nports = t.ports.len();
        drop(t);
        cache.groups.resize_with(cache.nports, Vec::new);
        cache.retagged.resize_with(cache.nports, Vec::new);
        cache.generation = gen;
        cache.last_route = None;
    }

    /// Where a frame with destination and source `addrs` that entered on
    /// `ingress` goes, checking its source against the port's rules and
    /// learning it on the way; a source not learned is counted in `refused`.
    fn route(
        &self,
        ingress: PortId,
        addrs: [u8; 12],
        vid: Vid,
        now: Instant,
        cache: &mut FdbCache,
        refused: &mut Forwarded,
    ) -> Route {
        let dst = Mac(addrs[..6].try_into().expect("6 bytes"));
        let src = Mac(addrs[6..].try_into().expect("6 bytes"));
        let (dst_at, src_at) = (VlanMac::new(vid, dst), VlanMac::new(vid, src));
        let mut until = now + LEARN_REFRESH;
        let allowed = cache
            .rules
            .get(ingress)
            .and_then(Option::as_ref)
            .is_none_or(|r| r.allows(src));
        if !allowed {
            // Neither learned nor forwarded; decided again only when the
            // ports change (the cache's generation moves) or it expires.
            return Route {
                ingress,
                addrs,
                vid,
                target: Target::Spoofed,
                until,
            };
        }
        if !src.is_multicast() {
            let known_here = cache.table.get(&src_at) == Some(&ingress);
            match cache.refreshed.get(&src_at) {
                Some(a)
                    if (known_here || !a.learned) && now.saturating_since(a.at) < LEARN_REFRESH =>
                {
                    until = a.at + LEARN_REFRESH;
                }
                _ => {
                    let learned = match self.learn(src_at, ingress, now) {
                        Ok(()) => true,
                        Err(why) => {
                            refused.not_learned[why.index()] += 1;
                            false
                        }
                    };
                    if cache.refreshed.len() >= REFRESHED_MAX {
                        cache.refreshed.clear();
                    }
                    cache
                        .refreshed
                        .insert(src_at, Asserted { at: now, learned });
                    // The cache takes what this frame taught (the next
                    // batch's refresh brings the rest): copying the whole
                    // table here, once per new source, held the switch's
                    // lock for a table's copy per frame of a guest spraying
                    // source MACs, and starved every other port's refresh.
                    if learned {
                        cache.table.insert(src_at, ingress);
                    }
                }
            }
        }
        let target = Target::for_destination(dst, cache.table.get(&dst_at).copied());
        Route {
            ingress,
            addrs,
            vid,
            target,
            until,
        }
    }

    /// Forward every frame of `frames` that entered on `ingress` (queue
    /// `flow`); what was refused (frames dropped by port security, sources
    /// not learned) is returned for the sending port to count.
    pub fn forward(
        &self,
        ingress: PortId,
        flow: u16,
        frames: &FrameBatch,
        cache: &mut FdbCache,
    ) -> Forwarded {
        self.forward_gated(ingress, flow, frames, cache, |_| true)
    }

    /// As [`forward`](Self::forward), asking `may_flood` about each frame
    /// (by its index) that would be flooded: broadcast, multicast and
    /// unknown unicast; one it refuses goes nowhere, counted in
    /// [`Forwarded::storm`] (the caller's storm control refused it). Its
    /// source is learned all the same. A frame
    /// port security drops is never flooded, so never asked about.
    pub fn forward_gated(
        &self,
        ingress: PortId,
        flow: u16,
        frames: &FrameBatch,
        cache: &mut FdbCache,
        mut may_flood: impl FnMut(usize) -> bool,
    ) -> Forwarded {
        let mut refused = Forwarded::default();
        if frames.is_empty() {
            return refused;
        }
        self.refresh_cache(cache);
        let now = coarse_now();
        if cache
            .last_route
            .is_some_and(|r| r.ingress != ingress || now >= r.until)
        {
            cache.last_route = None;
        }
        let Some(rules) = cache.rules.get(ingress).cloned().flatten() else {
            return refused; // removed meanwhile
        };
        if cache.capturing {
            if let Some(Some(tap)) = cache.captures.get(ingress) {
                tap.received(flow, frames);
            }
        }
        for i in 0..frames.len() {
            let frame = frames.get(i);
            let fate = decide(&rules, ingress, frame, |addrs, vid| {
                match cache.last_route {
                    Some(r) if r.addrs == *addrs && r.vid == vid => r.target,
                    _ => {
                        let r = self.route(ingress, *addrs, vid, now, cache, &mut refused);
                        cache.last_route = Some(r);
                        r.target
                    }
                }
            });
            let i = i as u16;
            match fate {
                Fate::Runt => {} // the ingress already counted it
                Fate::Vlan(why) => refused.vlan[why.index()] += 1,
                Fate::Ip(why) => refused.refuse_ip(why),
                Fate::Hairpin => {} // drop, like a learning bridge
                Fate::Port(p, entered) if p < cache.nports => cache.send_to(p, i, entered),
                Fate::Spoofed => {
                    refused.spoofed += 1;
                    if refused.spoofed_src.is_none() {
                        refused.spoofed_src = frame
                            .get(6..12)
                            .map(|s| Mac(s.try_into().expect("6 bytes")));
                    }
                }
                Fate::Port(..) | Fate::Flood(_) if !may_flood(usize::from(i)) => refused.storm += 1,
                Fate::Port(_, entered) | Fate::Flood(entered) => {
                    for p in 0..cache.nports {
                        if p != ingress {
                            cache.send_to(p, i, entered);
                        }
                    }
                }
            }
        }
        for p in 0..cache.nports {
            if cache.groups[p].is_empty() && cache.retagged[p].is_empty() {
                continue;
            }
            if let Some(egress) = &cache.egress[p] {
                let tap = if cache.capturing {
                    cache.captures[p].as_deref()
                } else {
                    None
                };
                if !cache.groups[p].is_empty() {
                    if let Some(tap) = tap {
                        tap.sent(frames, &cache.groups[p]);
                    }
                    egress.deliver(frames, &cache.groups[p], flow);
                }
                if !cache.retagged[p].is_empty() {
                    let scratch = cache
                        .scratch
                        .get_or_insert_with(|| FrameBatch::new(RETAG_BATCH));
                    let to = Delivery {
                        egress: &**egress,
                        tap,
                        flow,
                    };
                    refused.unretaggable +=
                        deliver_retagged(to, frames, &cache.retagged[p], scratch);
                }
            }
            cache.groups[p].clear();
            cache.retagged[p].clear();
        }
        refused
    }
}

impl FdbCache {
    /// Frame `i`, which `entered` its VLAN, is to leave by port `p`: into
    /// `p`'s group in its form, or into its retagged list, or nowhere if
    /// `p` is gone or does not carry the VLAN.
    #[inline]
    fn send_to(&mut self, p: PortId, i: u16, entered: Entered) {
        let Some(rules) = &self.rules[p] else {
            return;
        };
        match egress_form(rules, entered) {
            None => {}
            Some(Retag::Keep) => self.groups[p].push(i),
            Some(r) => self.retagged[p].push((i, r)),
        }
    }
}

/// Frames copied at once to be retagged (then delivered, and the next).
const RETAG_BATCH: usize = 64;

/// Every frame of a full scratch batch, by index: what a flush hands its
/// egress, without building the list each time.
const SCRATCH_INDICES: [u16; RETAG_BATCH] = {
    let mut a = [0u16; RETAG_BATCH];
    let mut i = 0;
    while i < RETAG_BATCH {
        a[i] = i as u16;
        i += 1;
    }
    a
};

/// Where retagged frames go: the port, its capture's tap if one runs,
/// and the flow they came in on.
#[derive(Clone, Copy)]
struct Delivery<'a> {
    egress: &'a dyn Egress,
    tap: Option<&'a CaptureTap>,
    flow: u16,
}

/// Deliver frames `which` of `frames` as `to` says, each with its tag
/// pushed or popped, through `scratch`; how many could not be (an offload
/// the tag's pop would move into the Ethernet header).
fn deliver_retagged(
    to: Delivery<'_>,
    frames: &FrameBatch,
    which: &[(u16, Retag)],
    scratch: &mut FrameBatch,
) -> u64 {
    let mut refused = 0;
    let flush = |scratch: &mut FrameBatch| {
        if !scratch.is_empty() {
            let all = &SCRATCH_INDICES[..scratch.len()];
            if let Some(tap) = to.tap {
                tap.sent(scratch, all);
            }
            to.egress.deliver(scratch, all, to.flow);
            scratch.clear();
        }
    };
    for &(i, r) in which {
        let i = usize::from(i);
        let len = r.len(frames.frame_len(i));
        let mut copied = false;
        for _ in 0..2 {
            copied = scratch.push_edited(frames, i, len, |f, t| r.edit(f, t), |o| r.reoffload(o));
            if copied || scratch.is_empty() {
                break;
            }
            flush(scratch); // full: deliver what it holds, and try again
        }
        refused += u64::from(!copied);
    }
    flush(scratch);
    refused
}

#[cfg(test)]
mod tests {
    use super::super::test_utils::Recorder;
    use super::*;
    use crate::metrics::PortStats;
    use vadapt_wire::ethernet::ETHERTYPE_EXPERIMENTAL;
    use vadapt_wire::test_frames::ethernet_frame;

    fn frame(dst: Mac, src: Mac, tag: u8) -> Vec<u8> {
        ethernet_frame(dst, src, ETHERTYPE_EXPERIMENTAL, &[tag])
    }

    fn setup(n: usize) -> (Switch, Vec<Arc<Recorder>>) {
        let sw = Switch::new(std::time::Duration::from_secs(300));
        let recs: Vec<_> = (0..n).map(|_| Arc::new(Recorder::default())).collect();
        for (i, r) in recs.iter().enumerate() {
            sw.add_port(
                r.clone(),
                Arc::new(PortStats::new(
                    &format!("p{i}"),
                    crate::metrics::PortKind::Vm,
                    1,
                )),
            );
        }
        (sw, recs)
    }

    #[test]
    fn a_configured_mac_does_not_move_a_mac_known_elsewhere() {
        // Live migration: the guest runs behind p0; the destination port p1,
        // configured with the same MAC, connects before the switch-over.
        let (sw, recs) = setup(3);
        let got = |i: usize| recs[i].0.lock().unwrap().len();
        let (a, b) = (Mac([2, 0, 0, 0, 0, 0xa]), Mac([2, 0, 0, 0, 0, 0xb]));
        let mut c = FdbCache::default();
        let one = |dst, src, tag| {
            let mut batch = FrameBatch::new(4);
            batch.push(&frame(dst, src, tag));
            batch
        };
        let _ = sw.forward(0, 0, &one(b, a, 1), &mut c); // a learned on p0 (flooded)
        let _ = sw.forward(2, 0, &one(a, b, 2), &mut c); // b learned on p2
        let before = (got(0), got(1));
        sw.learn_if_unknown(a, 1);
        assert_eq!(sw.lookup(a), Some(0), "a connect must not take the MAC");
        let _ = sw.forward(2, 0, &one(a, b, 3), &mut c);
        assert_eq!(
            (got(0), got(1)),
            (before.0 + 1, before.1),
            "to the source port only"
        );
        // The guest's first frame from p1 moves it.
        let _ = sw.forward(1, 0, &one(b, a, 4), &mut c);
        assert_eq!(sw.lookup(a), Some(1));
        let _ = sw.forward(2, 0, &one(a, b, 5), &mut c);
        assert_eq!(
            (got(0), got(1)),
            (before.0 + 1, before.1 + 1),
            "to the destination only"
        );
        // An unknown MAC is taken at connect, so its first frames are not flooded.
        let fresh = Mac([2, 0, 0, 0, 0, 0xc]);
        sw.learn_if_unknown(fresh, 2);
        assert_eq!(sw.lookup(fresh), Some(2));
    }

    #[test]
    fn unknown_unicast_floods_then_learned_mac_is_switched() {
        let (sw, recs) = setup(3);
        let a = Mac([2, 0, 0, 0, 0, 0xa]);
        let b = Mac([2, 0, 0, 0, 0, 0xb]);
        let mut c0 = FdbCache::default();
        let mut c1 = FdbCache::default();
        let mut batch = FrameBatch::new(4);
        batch.push(&frame(b, a, 1));
        let _ = sw.forward(0, 0, &batch, &mut c0);
        assert_eq!(recs[1].0.lock().unwrap().len(), 1);
        assert_eq!(recs[2].0.lock().unwrap().len(), 1);
        assert_eq!(recs[0].0.lock().unwrap().len(), 0, "never back to ingress");
        // b answers from port 1: a is known on port 0, so only port 0 gets it.
        batch.clear();
        batch.push(&frame(a, b, 2));
        let _ = sw.forward(1, 0, &batch, &mut c1);
        assert_eq!(recs[0].0.lock().unwrap().len(), 1);
        assert_eq!(recs[2].0.lock().unwrap().len(), 1);
        assert_eq!(sw.lookup(b), Some(1));
    }

    #[test]
    fn broadcast_floods_and_static_entries_do_not_move_or_age() {
        let (sw, recs) = setup(3);
        let s = Mac([2, 0, 0, 0, 0, 0x5]);
        sw.add_static(s, 2);
        let mut c = FdbCache::default();
        let mut batch = FrameBatch::new(4);
        batch.push(&frame(Mac::BROADCAST, s, 1)); // spoofed source must not move it
        let _ = sw.forward(0, 0, &batch, &mut c);
        assert_eq!(recs[1].0.lock().unwrap().len(), 1);
        assert_eq!(recs[2].0.lock().unwrap().len(), 1);
        assert_eq!(sw.lookup(s), Some(2));
        // Nor in the spoofer's own cache: its frames to `s` still reach port 2.
        batch.clear();
        batch.push(&frame(s, Mac([2, 0, 0, 0, 0, 0x6]), 2));
        let _ = sw.forward(0, 0, &batch, &mut c);
        assert_eq!(recs[2].0.lock().unwrap().len(), 2);
        assert_eq!(recs[1].0.lock().unwrap().len(), 1);
        // The learned 0x6 ages out; the static entry stays.
        assert_eq!(sw.age(coarse_now() + Duration::from_secs(1000)), 1);
        assert_eq!(sw.lookup(s), Some(2));
    }

    #[test]
    fn a_removed_port_gets_no_frame_and_its_slot_is_taken_next() {
        let (sw, recs) = setup(3);
        let (a, b) = (Mac([2, 0, 0, 0, 0, 0xa]), Mac([2, 0, 0, 0, 0, 0xb]));
        sw.add_static(b, 1);
        let mut c = FdbCache::default();
        let mut from_a = FrameBatch::new(4);
        from_a.push(&frame(b, a, 1));
        let _ = sw.forward(0, 0, &from_a, &mut c);
        assert_eq!(recs[1].0.lock().unwrap().len(), 1);
        sw.remove_port(1);
        assert_eq!(sw.lookup(b), None, "its static address goes too");
        assert!(sw.port_stats(1).is_none());
        // Unknown now: flooded to the ports that remain, not to the removed one.
        let _ = sw.forward(0, 0, &from_a, &mut c);
        assert_eq!(recs[1].0.lock().unwrap().len(), 1, "nothing after removal");
        assert_eq!(recs[2].0.lock().unwrap().len(), 1, "flooded to port 2");
        let new = Arc::new(Recorder::default());
        let id = sw.add_port(
            new.clone(),
            Arc::new(PortStats::new("n", crate::metrics::PortKind::Vm, 1)),
        );
        assert_eq!(id, 1, "the free slot is reused");
        sw.add_static(b, id);
        let _ = sw.forward(0, 0, &from_a, &mut c);
        assert_eq!(new.0.lock().unwrap().len(), 1);
        assert_eq!(recs[1].0.lock().unwrap().len(), 1);
    }

    #[test]
    fn learned_entries_age_out_and_port_forget() {
        let (sw, _recs) = setup(2);
        let a = Mac([2, 0, 0, 0, 0, 0xa]);
        let mut c = FdbCache::default();
        let mut batch = FrameBatch::new(1);
        batch.push(&frame(Mac::BROADCAST, a, 1));
        let _ = sw.forward(0, 0, &batch, &mut c);
        assert_eq!(sw.lookup(a), Some(0));
        assert_eq!(sw.age(coarse_now() + Duration::from_secs(301)), 1);
        assert_eq!(sw.lookup(a), None);
        let _ = sw.forward(0, 0, &batch, &mut FdbCache::default());
        sw.forget_port(0);
        assert_eq!(sw.lookup(a), None);
    }

    #[test]
    fn runt_frames_are_ignored() {
        let (sw, recs) = setup(2);
        let mut batch = FrameBatch::new(1);
        batch.push(&[1, 2, 3]);
        let _ = sw.forward(0, 0, &batch, &mut FdbCache::default());
        assert!(recs[1].0.lock().unwrap().is_empty());
    }

    #[test]
    fn a_flow_routed_once_follows_the_table_when_it_changes() {
        let (sw, recs) = setup(3);
        let a = Mac([2, 0, 0, 0, 0, 0xa]);
        let b = Mac([2, 0, 0, 0, 0, 0xb]);
        let mut c0 = FdbCache::default();
        let mut c1 = FdbCache::default();
        let mut c2 = FdbCache::default();
        let mut from_b = FrameBatch::new(1);
        from_b.push(&frame(a, b, 0));
        let _ = sw.forward(1, 0, &from_b, &mut c1); // b lives on port 1; a unknown: flooded
        assert_eq!(recs[0].0.lock().unwrap().len(), 1);
        assert_eq!(recs[2].0.lock().unwrap().len(), 1);
        let mut batch = FrameBatch::new(8);
        for tag in 0..8 {
            batch.push(&frame(b, a, tag));
        }
        let _ = sw.forward(0, 0, &batch, &mut c0);
        assert_eq!(recs[1].0.lock().unwrap().len(), 8, "one flow, one port");
        assert_eq!(recs[2].0.lock().unwrap().len(), 1);
        // b moves to port 2; the same flow from port 0 now goes there.
        let _ = sw.forward(2, 0, &from_b, &mut c2);
        assert_eq!(
            recs[0].0.lock().unwrap().len(),
            2,
            "a was learned on port 0"
        );
        let _ = sw.forward(0, 0, &batch, &mut c0);
        assert_eq!(recs[1].0.lock().unwrap().len(), 8);
        assert_eq!(recs[2].0.lock().unwrap().len(), 9);
        // Port 2 forgotten: b is unknown, so the flow floods.
        sw.forget_port(2);
        let _ = sw.forward(0, 0, &batch, &mut c0);
        assert_eq!(recs[1].0.lock().unwrap().len(), 16);
        assert_eq!(recs[2].0.lock().unwrap().len(), 17);
        // A frame with other addresses in the middle of the flow is routed
        // on its own, and the flow after it as before.
        let mut mixed = FrameBatch::new(3);
        mixed.push(&frame(b, a, 1));
        mixed.push(&frame(Mac::BROADCAST, a, 2));
        mixed.push(&frame(a, a, 3)); // to its own port: dropped
        let _ = sw.forward(0, 0, &mixed, &mut c0);
        assert_eq!(recs[1].0.lock().unwrap().len(), 18);
        assert_eq!(recs[2].0.lock().unwrap().len(), 19);
        assert_eq!(recs[0].0.lock().unwrap().len(), 2, "nothing back to port 0");
    }
}
