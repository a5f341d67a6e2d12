//! vhost-user message sequences into the data plane's real backend request
//! handler ([`Connection`] under the `vhost` crate's handler), through
//! the serve loop's own [`RequestStream`] (so also the requests the crate
//! leaves to vadapt: `SEND_RARP`, `SET_LOG_FD`), over a real
//! `UnixStream::pair()`: the harness is the frontend and writes each
//! message with `sendmsg` and `SCM_RIGHTS` (memfds, eventfds, pipe ends,
//! sockets), then the backend handles it.
//!
//! Most messages have a valid frame (a header whose `size` is the length
//! of a payload built from typed fields), so the fuzzer gets past the
//! header checks to memory tables, ring setup and feature negotiation in
//! any order; a running ring has a real queue worker, which the input can
//! kick and whose guest memory it can write. `Raw` bytes test the framing
//! itself. Errors are fine; panics, hangs and crashes are bugs.
//!
//! No thread per input, none per worker start: the connection is
//! [`Connection::stepped`], so the port's queues start and stop at every
//! ring message exactly as in the daemon, but no worker thread is spawned;
//! the harness runs the worker's passes itself ([`Connection::step`]) after
//! each operation: one pass at once (a worker woken early), then more while
//! the policy's wait says it is due. The passes are the worker's own
//! ([`PortQueues`](vadapt_dataplane::port::port_queues::PortQueues) under the
//! policy's executor, as a pool worker runs them), so the ring service, the
//! switch and the echo port run as in the daemon, on this thread.
//!
//! The harness never blocks by its own doing: the backend reads with
//! blocking I/O, so after a message that may leave a partial one in the
//! socket (raw bytes, more descriptors than the backend takes) the
//! frontend shuts its sending side down before the backend reads, and that
//! connection ends there. Replies are drained after every request.

use arbitrary::Arbitrary;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vadapt_dataplane::config::UnsealedMemory;
use vadapt_dataplane::config::VmPortConfig;
use vadapt_dataplane::metrics::PortStats;
use vadapt_dataplane::net::{offered_features, VHOST_USER_F_PROTOCOL_FEATURES};
use vadapt_dataplane::port::handler::{offered_protocol_features, Connection};
use vadapt_dataplane::port::serve::RequestStream;
use vadapt_dataplane::port::VmPort;
use vadapt_dataplane::switch::Echo;
use vadapt_dataplane::switch::Switch;
use vadapt_host::cpufreq::CpuFreq;
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_virtq::mem::{MappedRegion, MmapRegion};
use vadapt_virtq::{DriverQueue, GuestMemory, QueueLayout, RingFeatures, Seg};
use vadapt_wire::Mac;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// Most operations run per input.
pub const MAX_OPS: usize = 64;
/// Most passes of the worker after an operation, beyond the first.
const MAX_PASSES: usize = 3;
/// Longest payload sent (the protocol's limit is 4096: longer ones test it).
const MAX_PAYLOAD: usize = 8192;
/// Most descriptors the backend takes with one message (the `vhost`
/// crate's `MAX_ATTACHED_FD_ENTRIES`); with more, the kernel truncates the
/// control data and the backend loses its place in the stream.
const MAX_FDS: usize = 32;
/// Memfds of a memory table may be shorter than the region they back: the
/// daemon must refuse such a region (it checks each region against its
/// file's size at SET_MEM_TABLE), never map it and die of SIGBUS on the
/// first touch.
const SHORT_MEMFDS: bool = true;

/// One fuzz input: a port and the frontends' operations on it.
#[derive(Arbitrary, Debug)]
pub struct Input {
    /// Queue pairs of the port: 1, 2, 4 or 16 (bits 0-1); bit 2: the port
    /// has `mtu = 9000` (offers `VIRTIO_NET_F_MTU`, takes jumbo frames).
    pub queues: u8,
    /// The port's policy, an index into [`PolicyKind::ALL`].
    pub policy: u8,
    /// What the frontends do, in order (at most [`MAX_OPS`]).
    pub ops: Vec<Op>,
}

