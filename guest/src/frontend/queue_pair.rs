//! A queue pair built in guest memory as planned, ready for the rings to be started.

use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::{AnyDriverQueue, AnyLayout, RingFeatures};
use virtio_bindings::virtio_net::VIRTIO_NET_F_MRG_RXBUF;

use super::error::FrontendError;
use super::features::has_feature;
use super::memory_plan::{tx_stride, PairPlan};
use crate::config::{GuestConfig, Mode};
use crate::driver::queue::{QueuePair, RxQueue, TxQueue};
use crate::tcp_stream;
use vadapt_wire::stamped_frame::{self as frame, Stamp};

/// Creates queue pair `index` in `mem` as planned (split or packed rings, as `p` lays them
/// out): rings initialised, TX buffers pre-filled with
/// the packet template, RX buffers posted, RX callbacks on (NAPI), TX callbacks off (Linux's
/// non-NAPI TX path: no interrupt until the queue stops on a full ring). Nothing is said to a
/// backend: [`Connection::connect`](super::Connection::connect) does that, tests drive the rings directly.
pub fn build_pair(
    mem: &GuestMemory,
    index: u16,
    p: &PairPlan,
    cfg: &GuestConfig,
    features: u64,
    mac: [u8; 6],
) -> Result<QueuePair, FrontendError> {
    let ring_features = RingFeatures::from_bits(features);
    let ring = |i: usize, l: AnyLayout| {
        AnyDriverQueue::new(mem, l, ring_features).map_err(|e| FrontendError::Ring {
            index: i,
            reason: e.to_string(),
        })
    };
    let rxq = ring(2 * usize::from(index), p.rx)?;
    let txq = ring(2 * usize::from(index) + 1, p.tx)?;
    let qerr = |source| FrontendError::Queue {
        pair: index,
        source,
    };
    let mergeable = has_feature(features, VIRTIO_NET_F_MRG_RXBUF);
    let mut rx = RxQueue::new(rxq, mem, p.rx_bufs, cfg.ring_size, mergeable).map_err(qerr)?;
    let mut tx = if cfg.mode == Mode::TcpStream {
        TxQueue::new_segmented(
            txq,
            mem,
            p.tx_bufs,
            cfg.ring_size,
            p.tx_payload,
            &tcp_stream::payload_pattern(),
            ring_features.indirect,
        )
    } else {
        let mut template = vec![0u8; frame::packet_len(cfg.size)];
        let stamp = Stamp {
            seq: 0,
            sent_ns: 0,
            thread: 0,
        };
        frame::write_packet(&mut template, cfg.dst_mac, mac, cfg.size, stamp);
        TxQueue::new(
            txq,
            mem,
            p.tx_bufs,
            tx_stride(cfg.size),
            cfg.ring_size,
            &template,
        )
    }
    .map_err(qerr)?;
    // Linux posts its RX buffers before the device starts (`try_fill_recv`); the kick comes
    // once the rings are live (`Guest::connect`).
    rx.refill().map_err(qerr)?;
    let _ = rx.vq.enable_cb();
    tx.vq.disable_cb();
    Ok(QueuePair { index, rx, tx })
}
