//! TCP-stream mode (`--mode tcp-stream`): what a netperf `TCP_STREAM` sender and Linux's TCP
//! put on the virtio ring. The application writes messages of `--size` bytes; TCP coalesces
//! the byte stream into TSO segments of up to 64 KiB; the driver posts each segment as one
//! buffer with a virtio-net header asking the device to checksum and segment it. The headers
//! are [`vadapt_wire::tcp_build`]'s; this file is the sender: how many bytes go into each segment.
//!
//! # The segment size rule
//!
//! Linux cuts the byte stream, not the messages: `tcp_sendmsg` appends each write to the tail
//! skb until it holds `size_goal` bytes (`tcp_xmit_size_goal`: a multiple of the MSS under
//! 64 KiB, here [`TSO_SIZE_GOAL`] = 45 × 1448), so a message may straddle two segments. TSO
//! autosizing (`tcp_tso_autosize`) lowers the goal at low pacing rates; with a closed-loop
//! sender on a fast link it stays at the maximum. So:
//!
//! * **closed loop, free writes** (`--write-cost-ns 0 --write-cost-ns-per-kib 0`): the
//!   application is always ahead of the ring, every segment carries exactly the size goal;
//! * **closed loop with a write cost** (the default): the application writes one message at
//!   a time, each write costing the thread the emulated time of a `send()`
//!   ([`TcpSender::write_messages`], spent with [`crate::clock::spin_ns`]); after each write
//!   the driver takes what is queued if the ring has room, as `tcp_sendmsg` pushes to the
//!   device within the same system call. While the queue is stopped the writes go on and
//!   pile up, until a whole size goal is queued ([`TcpSender::send_queue_full`], standing for
//!   a full socket buffer: the writer then sleeps until the ring has room). So a writer
//!   slower than the device sends one message per segment, and one faster than the device
//!   sends full segments — small segments from slow writers, as Linux's do;
//! * **fixed rate** (`--rate`, in messages per second): the messages due are written (each
//!   paying the write cost) into a send queue, and each time the ring has room the sender
//!   takes `min(queued, size goal)` bytes — whatever is queued, as TCP Small Queues and
//!   autocorking release an skb that grew while the device was busy. No Nagle delay: no
//!   receiver ever acknowledges (see below), so a sender waiting for ACKs would never send.
//!
//! Without `HOST_TSO4` (or `CSUM`) the size goal is one MSS, as Linux segments in software
//! before the driver when the device does not.
//!
//! A message counts as sent once its last byte is on the ring.
//!
//! # Where it departs from Linux
//!
//! There is no receiver: no ACKs, so no congestion or receive window, no retransmissions,
//! and the acknowledgment number, window and timestamp echo stay fixed. Every segment's
//! payload is the same bytes ([`payload_pattern`], from one area of guest memory), as netperf
//! sends the same buffer over and over; the device reads it, the guest never rewrites it.

use std::sync::Arc;

use crate::clock::spin_ns;
use crate::driver::queue::{QueueError, TxQueue};
use crate::driver::Added;
use vadapt_wire::tcp_build::{TcpFlow, TxOffloads, BUF_HDRS_LEN, FRAME_HDRS_LEN, TSO_SIZE_GOAL};

/// The payload bytes every segment carries (its first `len` bytes for a segment of `len`):
/// a fixed, non-repeating-per-word pattern, so that a backend copying at a wrong offset
/// changes the checksum.
pub fn payload_pattern() -> Vec<u8> {
    (0..TSO_SIZE_GOAL)
        .map(|i| (i.wrapping_mul(31).wrapping_add(i >> 8)) as u8)
        .collect()
}