/// One frontend operation.
#[derive(Arbitrary, Debug)]
pub enum Op {
    /// A message with a valid frame: the header's `size` is the payload's length.
    Msg {
        /// Request code.
        req: Req,
        /// Header flags.
        flags: Flags,
        /// Payload.
        body: Body,
        /// Descriptors sent with it.
        fds: Fds,
    },
    /// Arbitrary bytes, perhaps a partial message: the frontend shuts down
    /// its sending side after them, and the connection ends.
    Raw {
        /// The bytes.
        bytes: Vec<u8>,
        /// Descriptors sent with them.
        fds: Vec<FdKind>,
    },
    /// The guest kicks a ring, through the kick eventfd it sent for it.
    Kick(u8),
    /// The guest writes its memory: a region of the last memory table sent.
    GuestWrite {
        /// Region (modulo the count).
        region: u8,
        /// Offset in the region's memfd (clamped to its length).
        offset: u32,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The frontend goes away; a new one connects for the next operation.
    Reconnect,
    /// What QEMU sends to start a device, as ordinary messages: features,
    /// a memory table of one 1 MiB region, then for each of the first
    /// rings its size, base, addresses, call and kick (and enable, with
    /// protocol features). The harness drives those rings as the guest.
    Start {
        /// Features acked (masked to those offered).
        features: u64,
        /// Rings set up: `min(2 + rings % 3, 2 * queues)`: a receive and a
        /// transmit ring at least.
        rings: u8,
        /// Ring size: `1 << (size % 9)`.
        size: u8,
        /// The memfd's length, if not the region's (see [`SHORT_MEMFDS`]).
        short: Option<u32>,
    },
    /// The guest reaps a started ring's used entries, then adds a buffer
    /// (an Ethernet frame to `dst` in its first segment) and kicks. Zeros
    /// (what `arbitrary` gives once the input runs out) make a well-formed
    /// buffer: full-size segments the right way round for the ring.
    Post {
        /// Ring (modulo the rings started): even receive, odd transmit.
        ring: u8,
        /// Segments (at most 8): see [`Seg1`].
        segs: (Seg1, Vec<Seg1>),
        /// First byte of the frame's destination MAC (0xff: broadcast).
        dst: u8,
    },
}

/// A segment of a posted buffer: its length (receive ring: `len % 2049`,
/// 0 for a whole 2 KiB buffer; transmit ring: `len % 257`, 0 for 72 bytes,
/// a header and a minimal frame, so that most frames are not oversized),
/// and 1 to give the device the wrong access for the ring (read for a
/// receive ring, write for a transmit ring; any other value, the right one:
/// one wrong segment spoils the whole buffer, so it is the rare case).
pub type Seg1 = (u16, u8);

/// Request codes (`vhost::vhost_user::message::FrontendReq`), or any.
#[derive(Arbitrary, Debug, Clone, Copy)]
#[allow(missing_docs)]
pub enum Req {
    GetFeatures,
    SetFeatures,
    SetOwner,
    ResetOwner,
    SetMemTable,
    SetLogBase,
    SetLogFd,
    SendRarp,
    SetVringNum,
    SetVringAddr,
    SetVringBase,
    GetVringBase,
    SetVringKick,
    SetVringCall,
    SetVringErr,
    GetProtocolFeatures,
    SetProtocolFeatures,
    GetQueueNum,
    SetVringEnable,
    SetBackendReqFd,
    GetConfig,
    SetConfig,
    GetInflightFd,
    SetInflightFd,
    ResetDevice,
    GetMaxMemSlots,
    AddMemReg,
    RemMemReg,
    SetDeviceStateFd,
    CheckDeviceState,
    GetShmemConfig,
    Code(u32),
}

impl Req {
    fn code(self) -> u32 {
        match self {
            Req::GetFeatures => 1,
            Req::SetFeatures => 2,
            Req::SetOwner => 3,
            Req::ResetOwner => 4,
            Req::SetMemTable => 5,
            Req::SetLogBase => 6,
            Req::SetLogFd => 7,
            Req::SendRarp => 19,
            Req::SetVringNum => 8,
            Req::SetVringAddr => 9,
            Req::SetVringBase => 10,
            Req::GetVringBase => 11,
            Req::SetVringKick => 12,
            Req::SetVringCall => 13,
            Req::SetVringErr => 14,
            Req::GetProtocolFeatures => 15,
            Req::SetProtocolFeatures => 16,
            Req::GetQueueNum => 17,
            Req::SetVringEnable => 18,
            Req::SetBackendReqFd => 21,
            Req::GetConfig => 24,
            Req::SetConfig => 25,
            Req::GetInflightFd => 31,
            Req::SetInflightFd => 32,
            Req::ResetDevice => 34,
            Req::GetMaxMemSlots => 36,
            Req::AddMemReg => 37,
            Req::RemMemReg => 38,
            Req::SetDeviceStateFd => 42,
            Req::CheckDeviceState => 43,
            Req::GetShmemConfig => 44,
            Req::Code(c) => c,
        }
    }
}

/// Header flags: version 1, version 1 asking for a reply, or any bits.
#[derive(Arbitrary, Debug, Clone, Copy)]
#[allow(missing_docs)]
pub enum Flags {
    V1,
    V1NeedReply,
    Bits(u32),
}

/// A message payload, built from typed fields.
#[derive(Arbitrary, Debug)]
pub enum Body {
    /// No payload.
    Empty,
    /// Any `u64`.
    U64(u64),
    /// Virtio feature bits, masked to those the daemon offers.
    Features(u64),
    /// Protocol feature bits, masked to those the daemon offers.
    ProtocolFeatures(u64),
    /// `VhostUserVringState`.
    VringState {
        /// Ring.
        index: u8,
        /// Size, base or enable.
        num: Num,
    },
    /// `VhostUserVringAddr` (ring addresses are frontend virtual addresses).
    VringAddr {
        /// Ring.
        index: u8,
        /// Flags (bit 0: log).
        flags: u32,
        /// Descriptor table.
        desc: Addr,
        /// Used ring.
        used: Addr,
        /// Available ring.
        avail: Addr,
        /// Log address.
        log: u64,
    },
    /// A ring's kick/call/err message: the index and the "no fd" bit; with
    /// [`Fds::Auto`], an eventfd is sent unless `no_fd`.
    VringFd {
        /// Ring.
        index: u8,
        /// Bit 8: no descriptor (polling).
        no_fd: bool,
    },
    /// `VhostUserMemory` and its regions; with [`Fds::Auto`], one memfd each.
    MemTable(Vec<Region>),
    /// `VhostUserSingleMemoryRegion`; with [`Fds::Auto`], one memfd.
    SingleRegion(Region),
    /// `VhostUserConfig` followed by `size` zero bytes.
    Config {
        /// Offset in the config space.
        offset: u16,
        /// Bytes asked for.
        size: u8,
        /// Flags.
        flags: u32,
    },
    /// Any bytes.
    Bytes(Vec<u8>),
}

/// A 32-bit number: a ring size, a small number, or any.
#[derive(Arbitrary, Debug, Clone, Copy)]
#[allow(missing_docs)]
pub enum Num {
    PowerOfTwo(u8),
    Small(u8),
    Any(u32),
}

impl Num {
    fn get(self) -> u32 {
        match self {
            Num::PowerOfTwo(n) => 1 << (n % 17),
            Num::Small(n) => n.into(),
            Num::Any(n) => n,
        }
    }
}

/// An address or offset: page-aligned, 16-byte-aligned and small, or any.
#[derive(Arbitrary, Debug, Clone, Copy)]
#[allow(missing_docs)]
pub enum Addr {
    Page(u8),
    Slot(u16),
    Any(u64),
}

impl Addr {
    fn get(self) -> u64 {
        match self {
            Addr::Page(n) => u64::from(n) * 4096,
            Addr::Slot(n) => u64::from(n) * 16,
            Addr::Any(n) => n,
        }
    }
}

/// A region length: whole pages (1..=256), or any.
#[derive(Arbitrary, Debug, Clone, Copy)]
#[allow(missing_docs)]
pub enum Size {
    Pages(u8),
    Any(u64),
}

/// A memory region and the memfd made for it.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Region {
    /// Guest physical address.
    pub gpa: Addr,
    /// Length.
    pub size: Size,
    /// Frontend virtual address.
    pub uva: Addr,
    /// Offset of the region in its file.
    pub offset: Addr,
    /// The memfd's length: exactly `offset + size`, or this many bytes
    /// (see [`SHORT_MEMFDS`]).
    pub short: Option<u32>,
}

