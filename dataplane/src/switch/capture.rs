//! Starting and stopping a capture on a port of the switch
//! (`vadapt capture`).
//!
//! A port has at most one capture at a time. Its [`CaptureTap`] is kept
//! with the port under the switch's one lock, and reaches the workers as
//! everything else about the ports does: starting or stopping one moves
//! the switch's generation, and each worker's [`FdbCache`](super::FdbCache)
//! takes the ports' taps when it refreshes. A worker's forwarding asks
//! its own cache whether any port is captured, once a batch, so a switch
//! without a capture costs no more than it did.
//!
//! The capture runs as long as its [`CaptureSession`] lives: dropping it
//! takes the tap off the port.

use super::capture_tap::{CaptureFilter, CaptureTap};
use super::learning_switch::Switch;
use std::sync::{Arc, Weak};

/// Why a capture could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CaptureError {
    /// No port of that name.
    #[error("no port {port} (ports: {ports})")]
    NoPort {
        /// The name asked for.
        port: String,
        /// The ports there are.
        ports: String,
    },
    /// The port has a capture running already.
    #[error("port {port} is being captured already; one capture per port at a time")]
    Busy {
        /// The port.
        port: String,
    },
}

impl Switch {
    /// Start capturing the port named `port` as `filter` says: until the
    /// returned session is dropped.
    pub fn capture(
        self: &Arc<Self>,
        port: &str,
        filter: CaptureFilter,
    ) -> Result<CaptureSession, CaptureError> {
        let mut t = self.tables();
        let Some(id) = t
            .ports
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.stats.name == port))
        else {
            let ports: Vec<String> = (t.ports.iter().flatten())
                .map(|p| p.stats.name.clone())
                .collect();
            return Err(CaptureError::NoPort {
                port: port.into(),
                ports: ports.join(", "),
            });
        };
        let entry = t.ports[id].as_mut().expect("found above");
        if entry.capture.is_some() {
            return Err(CaptureError::Busy { port: port.into() });
        }
        let tap = Arc::new(CaptureTap::new(id, filter, Arc::clone(&entry.stats)));
        entry.capture = Some(Arc::clone(&tap));
        drop(t);
        self.moved();
        Ok(CaptureSession {
            switch: Arc::downgrade(self),
            tap,
        })
    }

    /// Take `tap` off its port, if it is still there.
    fn end_capture(&self, tap: &Arc<CaptureTap>) {
        let mut t = self.tables();
        let Some(Some(entry)) = t.ports.get_mut(tap.port()) else {
            return;
        };
        if entry.capture.as_ref().is_some_and(|c| Arc::ptr_eq(c, tap)) {
            entry.capture = None;
            drop(t);
            self.moved();
        }
    }
}

/// A running capture: its tap on the port, until dropped.
#[derive(Debug)]
pub struct CaptureSession {
    switch: Weak<Switch>,
    tap: Arc<CaptureTap>,
}

impl CaptureSession {
    /// Its tap, where the writer takes the frames.
    pub fn tap(&self) -> &CaptureTap {
        &self.tap
    }
}

impl Drop for CaptureSession {
    fn drop(&mut self) {
        if let Some(sw) = self.switch.upgrade() {
            sw.end_capture(&self.tap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::capture_tap::{CaptureDir, Crossed};
    use super::super::learning_switch::FdbCache;
    use super::super::test_utils::Recorder;
    use super::*;
    use crate::frames::FrameBatch;
    use crate::metrics::{PortKind, PortStats};
    use std::time::Duration;

    fn switch() -> Arc<Switch> {
        let sw = Arc::new(Switch::new(Duration::from_secs(300)));
        for name in ["a", "b"] {
            let stats = Arc::new(PortStats::new(name, PortKind::Vm, 1));
            sw.add_port(Arc::new(Recorder::default()), stats);
        }
        sw
    }

    fn both() -> CaptureFilter {
        CaptureFilter::new(CaptureDir::Both, None, 100).unwrap()
    }

    #[test]
    fn frames_entering_and_leaving_a_captured_port_are_copied() {
        let sw = switch();
        let mut cache = FdbCache::default();
        let mut b = FrameBatch::new(1);
        b.push(&[0xff; 60]); // broadcast: from a to b
        let _ = sw.forward(0, 0, &b, &mut cache);
        let session = sw.capture("b", both()).unwrap();
        assert!(session.tap().take().is_none(), "nothing before it started");
        let _ = sw.forward(0, 0, &b, &mut cache);
        let f = session.tap().take().expect("b was handed the flood");
        assert_eq!((f.crossed, &*f.bytes), (Crossed::Sent, &[0xff; 60][..]));
        let mut c = FrameBatch::new(1);
        c.push(&[0xfe; 70]);
        let _ = sw.forward(1, 3, &c, &mut cache);
        let f = session.tap().take().expect("b received it");
        assert_eq!(
            (f.crossed, f.queue, f.len),
            (Crossed::Received, Some(3), 70)
        );
        assert!(session.tap().take().is_none());
        drop(session);
        let again = sw.capture("b", both()).unwrap();
        let old = Arc::clone(&again.tap);
        drop(again);
        let _ = sw.forward(0, 0, &b, &mut cache);
        assert!(old.take().is_none(), "a dropped session takes nothing more");
    }

    #[test]
    fn retagged_frames_are_copied_as_the_port_is_handed_them() {
        use super::super::port_rules::PortRules;
        use super::super::vlan::PortVlan;
        let sw = Arc::new(Switch::new(Duration::from_secs(300)));
        let trunk = PortRules::open_in(PortVlan::Trunk {
            allowed: [10].into_iter().collect(),
            native: 0,
        });
        let access = PortRules::open_in(PortVlan::Access(10));
        for (name, rules) in [("trunk", trunk), ("access", access)] {
            let stats = Arc::new(PortStats::new(name, PortKind::Vm, 1));
            sw.add_port_with(Arc::new(Recorder::default()), stats, rules);
        }
        let session = sw.capture("trunk", both()).unwrap();
        let mut b = FrameBatch::new(1);
        b.push(&[0xff; 60]);
        let _ = sw.forward(1, 0, &b, &mut FdbCache::default());
        let f = session.tap().take().expect("flooded to the trunk");
        assert_eq!(f.len, 64, "with its 802.1Q tag pushed");
        assert_eq!(&f.bytes[12..14], &[0x81, 0x00]);
    }

    #[test]
    fn one_capture_a_port_and_only_ports_there_are() {
        let sw = switch();
        let first = sw.capture("a", both()).unwrap();
        assert_eq!(
            sw.capture("a", both()).unwrap_err(),
            CaptureError::Busy { port: "a".into() }
        );
        assert!(sw.capture("b", both()).is_ok(), "another port may");
        let e = sw.capture("zz", both()).unwrap_err();
        assert_eq!(e.to_string(), "no port zz (ports: a, b)");
        drop(first);
        assert!(sw.capture("a", both()).is_ok(), "free again");
    }

    #[test]
    fn a_removed_port_detaches_its_capture() {
        let sw = switch();
        let session = sw.capture("a", both()).unwrap();
        assert!(!session.tap().is_detached());
        sw.remove_port(0);
        assert!(session.tap().is_detached());
        drop(session); // its slot is gone: nothing to take off
    }
}
