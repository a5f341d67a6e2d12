//! The TAP port: the host's network stack behind a TAP interface with
//! virtio-net headers, written to by the switch and read into it by a
//! reader thread.

use super::egress::Egress;
use super::ingress::{Ingress, Sender};
use super::learning_switch::FdbCache;
use crate::clock::monotonic_now;
use crate::frames::{FrameBatch, SLOT};
use crate::log_limit::LogLimit;
use crate::metrics::{Dir, DropReason, PortStats};
use crate::net::{HostOffloads, DEFAULT_MTU, MAX_GSO_FRAME, MIN_FRAME};
use crate::offload::{push_frame, Pushed};
use crate::policing::{LimitsSlot, TokenBucket};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use vadapt_host::error_chain::error_chain;
use vadapt_wire::VnetHdr;

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
    /// `SIOCSIFMTU` failed (no permission, an MTU the kernel refuses).
    #[error("cannot set the MTU of TAP device `{name}` to {mtu}")]
    SetMtu {
        /// Interface name.
        name: String,
        /// The MTU asked for, bytes.
        mtu: u16,
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
    /// The interface's MTU as configured (1500 if the port has none), bytes.
    mtu: u16,
    /// Largest frame (not a GSO frame) taken either way:
    /// [`crate::net::max_frame`] of `mtu`.
    max_frame: usize,
    /// Log lines about frames delivered over the MTU (the switch's
    /// threads deliver, so behind a lock taken only on such a drop).
    over_mtu_log: Mutex<LogLimit>,
    /// Rate limits on what the host sends into the switch; the reader
    /// holds the policers ([`LimitsSlot::take`]) and follows changes.
    limits: LimitsSlot,
}

