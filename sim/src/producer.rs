//! A stream sender group on one queue, as the engine's fluid model sees it:
//! vCPU time accumulates towards the next segment, finished segments go on
//! the ring, and the chains on the ring keep their sizes until the host takes
//! them (a pass's bytes, the NIC's wire time and the per-byte costs follow
//! the segments actually posted).
//!
//! How small messages become segments is the workload's `coalesce` rule
//! ([`Coalesce`]): every segment full, or the synthetic guest's rule, where
//! a segment carries what was written since the ring last had room
//! ([`Pile`]).

use crate::scenario::{Coalesce, StreamLoad};
use std::collections::VecDeque;

/// Smallest Ethernet frame without FCS: shorter frames are padded.
const MIN_FRAME: u64 = 60;

/// CPU per segment and payload per segment of a sender whose segments are
/// all alike: small messages coalesced into full segments, large ones split
/// into several.
pub(crate) fn stream_seg_cost(s: &StreamLoad) -> (f64, u64) {
    let seg = u64::from(s.segment_bytes);
    let msg = u64::from(s.msg_size);
    let per_msg = message_cost(s);
    if msg >= seg {
        let k = msg.div_ceil(seg);
        (per_msg / k as f64 + s.xmit_segment_ns, seg.min(msg))
    } else {
        let msgs = seg / msg;
        (msgs as f64 * per_msg + s.xmit_segment_ns, msgs * msg)
    }
}

/// Guest CPU to write one message, ns.
fn message_cost(s: &StreamLoad) -> f64 {
    s.send_msg_ns + f64::from(s.msg_size) * s.send_byte_ps / 1000.0
}

/// A closed-loop sender group on one queue.
#[derive(Debug)]
pub(crate) struct Producer {
    /// vCPU threads this queue's senders keep runnable.
    pub threads: f64,
    /// CPU per segment posted while the queue runs, ns.
    pub seg_cost: f64,
    /// Payload of such a segment, bytes.
    pub payload: u64,
    /// Protocol header bytes of every frame.
    header: u64,
    /// CPU done towards the next segment (or, piling up, messages), ns.
    pub progress: f64,
    /// CPU owed to exits and calls before any more progress, ns.
    pub debt: f64,
    /// The senders are blocked (no CPU) until the TX call.
    pub stalled: bool,
    /// `coalesce = "since-room"` with messages smaller than a segment.
    pub pile: Option<Pile>,
    /// Chains on the ring the host has not taken: runs of (chains, payload
    /// bytes each), oldest first.
    on_ring: VecDeque<(u64, u64)>,
}

/// What the synthetic guest's writers do while their queue is stopped: they
/// go on writing, and the writes pile up until a segment per thread is
/// queued; the TX call restarts the queue with what piled up.
#[derive(Debug)]
pub(crate) struct Pile {
    /// CPU per message written, ns.
    pub msg_cost: f64,
    /// Message size, bytes.
    msg_bytes: u64,
    /// CPU per segment handed to the driver, ns.
    pub xmit_ns: f64,
    /// Messages a segment holds at most.
    per_segment: u64,
    /// Messages piled up at which every thread's send queue is full.
    pub cap: u64,
    /// The queue is stopped: `progress` counts piled messages at `msg_cost`.
    pub stopped: bool,
}

impl Pile {
    /// The segments `msgs` piled-up messages leave as, runs of (segments,
    /// payload each): full segments, then the rest.
    pub fn segments(&self, msgs: u64) -> [(u64, u64); 2] {
        let full = msgs / self.per_segment;
        let rest = msgs % self.per_segment;
        [
            (full, self.per_segment * self.msg_bytes),
            (u64::from(rest > 0), rest * self.msg_bytes),
        ]
    }
}

impl Producer {
    /// The senders of `s`, `threads` of them runnable on this queue.
    pub fn new(s: &StreamLoad, threads: f64) -> Producer {
        let msg = u64::from(s.msg_size);
        let seg = u64::from(s.segment_bytes);
        let pile = (s.coalesce == Coalesce::SinceRoom && msg < seg).then(|| Pile {
            msg_cost: message_cost(s),
            msg_bytes: msg,
            xmit_ns: s.xmit_segment_ns,
            per_segment: seg / msg,
            cap: (seg / msg) * (threads.ceil() as u64).max(1),
            stopped: false,
        });
        let (seg_cost, payload) = match &pile {
            // While the queue runs, each message goes out as its own segment.
            Some(p) => (p.msg_cost + p.xmit_ns, msg),
            None => stream_seg_cost(s),
        };
        Producer {
            threads,
            seg_cost,
            payload,
            header: u64::from(s.header_bytes),
            progress: 0.0,
            debt: 0.0,
            stalled: false,
            pile,
            on_ring: VecDeque::new(),
        }
    }

