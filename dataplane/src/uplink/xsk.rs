//! One AF_XDP socket on one NIC queue, over a UMEM of its own: its fill,
//! completion, RX and TX rings, and the frames that cycle through them.
//!
//! The UMEM's frames are split in two fixed halves. The receive half
//! cycles fill ring → RX ring → (copied out) → fill ring, so the fill ring
//! (as large as the half) always has room for a frame given back. The
//! transmit half cycles free list → TX ring → completion ring → free list.
//! No frame is ever in two places, and a frame the kernel hands back that
//! is not one of ours is counted and forgotten, never used.

use super::libxdp::{self, XdpDesc, XskRing, XskSocketConfig, XskUmemConfig};
pub use crate::config::XskMode;
use std::ffi::CString;
use std::os::fd::RawFd;

/// Bytes per UMEM frame: one page, the largest an aligned UMEM takes.
pub const FRAME_SIZE: u32 = 4096;
/// Entries of each ring, and frames of each half of the UMEM.
pub const RING_SIZE: u32 = 2048;
const FRAMES: u64 = 2 * RING_SIZE as u64;
/// How soon a worker retries a TX ring whose last kick moved nothing
/// ([`XskQueue::tx_stalled`]): soon enough for a zero-copy driver that
/// completes asynchronously, far from a spin on a link that is down.
pub const TX_STALL_RETRY: vadapt_policy::Duration = vadapt_policy::Duration::from_millis(1);
/// The largest frame one UMEM frame holds (no multi-buffer).
pub const MAX_XSK_FRAME: usize = FRAME_SIZE as usize;

