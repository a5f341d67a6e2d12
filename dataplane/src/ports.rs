//! Ports that live inside the daemon: sink (count and drop), echo (swap MACs
//! and send back) and TAP (the host's network stack).

use crate::frames::{FrameBatch, SLOT};
use crate::log_limit::LogLimit;
use crate::metrics::{Dir, DropReason, PortStats};
use crate::net::{HostOffloads, MAX_GSO_FRAME, MIN_FRAME};
use crate::offload::{push_frame, Cutter, Pushed};
use crate::switch::{Egress, FdbCache, PortId, Switch};
use std::cell::RefCell;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use vadapt_host::error_chain::error_chain;
use vadapt_wire::VnetHdr;

/// Counts and drops every frame. The frames were already copied out of guest
/// memory into a host buffer by the sending worker, as DPDK's vhost PMD copies
/// into mbufs, so a sink measures a real backend's receive cost.
#[derive(Debug)]
pub struct Sink {
    stats: Arc<PortStats>,
}

impl Sink {
    /// A sink counting into `stats`.
    pub fn new(stats: Arc<PortStats>) -> Self {
        Sink { stats }
    }
}

impl Egress for Sink {
    fn deliver(&self, _sw: &Switch, frames: &FrameBatch, which: &[u16], _flow: u16) {
        let q = &self.stats.queues[0];
        if frames.has_offloads() {
            return sink_offloaded(q, frames, which);
        }
        let bytes: u64 = which
            .iter()
            .map(|&i| frames.frame_len(usize::from(i)) as u64)
            .sum();
        q.add(Dir::Rx, which.len() as u64, bytes);
    }
}

/// A sink takes no offload: a marked frame is cut and checksummed as any
/// such egress does ([`Cutter`]) into scratch space, and counted as the
/// frames it is cut into. The work is done, not just counted, so that a
/// sink still measures what a backend pays for the frames (B9's TSO stream
/// is cut here, in the sending worker, as it was at ingress before).
#[cold]
fn sink_offloaded(q: &crate::metrics::QueueStats, frames: &FrameBatch, which: &[u16]) {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; crate::net::MAX_FRAME]);
    }
    let (mut packets, mut bytes) = (0, 0);
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        for &i in which {
            let i = usize::from(i);
            let f = frames.get(i);
            let Some(k) = frames.offloaded(i) else {
                packets += 1;
                bytes += f.len() as u64;
                continue;
            };
            match Cutter::new(f, k.offload) {
                Ok(c) => {
                    let counter = if c.segments() {
                        &q.gso_frames
                    } else {
                        &q.csum_completed
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    for s in 0..c.count() {
                        let n = c.write(s, &mut scratch);
                        std::hint::black_box(&scratch[..n]);
                        packets += 1;
                        bytes += n as u64;
                    }
                }
                Err(_) => q.drop(DropReason::BadVnetHdr, 1),
            }
        }
    });
    q.add(Dir::Rx, packets, bytes);
}

thread_local! {
    static ECHO_SCRATCH: RefCell<(FrameBatch, FdbCache)> =
        RefCell::new((FrameBatch::new(256), FdbCache::default()));
}

/// Swaps source and destination MAC and sends each frame back into the switch,
/// from its own port (so it reaches the sender through normal switching).
#[derive(Debug)]
pub struct Echo {
    stats: Arc<PortStats>,
    id: AtomicUsize,
}

impl Echo {
    /// An echo counting into `stats`; call [`Echo::set_port_id`] once attached.
    pub fn new(stats: Arc<PortStats>) -> Self {
        Echo {
            stats,
            id: AtomicUsize::new(usize::MAX),
        }
    }

    /// The echo's own port id (frames are re-injected from it).
    pub fn set_port_id(&self, id: PortId) {
        self.id.store(id, Ordering::Release);
    }
}

impl Egress for Echo {
    fn deliver(&self, sw: &Switch, frames: &FrameBatch, which: &[u16], flow: u16) {
        let q = &self.stats.queues[0];
        q.add(Dir::Rx, which.len() as u64, frames_bytes(frames, which));
        let id = self.id.load(Ordering::Acquire);
        ECHO_SCRATCH.with(|s| {
            // A re-entrant delivery (echo into echo) cannot happen: the switch
            // never floods back to the ingress port. Be safe anyway.
            let Ok(mut s) = s.try_borrow_mut() else {
                q.drop(DropReason::Other, which.len() as u64);
                return;
            };
            let (batch, cache) = &mut *s;
            for chunk in which.chunks(batch.capacity()) {
                batch.clear();
                for &i in chunk {
                    // Offloads go back as they came; a GSO frame that finds
                    // the side store full sends the batch first.
                    if !batch.push_from(frames, usize::from(i)) {
                        q.add(Dir::Tx, batch.len() as u64, batch.bytes());
                        sw.forward(id, flow, batch, cache);
                        batch.clear();
                        batch.push_from(frames, usize::from(i));
                    }
                    let n = batch.len() - 1;
                    let f = batch.get_mut(n);
                    if f.len() >= 12 {
                        let mut tmp = [0u8; 6];
                        tmp.copy_from_slice(&f[0..6]);
                        f.copy_within(6..12, 0);
                        f[6..12].copy_from_slice(&tmp);
                    }
                }
                q.add(Dir::Tx, batch.len() as u64, batch.bytes());
                sw.forward(id, flow, batch, cache);
            }
        });
    }
}

