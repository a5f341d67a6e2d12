//! The echo port: swaps source and destination MAC of every frame and
//! sends it back into the switch from its own port.

use super::egress::Egress;
use super::ingress::Ingress;
use super::learning_switch::FdbCache;
use crate::frames::FrameBatch;
use crate::metrics::{Dir, DropReason, PortStats};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

thread_local! {
    static ECHO_SCRATCH: RefCell<(FrameBatch, FdbCache)> =
        RefCell::new((FrameBatch::new(256), FdbCache::default()));
}

/// Swaps source and destination MAC and sends each frame back into the switch,
/// from its own port (so it reaches the sender through normal switching).
#[derive(Debug)]
pub struct Echo {
    stats: Arc<PortStats>,
    /// Set once attached ([`Echo::attach`]); frames delivered before are dropped.
    ingress: OnceLock<Ingress>,
}

impl Echo {
    /// An echo counting into `stats`; call [`Echo::attach`] once attached.
    pub fn new(stats: Arc<PortStats>) -> Self {
        Echo {
            stats,
            ingress: OnceLock::new(),
        }
    }

    /// The echo's own way into the switch (frames are re-injected from its
    /// port). Only the first call counts.
    pub fn attach(&self, ingress: Ingress) {
        let _ = self.ingress.set(ingress);
    }
}

impl Egress for Echo {
    fn deliver(&self, frames: &FrameBatch, which: &[u16], flow: u16) {
        let q = &self.stats.queues[0];
        q.add(Dir::Rx, which.len() as u64, frames_bytes(frames, which));
        let Some(ingress) = self.ingress.get() else {
            q.drop(DropReason::PortDown, which.len() as u64);
            return;
        };
        ECHO_SCRATCH.with(|s| {
            // A re-entrant delivery (echo into echo) cannot happen: the switch
            // never floods back to the ingress port. Be safe anyway.
            let Ok(mut s) = s.try_borrow_mut() else {
                q.drop(DropReason::Other, which.len() as u64);
                return;
            };
            let (batch, cache) = &mut *s;
            for chunk in which.chunks(batch.capacity()) {
                batch.clear();
                for &i in chunk {
                    // Offloads go back as they came; a GSO frame that finds
                    // the side store full sends the batch first.
                    if !batch.push_from(frames, usize::from(i)) {
                        q.add(Dir::Tx, batch.len() as u64, batch.bytes());
                        if let Some(f) = ingress.forward(flow, batch, cache) {
                            f.count_into(&self.stats, 0);
                        }
                        batch.clear();
                        batch.push_from(frames, usize::from(i));
                    }
                    let n = batch.len() - 1;
                    let f = batch.get_mut(n);
                    if f.len() >= 12 {
                        let mut tmp = [0u8; 6];
                        tmp.copy_from_slice(&f[0..6]);
                        f.copy_within(6..12, 0);
                        f[6..12].copy_from_slice(&tmp);
                    }
                }
                q.add(Dir::Tx, batch.len() as u64, batch.bytes());
                if let Some(f) = ingress.forward(flow, batch, cache) {
                    f.count_into(&self.stats, 0);
                }
            }
        });
    }
}

fn frames_bytes(frames: &FrameBatch, which: &[u16]) -> u64 {
    which
        .iter()
        .map(|&i| frames.frame_len(usize::from(i)) as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::super::learning_switch::Switch;
    use super::super::sink::Sink;
    use super::super::test_utils::Recorder;
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use vadapt_wire::Mac;

    #[test]
    fn echo_swaps_macs_and_returns_to_sender_and_sink_counts() {
        let sw = Arc::new(Switch::new(Duration::from_secs(300)));
        let rec = Arc::new(Recorder::default());
        let vm = sw.add_port(
            rec.clone(),
            Arc::new(PortStats::new("vm", crate::metrics::PortKind::Vm, 1)),
        );
        let es = Arc::new(PortStats::new("echo", crate::metrics::PortKind::Echo, 1));
        let echo = Arc::new(Echo::new(es.clone()));
        let eid = sw.add_port(echo.clone(), es.clone());
        echo.attach(sw.ingress(eid));
        let emac = Mac([2, 0, 0, 0, 0, 0xe]);
        sw.add_static(emac, eid);
        let ss = Arc::new(PortStats::new("sink", crate::metrics::PortKind::Sink, 1));
        let sid = sw.add_port(Arc::new(Sink::new(ss.clone())), ss.clone());
        let smac = Mac([2, 0, 0, 0, 0, 0x5]);
        sw.add_static(smac, sid);

        let vmac = Mac([2, 0, 0, 0, 0, 1]);
        let mut b = FrameBatch::new(4);
        let mut f = emac.0.to_vec();
        f.extend_from_slice(&vmac.0);
        f.extend_from_slice(&[0x08, 0x00, 42]);
        b.push(&f);
        let mut s = smac.0.to_vec();
        s.extend_from_slice(&vmac.0);
        s.extend_from_slice(&[0x08, 0x00, 7]);
        b.push(&s);
        let _ = sw.forward(vm, 0, &b, &mut FdbCache::default());

        let got = rec.0.lock().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(&got[0][0..6], &vmac.0);
        assert_eq!(&got[0][6..12], &emac.0);
        assert_eq!(got[0][14], 42);
        let snap = |p: &PortStats, d: usize| p.queues[0].packets[d].load(Ordering::Relaxed);
        assert_eq!((snap(&es, 1), snap(&es, 0)), (1, 1));
        assert_eq!(snap(&ss, 1), 1);
    }
}
