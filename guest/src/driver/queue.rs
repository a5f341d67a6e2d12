//! One virtio-net queue pair seen from the driver side: a TX queue posting frames and an RX
//! queue kept full of writable buffers, each with its kick and call eventfds.
//!
//! These types only move buffers; the decisions a driver takes around them (when to stop the
//! TX queue, when to run NAPI, what to count) live in [`crate::driver`]. Every buffer has a
//! fixed slot in guest memory, chosen at setup, as the Linux driver keeps pre-allocated pages.
//!
//! Two TX layouts: a raw-frame queue posts one descriptor per packet, the whole packet in its
//! slot; a TCP-stream queue posts each segment in two parts, its headers from a small slot and
//! its payload (up to 64 KiB) from one payload area shared by all segments, as Linux posts an
//! skb's linear part and its page fragments.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use vadapt_virtq::driver::Seg;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::AnyDriverQueue;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use vadapt_wire::ethernet::ETH_HDR_LEN;
use vadapt_wire::stamped_frame::{self as frame, Stamp};
use vadapt_wire::vnet_hdr::{num_buffers, HDR_LEN_MRG};

/// Why a queue could not be set up or driven.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The buffer area is not inside guest memory (a layout bug).
    #[error("buffer area at gpa {gpa:#x} ({len} bytes) is outside guest memory")]
    BufferArea {
        /// Guest-physical start of the area.
        gpa: u64,
        /// Length of the area (bytes).
        len: u64,
    },
    /// Creating an eventfd failed.
    #[error("cannot create an eventfd")]
    EventFd(#[source] io::Error),
    /// The driver ring refused a buffer although a slot was free (a bookkeeping bug).
    #[error("the ring refused a buffer: {0}")]
    Add(String),
}

/// Fixed-size buffer slots in guest memory.
#[derive(Debug)]
struct BufArea {
    /// Guest-physical address of slot 0.
    gpa: u64,
    /// This process's address of slot 0.
    host: *mut u8,
    /// Distance between slots (bytes).
    stride: u32,
    /// Number of slots.
    count: u16,
    /// Keeps the mapping behind `host` alive.
    _mem: GuestMemory,
}

// SAFETY: `host` points into a mapping kept alive by `_mem` (a `GuestMemory` clone, itself
// `Send`). A `BufArea` is only reached through its owning queue, which the worker threads lock
// before use, so no two threads access a slot at the same time.
unsafe impl Send for BufArea {}

impl BufArea {
    fn new(mem: &GuestMemory, gpa: u64, stride: u32, count: u16) -> Result<BufArea, QueueError> {
        let len = u64::from(stride) * u64::from(count);
        let host = mem
            .translate(gpa, len)
            .ok_or(QueueError::BufferArea { gpa, len })?;
        Ok(BufArea {
            gpa,
            host,
            stride,
            count,
            _mem: mem.clone(),
        })
    }

    fn gpa(&self, slot: u16) -> u64 {
        self.gpa + u64::from(slot) * u64::from(self.stride)
    }

    /// Copies `src` into slot `slot` at byte `offset`.
    fn write(&self, slot: u16, offset: usize, src: &[u8]) {
        assert!(slot < self.count && offset + src.len() <= self.stride as usize);
        // SAFETY: the range lies inside slot `slot` (asserted), which lies inside the area
        // translated in `new` and kept mapped by `_mem`. A raw copy, not a reference: the
        // backend may read (never write, for TX; only before handing back, for RX) this memory.
        unsafe {
            let dst = self.host.add(slot as usize * self.stride as usize + offset);
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
        }
    }

    /// Copies from slot `slot` at byte `offset` into `dst`.
    fn read(&self, slot: u16, offset: usize, dst: &mut [u8]) {
        assert!(slot < self.count && offset + dst.len() <= self.stride as usize);
        // SAFETY: as in `write`; the backend handed this buffer back through the used ring
        // (acquire ordering in `pop_used`), so it no longer writes it.
        unsafe {
            let src = self.host.add(slot as usize * self.stride as usize + offset);
            std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len());
        }
    }
}

/// A queue's notification eventfds (both non-blocking).
#[derive(Debug)]
pub struct Notifiers {
    /// Written by the driver to kick the backend.
    pub kick: EventFd,
    /// Written by the backend to call (interrupt) the driver.
    pub call: EventFd,
}

impl Notifiers {
    pub(crate) fn new() -> Result<Notifiers, QueueError> {
        Ok(Notifiers {
            kick: EventFd::new(EFD_NONBLOCK).map_err(QueueError::EventFd)?,
            call: EventFd::new(EFD_NONBLOCK).map_err(QueueError::EventFd)?,
        })
    }

    /// Signals the kick eventfd. Failure is not reported: the eventfd counter cannot overflow
    /// in practice (2^64 - 2 kicks), and a kick is only a hint next to the ring contents.
    pub fn kick(&self) {
        let _ = self.kick.write(1);
    }