fn frames_bytes(frames: &FrameBatch, which: &[u16]) -> u64 {
    which
        .iter()
        .map(|&i| frames.frame_len(usize::from(i)) as u64)
        .sum()
}

/// Errors opening a TAP device.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// `/dev/net/tun` could not be opened.
    #[error("cannot open /dev/net/tun")]
    OpenTun(#[source] std::io::Error),
    /// `TUNSETIFF` failed (no permission, bad name, device busy).
    #[error("cannot create TAP device `{name}`")]
    SetIff {
        /// Interface name.
        name: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `_IOW('T', 208, unsigned int)`: which offloads the reader takes.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
/// Every read and write starts with a `struct virtio_net_hdr` (10 bytes,
/// the kernel's default `TUNSETVNETHDRSZ`).
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_ulong = 0x01;
const TUN_F_TSO4: libc::c_ulong = 0x02;
const TUN_F_TSO6: libc::c_ulong = 0x04;
const TUN_F_TSO_ECN: libc::c_ulong = 0x08;

/// A TAP interface opened with `IFF_VNET_HDR`: frames the switch delivers
/// are written to the host stack behind their header — zero for a plain
/// frame, the sender's checked header for a partial checksum or a TCP
/// segment of up to 64 KiB, which the kernel takes whole on any TAP with
/// vnet headers (`TUNSETOFFLOAD` is about the other direction) and cuts
/// itself if it must; a reader thread forwards what the host sends into
/// the switch. With `TUNSETOFFLOAD` accepted, the host sends partial
/// checksums and TCP segments of up to 64 KiB, which go on marked as a
/// guest's do.
#[derive(Debug)]
pub struct Tap {
    file: File,
    stats: Arc<PortStats>,
    /// What the kernel may send: all of TUN_F_CSUM/TSO4/TSO6/TSO_ECN, or
    /// none if `TUNSETOFFLOAD` was refused.
    offloads: HostOffloads,
}

impl Tap {
    /// Create (or attach to) TAP interface `name` and bring it up.
    pub fn open(name: &str, stats: Arc<PortStats>) -> Result<Self, TapError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .map_err(TapError::OpenTun)?;
        // SAFETY: `ifreq` is plain old data; zeroed is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes().take(15)) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
        // SAFETY: TUNSETIFF reads and writes one `ifreq`, which outlives the call.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req) };
        if r < 0 {
            return Err(TapError::SetIff {
                name: name.into(),
                source: std::io::Error::last_os_error(),
            });
        }
        let wanted = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
        // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETOFFLOAD as _, wanted) };
        let offloads = if r == 0 {
            HostOffloads {
                csum: true,
                tso4: true,
                tso6: true,
                ecn: true,
            }
        } else {
            HostOffloads::default()
        };
        set_link_up(name);
        Ok(Tap {
            file,
            stats,
            offloads,
        })
    }

    /// The offloads the kernel may use on frames it sends us (none if it
    /// refused `TUNSETOFFLOAD`).
    pub fn offloads(&self) -> HostOffloads {
        self.offloads
    }

    /// Counts `batch` as sent into the switch, forwards it, empties it.
    fn emit(&self, sw: &Switch, id: PortId, batch: &mut FrameBatch, cache: &mut FdbCache) {
        self.stats.queues[0].add(Dir::Tx, batch.len() as u64, batch.bytes());
        sw.forward(id, 0, batch, cache);
        batch.clear();
    }

    /// Forward frames from the host into the switch until `stop` is set.
    /// Polls with a 100 ms timeout so that a stop is noticed. Each read is
    /// one frame behind its virtio-net header, its offload checked and kept
    /// for the egress ([`push_frame`]); refused headers are counted
    /// (`bad_vnet_hdr`) and logged at most ten times a second.
    pub fn run_reader(&self, sw: &Switch, id: PortId, stop: &AtomicBool) {
        let mut batch = FrameBatch::new(32);
        let mut cache = FdbCache::default();
        let mut buf = vec![0u8; VnetHdr::LEN + MAX_GSO_FRAME];
        let mut log = LogLimit::per_second();
        let q = &self.stats.queues[0];
        let mut file = &self.file;
        while !stop.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, 100) };
            if n <= 0 {
                continue;
            }
            loop {
                match file.read(&mut buf) {
                    Ok(len) if len >= VnetHdr::LEN + MIN_FRAME => {
                        let hdr = VnetHdr::read(&buf).expect("VnetHdr::LEN bytes");
                        let frame = &mut buf[VnetHdr::LEN..len];
                        let flush = |b: &mut FrameBatch| self.emit(sw, id, b, &mut cache);
                        match push_frame(&hdr, frame, self.offloads, &mut batch, flush) {
                            Pushed::Frames { .. } => {}
                            Pushed::Oversize => q.drop(DropReason::Oversize, 1),
                            Pushed::Refused(e) => {
                                q.drop(DropReason::BadVnetHdr, 1);
                                if let Some(held_back) = log.allow(std::time::Instant::now()) {
                                    tracing::warn!(
                                        port = self.stats.name.as_str(),
                                        reason = error_chain(&e),
                                        held_back,
                                        "dropped a frame from the host with a bad virtio-net header"
                                    );
                                }
                            }
                        }
                    }
                    Ok(_) => q.drop(DropReason::Undersize, 1),
                    Err(_) => break,
                }
                if batch.is_full() || !poll_readable(self.file.as_raw_fd()) {
                    break;
                }
            }
            if !batch.is_empty() {
                self.emit(sw, id, &mut batch, &mut cache);
            }
        }
    }
}

