//! The far end of a NIC, for the uplink benchmark: a veth pair whose host
//! end the backend takes (vadapt's AF_XDP uplink, DPDK's `net_af_xdp`, or a
//! Linux bridge to a TAP port) and whose other end sits in a network
//! namespace of its own, where the traffic comes from ([`VethWire`]); the
//! Linux bridge of the kernel's path ([`Bridge`]); and what the benchmark
//! does on the wire itself: a paced one-way sender ([`send_paced`]) and a
//! request/response client ([`request_response`]) over an `AF_PACKET`
//! socket opened inside the namespace ([`WireSocket`]).
//!
//! The frames are the synthetic guest's stamped frames
//! ([`vadapt_wire::stamped_frame`]), so that a guest in echo mode answers
//! the requests; the round trip is timed on this side's clock.

use super::error::BenchError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};
use vadapt_wire::stamped_frame::{stamp_bytes, Stamp, ETHERTYPE, STAMP_LEN};

/// MAC of the namespace's end of the wire (set, so that tables and the
/// guest can name it).
pub const WIRE_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x02];

/// A veth pair: `host` in this namespace, `peer` in namespace `ns`.
/// Dropping it deletes both (and the namespace).
#[derive(Debug)]
pub struct VethWire {
    /// The namespace.
    pub ns: String,
    /// The end a backend takes.
    pub host: String,
    /// The far end, in `ns`.
    pub peer: String,
}

/// Run `args`; its failure, with stderr, as an error naming `what`.
fn ip(args: &[&str]) -> Result<(), BenchError> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| BenchError::Failed(format!("cannot run `{}`: {e}", args.join(" "))))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(BenchError::Failed(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl VethWire {
    /// A wire named after `tag` and this process (names stay under the
    /// 15 bytes of an interface name).
    pub fn new(tag: &str) -> Result<VethWire, BenchError> {
        let id = std::process::id() % 100_000;
        let w = VethWire {
            ns: format!("vbw{tag}{id}"),
            host: format!("vbh{tag}{id}"),
            peer: format!("vbp{tag}{id}"),
        };
        ip(&["ip", "netns", "add", &w.ns])?;
        let mac = vadapt_wire::Mac(WIRE_MAC).to_string();
        // From here on, Drop removes what was made.
        ip(&[
            "ip", "link", "add", &w.host, "type", "veth", "peer", "name", &w.peer, "address", &mac,
            "netns", &w.ns,
        ])?;
        ip(&["ip", "-n", &w.ns, "link", "set", &w.peer, "up"])?;
        ip(&["ip", "link", "set", &w.host, "up"])?;
        Ok(w)
    }

    /// Packets the far end has received (`rx_packets` of `peer`).
    pub fn peer_rx_packets(&self) -> Result<u64, BenchError> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, "cat"])
            .arg(format!(
                "/sys/class/net/{}/statistics/rx_packets",
                self.peer
            ))
            .output()
            .map_err(|e| BenchError::Failed(format!("cannot run `ip netns exec`: {e}")))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| BenchError::Parse {
                what: format!("rx_packets of {}", self.peer),
                detail: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
    }
}

impl Drop for VethWire {
    fn drop(&mut self) {
        let _ = ip(&["ip", "link", "del", &self.host]);
        let _ = ip(&["ip", "netns", "del", &self.ns]);
    }
}

/// A Linux bridge with the wire's host end in it: the kernel's path
/// (veth → bridge → TAP). Dropping it deletes the bridge, which frees the
/// wire's end for the next backend.
#[derive(Debug)]
pub struct Bridge {
    /// Its name.
    pub name: String,
}

impl Bridge {
    /// A bridge named after `wire`'s host end, with that end in it.
    pub fn new(wire: &VethWire) -> Result<Bridge, BenchError> {
        let b = Bridge {
            name: wire.host.replacen("vbh", "vbb", 1),
        };
        ip(&["ip", "link", "add", &b.name, "type", "bridge"])?;
        ip(&["ip", "link", "set", &b.name, "up"])?;
        ip(&["ip", "link", "set", &wire.host, "master", &b.name])?;
        Ok(b)
    }

    /// Put interface `port` (a TAP the daemon made) into the bridge, up.
    pub fn add(&self, port: &str) -> Result<(), BenchError> {
        ip(&["ip", "link", "set", port, "master", &self.name])?;
        ip(&["ip", "link", "set", port, "up"])
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = ip(&["ip", "link", "del", &self.name]);
    }
}