    /// Consumes pending calls: how many times the backend signalled since the last read
    /// (0 when none).
    pub fn take_calls(&self) -> u64 {
        self.call.read().unwrap_or(0)
    }

    /// Raw call eventfd, for `ppoll`.
    pub fn call_fd(&self) -> RawFd {
        self.call.as_raw_fd()
    }
}

/// Bytes of a TCP-stream header slot: the headers (at most [`SEGMENT_HDRS_MAX`] bytes), then
/// the two-entry indirect table (32 bytes).
pub const SEGMENT_SLOT_LEN: u32 = 128;
/// Room for the headers at the front of a TCP-stream slot; the indirect table follows.
pub const SEGMENT_HDRS_MAX: u32 = 96;

// The headers of a TCP-stream segment fit in front of the indirect table.
const _: () = assert!(vadapt_wire::tcp_build::BUF_HDRS_LEN as u32 <= SEGMENT_HDRS_MAX);

/// The one payload area of a segmented TX queue.
#[derive(Debug, Clone, Copy)]
struct PayloadArea {
    /// Guest-physical address.
    gpa: u64,
    /// Length (bytes): the most one segment carries.
    len: u32,
    /// Post each segment through an indirect table rather than a two-descriptor chain.
    indirect: bool,
}

/// The transmit queue of a pair.
#[derive(Debug)]
pub struct TxQueue {
    /// The driver side of the ring (split or packed).
    pub vq: AnyDriverQueue,
    /// Kick and call eventfds.
    pub notify: Notifiers,
    bufs: BufArea,
    /// Slots not posted to the ring.
    free: Vec<u16>,
    /// Slot of the buffer posted under each descriptor head.
    slot_of_head: Vec<u16>,
    /// Buffer length posted per packet (virtio-net header + frame, bytes); unused for
    /// segments.
    packet_len: u32,
    /// TCP-stream mode: the payload area every segment's second part points into.
    payload: Option<PayloadArea>,
    /// The queue is stopped (Linux `netif_stop_subqueue`) until a call or the ring drains.
    pub stopped: bool,
}

impl TxQueue {
    /// A TX queue over `vq` whose `count` slots of `stride` bytes start at `buf_gpa`; every
    /// slot is pre-filled with the complete packet so that a send only rewrites the stamp.
    pub(crate) fn new(
        vq: AnyDriverQueue,
        mem: &GuestMemory,
        buf_gpa: u64,
        stride: u32,
        count: u16,
        template: &[u8],
    ) -> Result<TxQueue, QueueError> {
        let bufs = BufArea::new(mem, buf_gpa, stride, count)?;
        for slot in 0..count {
            bufs.write(slot, 0, template);
        }
        Ok(TxQueue {
            vq,
            notify: Notifiers::new()?,
            bufs,
            free: (0..count).rev().collect(),
            slot_of_head: vec![0; usize::from(count)],
            packet_len: template.len() as u32,
            payload: None,
            stopped: false,
        })
    }

    /// A TX queue for TCP-stream segments: `count` header slots of [`SEGMENT_SLOT_LEN`]
    /// bytes from `hdr_gpa`, and one payload area at `payload_gpa` filled once with
    /// `payload`, which every segment's payload part points into (the backend only reads TX
    /// buffers, so segments in flight may share it). With `indirect`, each segment is one
    /// ring descriptor pointing to a two-entry indirect table in its slot, as Linux does when
    /// `VIRTIO_RING_F_INDIRECT_DESC` is negotiated and a buffer has more than one part;
    /// otherwise a chain of two descriptors.
    pub(crate) fn new_segmented(
        vq: AnyDriverQueue,
        mem: &GuestMemory,
        hdr_gpa: u64,
        count: u16,
        payload_gpa: u64,
        payload: &[u8],
        indirect: bool,
    ) -> Result<TxQueue, QueueError> {
        let bufs = BufArea::new(mem, hdr_gpa, SEGMENT_SLOT_LEN, count)?;
        let area = BufArea::new(mem, payload_gpa, payload.len() as u32, 1)?;
        area.write(0, 0, payload);
        Ok(TxQueue {
            vq,
            notify: Notifiers::new()?,
            bufs,
            free: (0..count).rev().collect(),
            slot_of_head: vec![0; usize::from(count)],
            packet_len: 0,
            payload: Some(PayloadArea {
                gpa: payload_gpa,
                len: payload.len() as u32,
                indirect,
            }),
            stopped: false,
        })
    }

    /// Descriptors free in the ring.
    pub fn num_free(&self) -> u16 {
        self.vq.num_free()
    }

    /// Packets posted and not yet returned by the backend.
    pub fn in_flight(&self) -> u16 {
        self.bufs.count - self.free.len() as u16
    }