fn poll_readable(fd: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
}

/// Bring interface `name` up (best effort; the operator may do it instead).
fn set_link_up(name: &str) {
    // SAFETY: plain socket(2) call; the fd is owned by `sock` below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if fd < 0 {
        return;
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    let sock = unsafe { File::from_raw_fd(fd) };
    // SAFETY: zeroed `ifreq` is valid plain data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read/write one `ifreq` that outlives the calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req);
        }
    }
}

impl Egress for Tap {
    fn deliver(&self, _sw: &Switch, frames: &FrameBatch, which: &[u16], _flow: u16) {
        let q = &self.stats.queues[0];
        let mut file = &self.file;
        let (mut n, mut bytes) = (0, 0);
        // A zero virtio-net header (complete frame, no offload) in front.
        let mut out = [0u8; VnetHdr::LEN + SLOT];
        for &i in which {
            let i = usize::from(i);
            let f = frames.get(i);
            let written = match frames.offloaded(i) {
                None => {
                    let len = VnetHdr::LEN + f.len();
                    out[VnetHdr::LEN..len].copy_from_slice(f);
                    // A TAP write takes a whole frame or fails; there is no partial write.
                    file.write(&out[..len]).is_ok_and(|w| w == len)
                }
                Some(k) => {
                    let h = k.hdr.to_bytes();
                    let iov = [std::io::IoSlice::new(&h), std::io::IoSlice::new(f)];
                    let ok = file
                        .write_vectored(&iov)
                        .is_ok_and(|w| w == VnetHdr::LEN + f.len());
                    if ok && k.hdr.gso_type != vadapt_wire::vnet_hdr::GSO_NONE {
                        q.gso_whole.fetch_add(1, Ordering::Relaxed);
                    }
                    ok
                }
            };
            if written {
                n += 1;
                bytes += f.len() as u64;
            } else {
                q.drop(DropReason::BacklogFull, 1);
            }
        }
        q.add(Dir::Rx, n, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::test_utils::Recorder;
    use std::time::Duration;
    use vadapt_wire::Mac;

    /// A real TAP device (root and /dev/net/tun needed: these machines have
    /// both; elsewhere the test says why it did nothing). The kernel
    /// accepts IFF_VNET_HDR and every offload, and a frame it sends (the
    /// ARP request for a neighbour on the TAP's subnet) reaches the switch
    /// whole, so the reader took the header off at the right place.
    #[test]
    fn a_tap_with_vnet_headers_forwards_what_the_host_sends() {
        let name = format!("offt{}", std::process::id() % 100_000);
        let stats = Arc::new(PortStats::new(&name, "tap", 1));
        let tap = match Tap::open(&name, stats.clone()) {
            Ok(t) => Arc::new(t),
            Err(e) if tap_not_permitted(&e) => {
                eprintln!("skipped: cannot create a TAP here ({e})");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert!(tap.offloads().csum && tap.offloads().tso4 && tap.offloads().tso6);
        let ip = |args: &[&str]| {
            let ok = std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip {args:?}");
        };
        ip(&["addr", "add", "10.213.7.1/24", "dev", &name]);
        ip(&["link", "set", &name, "up"]);
        let sw = Arc::new(Switch::new(Duration::from_secs(300)));
        let id = sw.add_port(tap.clone(), stats.clone());
        let rec = Arc::new(Recorder::default());
        sw.add_port(rec.clone(), Arc::new(PortStats::new("rec", "vm", 1)));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (tap, sw, stop) = (tap.clone(), sw.clone(), stop.clone());
            std::thread::spawn(move || tap.run_reader(&sw, id, &stop))
        };
        // A datagram to a neighbour makes the kernel ask for its MAC.
        let udp = std::net::UdpSocket::bind("10.213.7.1:0").unwrap();
        let mut arp = None;
        for _ in 0..50 {
            let _ = udp.send_to(b"x", "10.213.7.2:9");
            std::thread::sleep(Duration::from_millis(100));
            arp = rec
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|f| f.len() >= 42 && f[12..14] == [0x08, 0x06])
                .cloned();
            if arp.is_some() {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        let arp = arp.expect("the kernel's ARP request reached the switch");
        assert_eq!(&arp[0..6], &Mac::BROADCAST.0);
        assert_eq!(
            &arp[38..42],
            &[10, 213, 7, 2],
            "target IP, where ARP puts it"
        );
        assert_eq!(
            stats.queues[0]
                .drops
                .iter()
                .map(|d| d.load(Ordering::Relaxed))
                .sum::<u64>(),
            0
        );
    }

    /// True for the errors of a host that does not let us create a TAP.
    fn tap_not_permitted(e: &TapError) -> bool {
        use std::error::Error;
        e.source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::NotFound
                )
            })
    }

    #[test]
    fn a_sink_cuts_a_gso_frame_and_counts_its_segments() {
        use vadapt_wire::test_frames::{tso_frame, LINUX_V4};
        use vadapt_wire::vnet_hdr::{F_NEEDS_CSUM, GSO_TCPV4};
        let f = tso_frame(LINUX_V4, &[5; 10 * 1448]);
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let all = HostOffloads {
            csum: true,
            tso4: true,
            tso6: true,
            ecn: true,
        };
        let mut b = FrameBatch::new(4);
        push_frame(&hdr, &f, all, &mut b, |_| {});
        b.push(&[0u8; 60]);
        let ss = Arc::new(PortStats::new("sink", "sink", 1));
        let sw = Switch::new(Duration::from_secs(300));
        Sink::new(ss.clone()).deliver(&sw, &b, &[0, 1], 0);
        let q = &ss.queues[0];
        assert_eq!(q.packets[1].load(Ordering::Relaxed), 11);
        assert_eq!(q.bytes[1].load(Ordering::Relaxed), 10 * 1514 + 60);
        assert_eq!(q.gso_frames.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn echo_swaps_macs_and_returns_to_sender_and_sink_counts() {
        let sw = Switch::new(Duration::from_secs(300));
        let rec = Arc::new(Recorder::default());
        let vm = sw.add_port(rec.clone(), Arc::new(PortStats::new("vm", "vm", 1)));
        let es = Arc::new(PortStats::new("echo", "echo", 1));
        let echo = Arc::new(Echo::new(es.clone()));
        let eid = sw.add_port(echo.clone(), es.clone());
        echo.set_port_id(eid);
        let emac = Mac([2, 0, 0, 0, 0, 0xe]);
        sw.add_static(emac, eid);
        let ss = Arc::new(PortStats::new("sink", "sink", 1));
        let sid = sw.add_port(Arc::new(Sink::new(ss.clone())), ss.clone());
        let smac = Mac([2, 0, 0, 0, 0, 0x5]);
        sw.add_static(smac, sid);

        let vmac = Mac([2, 0, 0, 0, 0, 1]);
        let mut b = FrameBatch::new(4);
        let mut f = emac.0.to_vec();
        f.extend_from_slice(&vmac.0);
        f.extend_from_slice(&[0x08, 0x00, 42]);
        b.push(&f);
        let mut s = smac.0.to_vec();
        s.extend_from_slice(&vmac.0);
        s.extend_from_slice(&[0x08, 0x00, 7]);
        b.push(&s);
        sw.forward(vm, 0, &b, &mut FdbCache::default());

        let got = rec.0.lock().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(&got[0][0..6], &vmac.0);
        assert_eq!(&got[0][6..12], &emac.0);
        assert_eq!(got[0][14], 42);
        let snap = |p: &PortStats, d: usize| p.queues[0].packets[d].load(Ordering::Relaxed);
        assert_eq!((snap(&es, 1), snap(&es, 0)), (1, 1));
        assert_eq!(snap(&ss, 1), 1);
    }
}
