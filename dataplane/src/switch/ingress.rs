//! A port's handle on the switch: what a port that sends frames into the
//! switch holds instead of the switch itself.
//!
//! The switch holds every port as an [`Egress`](super::Egress); a port that
//! also sends (a VM port's transmit side, the echo port, TAP's reader)
//! holds an [`Ingress`]: the switch by a weak reference, so that the two
//! never keep each other alive, and the port's own id, so that it can only
//! send as itself. A worker that forwards on every pass takes a [`Sender`]
//! once ([`Ingress::sender`]) rather than upgrading on every pass.

use super::egress::PortId;
use super::forwarded::Forwarded;
use super::learning_switch::{FdbCache, Switch};
use crate::frames::FrameBatch;
use std::sync::{Arc, Weak};
use vadapt_wire::Mac;

impl Switch {
    /// The handle by which port `id` sends into this switch.
    pub fn ingress(self: &Arc<Self>, id: PortId) -> Ingress {
        Ingress::new(self, id)
    }
}

/// A port's way into the switch (see the module documentation).
#[derive(Clone, Debug)]
pub struct Ingress {
    switch: Weak<Switch>,
    port: PortId,
}

impl Ingress {
    /// Port `port` of `switch`.
    fn new(switch: &Arc<Switch>, port: PortId) -> Self {
        Ingress {
            switch: Arc::downgrade(switch),
            port,
        }
    }

    /// The port's id on the switch.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// Forward `frames` as having entered on this port (queue `flow`):
    /// what the switch refused, for the port to count; `None` if the switch
    /// is gone (the daemon is stopping), and nothing was sent.
    pub fn forward(
        &self,
        flow: u16,
        frames: &FrameBatch,
        cache: &mut FdbCache,
    ) -> Option<Forwarded> {
        self.switch
            .upgrade()
            .map(|sw| sw.forward(self.port, flow, frames, cache))
    }

    /// Learn `mac` on this port now, unless another port has it (a port's
    /// configured MAC, before its first frame: see
    /// [`Switch::learn_if_unknown`]); nothing if the switch is gone.
    pub fn learn_if_unknown(&self, mac: Mac) {
        if let Some(sw) = self.switch.upgrade() {
            sw.learn_if_unknown(mac, self.port);
        }
    }

    /// Forget every address learned on this port (its frontend went away);
    /// nothing if the switch is gone.
    pub fn forget(&self) {
        if let Some(sw) = self.switch.upgrade() {
            sw.forget_port(self.port);
        }
    }

    /// A [`Sender`] for a worker's lifetime; `None` if the switch is gone.
    pub fn sender(&self) -> Option<Sender> {
        Some(Sender {
            switch: self.switch.upgrade()?,
            port: self.port,
        })
    }
}

/// An [`Ingress`] held strongly, for the lifetime of one worker: it
/// forwards without touching a shared reference count on every pass.
#[derive(Clone, Debug)]
pub struct Sender {
    switch: Arc<Switch>,
    port: PortId,
}

impl Sender {
    /// The port's id on the switch.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// Forward `frames` as having entered on this port (queue `flow`):
    /// what the switch refused, for the port to count.
    pub fn forward(&self, flow: u16, frames: &FrameBatch, cache: &mut FdbCache) -> Forwarded {
        self.switch.forward(self.port, flow, frames, cache)
    }

    /// As [`forward`](Self::forward), flooding only the frames `may_flood`
    /// lets through ([`Switch::forward_gated`]).
    pub fn forward_gated(
        &self,
        flow: u16,
        frames: &FrameBatch,
        cache: &mut FdbCache,
        may_flood: impl FnMut(usize) -> bool,
    ) -> Forwarded {
        self.switch
            .forward_gated(self.port, flow, frames, cache, may_flood)
    }

    /// The switch (for its table: learning, lookups).
    pub fn switch(&self) -> &Switch {
        &self.switch
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_utils::Recorder;
    use super::*;
    use crate::metrics::PortStats;
    use std::time::Duration;

    fn two_ports() -> (Arc<Switch>, Arc<Recorder>) {
        let sw = Arc::new(Switch::new(Duration::from_secs(300)));
        let rec = Arc::new(Recorder::default());
        sw.add_port(
            rec.clone(),
            Arc::new(PortStats::new("a", crate::metrics::PortKind::Vm, 1)),
        );
        sw.add_port(
            rec.clone(),
            Arc::new(PortStats::new("b", crate::metrics::PortKind::Vm, 1)),
        );
        (sw, rec)
    }

    #[test]
    fn an_ingress_sends_as_its_own_port() {
        let (sw, rec) = two_ports();
        let mut b = FrameBatch::new(2);
        b.push(&[0xff; 60]); // broadcast: flooded to every port but the ingress
        let ingress = sw.ingress(1);
        assert_eq!(ingress.port(), 1);
        assert!(ingress.forward(0, &b, &mut FdbCache::default()).is_some());
        assert_eq!(rec.0.lock().unwrap().len(), 1, "to port 0 only");
        let sender = ingress.sender().expect("switch alive");
        assert!(sender.forward(0, &b, &mut FdbCache::default()).is_quiet());
        assert_eq!(rec.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_flood_gate_is_asked_about_floods_only() {
        let (sw, rec) = two_ports();
        let sender = sw.ingress(1).sender().expect("switch alive");
        let known = Mac([2, 0, 0, 0, 0, 0xa]);
        sw.add_static(known, 0);
        let frame = |dst: Mac| {
            let mut f = [0u8; 60];
            f[..6].copy_from_slice(&dst.0);
            f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
            f
        };
        let mut b = FrameBatch::new(4);
        b.push(&frame(known)); // unicast to a known MAC: not asked
        b.push(&frame(Mac::BROADCAST)); // asked, refused
        b.push(&frame(Mac([1, 0, 0x5e, 0, 0, 1]))); // multicast: asked, let through
        b.push(&frame(Mac([2, 0, 0, 0, 0, 0xc]))); // unknown unicast: asked, refused
        let mut asked = Vec::new();
        let refused = sender.forward_gated(0, &b, &mut FdbCache::default(), |i| {
            asked.push(i);
            i == 2
        });
        assert_eq!(refused.spoofed, 0, "no port security on this port");
        assert_eq!(asked, [1, 2, 3]);
        let got = rec.0.lock().unwrap();
        assert_eq!(got.len(), 2, "the unicast and the multicast frame");
        assert_eq!(got[0][..6], known.0);
        assert_eq!(got[1][0], 1);
    }

    #[test]
    fn an_ingress_does_not_keep_the_switch_alive() {
        let (sw, rec) = two_ports();
        let ingress = sw.ingress(0);
        drop(sw);
        let mut b = FrameBatch::new(1);
        b.push(&[0xff; 60]);
        assert!(ingress.forward(0, &b, &mut FdbCache::default()).is_none());
        assert!(ingress.sender().is_none());
        assert!(rec.0.lock().unwrap().is_empty());
    }
}
