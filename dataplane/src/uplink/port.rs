//! The uplink as the switch sees it: an [`Egress`] whose frames wait in a
//! backlog per NIC queue for that queue's worker, and the notification
//! between the switch and the workers (as a VM port's,
//! [`crate::queue::VmPort`]).

use crate::config::UplinkPortConfig;
use crate::frames::{Backlog, FrameBatch};
use crate::metrics::{DropReason, PortStats};
use crate::switch::{Egress, Ingress, PortId};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use vmm_sys_util::eventfd::EventFd;

/// One NIC queue's side of the switch.
#[derive(Debug)]
pub(crate) struct QueueSlot {
    /// Frames from the switch waiting for the TX ring.
    pub(crate) backlog: Backlog,
    /// Wakes the queue's worker blocked waiting for the NIC.
    pub(crate) wake: EventFd,
    /// True while the worker is blocked.
    pub(crate) waiting: AtomicBool,
    /// While the worker sleeps a timed sleep with a kick threshold
    /// (NetAP's ring-full safety net): the backlog length that wakes it
    /// early; 0 otherwise.
    pub(crate) wake_at: AtomicUsize,
}

/// An uplink port on the switch.
#[derive(Debug)]
pub struct Uplink {
    /// Configuration.
    pub cfg: UplinkPortConfig,
    /// Port counters, a queue per NIC queue.
    pub stats: Arc<PortStats>,
    pub(crate) queues: Vec<QueueSlot>,
    ingress: OnceLock<Ingress>,
}

impl Uplink {
    /// An uplink for `cfg` with backlogs of `backlog` frames, not yet on
    /// the switch.
    pub fn new(cfg: UplinkPortConfig, backlog: usize) -> std::io::Result<Arc<Self>> {
        let stats = Arc::new(PortStats::new(&cfg.name, "uplink", usize::from(cfg.queues)));
        let queues = (0..cfg.queues)
            .map(|_| {
                Ok(QueueSlot {
                    backlog: Backlog::new(backlog),
                    wake: EventFd::new(libc::EFD_NONBLOCK)?,
                    waiting: AtomicBool::new(false),
                    wake_at: AtomicUsize::new(0),
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Arc::new(Uplink {
            cfg,
            stats,
            queues,
            ingress: OnceLock::new(),
        }))
    }

    /// Port name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Largest frame taken either way (not a GSO frame), bytes.
    pub fn max_frame(&self) -> usize {
        crate::net::max_frame(self.cfg.mtu.unwrap_or(crate::net::DEFAULT_MTU))
    }

    /// Our way into the switch: set once, right after the switch attached us.
    pub fn attach(&self, ingress: Ingress) {
        let _ = self.ingress.set(ingress);
    }

    /// Our way into the switch (`None` before [`Uplink::attach`]).
    pub fn ingress(&self) -> Option<&Ingress> {
        self.ingress.get()
    }

    /// Our switch port id (`usize::MAX` before [`Uplink::attach`]).
    pub fn port_id(&self) -> PortId {
        self.ingress.get().map_or(usize::MAX, Ingress::port)
    }

    /// Wake queue `q`'s worker if it is blocked.
    pub(crate) fn kick_worker(&self, q: usize) {
        let _ = self.queues[q].wake.write(1);
    }
}

impl Egress for Uplink {
    /// Frames for the wire: onto the backlog of NIC queue `flow` modulo the
    /// queue count (the sender's queue: one flow stays on one queue).
    fn deliver(&self, frames: &FrameBatch, which: &[u16], flow: u16) {
        let q = usize::from(flow) % self.queues.len();
        let slot = &self.queues[q];
        let (_, dropped) = slot.backlog.push(frames, which);
        if dropped > 0 {
            self.stats.queues[q].drop(DropReason::BacklogFull, dropped);
        }
        // Pairs with the worker's store of `waiting` (or `wake_at`) before
        // its re-check.
        std::sync::atomic::fence(Ordering::SeqCst);
        let at = slot.wake_at.load(Ordering::Relaxed);
        if slot.waiting.load(Ordering::Relaxed) || (at > 0 && slot.backlog.held() >= at) {
            self.kick_worker(q);
        }
    }
}
