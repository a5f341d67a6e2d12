//! A running capture's tap on one port (`vadapt capture`): which frames it
//! takes, and the bounded buffer that carries their copies from the
//! workers to the capture's writer.
//!
//! The switch hands the tap the frames that enter through the port
//! ([`CaptureTap::received`], called by the sending worker's forwarding)
//! and those it hands to the port's egress ([`CaptureTap::sent`]). The
//! directions are the port's, as tcpdump on a VM's host tap interface or
//! OVS's counters of a vhost-user port name them: *received* (`rx`) is
//! what the port took in from its VM (the guest's transmit), *sent*
//! (`tx`) what it is handed to give its VM (the guest's receive). This is
//! the opposite of `vadapt_queue_packets`' `dir`, which is the guest's.
//!
//! A worker never waits on the tap: each frame's copy (at most the
//! snap length) goes into a lock-free bounded queue ([`ArrayQueue`]), and
//! when the queue or its byte budget is full the frame is not kept and
//! counted instead ([`CaptureTap::dropped`], and the port's
//! `capture_dropped`). The writer takes the copies out on a thread of its
//! own ([`CaptureTap::take`]).

use super::egress::PortId;
use crate::frames::FrameBatch;
use crate::metrics::PortStats;
use crossbeam_queue::ArrayQueue;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Which frames of a port a capture takes, by the way they crossed it
/// (see the module docs for whose point of view).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaptureDir {
    /// Frames the port received from its VM (or its peer), entering the
    /// switch.
    Rx,
    /// Frames the switch handed the port to send to its VM.
    Tx,
    /// Both.
    #[default]
    Both,
}

/// The way one captured frame crossed its port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crossed {
    /// Received from the VM, into the switch (pcapng: inbound).
    Received,
    /// Handed by the switch to the port, for its VM (pcapng: outbound).
    Sent,
}

/// Longest snap length a capture takes, bytes (what tcpdump takes by
/// default; every frame, GSO frames of 64 KiB included, fits).
pub const MAX_SNAPLEN: u32 = 262_144;

/// Most frames a tap holds for its writer.
pub const BUFFER_FRAMES: usize = 8192;

/// Most frame bytes a tap holds for its writer (its copies, truncated to
/// the snap length): past it a frame is dropped, as when the queue is full.
pub const BUFFER_BYTES: usize = 16 << 20;

/// What a capture takes: its direction, queue and snap length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureFilter {
    dir: CaptureDir,
    queue: Option<u16>,
    snaplen: u32,
}

/// Why a capture cannot be taken as asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CaptureFilterError {
    /// A queue was asked for frames the port sends: the switch hands a
    /// port its frames before the port picks the queue they leave by.
    #[error(
        "--queue selects frames the port received (--dir rx): the queue a frame leaves by is \
         chosen inside the port, after the switch"
    )]
    QueueOfSentFrames,
    /// The snap length is 0 or more than [`MAX_SNAPLEN`].
    #[error("snap length {0} is not within 1..={MAX_SNAPLEN} bytes")]
    Snaplen(u32),
}

impl CaptureFilter {
    /// Frames crossing `dir`, received on queue `queue` (any if `None`),
    /// kept up to `snaplen` bytes each.
    pub fn new(
        dir: CaptureDir,
        queue: Option<u16>,
        snaplen: u32,
    ) -> Result<Self, CaptureFilterError> {
        if queue.is_some() && dir != CaptureDir::Rx {
            return Err(CaptureFilterError::QueueOfSentFrames);
        }
        if snaplen == 0 || snaplen > MAX_SNAPLEN {
            return Err(CaptureFilterError::Snaplen(snaplen));
        }
        Ok(CaptureFilter {
            dir,
            queue,
            snaplen,
        })
    }

    /// Its snap length, bytes.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Its direction.
    pub fn dir(&self) -> CaptureDir {
        self.dir
    }

    fn takes_received(&self, queue: u16) -> bool {
        self.dir != CaptureDir::Tx && self.queue.is_none_or(|q| q == queue)
    }

    fn takes_sent(&self) -> bool {
        self.dir != CaptureDir::Rx
    }
}