    /// Frees every buffer the backend has used (Linux `free_old_xmit_skbs`); returns how many.
    pub fn reap(&mut self) -> u32 {
        let mut n = 0;
        while let Some((head, _len)) = self.vq.pop_used() {
            self.free.push(self.slot_of_head[usize::from(head)]);
            n += 1;
        }
        n
    }

    /// Adds one packet with `stamp`, to `dst` instead of the configured destination when
    /// given (one descriptor: header + frame, as Linux does with
    /// `ANY_LAYOUT`); not yet visible to the backend until [`TxQueue::publish`]. Returns
    /// `false` when no slot or descriptor is free.
    pub fn add(&mut self, stamp: Stamp, dst: Option<[u8; 6]>) -> Result<bool, QueueError> {
        if self.vq.num_free() == 0 {
            return Ok(false);
        }
        let Some(slot) = self.free.pop() else {
            return Ok(false);
        };
        if let Some(dst) = dst {
            self.bufs.write(slot, HDR_LEN_MRG, &dst);
        }
        self.bufs
            .write(slot, HDR_LEN_MRG + ETH_HDR_LEN, &frame::stamp_bytes(stamp));
        let seg = Seg {
            gpa: self.bufs.gpa(slot),
            len: self.packet_len,
            writable: false,
        };
        let added = self.vq.add(&[seg]);
        self.took(slot, added)
    }

    /// Whether [`TxQueue::add_segment`] would find a slot and descriptors now.
    pub fn segment_room(&self) -> bool {
        let descs = match self.payload {
            Some(PayloadArea {
                indirect: false, ..
            }) => 2,
            _ => 1,
        };
        !self.free.is_empty() && self.vq.num_free() >= descs
    }

    /// Adds one segment (TCP-stream mode): `hdrs` (virtio-net header and frame headers)
    /// written into a free slot, followed by the first `payload_len` bytes of the payload
    /// area. Not yet visible to the backend until [`TxQueue::publish`]. Returns `false` when
    /// no slot or descriptor is free.
    ///
    /// # Panics
    /// If the queue was not made for segments (`new_segmented`), `hdrs` does not fit in
    /// [`SEGMENT_HDRS_MAX`] bytes, or `payload_len` is 0 or beyond the payload area (caller
    /// bugs).
    pub fn add_segment(&mut self, hdrs: &[u8], payload_len: u32) -> Result<bool, QueueError> {
        let area = self.payload.expect("a segmented TX queue");
        assert!(hdrs.len() <= SEGMENT_HDRS_MAX as usize);
        assert!(payload_len > 0 && payload_len <= area.len);
        if !self.segment_room() {
            return Ok(false);
        }
        let Some(slot) = self.free.pop() else {
            return Ok(false);
        };
        self.bufs.write(slot, 0, hdrs);
        let segs = [
            Seg {
                gpa: self.bufs.gpa(slot),
                len: hdrs.len() as u32,
                writable: false,
            },
            Seg {
                gpa: area.gpa,
                len: payload_len,
                writable: false,
            },
        ];
        let added = if area.indirect {
            let table = self.bufs.gpa(slot) + u64::from(SEGMENT_HDRS_MAX);
            self.vq.add_indirect(&segs, table)
        } else {
            self.vq.add(&segs)
        };
        self.took(slot, added)
    }

    /// Buffer `slot` went on the ring as chain `added` (its head), or did
    /// not, and the slot is free again.
    fn took<E: std::fmt::Debug>(
        &mut self,
        slot: u16,
        added: Result<u16, E>,
    ) -> Result<bool, QueueError> {
        match added {
            Ok(head) => {
                self.slot_of_head[usize::from(head)] = slot;
                Ok(true)
            }
            Err(e) => {
                self.free.push(slot);
                Err(QueueError::Add(format!("{e:?}")))
            }
        }
    }

    /// Makes the added packets visible to the backend; returns whether the notification rules
    /// ask for a kick (the caller kicks, counts and pays the exit cost).
    pub fn publish(&mut self) -> bool {
        self.vq.publish();
        self.vq.kick_prepare()
    }
}

/// Size of each RX buffer (bytes): a 12-byte header plus a full 1514-byte frame fits, as with
/// Linux's mergeable buffers (about 1.5 KiB each); longer frames span several buffers when
/// `VIRTIO_NET_F_MRG_RXBUF` is negotiated.
pub const RX_BUF_LEN: u32 = 2048;

/// What the RX queue hands to its consumer for each received packet.
#[derive(Debug, Clone, Copy)]
pub struct RxPacket {
    /// Frame length (bytes, without the virtio-net header).
    pub frame_len: u32,
    /// The first bytes of the frame (headers and stamp); `head_len` of them are valid.
    pub head: [u8; 64],
    /// Valid bytes in `head`.
    pub head_len: usize,
}