    /// CPU still needed before the next point that matters: `k` more
    /// segments while the queue runs, or a full pile while it is stopped.
    pub fn cpu_to_next(&self, k: u64) -> f64 {
        let target = match &self.pile {
            Some(p) if p.stopped => p.cap as f64 * p.msg_cost,
            _ => k as f64 * self.seg_cost,
        };
        self.debt + target - self.progress
    }

    /// `n` chains of `payload` bytes each went on the ring.
    pub fn posted(&mut self, n: u64, payload: u64) {
        if n == 0 {
            return;
        }
        match self.on_ring.back_mut() {
            Some((m, p)) if *p == payload => *m += n,
            _ => self.on_ring.push_back((n, payload)),
        }
    }

    /// Bytes of the frame of a chain carrying `payload`.
    fn frame(&self, payload: u64) -> u64 {
        (payload + self.header).max(MIN_FRAME)
    }

    /// How many of the oldest chains on the ring fit in `bytes` of frames
    /// (at least one).
    pub fn chains_within(&self, bytes: u64) -> u64 {
        let mut left = bytes;
        let mut n = 0;
        for &(m, p) in &self.on_ring {
            let f = self.frame(p);
            let k = (left / f).min(m);
            n += k;
            if k < m {
                break;
            }
            left -= k * f;
        }
        n.max(1)
    }

    /// The host takes the `n` oldest chains: (frame bytes, payload bytes).
    pub fn take(&mut self, mut n: u64) -> (u64, u64) {
        let (mut bytes, mut payload) = (0, 0);
        while let Some(&(m, p)) = self.on_ring.front() {
            if n == 0 {
                break;
            }
            let k = n.min(m);
            bytes += k * self.frame(p);
            payload += k * p;
            n -= k;
            if k == m {
                self.on_ring.pop_front();
            } else {
                self.on_ring[0].0 -= k;
            }
        }
        (bytes, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(coalesce: Coalesce) -> StreamLoad {
        StreamLoad {
            threads: 1,
            msg_size: 64,
            segment_bytes: 1448,
            header_bytes: 54,
            send_msg_ns: 500.0,
            send_byte_ps: 0.0,
            xmit_segment_ns: 1000.0,
            coalesce,
        }
    }

    #[test]
    fn small_messages_coalesce_into_segments() {
        let s = load(Coalesce::Full);
        let (cost, payload) = stream_seg_cost(&s);
        assert_eq!(payload, 22 * 64);
        assert_eq!(cost, 22.0 * 500.0 + 1000.0);
        let big = StreamLoad {
            msg_size: 4000,
            ..s
        };
        let (cost, payload) = stream_seg_cost(&big);
        assert_eq!(payload, 1448);
        assert!((cost - (500.0 / 3.0 + 1000.0)).abs() < 1e-9);
        assert!(Producer::new(&s, 1.0).pile.is_none());
    }

    #[test]
    fn since_room_posts_one_message_a_segment_and_piles_up_to_a_segment_a_thread() {
        let p = Producer::new(&load(Coalesce::SinceRoom), 3.0);
        assert_eq!((p.seg_cost, p.payload), (1500.0, 64));
        let pile = p.pile.as_ref().unwrap();
        assert_eq!(pile.cap, 3 * 22);
        assert_eq!(pile.segments(50), [(2, 22 * 64), (1, 6 * 64)]);
        assert_eq!(pile.segments(44), [(2, 22 * 64), (0, 0)]);
        // Messages as large as a segment are never piled.
        let big = StreamLoad {
            msg_size: 1448,
            ..load(Coalesce::SinceRoom)
        };
        assert!(Producer::new(&big, 1.0).pile.is_none());
    }

    #[test]
    fn chains_keep_their_sizes_until_taken() {
        let mut p = Producer::new(&load(Coalesce::SinceRoom), 1.0);
        p.posted(3, 64);
        p.posted(2, 64);
        p.posted(1, 1408);
        p.posted(0, 7);
        // 64 + 54 = 118-byte frames, then one of 1462.
        assert_eq!(p.chains_within(118 * 4 + 10), 4);
        assert_eq!(p.chains_within(118 * 5 + 1462), 6);
        assert_eq!(p.chains_within(1), 1);
        assert_eq!(p.take(4), (4 * 118, 4 * 64));
        assert_eq!(p.take(10), (118 + 1462, 64 + 1408));
        assert_eq!(p.take(1), (0, 0));
        // Frames are padded to 60 bytes.
        let mut tiny = Producer::new(
            &StreamLoad {
                header_bytes: 0,
                ..load(Coalesce::Full)
            },
            1.0,
        );
        tiny.posted(2, 10);
        assert_eq!(tiny.take(2), (120, 20));
    }
}