impl Region {
    fn size(&self) -> u64 {
        match self.size {
            Size::Pages(n) => (u64::from(n) + 1) * 4096,
            Size::Any(n) => n,
        }
    }

    fn bytes(&self, out: &mut Vec<u8>) {
        for v in [
            self.gpa.get(),
            self.size(),
            self.uva.get(),
            self.offset.get(),
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
    }

    /// The memfd's length.
    fn file_len(&self) -> u64 {
        let fit = self.offset.get().saturating_add(self.size());
        match self.short {
            Some(n) if SHORT_MEMFDS => n.into(),
            Some(n) => fit.max(n.into()),
            None => fit,
        }
    }
}

/// Which descriptors go with a message.
#[derive(Arbitrary, Debug)]
pub enum Fds {
    /// What the body calls for (see [`Body`]).
    Auto,
    /// None.
    None,
    /// These.
    Explicit(Vec<FdKind>),
}

/// A descriptor the frontend can send.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum FdKind {
    /// A memfd of this length.
    Memfd(u32),
    /// An eventfd.
    EventFd,
    /// The read end of a pipe.
    PipeRead,
    /// The write end of a pipe.
    PipeWrite,
    /// One end of a Unix stream socket pair.
    Socket,
}

fn check(r: libc::c_int) -> Option<OwnedFd> {
    // SAFETY: `r` is a descriptor a successful libc call just returned to us.
    (r >= 0).then(|| unsafe { OwnedFd::from_raw_fd(r) })
}