/// One frame's copy, as the writer gets it.
#[derive(Debug)]
pub struct CapturedFrame {
    /// Which way it crossed the port.
    pub crossed: Crossed,
    /// The queue it was received on (`None` for sent frames: see
    /// [`CaptureFilterError::QueueOfSentFrames`]).
    pub queue: Option<u16>,
    /// When, since the Unix epoch (wall clock, read once a batch).
    pub at: Duration,
    /// Its length on the wire, bytes.
    pub len: u32,
    /// Its first bytes, at most the snap length.
    pub bytes: Box<[u8]>,
}

/// A capture's tap on one port (see the module docs).
#[derive(Debug)]
pub struct CaptureTap {
    port: PortId,
    filter: CaptureFilter,
    buffer: ArrayQueue<CapturedFrame>,
    /// Bytes of the copies in `buffer`.
    held: AtomicUsize,
    /// Frames taken into the buffer.
    kept: AtomicU64,
    /// Frames not kept, the buffer being full.
    dropped: AtomicU64,
    /// Set when the port left the switch: no frame comes any more.
    detached: AtomicBool,
    /// The port's counters (`capture_dropped`).
    stats: Arc<PortStats>,
}

impl CaptureTap {
    /// A tap on port `port` (counters `stats`) taking what `filter` says.
    pub fn new(port: PortId, filter: CaptureFilter, stats: Arc<PortStats>) -> Self {
        CaptureTap {
            port,
            filter,
            buffer: ArrayQueue::new(BUFFER_FRAMES),
            held: AtomicUsize::new(0),
            kept: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            detached: AtomicBool::new(false),
            stats,
        }
    }

    /// The port it taps.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// What it takes.
    pub fn filter(&self) -> CaptureFilter {
        self.filter
    }

    /// Every frame of `frames`, which entered the switch through the port
    /// on queue `flow`. Never blocks; bounded work (one copy a frame).
    pub fn received(&self, flow: u16, frames: &FrameBatch) {
        if !self.filter.takes_received(flow) {
            return;
        }
        let at = crate::clock::since_epoch();
        for i in 0..frames.len() {
            self.keep(Crossed::Received, Some(flow), frames.get(i), at);
        }
    }

    /// Frames `which` of `frames`, handed to the port's egress. Never
    /// blocks; bounded work (one copy a frame).
    pub fn sent(&self, frames: &FrameBatch, which: &[u16]) {
        if !self.filter.takes_sent() {
            return;
        }
        let at = crate::clock::since_epoch();
        for &i in which {
            self.keep(Crossed::Sent, None, frames.get(usize::from(i)), at);
        }
    }

    fn keep(&self, crossed: Crossed, queue: Option<u16>, frame: &[u8], at: Duration) {
        let n = frame.len().min(self.filter.snaplen as usize);
        if self.held.fetch_add(n, Relaxed) + n > BUFFER_BYTES {
            self.held.fetch_sub(n, Relaxed);
            self.drop_one();
            return;
        }
        let copy = CapturedFrame {
            crossed,
            queue,
            at,
            // A frame is < 64 KiB + 18 bytes.
            len: frame.len() as u32,
            bytes: frame[..n].into(),
        };
        match self.buffer.push(copy) {
            Ok(()) => {
                self.kept.fetch_add(1, Relaxed);
            }
            Err(_) => {
                self.held.fetch_sub(n, Relaxed);
                self.drop_one();
            }
        }
    }

    fn drop_one(&self) {
        self.dropped.fetch_add(1, Relaxed);
        self.stats.capture_dropped.fetch_add(1, Relaxed);
    }

    /// The oldest copy held, for the writer; `None` if none is.
    pub fn take(&self) -> Option<CapturedFrame> {
        let f = self.buffer.pop()?;
        self.held.fetch_sub(f.bytes.len(), Relaxed);
        Some(f)
    }

    /// Frames not kept so far, the buffer being full (the writer behind).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    /// Frames kept so far (taken by the writer or not yet).
    pub fn kept(&self) -> u64 {
        self.kept.load(Relaxed)
    }

    /// Whether the port has left the switch (no frame comes any more).
    pub fn is_detached(&self) -> bool {
        self.detached.load(Relaxed)
    }