/// Errors opening an AF_XDP socket.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// The UMEM's memory could not be mapped.
    #[error("cannot map {bytes} bytes for the UMEM")]
    MapUmem {
        /// Size asked for.
        bytes: u64,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// libxdp refused the UMEM (`xsk_umem__create`).
    #[error("cannot register the UMEM with the kernel")]
    CreateUmem(#[source] std::io::Error),
    /// libxdp could not load the program or bind the socket
    /// (`xsk_socket__create`).
    #[error("cannot bind an AF_XDP socket to queue {queue} of `{iface}` in {mode} mode")]
    CreateSocket {
        /// Interface.
        iface: String,
        /// NIC queue.
        queue: u32,
        /// Mode asked for.
        mode: XskMode,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// libxdp could not be loaded.
    #[error(transparent)]
    Library(#[from] libxdp::LibraryError),
    /// The interface name has a NUL byte.
    #[error("interface name `{0}` has a NUL byte")]
    BadName(String),
}

impl XskError {
    fn is_busy(&self) -> bool {
        matches!(self, XskError::CreateSocket { source, .. } if source.raw_os_error() == Some(libc::EBUSY))
    }
}

/// What one call to [`XskQueue::receive`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Frames taken off the RX ring (each handed to the callback, or
    /// counted in `foreign`).
    pub frames: u32,
    /// Descriptors whose address or length lay outside our receive frames:
    /// dropped, their frame (if any) not given back.
    pub foreign: u32,
}

/// The four rings, at an address that stays put.
#[derive(Debug, Default)]
struct Rings {
    fill: XskRing,
    comp: XskRing,
    rx: XskRing,
    tx: XskRing,
}

/// An AF_XDP socket bound to one NIC queue, with its UMEM.
#[derive(Debug)]
pub struct XskQueue {
    area: *mut u8,
    umem: *mut libxdp::XskUmem,
    xsk: *mut libxdp::XskSocket,
    /// libxdp keeps pointers to these (it unmaps the rings through them
    /// when the socket and the UMEM go): boxed, so that they never move.
    rings: Box<Rings>,
    /// Transmit frames not in the TX ring nor the completion ring.
    free_tx: Vec<u64>,
    /// Receive frames handed out by the RX ring, waiting to go back into
    /// the fill ring.
    refill: Vec<u64>,
    /// The mode the socket was bound in: copy or zerocopy.
    mode: XskMode,
    /// Whether the last kick moved the TX ring (or none was needed): a
    /// kick that moved nothing (the link down, the driver busy) is not
    /// retried at once, see [`XskQueue::tx_stalled`].
    tx_moved: bool,
    fd: RawFd,
}

// SAFETY: the raw pointers are the UMEM mapping and libxdp's objects, owned
// by this value alone and used only through `&mut self` (one worker).
unsafe impl Send for XskQueue {}

impl XskQueue {
    /// An AF_XDP socket on queue `queue` of `iface` in `mode`
    /// (`Auto`: zero-copy first, then copy). libxdp loads and attaches its
    /// default redirect program to the interface on the first socket.
    pub fn open(iface: &str, queue: u32, mode: XskMode) -> Result<Self, XskError> {
        let name = CString::new(iface).map_err(|_| XskError::BadName(iface.into()))?;
        let tries: &[XskMode] = match mode {
            XskMode::Auto => &[XskMode::Zerocopy, XskMode::Copy],
            XskMode::Copy => &[XskMode::Copy],
            XskMode::Zerocopy => &[XskMode::Zerocopy],
        };
        let mut last = None;
        for &m in tries {
            // The kernel lets a queue go some time after its last socket
            // closed (the UMEM's release is deferred): a restart or a
            // reload may find it busy for a moment.
            for _ in 0..50 {
                match Self::open_in(&name, iface, queue, m) {
                    Ok(q) => return Ok(q),
                    Err(e) if e.is_busy() => {
                        last = Some(e);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    Err(e) => {
                        last = Some(e);
                        break;
                    }
                }
            }
        }
        Err(last.expect("at least one mode tried"))
    }

    fn open_in(name: &CString, iface: &str, queue: u32, mode: XskMode) -> Result<Self, XskError> {
        let lib = libxdp::libxdp().map_err(XskError::Library)?;
        let bytes = FRAMES * u64::from(FRAME_SIZE);
        // SAFETY: a fresh private anonymous mapping; checked below.
        let area = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if area == libc::MAP_FAILED {
            return Err(XskError::MapUmem {
                bytes,
                source: std::io::Error::last_os_error(),
            });
        }
        let mut q = XskQueue {
            area: area.cast(),
            umem: std::ptr::null_mut(),
            xsk: std::ptr::null_mut(),
            rings: Box::default(),
            free_tx: (u64::from(RING_SIZE)..FRAMES)
                .map(|i| i * u64::from(FRAME_SIZE))
                .collect(),
            refill: Vec::with_capacity(RING_SIZE as usize),
            mode,
            tx_moved: true,
            fd: -1,
        };
        let ucfg = XskUmemConfig {
            fill_size: RING_SIZE,
            comp_size: RING_SIZE,
            frame_size: FRAME_SIZE,
            frame_headroom: 0,
            flags: 0,
        };
        // SAFETY: `area` is `bytes` long and page-aligned and outlives the
        // UMEM (unmapped in Drop after the UMEM is deleted); the rings are
        // boxed fields of `q`, which libxdp fills in and keeps pointers to.
        let r = unsafe {
            (lib.xsk_umem__create)(
                &mut q.umem,
                area,
                bytes,
                &mut q.rings.fill,
                &mut q.rings.comp,
                &ucfg,
            )
        };
        if r != 0 {
            return Err(XskError::CreateUmem(std::io::Error::from_raw_os_error(-r)));
        }
        let scfg = XskSocketConfig {
            rx_size: RING_SIZE,
            tx_size: RING_SIZE,
            libxdp_flags: 0,
            xdp_flags: 0,
            bind_flags: libxdp::XDP_USE_NEED_WAKEUP
                | match mode {
                    XskMode::Zerocopy => libxdp::XDP_ZEROCOPY,
                    _ => libxdp::XDP_COPY,
                },
        };
        // SAFETY: `name` is NUL-terminated; the UMEM is live; the rings are
        // boxed fields of `q`, which libxdp fills in and keeps pointers to.
        let r = unsafe {
            (lib.xsk_socket__create)(
                &mut q.xsk,
                name.as_ptr(),
                queue,
                q.umem,
                &mut q.rings.rx,
                &mut q.rings.tx,
                &scfg,
            )
        };
        if r != 0 {
            return Err(XskError::CreateSocket {
                iface: iface.into(),
                queue,
                mode,
                source: std::io::Error::from_raw_os_error(-r),
            });
        }
        // SAFETY: the socket was just created.
        q.fd = unsafe { (lib.xsk_socket__fd)(q.xsk) };
        // libxdp opens it without close-on-exec: a child of the process
        // would hold the queue (and the UMEM) until it exits.
        // SAFETY: fcntl on the socket's own descriptor, flags only.
        unsafe { libc::fcntl(q.fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        q.refill
            .extend((0..u64::from(RING_SIZE)).map(|i| i * u64::from(FRAME_SIZE)));
        q.give_back();
        Ok(q)
    }

    /// The mode the socket is bound in (never `Auto`).
    pub fn mode(&self) -> XskMode {
        self.mode
    }

    /// The socket's descriptor: readable when the RX ring has frames.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// True if the RX ring has a frame (no system call).
    pub fn rx_ready(&mut self) -> bool {
        self.rings.rx.has_entries()
    }

    /// Frames waiting in the RX ring, permille of its size.
    pub fn rx_fill_permille(&mut self) -> u16 {
        (u64::from(self.rings.rx.ready().min(RING_SIZE)) * 1000 / u64::from(RING_SIZE)) as u16
    }

    /// Take up to `max` frames off the RX ring, handing each to `take`, and
    /// give their frames back to the fill ring.
    pub fn receive(&mut self, max: u32, mut take: impl FnMut(&[u8])) -> Received {
        let (at, n) = self.rings.rx.peek(max);
        let mut out = Received {
            frames: n,
            foreign: 0,
        };
        let rx_bytes = u64::from(RING_SIZE) * u64::from(FRAME_SIZE);
        for i in 0..n {
            // SAFETY: entries at..at+n were peeked and not yet released.
            let d: XdpDesc = unsafe { *self.rings.rx.desc(at.wrapping_add(i)) };
            let frame = d.addr - d.addr % u64::from(FRAME_SIZE);
            let end = d.addr.checked_add(u64::from(d.len));
            let inside =
                frame < rx_bytes && end.is_some_and(|e| e <= frame + u64::from(FRAME_SIZE));
            if !inside {
                out.foreign += 1;
                continue;
            }
            // SAFETY: [addr, addr+len) lies inside one receive frame of the
            // mapping (checked above), which the kernel handed to us with
            // this descriptor and does not write until we give it back.
            let bytes = unsafe {
                std::slice::from_raw_parts(self.area.add(d.addr as usize), d.len as usize)
            };
            take(bytes);
            self.refill.push(frame);
        }
        if n > 0 {
            self.rings.rx.release(n);
        }
        self.give_back();
        out
    }

    /// Receive frames taken so far into the fill ring (it always has room:
    /// it is as large as the receive half).
    fn give_back(&mut self) {
        let n = self.refill.len() as u32;
        if n == 0 {
            return;
        }
        let Some(at) = self.rings.fill.reserve(n) else {
            return;
        };
        for (i, a) in self.refill.drain(..).enumerate() {
            // SAFETY: `n` entries from `at` were reserved.
            unsafe { *self.rings.fill.addr(at.wrapping_add(i as u32)) = a };
        }
        self.rings.fill.submit(n);
    }

    /// True if the fill ring asks to be woken (a zero-copy driver that ran
    /// out of buffers waits for a `poll`/`recvfrom`).
    pub fn fill_needs_wakeup(&self) -> bool {
        self.rings.fill.needs_wakeup()
    }

    /// Frames in the fill ring the kernel has not used yet; 0 means a
    /// frame arriving now has nowhere to go.
    pub fn fill_level(&mut self) -> u32 {
        RING_SIZE - self.rings.fill.prod_free(RING_SIZE).min(RING_SIZE)
    }

    /// Wake the driver's receive side (`recvfrom` with nothing to read).
    pub fn wake_rx(&self) {
        // SAFETY: a zero-length, non-blocking recvfrom on our own socket.
        unsafe {
            libc::recvfrom(
                self.fd,
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }

    /// Transmit frames: up to `count`, frame `i` written by `write(i, buf)`
    /// into a UMEM frame (returning its length, at most
    /// [`MAX_XSK_FRAME`]). Returns how many went into the TX ring: all of
    /// them when `count` is at most [`XskQueue::tx_room`]; the rest found
    /// the free frames exhausted. Then kicks the kernel with one `sendto`
    /// if it asks for one; returns whether it did.
    pub fn transmit(
        &mut self,
        count: usize,
        mut write: impl FnMut(usize, &mut [u8]) -> usize,
    ) -> (usize, bool) {
        self.reclaim();
        let n = count.min(self.free_tx.len()) as u32;
        if n == 0 {
            return (0, self.kick_tx());
        }
        // Never fails: every frame in the TX ring is off the free list, and
        // the ring is as large as the transmit half.
        let Some(at) = self.rings.tx.reserve(n) else {
            return (0, self.kick_tx());
        };
        let mut used = 0u32;
        for i in 0..n as usize {
            let addr = self.free_tx.pop().expect("counted above");
            // SAFETY: `addr` is a transmit frame on our free list: inside
            // the mapping, FRAME_SIZE long, not in any ring.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(self.area.add(addr as usize), FRAME_SIZE as usize)
            };
            let len = write(i, buf).min(MAX_XSK_FRAME);
            // SAFETY: `n` entries from `at` were reserved.
            unsafe {
                *self.rings.tx.desc(at.wrapping_add(used)) = XdpDesc {
                    addr,
                    len: len as u32,
                    options: 0,
                }
            };
            used += 1;
        }
        self.rings.tx.submit(used);
        (used as usize, self.kick_tx())
    }

    /// Frames the TX side can take now: the completion ring is reaped
    /// first, so frames the kernel finished with count.
    pub fn tx_room(&mut self) -> usize {
        self.reclaim();
        self.free_tx.len()
    }

    /// Descriptors in the TX ring the kernel has not taken yet.
    pub fn tx_pending(&mut self) -> u32 {
        RING_SIZE - self.rings.tx.prod_free(RING_SIZE).min(RING_SIZE)
    }

    /// One `sendto` if the kernel asks to be woken (`XDP_USE_NEED_WAKEUP`)
    /// and the TX ring has frames; true if it was made. In copy mode a call
    /// sends at most 32 (the kernel's `TX_BATCH_SIZE`): the rest wait in
    /// the ring for the next pass's kick, and the frames behind them in the
    /// port's backlog (see the worker's transmit).
    fn kick_tx(&mut self) -> bool {
        let before = self.tx_pending();
        if !self.rings.tx.needs_wakeup() || before == 0 {
            self.tx_moved = true;
            return false;
        }
        // SAFETY: a zero-length, non-blocking sendto on our own socket.
        // Its errors (EAGAIN: the batch limit, or the completion ring
        // full; EBUSY: the driver busy) all mean "later": the next pass
        // kicks again.
        unsafe {
            libc::sendto(
                self.fd,
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        // Copy mode sends within the call; a zero-copy driver that took
        // the kick later shows its progress in the completion ring.
        self.tx_moved = self.tx_pending() < before;
        true
    }

    /// True if frames wait in the TX ring and the last kick moved none of
    /// them: kicking again at once would spin (the link down, the driver
    /// busy); the worker retries after [`TX_STALL_RETRY`] instead.
    pub fn tx_stalled(&mut self) -> bool {
        !self.tx_moved && self.tx_pending() > 0
    }

    /// Frames still in the TX ring sent on (a pass with nothing new to
    /// send still owes the kernel its wake-up); true if it kicked.
    pub fn flush_tx(&mut self) -> bool {
        self.reclaim();
        self.kick_tx()
    }

    /// Transmit frames the kernel is done with, back to the free list.
    fn reclaim(&mut self) {
        let (at, n) = self.rings.comp.peek(RING_SIZE);
        let tx_lo = u64::from(RING_SIZE) * u64::from(FRAME_SIZE);
        let tx_hi = FRAMES * u64::from(FRAME_SIZE);
        for i in 0..n {
            // SAFETY: entries at..at+n were peeked and not yet released.
            let a = unsafe { *self.rings.comp.addr(at.wrapping_add(i)) };
            let a = a - a % u64::from(FRAME_SIZE);
            // Only our transmit frames come back; anything else is ignored.
            if (tx_lo..tx_hi).contains(&a) && self.free_tx.len() < RING_SIZE as usize {
                self.free_tx.push(a);
            }
        }
        if n > 0 {
            self.rings.comp.release(n);
        }
    }
}

impl Drop for XskQueue {
    fn drop(&mut self) {
        // SAFETY: each object was created by libxdp and is deleted once;
        // the socket before its UMEM, the UMEM before its memory.
        unsafe {
            if let Ok(lib) = libxdp::libxdp() {
                if !self.xsk.is_null() {
                    (lib.xsk_socket__delete)(self.xsk);
                }
                if !self.umem.is_null() {
                    (lib.xsk_umem__delete)(self.umem);
                }
            }
            libc::munmap(self.area.cast(), (FRAMES * u64::from(FRAME_SIZE)) as usize);
        }
    }
}
