//! A thread's end of the wire, the layer above its driver: what it sends (stamped raw
//! frames, or the segments of its TCP connection) and what it makes of what arrives (a reply
//! to one of the guest's requests is timed; a request is answered in echo mode).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::Mode;
use crate::driver::queue::{QueueError, RxPacket, TxQueue};
use crate::driver::{Added, Reply, Stack};
use crate::load::Load;
use crate::metrics::LatencyHistogram;
use crate::shared::Shared;
use crate::tcp_stream::TcpSender;
use vadapt_wire::stamped_frame::{self as frame, Stamp};
use vadapt_wire::tcp_build::TcpFlow;

/// One thread's endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// Thread number (stamped into every frame).
    id: u32,
    shared: Arc<Shared>,
    /// Sequence number of the next raw frame.
    seq: u64,
    /// Round trips of the requests answered (ns).
    hist: LatencyHistogram,
    /// TCP stream: this thread's connection.
    tcp: Option<TcpSender>,
}

impl Endpoint {
    /// Thread `id`'s endpoint: a TCP connection of its own in TCP stream, else raw frames.
    pub(crate) fn new(id: u32, shared: Arc<Shared>) -> Endpoint {
        Endpoint {
            id,
            seq: 0,
            hist: LatencyHistogram::new(),
            tcp: shared.tcp.as_ref().map(|t| {
                TcpSender::new(
                    TcpFlow::new(id, shared.mac, shared.dst_mac),
                    t.offloads,
                    shared.size,
                    shared.load == Load::ClosedLoop,
                    t.write_ns,
                    Arc::clone(&t.pattern),
                )
            }),
            shared,
        }
    }

    /// Sequence number the next raw frame (the next request) carries.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq
    }

    /// TCP stream: this thread's connection.
    pub(crate) fn tcp(&self) -> Option<&TcpSender> {
        self.tcp.as_ref()
    }

    /// TCP stream: this thread's connection, to write to.
    pub(crate) fn tcp_mut(&mut self) -> Option<&mut TcpSender> {
        self.tcp.as_mut()
    }

    /// The round trips measured, at the end of the run.
    pub(crate) fn into_histogram(self) -> LatencyHistogram {
        self.hist
    }
}

impl Stack for Endpoint {
    /// Adds the next buffer: a stamped raw frame, or this thread's next TCP segment.
    fn add_next(&mut self, tx: &mut TxQueue, now_ns: u64) -> Result<Added, QueueError> {
        if let Some(tcp) = self.tcp.as_mut() {
            // TCP timestamps tick in milliseconds (Linux's `tcp_time_stamp_ts`).
            let ts_ms = (now_ns / 1_000_000) as u32;
            return tcp.add_next(tx, ts_ms);
        }
        let stamp = Stamp {
            seq: self.seq,
            sent_ns: now_ns,
            thread: self.id,
        };
        if !tx.add(stamp, None)? {
            return Ok(Added::RingFull);
        }
        self.seq += 1;
        Ok(Added::Buffer {
            frame_bytes: self.shared.frame_len,
            payload_bytes: u64::from(self.shared.size),
            messages: 1,
        })
    }

    fn receive(&mut self, pkt: &RxPacket) -> Option<Reply> {
        on_packet(&self.shared, &mut self.hist, &pkt.head[..pkt.head_len])
    }
}