fn memfd(len: u64) -> Option<File> {
    // SAFETY: a NUL-terminated name and flags; no other pointers.
    let fd = check(unsafe { libc::memfd_create(c"vadapt-fuzz".as_ptr(), libc::MFD_CLOEXEC) })?;
    let f = File::from(fd);
    // Sparse: only the pages written take memory. Too long for a file:
    // left empty (then too long to map as well).
    let _ = f.set_len(len.min(i64::MAX as u64));
    Some(f)
}

fn eventfd() -> Option<File> {
    // SAFETY: eventfd takes no pointers.
    check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).map(File::from)
}

impl FdKind {
    fn make(self) -> Option<OwnedFd> {
        match self {
            FdKind::Memfd(len) => memfd(len.into()).map(OwnedFd::from),
            FdKind::EventFd => eventfd().map(OwnedFd::from),
            FdKind::PipeRead | FdKind::PipeWrite => {
                let mut p = [-1; 2];
                // SAFETY: `p` has room for the two descriptors pipe2 writes.
                if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                    return None;
                }
                let (r, w) = (check(p[0])?, check(p[1])?);
                Some(if matches!(self, FdKind::PipeRead) {
                    r
                } else {
                    w
                })
            }
            FdKind::Socket => UnixStream::pair().ok().map(|(a, _)| a.into()),
        }
    }
}

/// Frames queued per queue pair (`backlog` in the config; default 1024):
/// small, because every worker start allocates and zeroes a batch this
/// large per queue pair, and workers start after most messages here.
const BACKLOG: usize = 32;

/// A fresh port on a fresh switch with an echo port, built as
/// `Daemon::start` builds them: frames the guest sends come back to it.
/// The port reaches the switch by a weak handle, as a daemon's does: the
/// caller keeps the switch (both are freed with the input).
fn new_port(queues: u16, mtu: Option<u16>, policy: PolicyConfig) -> (Arc<VmPort>, Arc<Switch>) {
    let switch = Arc::new(Switch::new(Duration::from_secs(300)));
    let cfg = VmPortConfig {
        name: "fuzz".into(),
        socket: "/nonexistent/vadapt-fuzz.sock".into(),
        mode: Default::default(),
        qmp: None,
        qemu_pidfile: None,
        qga: None,
        guest_iface: None,
        role: Default::default(),
        mtu,
        queues,
        mac: None,
        policy: None,
        limits: Default::default(),
        // Offered: an input that acks it gets packed rings over whatever
        // the harness's split driver wrote, which the packed device must
        // survive as it survives any memory.
        packed: true,
        rss: true,
        // The harness's memfds are not sealed: accepting them keeps the
        // fuzzer past the memory table and exercises the SIGBUS guard.
        unsealed_memory: UnsealedMemory::Accept,
        port_security: true,
        allowed_macs: Vec::new(),
        allowed_ips: Vec::new(),
        max_learned: None,
        vlan: None,
    };
    let freq = Arc::new(CpuFreq::unavailable("fuzzing"));
    let vm =
        VmPort::new(cfg, policy, BACKLOG, None, freq, None).expect("creating a port (an eventfd)");
    let id = switch.add_port(vm.clone(), Arc::clone(&vm.stats));
    vm.attach(switch.ingress(id));
    let stats = Arc::new(PortStats::new(
        "echo",
        vadapt_dataplane::metrics::PortKind::Echo,
        1,
    ));
    let echo = Arc::new(Echo::new(Arc::clone(&stats)));
    let id = switch.add_port(echo.clone(), stats);
    echo.attach(switch.ingress(id));
    switch.add_static(Mac::from_name("echo"), id);
    (vm, switch)
}

/// Guest memory of [`Op::Start`]: rings at `RING_STRIDE * i`, buffers above.
const START_MEM: u64 = 1 << 20;
const RING_STRIDE: u64 = 16 << 10;
const BUFFERS: u64 = START_MEM / 2;
const BUFFER_LEN: u64 = 2048;

