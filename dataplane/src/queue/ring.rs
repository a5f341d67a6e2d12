//! The rings a worker incarnation owns: each running ring with its kick and
//! call eventfds, grouped by queue pair, and the two notification switches
//! the worker throws on them — calling the guest after publishing used
//! buffers, and asking the guest for kicks (or not).
//!
//! Queue pair `p` is receive ring `2p` (host→guest) and transmit ring `2p+1`
//! (guest→host).

use std::fs::File;

use crate::migration::RingLog;
use vadapt_virtq::device::{ChainError, ChainErrorKind};
use vadapt_virtq::{AnyDeviceQueue, Chain, DeviceRing};

/// One running ring.
#[derive(Debug)]
pub struct Ring {
    /// The ring itself: split or packed (`VIRTIO_F_RING_PACKED`).
    pub q: AnyDeviceQueue,
    /// Kick eventfd (guest → us), non-blocking.
    pub kick: File,
    /// Call eventfd (us → guest), if the frontend gave one.
    pub call: Option<File>,
    /// Set when the guest corrupted the ring: it is no longer serviced.
    pub broken: bool,
    /// While the frontend logs dirty pages (live migration): where.
    pub log: Option<RingLog>,
}

impl Ring {
    /// With logging on, marks the used ring's pages: call after anything
    /// that may have written it (a pass, a change of notifications). The
    /// whole used ring is marked, a page or two, rather than tracking which
    /// of its bytes moved.
    pub fn log_used(&self) {
        if let Some(l) = &self.log {
            l.used();
        }
    }

    /// With logging on, marks the pages of the first `written` bytes of
    /// `chain`'s writable buffers (what a receive wrote into them).
    pub fn log_written(&self, chain: &Chain, written: usize) {
        if let Some(l) = &self.log {
            l.written(chain, written);
        }
    }

    /// Calls the guest (writes its call eventfd) if the ring says the guest
    /// wants to hear about the used buffers published since the last check
    /// (`NO_INTERRUPT` flag, or `used_event` with EVENT_IDX; see
    /// [`DeviceRing::needs_call`]). Call after `flush_used`. Returns `true`
    /// if a call was sent; never with no call eventfd.
    pub fn call_if_needed(&mut self) -> bool {
        if self.q.needs_call() {
            if let Some(c) = &self.call {
                // Never blocks: a full counter means a call is pending
                // anyway, and the descriptor was checked to be an eventfd.
                let _ = super::eventfd_io::signal(c);
                return true;
            }
        }
        false
    }

    /// Handles a chain [`DeviceRing::pop`] rejected: gives its head back to
    /// the guest unused (if it had a valid one), so the guest can reuse the
    /// descriptors, and marks the ring broken if the guest ran `avail.idx`
    /// ahead (nothing can be trusted in it then). Returns `true` if the ring
    /// is now broken and the pass must stop.
    pub fn give_back_rejected(&mut self, e: &ChainError) -> bool {
        if let Some(h) = e.head {
            self.q.push_used(h, 0);
        }
        if e.kind == ChainErrorKind::AvailIndexAhead {
            self.broken = true;
        }
        self.broken
    }
}

/// A queue pair's running rings.
#[derive(Debug, Default)]
pub struct Pair {
    /// Receive ring (host→guest), if running.
    pub rx: Option<Ring>,
    /// Transmit ring (guest→host), if running.
    pub tx: Option<Ring>,
}

impl Pair {
    /// Asks the guest for kicks on the pair's unbroken rings (`on`), or not.
    /// Transmit kicks follow `on`; receive kicks are asked for only when
    /// frames wait for receive buffers (`rx_buffers_wanted` is `Some(n)`:
    /// the next frame needs `n` of them — vhost-net enables them only then,
    /// too). Returns `true` if a ring whose kicks were just enabled already
    /// has buffers available (`n` of them on receive): the worker must
    /// serve them rather than block, or the guest, having published before
    /// it saw the request, would never kick.
    pub fn set_notifications(&mut self, on: bool, rx_buffers_wanted: Option<u16>) -> bool {
        let mut work = false;
        if let Some(r) = self.tx.as_mut().filter(|r| !r.broken) {
            if on {
                work |= r.q.enable_notifications().unwrap_or(false);
            } else {
                r.q.disable_notifications();
            }
        }
        if let Some(r) = self.rx.as_mut().filter(|r| !r.broken) {
            if let (true, Some(n)) = (on, rx_buffers_wanted) {
                work |= r.q.enable_notifications_for(n).unwrap_or(false);
            } else {
                r.q.disable_notifications();
            }
        }
        work
    }

    /// The pair's running rings, receive first.
    pub fn rings(&self) -> impl Iterator<Item = &Ring> {
        [&self.rx, &self.tx].into_iter().flatten()
    }
}

/// Rings driven from the guest's side, for the unit tests of the ring
/// service and the waiting code.
#[cfg(test)]
pub(crate) mod test_utils {
    use super::Ring;
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::{FromRawFd, IntoRawFd};
    use vadapt_policy::Budget;
    use vadapt_virtq::driver::DriverQueue;
    use vadapt_virtq::mock::MockQueue;
    use vadapt_virtq::raw::RawRing;
    use vadapt_virtq::{GuestMemory, QueueLayout, RingFeatures};
    use vmm_sys_util::eventfd::EventFd;