/// The receive queue of a pair.
#[derive(Debug)]
pub struct RxQueue {
    /// The driver side of the ring (split or packed).
    pub vq: AnyDriverQueue,
    /// Kick and call eventfds.
    pub notify: Notifiers,
    bufs: BufArea,
    /// Slots not posted to the ring.
    free: Vec<u16>,
    /// Slot of the buffer posted under each descriptor head.
    slot_of_head: Vec<u16>,
    /// `VIRTIO_NET_F_MRG_RXBUF` negotiated: honour `num_buffers`.
    mergeable: bool,
    /// NAPI is scheduled: poll again without waiting for a call (budget exhausted, or entries
    /// arrived while re-enabling callbacks).
    pub napi_scheduled: bool,
}

/// Result of one RX poll.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RxPoll {
    /// Packets handed to the consumer.
    pub packets: u32,
    /// Buffers that could not be understood (dropped and reposted).
    pub errors: u32,
}

impl RxQueue {
    /// An RX queue over `vq` with `count` buffers of [`RX_BUF_LEN`] from `buf_gpa`.
    pub(crate) fn new(
        vq: AnyDriverQueue,
        mem: &GuestMemory,
        buf_gpa: u64,
        count: u16,
        mergeable: bool,
    ) -> Result<RxQueue, QueueError> {
        Ok(RxQueue {
            vq,
            notify: Notifiers::new()?,
            bufs: BufArea::new(mem, buf_gpa, RX_BUF_LEN, count)?,
            free: (0..count).rev().collect(),
            slot_of_head: vec![0; usize::from(count)],
            mergeable,
            napi_scheduled: false,
        })
    }

    /// Posts every free buffer (Linux `try_fill_recv`) and publishes them; returns whether the
    /// notification rules ask for a kick.
    pub fn refill(&mut self) -> Result<bool, QueueError> {
        let mut added = false;
        while self.vq.num_free() > 0 {
            let Some(slot) = self.free.pop() else { break };
            let seg = Seg {
                gpa: self.bufs.gpa(slot),
                len: RX_BUF_LEN,
                writable: true,
            };
            match self.vq.add(&[seg]) {
                Ok(head) => self.slot_of_head[usize::from(head)] = slot,
                Err(e) => {
                    self.free.push(slot);
                    return Err(QueueError::Add(format!("{e:?}")));
                }
            }
            added = true;
        }
        if !added {
            return Ok(false);
        }
        self.vq.publish();
        Ok(self.vq.kick_prepare())
    }

    /// Buffers not posted (waiting for a refill).
    pub fn unposted(&self) -> usize {
        self.free.len()
    }

    /// Takes up to `budget` packets from the used ring, handing each to `on_packet`; buffers
    /// go back to the free list (the caller refills).
    pub fn poll(&mut self, budget: u32, mut on_packet: impl FnMut(&RxPacket)) -> RxPoll {
        let mut res = RxPoll::default();
        while res.packets < budget {
            let Some((head, len)) = self.vq.pop_used() else {
                break;
            };
            let slot = self.slot_of_head[usize::from(head)];
            self.free.push(slot);
            if (len as usize) < HDR_LEN_MRG || len > RX_BUF_LEN {
                res.errors += 1;
                continue;
            }
            let mut hdr = [0u8; HDR_LEN_MRG];
            self.bufs.read(slot, 0, &mut hdr);
            let nbufs = if self.mergeable {
                num_buffers(&hdr).unwrap_or(1)
            } else {
                1
            };
            let mut pkt = RxPacket {
                frame_len: len - HDR_LEN_MRG as u32,
                head: [0; 64],
                head_len: 0,
            };
            pkt.head_len = (pkt.frame_len as usize).min(pkt.head.len());
            self.bufs
                .read(slot, HDR_LEN_MRG, &mut pkt.head[..pkt.head_len]);
            // The rest of a mergeable packet: the backend publishes all its buffers with one
            // used-index update, so they are all visible now.
            let mut ok = true;
            for _ in 1..nbufs {
                match self.vq.pop_used() {
                    Some((h, l)) if l <= RX_BUF_LEN => {
                        self.free.push(self.slot_of_head[usize::from(h)]);
                        pkt.frame_len += l;
                    }
                    Some((h, _)) => {
                        self.free.push(self.slot_of_head[usize::from(h)]);
                        ok = false;
                    }
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                res.packets += 1;
                on_packet(&pkt);
            } else {
                res.errors += 1;
            }
        }
        res
    }
}

/// One queue pair: RX queue `2*index`, TX queue `2*index+1`.
#[derive(Debug)]
pub struct QueuePair {
    /// Pair number.
    pub index: u16,
    /// Receive queue.
    pub rx: RxQueue,
    /// Transmit queue.
    pub tx: TxQueue,
}