/// One frontend connection.
struct Session {
    front: UnixStream,
    requests: RequestStream,
    conn: Arc<Mutex<Connection>>,
    /// Memfds of the last memory table sent (the guest's memory).
    guest: Vec<File>,
    /// Kick eventfds sent, by ring.
    kicks: Vec<(u8, File)>,
    /// The guest's drivers of the rings [`Op::Start`] set up, by ring.
    drivers: Vec<(u8, DriverQueue)>,
    /// Buffers handed out so far (the next one's slot).
    next_buffer: u64,
    /// Queue pairs of the port.
    queues: u16,
    /// The features the port offers, with `VHOST_USER_F_PROTOCOL_FEATURES`:
    /// what the frontend's acks are masked with.
    offered: u64,
}

impl Session {
    /// What `serve` does when a frontend connects.
    fn connect(port: &Arc<VmPort>) -> Session {
        let (front, back) = UnixStream::pair().expect("socketpair");
        front.set_nonblocking(true).expect("O_NONBLOCK");
        if let Some(i) = port.ingress() {
            i.learn_if_unknown(port.mac);
        }
        let conn = Arc::new(Mutex::new(Connection::stepped(Arc::clone(port))));
        let requests = RequestStream::new(back, Arc::clone(&conn));
        Session {
            front,
            requests,
            conn,
            guest: Vec::new(),
            kicks: Vec::new(),
            drivers: Vec::new(),
            next_buffer: 0,
            queues: port.cfg.queues,
            offered: offered_features(port.cfg.mtu, port.cfg.packed, port.cfg.rss)
                | VHOST_USER_F_PROTOCOL_FEATURES,
        }
    }

    /// What `serve` does when the connection ends: reset the port.
    fn close(self) {
        let Session {
            front,
            requests,
            conn,
            ..
        } = self;
        drop((front, requests));
        conn.lock().unwrap_or_else(|e| e.into_inner()).reset();
    }

    /// Handle one request as `serve` does; false when it would close the
    /// connection.
    fn serve_one(&mut self) -> bool {
        let go = self.requests.serve_next("fuzz");
        self.drain_replies();
        go
    }