impl Tap {
    /// Create (or attach to) TAP interface `name`, set its MTU to `mtu`
    /// if given (else leave it, and take 1500), and bring it up.
    pub fn open(name: &str, mtu: Option<u16>, stats: Arc<PortStats>) -> Result<Self, TapError> {
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
            HostOffloads::ALL
        } else {
            HostOffloads::default()
        };
        if let Some(m) = mtu {
            set_mtu(name, m).map_err(|source| TapError::SetMtu {
                name: name.into(),
                mtu: m,
                source,
            })?;
        }
        set_link_up(name);
        let mtu = mtu.unwrap_or(DEFAULT_MTU);
        Ok(Tap {
            file,
            stats,
            offloads,
            mtu,
            max_frame: crate::net::max_frame(mtu),
            over_mtu_log: Mutex::new(LogLimit::per_second()),
            limits: LimitsSlot::new(crate::config::PortLimits::NONE),
        })
    }

    /// The port's rate limits (none when opened): set them here, and the
    /// reader applies them from its next wake-up.
    pub fn limits(&self) -> &LimitsSlot {
        &self.limits
    }

    /// The MTU the port holds frames to, bytes.
    pub fn mtu(&self) -> u16 {
        self.mtu
    }

    /// Counts a frame of `len` bytes over the MTU, going `dir`, as dropped,
    /// with a line (at most ten a second per port).
    fn drop_over_mtu(&self, log: &mut LogLimit, dir: &str, len: usize) {
        self.stats.queues[0].drop(DropReason::OverMtu, 1);
        if let Some(held_back) = log.allow(std::time::Instant::now()) {
            tracing::warn!(
                port = self.stats.name.as_str(),
                dir,
                bytes = len,
                mtu = self.mtu,
                max_frame = self.max_frame,
                held_back,
                "dropped a frame over the TAP port's MTU"
            );
        }
    }

    /// The offloads the kernel may use on frames it sends us (none if it
    /// refused `TUNSETOFFLOAD`).
    pub fn offloads(&self) -> HostOffloads {
        self.offloads
    }

    /// Counts `batch` as sent into the switch, forwards it (its floods
    /// through `storm`, if the port has storm control), empties it.
    fn emit(
        &self,
        to: &Sender,
        batch: &mut FrameBatch,
        cache: &mut FdbCache,
        storm: Option<&mut TokenBucket>,
    ) {
        self.stats.queues[0].add(Dir::Tx, batch.len() as u64, batch.bytes());
        let refused = match storm {
            None => to.forward(0, batch, cache),
            Some(bucket) => to.forward_gated(0, batch, cache, |_| bucket.take(1)),
        };
        refused.count_into(&self.stats, 0);
        batch.clear();
    }

    /// Forward frames from the host into the switch until `stop` is set.
    /// Polls with a 100 ms timeout so that a stop is noticed. Each read is
    /// one frame behind its virtio-net header, its offload checked and kept
    /// for the egress ([`push_frame`]); refused headers are counted
    /// (`bad_vnet_hdr`) and logged at most ten times a second. The port's
    /// rate limits apply as on a VM port: a frame over the policer is
    /// dropped (`policed`) before it is copied, charged its length
    /// without the header (a TCP segment whole, as one frame); a flood
    /// over storm control is not flooded (`storm`).
    pub fn run_reader(&self, ingress: &Ingress, stop: &AtomicBool) {
        let Some(to) = ingress.sender() else {
            return; // the switch is gone: the daemon is stopping
        };
        let mut batch = FrameBatch::new(32);
        let mut cache = FdbCache::default();
        let mut buf = vec![0u8; VnetHdr::LEN + MAX_GSO_FRAME];
        let mut log = LogLimit::per_second();
        let q = &self.stats.queues[0];
        let mut file = &self.file;
        let (mut policers, mut limits_seen) = self.limits.take(monotonic_now());
        while !stop.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, 100) };
            if let Some(l) = self.limits.changed(&mut limits_seen) {
                policers.update(l, monotonic_now());
            }
            if n <= 0 {
                continue;
            }
            if policers.is_active() {
                policers.refill(monotonic_now());
            }
            let (mut policer, mut storm) = policers.parts();
            loop {
                match file.read(&mut buf) {
                    Ok(len)
                        if len >= VnetHdr::LEN + MIN_FRAME
                            && policer
                                .as_mut()
                                .is_some_and(|p| !p.admit(len - VnetHdr::LEN)) =>
                    {
                        q.drop(DropReason::Policed, 1)
                    }
                    Ok(len) if len >= VnetHdr::LEN + MIN_FRAME => {
                        let hdr = VnetHdr::read(&buf).expect("VnetHdr::LEN bytes");
                        let frame = &mut buf[VnetHdr::LEN..len];
                        let flush = |b: &mut FrameBatch| {
                            self.emit(&to, b, &mut cache, storm.as_deref_mut())
                        };
                        let offloads = self.offloads;
                        match push_frame(&hdr, frame, offloads, self.max_frame, &mut batch, flush) {
                            Pushed::Frames { .. } => {}
                            Pushed::Oversize => q.drop(DropReason::Oversize, 1),
                            Pushed::OverMtu(len) => self.drop_over_mtu(&mut log, "from host", len),
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
                self.emit(&to, &mut batch, &mut cache, storm);
            }
        }
        self.limits.park(policers);
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

/// Set interface `name`'s MTU (`SIOCSIFMTU`).
fn set_mtu(name: &str, mtu: u16) -> std::io::Result<()> {
    // SAFETY: plain socket(2) call; the fd is owned by `sock` below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    let sock = unsafe { File::from_raw_fd(fd) };
    // SAFETY: zeroed `ifreq` is valid plain data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_mtu = libc::c_int::from(mtu);
    // SAFETY: SIOCSIFMTU reads one `ifreq` that outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFMTU, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
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
    fn deliver(&self, frames: &FrameBatch, which: &[u16], _flow: u16) {
        let q = &self.stats.queues[0];
        let mut file = &self.file;
        let (mut n, mut bytes) = (0, 0);
        // A zero virtio-net header (complete frame, no offload) in front.
        let mut out = [0u8; VnetHdr::LEN + SLOT];
        for &i in which {
            let i = usize::from(i);
            let f = frames.get(i);
            let offloaded = frames.offloaded(i);
            let gso = offloaded.is_some_and(|k| matches!(k.offload, vadapt_wire::Offload::Tcp(..)));
            if !gso && f.len() > self.max_frame {
                let mut log = self.over_mtu_log.lock().unwrap_or_else(|e| e.into_inner());
                self.drop_over_mtu(&mut log, "to host", f.len());
                continue;
            }
            let written = match offloaded {
                // A jumbo frame does not fit `out`: written as an offloaded
                // one is, behind a zero header.
                None if f.len() > SLOT => {
                    let h = [0u8; VnetHdr::LEN];
                    let iov = [std::io::IoSlice::new(&h), std::io::IoSlice::new(f)];
                    file.write_vectored(&iov)
                        .is_ok_and(|w| w == VnetHdr::LEN + f.len())
                }
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
    use crate::switch::learning_switch::Switch;
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
        let stats = Arc::new(PortStats::new(&name, crate::metrics::PortKind::Tap, 1));
        let tap = match Tap::open(&name, None, stats.clone()) {
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
        sw.add_port(
            rec.clone(),
            Arc::new(PortStats::new("rec", crate::metrics::PortKind::Vm, 1)),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (tap, sw, stop) = (tap.clone(), sw.clone(), stop.clone());
            std::thread::spawn(move || tap.run_reader(&sw.ingress(id), &stop))
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

    /// A TAP port with an `mtu` sets it on the interface, writes frames of
    /// up to MTU + 18 bytes (a jumbo one from the side store, behind a zero
    /// header) and drops longer ones as `over_mtu`; one without keeps 1518.
    #[test]
    fn a_tap_takes_its_mtu_and_drops_frames_over_it() {
        let dropped = |st: &PortStats| {
            let i = DropReason::ALL
                .iter()
                .position(|r| *r == DropReason::OverMtu)
                .unwrap();
            st.queues[0].drops[i].load(Ordering::Relaxed)
        };
        let mut b = FrameBatch::new(4);
        for len in [9018, 9019, 1518, 60] {
            let mut f = vec![0u8; len];
            f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            assert!(b.push(&f));
        }
        for (mtu, delivered, over) in [(Some(9000), 3, 1), (None, 2, 2)] {
            let name = format!("mtut{}", std::process::id() % 100_000);
            let stats = Arc::new(PortStats::new(&name, crate::metrics::PortKind::Tap, 1));
            let tap = match Tap::open(&name, mtu, stats.clone()) {
                Ok(t) => t,
                Err(e) if tap_not_permitted(&e) => {
                    eprintln!("skipped: cannot create a TAP here ({e})");
                    return;
                }
                Err(e) => panic!("{e}"),
            };
            let sys = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).unwrap();
            assert_eq!(sys.trim(), mtu.unwrap_or(1500).to_string(), "SIOCSIFMTU");
            assert_eq!(tap.mtu(), mtu.unwrap_or(1500));
            tap.deliver(&b, &[0, 1, 2, 3], 0);
            let q = &stats.queues[0];
            assert_eq!(
                q.packets[Dir::Rx as usize].load(Ordering::Relaxed),
                delivered
            );
            assert_eq!(dropped(&stats), over, "MTU {mtu:?}");
            drop(tap);
        }
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
}