/// An `AF_PACKET` socket on the wire's far end, for the stamped frames'
/// EtherType only, opened inside the wire's namespace.
#[derive(Debug)]
pub struct WireSocket {
    fd: OwnedFd,
}

impl WireSocket {
    /// Open it: a thread enters `wire.ns` (a socket stays in the namespace
    /// it was made in) and binds to `wire.peer`.
    pub fn open(wire: &VethWire) -> Result<WireSocket, BenchError> {
        let ns = format!("/var/run/netns/{}", wire.ns);
        let peer = wire.peer.clone();
        let r = std::thread::spawn(move || -> std::io::Result<OwnedFd> {
            let f = std::fs::File::open(&ns)?;
            // SAFETY: `f` is an open namespace file; setns(2) changes only
            // this (short-lived) thread's network namespace.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let proto = ETHERTYPE.to_be();
            // SAFETY: socket(2) with constant arguments; the result is checked.
            let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
            if raw < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `raw` is a descriptor we own from here on.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let name = std::ffi::CString::new(peer).map_err(std::io::Error::other)?;
            // SAFETY: `name` is a NUL-terminated string.
            let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
            if index == 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: all-zero is a valid sockaddr_ll.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sa.sll_family = libc::AF_PACKET as u16;
            sa.sll_protocol = proto;
            sa.sll_ifindex = index as i32;
            // SAFETY: `sa` is a sockaddr_ll of the length passed.
            let rc = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(fd)
        })
        .join()
        .map_err(|_| BenchError::Failed("the namespace thread panicked".into()))?;
        let fd = r.map_err(|e| {
            BenchError::Failed(format!(
                "cannot open an AF_PACKET socket on {}: {e}",
                wire.peer
            ))
        })?;
        Ok(WireSocket { fd })
    }

    fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: `frame` is valid for its length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        n == frame.len() as isize
    }

    /// Wait up to `timeout` for a frame addressed to the wire; its stamp.
    fn recv_reply(&self, buf: &mut [u8], timeout: Duration) -> Option<Stamp> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, 1000) as i32;
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
                continue;
            }
            // SAFETY: `buf` is valid for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                continue;
            }
            // The socket sees our own requests leave too: only frames to us.
            if let Some(s) = reply_stamp(&buf[..n as usize]) {
                return Some(s);
            }
        }
    }
}

/// A stamped frame of `len` bytes (at least 64) from the wire to `dst`.
pub fn request_frame(dst: [u8; 6], len: usize, stamp: Stamp) -> Vec<u8> {
    let mut f = Vec::with_capacity(len.max(64));
    f.extend_from_slice(&dst);
    f.extend_from_slice(&WIRE_MAC);
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.extend_from_slice(&stamp_bytes(stamp));
    f.resize(len.max(14 + STAMP_LEN).max(60), 0xA5);
    f
}

/// The stamp of `frame` when it is a stamped frame addressed to the wire.
pub fn reply_stamp(frame: &[u8]) -> Option<Stamp> {
    let f = vadapt_wire::stamped_frame::parse_frame(frame)?;
    (f.dst == WIRE_MAC).then_some(f.stamp).flatten()
}

/// Sleep until `t` (the timer slack set small by the caller).
fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Make this thread's sleeps precise (1 µs slack, not 50) and pin it to `cpu`.
fn precise_thread(cpu: usize) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes an integer; no memory involved.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64) };
    // SAFETY: an all-zero cpu_set_t is empty; CPU_SET writes within it and
    // sched_setaffinity(0) reads it for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// What [`send_paced`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Paced {
    /// Frames the socket took.
    pub sent: u64,
    /// Frames it refused (its queue full).
    pub refused: u64,
    /// Seconds the sending took.
    pub elapsed: f64,
}