    /// Read and drop whatever the backend answered (closing any descriptor).
    fn drain_replies(&self) {
        let mut buf = [0u8; 4096];
        let mut fds = [-1 as RawFd; MAX_FDS];
        loop {
            let mut iov = [libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            }];
            // SAFETY: the iovec points into `buf`, which outlives the call.
            match unsafe { self.front.recv_with_fds(&mut iov, &mut fds) } {
                Ok((0, _)) | Err(_) => return,
                Ok((_, n)) => {
                    for &fd in &fds[..n] {
                        // SAFETY: a descriptor just received, owned by nobody else.
                        drop(unsafe { OwnedFd::from_raw_fd(fd) });
                    }
                }
            }
        }
    }

    /// Send `bytes` with `fds` and let the backend handle them; false when
    /// the connection is over.
    fn send_and_serve(&mut self, bytes: &[u8], fds: &[OwnedFd], whole_message: bool) -> bool {
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let sent = bytes.is_empty()
            || matches!(self.front.send_with_fds(&[bytes], &raw), Ok(n) if n == bytes.len());
        if sent && whole_message && fds.len() <= MAX_FDS {
            return self.serve_one();
        }
        // The backend may be left waiting for the rest of a message: give
        // it the end of the stream instead, and let it read to there.
        let _ = self.front.shutdown(std::net::Shutdown::Write);
        for _ in 0..1024 {
            if !self.serve_one() {
                break;
            }
        }
        false
    }

    /// Run one operation, then the worker's passes it calls for; false
    /// when the connection is over.
    fn run(&mut self, op: &Op) -> bool {
        let more = self.op(op);
        self.passes();
        more
    }

    /// The worker's passes after an operation (what a worker thread would
    /// have done meanwhile): one at once, then up to [`MAX_PASSES`] more
    /// while its wait has ended.
    fn passes(&self) {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if conn.step(true) {
            for _ in 0..MAX_PASSES {
                if !conn.step(false) {
                    break;
                }
            }
        }
    }

    /// Run one operation; false when the connection is over.
    fn op(&mut self, op: &Op) -> bool {
        match op {
            Op::Msg {
                req,
                flags,
                body,
                fds,
            } => self.message(*req, *flags, body, fds),
            Op::Raw { bytes, fds } => {
                let fds: Vec<OwnedFd> = fds.iter().filter_map(|k| k.make()).collect();
                self.send_and_serve(&bytes[..bytes.len().min(MAX_PAYLOAD)], &fds, false)
            }
            Op::Kick(ring) => {
                if let Some((_, f)) = self.kicks.iter().rev().find(|(r, _)| r == ring) {
                    let _ = (&*f).write(&1u64.to_ne_bytes());
                }
                true
            }
            Op::GuestWrite {
                region,
                offset,
                bytes,
            } => {
                if !self.guest.is_empty() {
                    let f = &self.guest[usize::from(*region) % self.guest.len()];
                    let len = f.metadata().map_or(0, |m| m.len());
                    // Inside the file only: a write past its end would grow it.
                    let n = (bytes.len() as u64).min(len);
                    let at = u64::from(*offset).min(len - n);
                    let _ = f.write_at(&bytes[..n as usize], at);
                }
                true
            }
            Op::Reconnect => false,
            Op::Start {
                features,
                rings,
                size,
                short,
            } => self.start(*features, *rings, *size, *short),
            Op::Post { ring, segs, dst } => {
                let all: Vec<Seg1> = std::iter::once(segs.0)
                    .chain(segs.1.iter().copied())
                    .collect();
                self.post(*ring, &all, *dst);
                true
            }
        }
    }

    /// [`Op::Start`].
    fn start(&mut self, features: u64, rings: u8, size: u8, short: Option<u32>) -> bool {
        let features = features & self.offered;
        let size = 1u16 << (size % 9);
        let v1 = Flags::V1;
        if !self.message(Req::SetFeatures, v1, &Body::Features(features), &Fds::Auto) {
            return false;
        }
        let region = Region {
            gpa: Addr::Any(0),
            size: Size::Any(START_MEM),
            uva: Addr::Any(0),
            offset: Addr::Any(0),
            short,
        };
        let table = Body::MemTable(vec![region]);
        if !self.message(Req::SetMemTable, v1, &table, &Fds::Auto) {
            return false;
        }
        // The guest's own view; not with a memfd shorter than the region
        // (the guest itself would die of SIGBUS).
        let mem = self.guest.first().and_then(|f| {
            if f.metadata().ok()?.len() < START_MEM {
                return None;
            }
            let mapping = Arc::new(MmapRegion::map_file(f, 0, START_MEM).ok()?);
            GuestMemory::from_mapped(vec![MappedRegion {
                gpa: 0,
                uva: 0,
                size: START_MEM,
                mapping,
                offset: 0,
            }])
            .ok()
        });
        self.drivers.clear();
        // At most 4: each message restarts the worker.
        let n = (2 + u16::from(rings) % 3).min(2 * self.queues);
        for i in 0..n as u8 {
            let (layout, _) = QueueLayout::contiguous(size, u64::from(i) * RING_STRIDE);
            let rf = RingFeatures::from_bits(features);
            if let Some(drv) = mem
                .as_ref()
                .and_then(|m| DriverQueue::new(m, layout, rf).ok())
            {
                self.drivers.push((i, drv));
            }
            let state = |num| Body::VringState {
                index: i,
                num: Num::Any(num),
            };
            let addr = Body::VringAddr {
                index: i,
                flags: 0,
                desc: Addr::Any(layout.desc),
                used: Addr::Any(layout.used),
                avail: Addr::Any(layout.avail),
                log: 0,
            };
            let fd = || Body::VringFd {
                index: i,
                no_fd: false,
            };
            let mut msgs = vec![
                (Req::SetVringNum, state(size.into())),
                (Req::SetVringBase, state(0)),
                (Req::SetVringAddr, addr),
                (Req::SetVringCall, fd()),
                (Req::SetVringKick, fd()),
            ];
            if features & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
                msgs.push((Req::SetVringEnable, state(1)));
            }
            for (req, body) in &msgs {
                if !self.message(*req, v1, body, &Fds::Auto) {
                    return false;
                }
            }
        }
        true
    }

    /// [`Op::Post`].
    fn post(&mut self, ring: u8, segs: &[Seg1], dst: u8) {
        if self.drivers.is_empty() {
            return;
        }
        let k = usize::from(ring) % self.drivers.len();
        let (index, drv) = &mut self.drivers[k];
        let receive = *index % 2 == 0;
        while drv.pop_used().is_some() {}
        let segs: Vec<Seg> = segs
            .iter()
            .take(8)
            .map(|&(len, wrong_way)| {
                let wrong_way = wrong_way == 1;
                let gpa = BUFFERS + (self.next_buffer % (BUFFERS / BUFFER_LEN)) * BUFFER_LEN;
                self.next_buffer += 1;
                let len = match (receive, u32::from(len)) {
                    (true, n) if n % 2049 == 0 => BUFFER_LEN as u32,
                    (true, n) => n % 2049,
                    (false, n) if n % 257 == 0 => 72,
                    (false, n) => n % 257,
                };
                Seg {
                    gpa,
                    len,
                    writable: receive != wrong_way,
                }
            })
            .collect();
        // A frame for the first segment: virtio-net header, Ethernet header.
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[dst, 0, 0, 0, 0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 8, 0]);
        frame.resize(64, 0);
        let _ = drv.memory().write(segs[0].gpa, &frame);
        if drv.add(&segs).is_ok() {
            drv.publish();
            let _ = drv.kick_prepare();
            let index = *index;
            if let Some((_, f)) = self.kicks.iter().rev().find(|(r, _)| *r == index) {
                let _ = (&*f).write(&1u64.to_ne_bytes());
            }
        }
    }

    fn message(&mut self, req: Req, flags: Flags, body: &Body, fds: &Fds) -> bool {
        let mut payload = Vec::new();
        let mut auto: Vec<OwnedFd> = Vec::new();
        match body {
            Body::Empty => {}
            Body::U64(v) => payload.extend_from_slice(&v.to_ne_bytes()),
            Body::Features(v) => {
                payload.extend_from_slice(&(v & self.offered).to_ne_bytes());
            }
            Body::ProtocolFeatures(v) => {
                let offered = offered_protocol_features().bits();
                payload.extend_from_slice(&(v & offered).to_ne_bytes());
            }
            Body::VringState { index, num } => {
                payload.extend_from_slice(&u32::from(*index).to_ne_bytes());
                payload.extend_from_slice(&num.get().to_ne_bytes());
            }
            Body::VringAddr {
                index,
                flags,
                desc,
                used,
                avail,
                log,
            } => {
                payload.extend_from_slice(&u32::from(*index).to_ne_bytes());
                payload.extend_from_slice(&flags.to_ne_bytes());
                for v in [desc.get(), used.get(), avail.get(), *log] {
                    payload.extend_from_slice(&v.to_ne_bytes());
                }
            }
            Body::VringFd { index, no_fd } => {
                let v = u64::from(*index) | if *no_fd { 0x100 } else { 0 };
                payload.extend_from_slice(&v.to_ne_bytes());
                if !no_fd {
                    auto.extend(eventfd().map(OwnedFd::from));
                }
            }
            Body::MemTable(regions) => {
                let regions = &regions[..regions.len().min(MAX_FDS + 2)];
                payload.extend_from_slice(&(regions.len() as u32).to_ne_bytes());
                payload.extend_from_slice(&0u32.to_ne_bytes());
                for r in regions {
                    r.bytes(&mut payload);
                    auto.extend(memfd(r.file_len()).map(OwnedFd::from));
                }
            }
            Body::SingleRegion(r) => {
                payload.extend_from_slice(&0u64.to_ne_bytes());
                r.bytes(&mut payload);
                auto.extend(memfd(r.file_len()).map(OwnedFd::from));
            }
            Body::Config {
                offset,
                size,
                flags,
            } => {
                for v in [u32::from(*offset), u32::from(*size), *flags] {
                    payload.extend_from_slice(&v.to_ne_bytes());
                }
                payload.resize(payload.len() + usize::from(*size), 0);
            }
            Body::Bytes(b) => payload.extend_from_slice(&b[..b.len().min(MAX_PAYLOAD)]),
        }
        let fds = match fds {
            Fds::Auto => auto,
            Fds::None => Vec::new(),
            Fds::Explicit(kinds) => kinds
                .iter()
                .take(MAX_FDS + 2)
                .filter_map(|k| k.make())
                .collect(),
        };
        // Keep what the guest side needs: its memory and its kicks.
        let req_code = req.code();
        if req_code == Req::SetMemTable.code() {
            self.guest = fds
                .iter()
                .filter_map(|f| f.try_clone().ok().map(File::from))
                .collect();
        }
        if let (Req::SetVringKick, Body::VringFd { index, .. }) = (req, body) {
            if let Some(f) = fds.first().and_then(|f| f.try_clone().ok()) {
                self.kicks.push((*index, File::from(f)));
            }
        }
        let flags = match flags {
            Flags::V1 => 0x1,
            Flags::V1NeedReply => 0x9,
            Flags::Bits(b) => b,
        };
        let mut msg = Vec::with_capacity(12 + payload.len());
        for v in [req_code, flags, payload.len() as u32] {
            msg.extend_from_slice(&v.to_ne_bytes());
        }
        msg.extend_from_slice(&payload);
        self.send_and_serve(&msg, &fds, true)
    }
}

