//! The guests: each VM's vCPU time and request/response server threads, and
//! the guest side of a queue, where stream senders post segments to the
//! ring, stop on a full ring, and restart on a call.

use super::queues::SimulatedQueue;
use crate::scenario::RrLoad;
use std::collections::VecDeque;

/// One VM.
#[derive(Debug)]
pub(super) struct SimulatedVm {
    /// vCPU time used, ns.
    pub(super) guest_busy: f64,
    /// Request/response: when each server thread is next free, ns.
    pub(super) servers: Vec<u64>,
    /// Request/response: per server thread, the windows (start, end), ns,
    /// in which it is preempted and does not run although `servers` says it
    /// is not free (the `cores` module's preemption model), in time order.
    pub(super) gaps: Vec<VecDeque<(u64, u64)>>,
    /// The VM's request/response load, if it has one.
    pub(super) request_response: Option<RrLoad>,
}

impl SimulatedVm {
    /// A VM with `server_threads` idle request/response servers.
    pub(super) fn new(request_response: Option<RrLoad>, server_threads: usize) -> Self {
        SimulatedVm {
            guest_busy: 0.0,
            servers: vec![0u64; server_threads],
            gaps: vec![VecDeque::new(); server_threads],
            request_response,
        }
    }

    /// Request/response server threads running at `t`: not free yet (`free
    /// > t`, or `free >= t` when `at_end`) and not in a preemption gap.
    pub(super) fn running(&self, t: u64, at_end: bool) -> f64 {
        self.servers
            .iter()
            .zip(&self.gaps)
            .filter(|(&f, g)| {
                // Gaps are disjoint and in time order, and those that ended
                // by the last advance are gone: only the first few can
                // hold `t`.
                (if at_end { f >= t } else { f > t })
                    && !g.iter().take_while(|&&(a, _)| a <= t).any(|&(_, b)| t < b)
            })
            .count() as f64
    }

    /// Forget the preemption gaps that ended by `t`.
    pub(super) fn drop_gaps_before(&mut self, t: u64) {
        for g in &mut self.gaps {
            while g.front().is_some_and(|w| w.1 <= t) {
                g.pop_front();
            }
        }
    }
}

impl SimulatedQueue {
    /// Post the segments the senders have finished; stop or stall as the
    /// ring says. Returns whether the guest kicked.
    pub(super) fn post_finished_segments(&mut self) -> bool {
        let Some(p) = &mut self.senders else {
            return false;
        };
        if p.stalled {
            return false;
        }
        if let Some(pile) = p.pile.as_ref().filter(|pile| pile.stopped) {
            // Stopped: the writes pile up until every send queue is full.
            let full = pile.cap as f64 * pile.msg_cost;
            if p.progress + 1e-9 >= full {
                p.progress = full;
                p.stalled = true;
            }
            return false;
        }
        let ready = (p.progress / p.seg_cost + 1e-9).floor() as u64;
        let n = ready.min(self.ring.free());
        let mut kicked = false;
        if n > 0 {
            // Post up to the kick point first so a kick lands on its index.
            kicked = self.ring.post(n);
            p.posted(n, p.payload);
            p.progress = (p.progress - n as f64 * p.seg_cost).max(0.0);
        }
        let ring_full = self.ring.free() == 0;
        if let Some(pile) = p.pile.as_mut() {
            if ring_full {
                // The queue stops (Linux `netif_stop_subqueue`) and asks for
                // a call; the writers go on, piling up.
                pile.stopped = true;
                self.ring.enable_call_delayed();
            }
        } else if ring_full && p.progress + 1e-9 >= p.seg_cost {
            // The next segment does not fit: the queue stops, the senders
            // block, the vCPUs halt; the guest asks for a call (virtio-net).
            p.progress = p.seg_cost;
            p.stalled = true;
            self.ring.enable_call_delayed();
        }
        kicked
    }

    /// The TX call (costing the guest `call_ns`) restarts a stopped queue:
    /// the piled-up writes go out as segments (`coalesce = "since-room"`),
    /// then the senders run on. Returns whether the guest kicked.
    pub(super) fn restart_stopped_queue(&mut self, call_ns: f64) -> bool {
        let Some(p) = &mut self.senders else {
            return false;
        };
        p.stalled = false;
        p.debt += call_ns;
        let mut kicked = false;
        if let Some(pile) = p.pile.as_mut().filter(|pile| pile.stopped) {
            pile.stopped = false;
            let msgs = (p.progress / pile.msg_cost + 1e-9).floor() as u64;
            let (runs, msg_cost, xmit_ns) = (pile.segments(msgs), pile.msg_cost, pile.xmit_ns);
            p.progress = (p.progress - msgs as f64 * msg_cost).max(0.0);
            let mut room = self.ring.free();
            for (segs, payload) in runs {
                // The call comes once 3/4 of the ring is used: there is room
                // for a pile (at most a segment a thread) on any ring larger
                // than four segments a thread; a smaller one drops the rest.
                let segs = segs.min(room);
                room -= segs;
                kicked |= self.ring.post(segs);
                p.posted(segs, payload);
                p.debt += segs as f64 * xmit_ns;
            }
        }
        kicked
    }
}