/// What a received packet (its first bytes, `head`) means to the guest: in request/response
/// mode, a reply to one of its threads' requests, whose round trip is recorded once; in echo
/// mode, a request to answer (returned: destination, stamp).
fn on_packet(shared: &Shared, hist: &mut LatencyHistogram, head: &[u8]) -> Option<Reply> {
    if matches!(shared.mode, Mode::Stream | Mode::TcpStream) {
        return None;
    }
    let f = frame::parse_frame(head)?;
    let stamp = f.stamp?;
    if f.dst != shared.mac {
        return None;
    }
    if shared.mode == Mode::Echo {
        return Some((f.src, stamp));
    }
    if stamp.thread >= shared.threads {
        return None;
    }
    let slot = &shared.answered[stamp.thread as usize];
    if stamp.seq + 1 > slot.load(Ordering::Acquire) {
        let rtt = shared.clock.now_ns().saturating_sub(stamp.sent_ns);
        hist.record(rtt);
        if let Some(p) = &shared.period_latency {
            p.record(stamp.thread, rtt);
        }
        slot.store(stamp.seq + 1, Ordering::Release);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use crate::clock::{Clock, ExitCost};
    use crate::load::Pacing;
    use crate::metrics::GuestCounters;
    use vadapt_qemu::server::vcpus::Vcpus;
    use vadapt_wire::vnet_hdr::HDR_LEN_MRG;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn shared(mode: Mode) -> Shared {
        Shared {
            clock: Clock::start(),
            stop: Arc::new(AtomicBool::new(false)),
            abort: AtomicBool::new(false),
            deadline_ns: u64::MAX,
            answered: (0..2).map(|_| AtomicU64::new(0)).collect(),
            counters: Arc::new(GuestCounters::new(2)),
            mac: MAC,
            dst_mac: PEER,
            mode,
            load: Load::ClosedLoop,
            pacing: Pacing::Exact,
            threads: 2,
            pairs: 1,
            exit: ExitCost { ns: 0 },
            napi_budget: 64,
            tx_batch: 1,
            rr_timeout_ns: 1_000_000_000,
            frame_len: 64,
            size: 64,
            tcp: None,
            vcpus: Arc::new(Vcpus::new()),
            period_latency: None,
        }
    }

    /// The frame (no virtio-net header) of a stamped packet from `src` to `dst`.
    fn frame(dst: [u8; 6], src: [u8; 6], stamp: Stamp) -> Vec<u8> {
        let mut buf = vec![0u8; frame::packet_len(64)];
        frame::write_packet(&mut buf, dst, src, 64, stamp);
        buf.split_off(HDR_LEN_MRG)
    }

    fn stamp(thread: u32, seq: u64) -> Stamp {
        Stamp {
            seq,
            sent_ns: 0,
            thread,
        }
    }

    #[test]
    fn a_stream_ignores_what_it_receives() {
        for mode in [Mode::Stream, Mode::TcpStream] {
            let sh = shared(mode);
            let mut hist = LatencyHistogram::new();
            assert_eq!(
                on_packet(&sh, &mut hist, &frame(MAC, PEER, stamp(0, 0))),
                None
            );
            assert!(hist.is_empty());
        }
    }

    #[test]
    fn echo_answers_requests_to_its_mac_only() {
        let sh = shared(Mode::Echo);
        let mut hist = LatencyHistogram::new();
        let s = stamp(1, 7);
        assert_eq!(
            on_packet(&sh, &mut hist, &frame(MAC, PEER, s)),
            Some((PEER, s))
        );
        assert_eq!(on_packet(&sh, &mut hist, &frame(PEER, MAC, s)), None);
        assert_eq!(on_packet(&sh, &mut hist, &[0u8; 10]), None);
        assert!(hist.is_empty());
    }

    #[test]
    fn a_reply_is_timed_once_and_marks_its_request_answered() {
        let sh = shared(Mode::RequestResponse);
        let mut hist = LatencyHistogram::new();
        let reply = frame(MAC, PEER, stamp(1, 4));
        assert_eq!(on_packet(&sh, &mut hist, &reply), None);
        assert_eq!(hist.len(), 1);
        assert_eq!(sh.answered[1].load(Ordering::Acquire), 5);
        assert_eq!(sh.answered[0].load(Ordering::Acquire), 0);
        // A duplicate, or an older reply, is not timed again.
        on_packet(&sh, &mut hist, &reply);
        on_packet(&sh, &mut hist, &frame(MAC, PEER, stamp(1, 3)));
        assert_eq!(hist.len(), 1);
        // Replies to a thread the guest does not have, or to another MAC, are ignored.
        on_packet(&sh, &mut hist, &frame(MAC, PEER, stamp(2, 9)));
        on_packet(&sh, &mut hist, &frame(PEER, MAC, stamp(0, 9)));
        assert_eq!(hist.len(), 1);
        assert_eq!(sh.answered[0].load(Ordering::Acquire), 0);
    }
}