/// Run one input: a fresh port, its frontends' operations, each
/// connection reset as `serve` resets it, and everything closed.
pub fn run(input: &Input) {
    let queues = [1, 2, 4, 16][usize::from(input.queues % 4)];
    let kind = PolicyKind::ALL[usize::from(input.policy) % PolicyKind::ALL.len()];
    let mtu = (input.queues & 4 != 0).then_some(9000);
    let (port, _switch) = new_port(queues, mtu, PolicyConfig::default_for(kind));
    let mut session: Option<Session> = None;
    for op in input.ops.iter().take(MAX_OPS) {
        let s = session.get_or_insert_with(|| Session::connect(&port));
        if !s.run(op) {
            session.take().expect("a session").close();
        }
    }
    if let Some(s) = session {
        s.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness reaches the data path: a started port's worker takes a
    /// broadcast frame from the transmit ring, and the echo port's answer
    /// lands in a receive buffer.
    #[test]
    fn a_started_port_moves_frames_both_ways() {
        let _one = crate::tests::serial();
        // In a thread of its own, joined before the next test counts
        // descriptors: the echo's thread-local forwarding cache holds the
        // port (and its eventfd) until its thread's destructors run.
        std::thread::spawn(moves_frames_both_ways)
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
    }

    fn moves_frames_both_ways() {
        let (port, _switch) = new_port(1, None, PolicyConfig::default_for(PolicyKind::Interrupt));
        let mut s = Session::connect(&port);
        let start = Op::Start {
            features: u64::MAX & !(1 << 34), // split rings: the harness drives them
            rings: 1,
            size: 8,
            short: None,
        };
        assert!(s.run(&start));
        assert_eq!(s.drivers.len(), 2);
        let rx = Op::Post {
            ring: 0,
            segs: ((0, 0), vec![]),
            dst: 0,
        };
        let tx = Op::Post {
            ring: 1,
            segs: ((0, 0), vec![]),
            dst: 0xff,
        };
        assert!(s.run(&rx) && s.run(&tx));
        // No thread: the worker's passes run here, after each operation.
        let (mut sent, mut received) = (false, false);
        for _ in 0..4 {
            sent |= s.drivers[1].1.pop_used().is_some();
            received |= s.drivers[0].1.pop_used().is_some();
            s.passes();
        }
        assert!(sent, "the worker never took the transmit buffer");
        assert!(received, "the echo never came back to the receive ring");
        s.close();
    }

    /// Every input closes what it opened.
    #[test]
    fn no_descriptor_outlives_its_input() {
        let _one = crate::tests::serial();
        let start = || Op::Start {
            features: u64::MAX,
            rings: 3,
            size: 4,
            short: None,
        };
        let explicit = Fds::Explicit(vec![
            FdKind::Memfd(4096),
            FdKind::EventFd,
            FdKind::PipeRead,
            FdKind::PipeWrite,
            FdKind::Socket,
        ]);
        let inputs = [
            vec![start(), Op::Kick(1), Op::Reconnect, start()],
            vec![
                start(),
                Op::Msg {
                    req: Req::GetVringBase,
                    flags: Flags::V1,
                    body: Body::VringState {
                        index: 1,
                        num: Num::Small(0),
                    },
                    fds: Fds::Auto,
                },
                Op::Raw {
                    bytes: vec![5, 0, 0, 0, 1, 0, 0, 0, 64, 0],
                    fds: vec![FdKind::EventFd, FdKind::Memfd(8192)],
                },
            ],
            vec![Op::Msg {
                req: Req::SetBackendReqFd,
                flags: Flags::V1NeedReply,
                body: Body::Empty,
                fds: explicit,
            }],
            vec![Op::Msg {
                req: Req::SetVringCall,
                flags: Flags::V1,
                body: Body::VringFd {
                    index: 0,
                    no_fd: false,
                },
                fds: Fds::Explicit(vec![FdKind::EventFd; MAX_FDS + 1]),
            }],
        ];
        for ops in inputs {
            let input = Input {
                queues: 1,
                policy: 3,
                ops,
            };
            run(&input); // warm-up: lazily opened files stay open
            let before = crate::open_fds();
            for _ in 0..3 {
                run(&input);
            }
            assert_eq!(crate::open_fds(), before, "{input:?}");
        }
    }
}