    /// A budget that never ends a pass.
    pub(crate) const UNLIMITED: Budget = Budget {
        packets: u32::MAX,
        bytes: u64::MAX,
    };

    /// A recognisable frame of `len` bytes: different seeds, different bytes.
    pub(crate) fn frame(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| seed.wrapping_mul(31) ^ i as u8).collect()
    }

    /// A fresh non-blocking eventfd as the `File` the handler hands over.
    pub(crate) fn eventfd() -> File {
        let fd = EventFd::new(libc::EFD_NONBLOCK)
            .expect("eventfd")
            .into_raw_fd();
        // SAFETY: `fd` is a fresh descriptor that `into_raw_fd` released to
        // us; the `File` becomes its only owner.
        unsafe { File::from_raw_fd(fd) }
    }

    /// Reads an eventfd's counter, resetting it: 0 when nothing was written.
    pub(crate) fn take_count(f: &File) -> u64 {
        let mut b = [0u8; 8];
        match (&*f).read(&mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    /// The guest's half of a [`MockQueue`] whose device half became a [`Ring`].
    #[derive(Debug)]
    pub(crate) struct Guest {
        /// Guest memory (rings at 0, buffers at `mock::buf(i)`).
        pub mem: GuestMemory,
        /// Where the rings are.
        pub layout: QueueLayout,
        /// The guest driver.
        pub driver: DriverQueue,
    }

    impl Guest {
        /// Unchecked view of the ring, to set flags and event indices.
        pub(crate) fn raw(&self) -> RawRing {
            RawRing::new(&self.mem, self.layout).expect("mock layout is valid")
        }
    }

    /// A running ring of `size` entries with fresh kick and call eventfds,
    /// and the guest that drives it.
    pub(crate) fn ring(size: u16, features: RingFeatures) -> (Ring, Guest) {
        let MockQueue {
            mem,
            layout,
            driver,
            device,
            ..
        } = MockQueue::new(size, features);
        let ring = Ring {
            q: vadapt_virtq::AnyDeviceQueue::Split(device),
            kick: eventfd(),
            call: Some(eventfd()),
            broken: false,
            log: None,
        };
        (
            ring,
            Guest {
                mem,
                layout,
                driver,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::test_utils::{ring, take_count};
    use super::*;
    use vadapt_virtq::mock::{buf, readable, writable};
    use vadapt_virtq::RingFeatures;

    /// The guest sends one buffer; the device takes it and publishes it used.
    fn send_and_use_one(r: &mut Ring, g: &mut super::test_utils::Guest) {
        g.driver.add(&[readable(buf(0), 64)]).unwrap();
        g.driver.publish();
        let mut chain = Default::default();
        let head = r.q.pop(&g.mem, &mut chain).unwrap().unwrap();
        r.q.push_used(head, 0);
        r.q.flush_used();
        g.driver.pop_used().unwrap();
    }

    #[test]
    fn call_goes_out_only_when_the_guest_wants_it_and_has_an_eventfd() {
        let (mut r, mut g) = ring(8, RingFeatures::default());
        send_and_use_one(&mut r, &mut g);
        assert!(r.call_if_needed());
        assert_eq!(take_count(r.call.as_ref().unwrap()), 1);
        assert!(!r.call_if_needed(), "nothing published since");
        g.driver.disable_cb();
        send_and_use_one(&mut r, &mut g);
        assert!(!r.call_if_needed(), "NO_INTERRUPT");
        assert!(g.driver.enable_cb());
        r.call = None;
        send_and_use_one(&mut r, &mut g);
        assert!(!r.call_if_needed(), "wanted, but no call eventfd");
    }

    #[test]
    fn receive_kicks_are_asked_for_only_while_frames_wait() {
        let (tx, _gt) = ring(8, RingFeatures::default());
        let (rx, mut gr) = ring(8, RingFeatures::default());
        let mut pair = Pair {
            rx: Some(rx),
            tx: Some(tx),
        };
        assert!(!pair.set_notifications(true, None), "no work anywhere");
        assert!(pair.tx.as_ref().unwrap().q.notifications_enabled());
        assert!(!pair.rx.as_ref().unwrap().q.notifications_enabled());
        // Receive buffers were posted before the enable: report work.
        gr.driver.add(&[writable(buf(0), 2048)]).unwrap();
        gr.driver.publish();
        assert!(pair.set_notifications(true, Some(1)));
        assert!(pair.rx.as_ref().unwrap().q.notifications_enabled());
        assert!(!pair.set_notifications(false, Some(1)));
        assert!(pair.rings().all(|r| !r.q.notifications_enabled()));
        // A broken ring is left alone.
        pair.tx.as_mut().unwrap().broken = true;
        pair.set_notifications(true, None);
        assert!(!pair.tx.as_ref().unwrap().q.notifications_enabled());
    }
}