/// One sender thread's TCP connection: the flow's headers, the send queue and what went out.
#[derive(Debug)]
pub struct TcpSender {
    flow: TcpFlow,
    offloads: TxOffloads,
    /// Application message size (bytes).
    size: u32,
    /// Closed loop with free writes: the application always has more queued than a segment
    /// takes.
    always_full: bool,
    /// Emulated cost of one write (ns).
    write_ns: u64,
    /// Bytes written by the application and not yet on the ring (unless `always_full`).
    queued: u64,
    /// Payload bytes put on the ring so far.
    sent: u64,
    /// [`payload_pattern`], for the full checksum without `CSUM`.
    pattern: Arc<[u8]>,
    hdrs: [u8; BUF_HDRS_LEN],
}

impl TcpSender {
    /// The sender of `flow`, for messages of `size` bytes (> 0) that cost `write_ns` each to
    /// write. A closed loop with free writes (`write_ns` 0) always has a full segment to
    /// send; otherwise the sender is fed by [`TcpSender::write_messages`].
    pub fn new(
        flow: TcpFlow,
        offloads: TxOffloads,
        size: u32,
        closed_loop: bool,
        write_ns: u64,
        pattern: Arc<[u8]>,
    ) -> TcpSender {
        TcpSender {
            flow,
            offloads,
            size: size.max(1),
            always_full: closed_loop && write_ns == 0,
            write_ns,
            queued: 0,
            sent: 0,
            pattern,
            hdrs: [0; BUF_HDRS_LEN],
        }
    }

    /// The application writes `n` more messages: busy-waits `n` times the write cost on
    /// this thread, then queues their bytes. Returns the write cost spent (ns).
    pub fn write_messages(&mut self, n: u64) -> u64 {
        let ns = self.write_ns.saturating_mul(n);
        spin_ns(ns);
        self.queued = self
            .queued
            .saturating_add(n.saturating_mul(u64::from(self.size)));
        ns
    }

    /// Whether writes pay a cost, so that the application writes message by message instead
    /// of always being a full segment ahead.
    pub fn writes_cost(&self) -> bool {
        self.write_ns > 0
    }

    /// Whether a whole segment is queued: a writer blocked on a stopped ring stops here,
    /// as a Linux sender sleeps on a full socket buffer (more would not change a segment).
    pub fn send_queue_full(&self) -> bool {
        self.always_full || self.queued >= u64::from(self.offloads.size_goal())
    }

    /// Whether a segment could be built now.
    pub fn has_data(&self) -> bool {
        self.always_full || self.queued > 0
    }

    /// Payload bytes put on the ring so far.
    pub fn payload_sent(&self) -> u64 {
        self.sent
    }

    /// The flow (its sequence number is that of the next byte).
    pub fn flow(&self) -> &TcpFlow {
        &self.flow
    }

    /// Builds the next segment (`min(queued, size goal)` bytes; see the module doc) and adds
    /// it to `tx`, unpublished. `ts_ms` is the TCP timestamp.
    pub fn add_next(&mut self, tx: &mut TxQueue, ts_ms: u32) -> Result<Added, QueueError> {
        let goal = u64::from(self.offloads.size_goal());
        let len = if self.always_full {
            goal
        } else {
            self.queued.min(goal)
        };
        if len == 0 {
            return Ok(Added::NothingQueued);
        }
        if !tx.segment_room() {
            return Ok(Added::RingFull);
        }
        let len32 = len as u32;
        let payload = &self.pattern[..len as usize];
        self.flow
            .write_headers(&mut self.hdrs, len32, payload, self.offloads, ts_ms);
        if !tx.add_segment(&self.hdrs, len32)? {
            // `segment_room` said yes under the same lock: a bookkeeping bug.
            return Err(QueueError::Add("no room after segment_room".into()));
        }
        let size = u64::from(self.size);
        let messages = (self.sent + len) / size - self.sent / size;
        self.sent += len;
        if !self.always_full {
            self.queued -= len;
        }
        Ok(Added::Buffer {
            frame_bytes: FRAME_HDRS_LEN as u64 + len,
            payload_bytes: len,
            messages,
        })
    }
}