    /// The port left the switch.
    pub(super) fn detach(&self) {
        self.detached.store(true, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PortKind;

    fn tap(dir: CaptureDir, queue: Option<u16>, snaplen: u32) -> CaptureTap {
        let stats = Arc::new(PortStats::new("vm1", PortKind::Vm, 2));
        CaptureTap::new(0, CaptureFilter::new(dir, queue, snaplen).unwrap(), stats)
    }

    fn batch<F: AsRef<[u8]>>(frames: &[F]) -> FrameBatch {
        let mut b = FrameBatch::new(frames.len());
        for f in frames {
            assert!(b.push(f.as_ref()));
        }
        b
    }

    #[test]
    fn copies_are_cut_to_the_snap_length_and_keep_their_length() {
        let t = tap(CaptureDir::Both, None, 20);
        let long: Vec<u8> = (0..100).collect();
        t.received(1, &batch(&[&long[..], &[7; 10][..]]));
        let a = t.take().unwrap();
        assert_eq!(
            (a.crossed, a.queue, a.len),
            (Crossed::Received, Some(1), 100)
        );
        assert_eq!(&*a.bytes, &long[..20]);
        let b = t.take().unwrap();
        assert_eq!((b.len, &*b.bytes), (10, &[7u8; 10][..]));
        assert!(t.take().is_none());
        assert_eq!((t.kept(), t.dropped()), (2, 0));
    }

    #[test]
    fn only_the_asked_direction_and_queue_are_taken() {
        let b = batch(&[[1; 60], [2; 60]]);
        let rx = tap(CaptureDir::Rx, Some(1), 100);
        rx.received(0, &b);
        rx.sent(&b, &[0, 1]);
        assert!(rx.take().is_none(), "queue 0 and sent frames are not taken");
        rx.received(1, &b);
        assert_eq!(rx.kept(), 2);
        let tx = tap(CaptureDir::Tx, None, 100);
        tx.received(0, &b);
        tx.sent(&b, &[1]);
        let f = tx.take().unwrap();
        assert_eq!((f.crossed, f.queue, f.bytes[0]), (Crossed::Sent, None, 2));
        assert!(tx.take().is_none());
    }

    #[test]
    fn a_queue_is_for_received_frames_and_the_snap_length_is_bounded() {
        let e = CaptureFilter::new(CaptureDir::Both, Some(0), 100);
        assert_eq!(e, Err(CaptureFilterError::QueueOfSentFrames));
        let e = CaptureFilter::new(CaptureDir::Rx, None, MAX_SNAPLEN + 1);
        assert_eq!(e, Err(CaptureFilterError::Snaplen(MAX_SNAPLEN + 1)));
        assert!(CaptureFilter::new(CaptureDir::Rx, None, 0).is_err());
    }

    #[test]
    fn a_full_buffer_drops_and_counts_and_never_blocks() {
        let t = tap(CaptureDir::Rx, None, MAX_SNAPLEN);
        let b = batch(&[[0xab; 1500]; 64]);
        // Nobody takes: the buffer fills, then every frame is dropped and
        // counted, the call returning each time.
        let sent = BUFFER_FRAMES as u64 + 640;
        for _ in 0..sent / 64 {
            t.received(0, &b);
        }
        let by_bytes = (BUFFER_BYTES / 1500) as u64;
        let held = by_bytes.min(BUFFER_FRAMES as u64);
        assert_eq!(t.kept(), held);
        assert_eq!(t.dropped(), sent - held);
        assert_eq!(t.stats.capture_dropped.load(Relaxed), sent - held);
        // The writer takes one: there is room for one more.
        assert!(t.take().is_some());
        t.received(0, &batch(&[[1; 60]]));
        assert_eq!(t.kept(), held + 1);
    }

    #[test]
    fn the_byte_budget_bounds_large_copies() {
        let t = tap(CaptureDir::Rx, None, MAX_SNAPLEN);
        let big = vec![0u8; 60_000];
        let mut b = FrameBatch::new(1);
        assert!(b.push(&big));
        for _ in 0..(BUFFER_BYTES / 60_000 + 10) {
            t.received(0, &b);
        }
        assert_eq!(t.kept() as usize, BUFFER_BYTES / 60_000);
        assert_eq!(t.dropped(), 10);
    }
}