/// Send `pps` frames per second of `len` bytes to `dst` for `window`, from
/// a thread pinned to `cpu` (sends are spread in 100 µs slices).
pub fn send_paced(
    sock: &WireSocket,
    dst: [u8; 6],
    len: usize,
    pps: f64,
    window: Duration,
    cpu: usize,
) -> Paced {
    std::thread::scope(|s| {
        s.spawn(|| {
            precise_thread(cpu);
            let frame = request_frame(
                dst,
                len,
                Stamp {
                    seq: 0,
                    sent_ns: 0,
                    // Not a request the echo's thread 0 would time.
                    thread: u32::MAX,
                },
            );
            let t0 = Instant::now();
            let mut p = Paced::default();
            let slice = Duration::from_micros(100);
            loop {
                let el = t0.elapsed();
                if el >= window {
                    break;
                }
                let due = (el.as_secs_f64() * pps) as u64;
                while p.sent + p.refused < due {
                    if sock.send(&frame) {
                        p.sent += 1;
                    } else {
                        p.refused += 1;
                    }
                }
                sleep_until(t0 + el + slice);
            }
            p.elapsed = t0.elapsed().as_secs_f64();
            p
        })
        .join()
        .unwrap_or_default()
    })
}

/// Round trips of [`request_response`], ns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundTrips {
    /// Each answered request's round trip, ns, in order.
    pub rtt_ns: Vec<u64>,
    /// Requests without an answer within the timeout.
    pub lost: u64,
}

impl RoundTrips {
    /// The `q` quantile (0..=1) of the round trips, ns; `None` without any.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut v = self.rtt_ns.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        Some(v[i.min(v.len() - 1)] as f64)
    }
}

/// One request outstanding at a time to `dst` (a guest in echo mode),
/// started `rate` times a second (or at once after the previous answer,
/// when that came later), for `window`, from a thread pinned to `cpu`; each
/// answer awaited in `poll(2)`, as a kernel-stack client's would be.
pub fn request_response(
    sock: &WireSocket,
    dst: [u8; 6],
    len: usize,
    rate: f64,
    window: Duration,
    cpu: usize,
) -> RoundTrips {
    std::thread::scope(|s| {
        s.spawn(|| {
            precise_thread(cpu);
            let gap = Duration::from_secs_f64(1.0 / rate);
            let mut buf = vec![0u8; 2048];
            let mut out = RoundTrips::default();
            let t0 = Instant::now();
            let mut next = t0;
            let mut seq = 0u64;
            while t0.elapsed() < window {
                sleep_until(next);
                next += gap;
                let sent = Instant::now();
                let stamp = Stamp {
                    seq,
                    sent_ns: sent.duration_since(t0).as_nanos() as u64,
                    thread: 0,
                };
                seq += 1;
                if !sock.send(&request_frame(dst, len, stamp)) {
                    out.lost += 1;
                    continue;
                }
                // Answers to older, lost requests are skipped.
                loop {
                    match sock.recv_reply(&mut buf, Duration::from_millis(50)) {
                        Some(s) if s.seq == stamp.seq => {
                            out.rtt_ns.push(sent.elapsed().as_nanos() as u64);
                            break;
                        }
                        Some(_) => continue,
                        None => {
                            out.lost += 1;
                            break;
                        }
                    }
                }
                if next < Instant::now() {
                    next = Instant::now();
                }
            }
            out
        })
        .join()
        .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_a_stamped_frame_and_only_a_reply_to_the_wire_counts() {
        let guest = [2, 0, 0, 0, 0, 9];
        let st = Stamp {
            seq: 5,
            sent_ns: 77,
            thread: 0,
        };
        let f = request_frame(guest, 64, st);
        assert_eq!(f.len(), 64);
        let parsed = vadapt_wire::stamped_frame::parse_frame(&f).unwrap();
        assert_eq!(
            (parsed.dst, parsed.src, parsed.stamp),
            (guest, WIRE_MAC, Some(st))
        );
        // Our own request, seen leaving: not a reply.
        assert_eq!(reply_stamp(&f), None);
        // The echo's answer: addresses swapped, stamp kept.
        let mut r = f.clone();
        r[..6].copy_from_slice(&WIRE_MAC);
        r[6..12].copy_from_slice(&guest);
        assert_eq!(reply_stamp(&r), Some(st));
        // Runt sizes are padded to the Ethernet minimum.
        assert_eq!(request_frame(guest, 10, st).len(), 60);
    }

    #[test]
    fn quantiles_of_round_trips() {
        let r = RoundTrips {
            rtt_ns: (1..=100).rev().collect(),
            lost: 0,
        };
        assert_eq!(r.quantile(0.5), Some(51.0));
        assert_eq!(r.quantile(0.99), Some(99.0));
        assert_eq!(RoundTrips::default().quantile(0.5), None);
    }
}
