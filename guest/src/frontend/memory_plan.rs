//! Where every part of guest memory goes: rings first, page-aligned, then the buffers.

use vadapt_virtq::AnyLayout;

use crate::config::{GuestConfig, Mode};
use crate::driver::queue::{RX_BUF_LEN, SEGMENT_SLOT_LEN};
use vadapt_wire::stamped_frame as frame;
use vadapt_wire::tcp_build::TSO_SIZE_GOAL;

/// Page size used to align the parts of guest memory (bytes).
pub(super) const PAGE: u64 = 4096;

/// Where every part of guest memory goes (guest-physical addresses, bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Total size of the memfd (bytes, page multiple).
    pub size: u64,
    /// Per queue pair: RX ring layout, TX ring layout, RX buffers start, TX buffers start.
    pub pairs: Vec<PairPlan>,
    /// Control queue ring and its one page of command buffers.
    pub ctrl: CtrlPlan,
}

/// Guest-physical placement of the control queue (set up only when used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtrlPlan {
    /// The ring ([`CTRL_RING_SIZE`] descriptors).
    pub ring: AnyLayout,
    /// One page for the command header, its data and the ack byte.
    pub buf: u64,
}

/// Descriptors of the control queue (Linux uses 64).
pub const CTRL_RING_SIZE: u16 = 64;

/// Guest-physical placement of one queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairPlan {
    /// RX ring (queue `2*i`).
    pub rx: AnyLayout,
    /// TX ring (queue `2*i+1`).
    pub tx: AnyLayout,
    /// First RX buffer; `ring_size` buffers of [`RX_BUF_LEN`].
    pub rx_bufs: u64,
    /// First TX buffer; `ring_size` buffers of [`TxBufs::stride`].
    pub tx_bufs: u64,
    /// TCP-stream mode: the payload area ([`TxBufs::payload`] bytes; 0 = none).
    pub tx_payload: u64,
}

/// How a pair's TX buffers are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxBufs {
    /// Bytes per TX slot.
    pub stride: u32,
    /// Bytes of the payload area shared by the slots (0 = none: raw frames).
    pub payload: u32,
}

impl TxBufs {
    /// The layout `cfg` needs: whole packets of `cfg.size` bytes per slot for raw frames;
    /// header slots plus one payload area of a full TSO segment for TCP stream.
    pub fn for_config(cfg: &GuestConfig) -> TxBufs {
        if cfg.mode == Mode::TcpStream {
            TxBufs {
                stride: SEGMENT_SLOT_LEN,
                payload: TSO_SIZE_GOAL,
            }
        } else {
            TxBufs {
                stride: tx_stride(cfg.size),
                payload: 0,
            }
        }
    }
}

fn page_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// TX buffer stride for messages of `size` bytes: the packet rounded up to a cache line.
pub fn tx_stride(size: u32) -> u32 {
    (frame::packet_len(size) as u32).div_ceil(64) * 64
}

/// Lays out `pairs` queue pairs with rings of `ring_size` (packed ones with `packed`) from
/// guest-physical 0: rings first (page-aligned, so the backend's ring accesses never share a
/// page with packet data), then the buffers (`tx` says how the TX buffers are laid out).
pub fn plan_memory(pairs: u16, ring_size: u16, tx: TxBufs, packed: bool) -> MemoryPlan {
    let mut at = 0u64;
    let mut plans = Vec::with_capacity(usize::from(pairs));
    for _ in 0..pairs {
        let (rx, rx_len) = AnyLayout::contiguous(packed, ring_size, at);
        at = page_up(at + rx_len);
        let (tx, tx_len) = AnyLayout::contiguous(packed, ring_size, at);
        at = page_up(at + tx_len);
        plans.push(PairPlan {
            rx,
            tx,
            rx_bufs: 0,
            tx_bufs: 0,
            tx_payload: 0,
        });
    }
    let (ring, ctrl_len) = AnyLayout::contiguous(packed, CTRL_RING_SIZE, at);
    at = page_up(at + ctrl_len);
    let ctrl = CtrlPlan { ring, buf: at };
    at += PAGE;
    for p in &mut plans {
        p.rx_bufs = at;
        at = page_up(at + u64::from(RX_BUF_LEN) * u64::from(ring_size));
        p.tx_bufs = at;
        at = page_up(at + u64::from(tx.stride) * u64::from(ring_size));
        if tx.payload > 0 {
            p.tx_payload = at;
            at = page_up(at + u64::from(tx.payload));
        }
    }
    MemoryPlan {
        size: at,
        pairs: plans,
        ctrl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_stream_plan_has_header_slots_and_a_payload_area() {
        let tx = TxBufs {
            stride: SEGMENT_SLOT_LEN,
            payload: TSO_SIZE_GOAL,
        };
        let plan = plan_memory(2, 1024, tx, false);
        for p in &plan.pairs {
            assert!(p.tx_payload >= p.tx_bufs + u64::from(SEGMENT_SLOT_LEN) * 1024);
            assert_eq!(p.tx_payload % PAGE, 0);
        }
        assert!(plan.pairs[1].rx_bufs >= plan.pairs[0].tx_payload + u64::from(TSO_SIZE_GOAL));
        assert!(plan.size >= plan.pairs[1].tx_payload + u64::from(TSO_SIZE_GOAL));
    }

    #[test]
    fn memory_plan_has_no_overlaps() {
        let tx = TxBufs {
            stride: tx_stride(1500),
            payload: 0,
        };
        for packed in [false, true] {
            let plan = plan_memory(3, 256, tx, packed);
            let mut spans = vec![];
            for p in &plan.pairs {
                for l in [p.rx, p.tx] {
                    assert!(l.is_valid());
                    assert_eq!(l.is_packed(), packed);
                    spans.push((l.vring_addrs().0, l.end()));
                }
                spans.push((p.rx_bufs, p.rx_bufs + 2048 * 256));
                spans.push((p.tx_bufs, p.tx_bufs + u64::from(tx_stride(1500)) * 256));
            }
            let c = plan.ctrl;
            assert!(c.ring.is_valid());
            assert_eq!(c.ring.size(), CTRL_RING_SIZE);
            spans.push((c.ring.vring_addrs().0, c.ring.end()));
            spans.push((c.buf, c.buf + PAGE));
            spans.sort();
            for w in spans.windows(2) {
                assert!(w[0].1 <= w[1].0, "{w:?} overlap");
            }
            assert!(spans.last().unwrap().1 <= plan.size);
            assert_eq!(plan.size % PAGE, 0);
        }
        assert_eq!(tx_stride(64), 128); // 12 + 14 + 64 = 90 -> 128
    }
}
