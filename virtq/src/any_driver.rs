//! The driver side of either ring kind behind one type ([`AnyDriverQueue`]),
//! as [`AnyDeviceQueue`](crate::AnyDeviceQueue) is for the device side: what
//! the synthetic guest drives without knowing whether `VIRTIO_F_RING_PACKED`
//! was negotiated. Each method is the split queue's ([`DriverQueue`]) or the
//! packed queue's ([`PackedDriverQueue`]), which have the same contract; a
//! buffer is named by its head index on a split ring and by its buffer id
//! on a packed one, both below the ring size.
//!
//! [`AnyLayout`] is where either kind lives, and says how vhost-user's
//! `SET_VRING_ADDR` names its parts.

use crate::driver::{DriverError, DriverQueue, Seg};
use crate::features::RingFeatures;
use crate::layout::{used_ring_bytes, QueueLayout};
use crate::mem::GuestMemory;
use crate::packed::{PackedDriverQueue, PackedLayout};
use crate::ring::QueueError;
use crate::spec::DESC_SIZE;

/// Where a split or a packed ring lives (guest-physical addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnyLayout {
    /// A split ring's descriptor table, available and used rings.
    Split(QueueLayout),
    /// A packed ring's descriptor ring and event suppression structures.
    Packed(PackedLayout),
}

impl AnyLayout {
    /// Number of descriptors.
    pub fn size(&self) -> u16 {
        match self {
            AnyLayout::Split(l) => l.size,
            AnyLayout::Packed(l) => l.size,
        }
    }

    /// True for a packed ring.
    pub fn is_packed(&self) -> bool {
        matches!(self, AnyLayout::Packed(_))
    }

    /// The three addresses vhost-user's `SET_VRING_ADDR` carries, as
    /// `(descriptor, available, used)`: a packed ring's driver area goes
    /// in the available field and its device area in the used one (as
    /// QEMU and DPDK send them).
    pub fn vring_addrs(&self) -> (u64, u64, u64) {
        match self {
            AnyLayout::Split(l) => (l.desc, l.avail, l.used),
            AnyLayout::Packed(l) => (l.desc, l.driver_event, l.device_event),
        }
    }

    /// Guest-physical spans `(start, bytes)` the device writes: the used
    /// ring of a split ring; the descriptor ring (used descriptors) and the
    /// device event structure of a packed one.
    pub fn device_written(&self) -> Vec<(u64, u64)> {
        match self {
            AnyLayout::Split(l) => vec![(l.used, used_ring_bytes(l.size))],
            AnyLayout::Packed(l) => {
                vec![(l.desc, DESC_SIZE * u64::from(l.size)), (l.device_event, 4)]
            }
        }
    }

    /// The first byte past the ring's last part.
    pub fn end(&self) -> u64 {
        match self {
            AnyLayout::Split(l) => l.used + used_ring_bytes(l.size),
            AnyLayout::Packed(l) => l.device_event + 4,
        }
    }

    /// `true` if the size is valid for the kind and every part has its
    /// spec alignment.
    pub fn is_valid(&self) -> bool {
        match self {
            AnyLayout::Split(l) => l.is_valid(),
            AnyLayout::Packed(l) => l.is_valid(),
        }
    }

    /// A ring of `size` placed from `base` as
    /// [`QueueLayout::contiguous`] or [`PackedLayout::contiguous`] does;
    /// returns it and the bytes from `base` to its end.
    ///
    /// # Panics
    /// If `base` is within 1 MiB of `u64::MAX` (a caller bug).
    pub fn contiguous(packed: bool, size: u16, base: u64) -> (AnyLayout, u64) {
        if packed {
            let (l, n) = PackedLayout::contiguous(size, base);
            (AnyLayout::Packed(l), n)
        } else {
            let (l, n) = QueueLayout::contiguous(size, base);
            (AnyLayout::Split(l), n)
        }
    }
}

/// A split or a packed driver queue.
#[derive(Debug)]
pub enum AnyDriverQueue {
    /// A split virtqueue (virtio 1.2, 2.7).
    Split(DriverQueue),
    /// A packed virtqueue (virtio 1.2, 2.8).
    Packed(PackedDriverQueue),
}

/// `$q.$method($args)` on whichever kind `$self` is.
macro_rules! either {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            AnyDriverQueue::Split($q) => $e,
            AnyDriverQueue::Packed($q) => $e,
        }
    };
}

impl AnyDriverQueue {
    /// A driver queue of `layout`'s kind: see [`DriverQueue::new`] and
    /// [`PackedDriverQueue::new`].
    pub fn new(
        mem: &GuestMemory,
        layout: AnyLayout,
        features: RingFeatures,
    ) -> Result<Self, QueueError> {
        Ok(match layout {
            AnyLayout::Split(l) => AnyDriverQueue::Split(DriverQueue::new(mem, l, features)?),
            AnyLayout::Packed(l) => {
                AnyDriverQueue::Packed(PackedDriverQueue::new(mem, l, features)?)
            }
        })
    }

    /// True for a packed queue.
    pub fn is_packed(&self) -> bool {
        matches!(self, AnyDriverQueue::Packed(_))
    }

    /// The ring layout.
    pub fn layout(&self) -> AnyLayout {
        match self {
            AnyDriverQueue::Split(q) => AnyLayout::Split(q.layout()),
            AnyDriverQueue::Packed(q) => AnyLayout::Packed(q.layout()),
        }
    }

    /// Number of descriptors.
    pub fn size(&self) -> u16 {
        self.layout().size()
    }

    /// See [`DriverQueue::num_free`].
    #[inline]
    pub fn num_free(&self) -> u16 {
        either!(self, q => q.num_free())
    }

    /// See [`DriverQueue::outstanding`].
    pub fn outstanding(&self) -> u16 {
        either!(self, q => q.outstanding())
    }

    /// See [`DriverQueue::bad_used_entries`].
    pub fn bad_used_entries(&self) -> u64 {
        either!(self, q => q.bad_used_entries())
    }

    /// See [`DriverQueue::features`].
    pub fn features(&self) -> RingFeatures {
        either!(self, q => q.features())
    }

    /// See [`DriverQueue::memory`].
    pub fn memory(&self) -> &GuestMemory {
        either!(self, q => q.memory())
    }

    /// See [`DriverQueue::add`].
    #[inline]
    pub fn add(&mut self, segs: &[Seg]) -> Result<u16, DriverError> {
        either!(self, q => q.add(segs))
    }

    /// See [`DriverQueue::add_indirect`].
    pub fn add_indirect(&mut self, segs: &[Seg], table_gpa: u64) -> Result<u16, DriverError> {
        either!(self, q => q.add_indirect(segs, table_gpa))
    }

    /// See [`DriverQueue::publish`].
    #[inline]
    pub fn publish(&mut self) {
        either!(self, q => q.publish())
    }

    /// See [`DriverQueue::kick_prepare`].
    #[inline]
    pub fn kick_prepare(&mut self) -> bool {
        either!(self, q => q.kick_prepare())
    }

    /// See [`DriverQueue::pop_used`].
    #[inline]
    pub fn pop_used(&mut self) -> Option<(u16, u32)> {
        either!(self, q => q.pop_used())
    }

    /// See [`DriverQueue::disable_cb`].
    pub fn disable_cb(&mut self) {
        either!(self, q => q.disable_cb())
    }

    /// See [`DriverQueue::enable_cb`].
    pub fn enable_cb(&mut self) -> bool {
        either!(self, q => q.enable_cb())
    }

    /// See [`DriverQueue::enable_cb_delayed`].
    pub fn enable_cb_delayed(&mut self) -> bool {
        either!(self, q => q.enable_cb_delayed())
    }

    /// See [`DriverQueue::call_owed`].
    pub fn call_owed(&self) -> bool {
        either!(self, q => q.call_owed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::any_device::AnyDeviceQueue;
    use crate::chain::Chain;
    use crate::device::DeviceQueue;
    use crate::device_ring::DeviceRing;
    use crate::packed::PackedDeviceQueue;

    /// A driver and a device of one kind over a fresh ring at gpa 0.
    fn pair(
        packed: bool,
        size: u16,
        f: RingFeatures,
    ) -> (GuestMemory, AnyDriverQueue, AnyDeviceQueue) {
        let mem = GuestMemory::new_anonymous(1 << 20).unwrap();
        let (layout, _) = AnyLayout::contiguous(packed, size, 0);
        assert!(layout.is_valid());
        let drv = AnyDriverQueue::new(&mem, layout, f).unwrap();
        let dev = match layout {
            AnyLayout::Split(l) => {
                AnyDeviceQueue::Split(DeviceQueue::new(&mem, l, false, f, 0).unwrap())
            }
            AnyLayout::Packed(l) => {
                AnyDeviceQueue::Packed(PackedDeviceQueue::new(&mem, l, false, f, 0x8000).unwrap())
            }
        };
        (mem, drv, dev)
    }

    #[test]
    fn either_kind_moves_buffers_and_suppresses_kicks_and_calls_alike() {
        for packed in [false, true] {
            for f in [RingFeatures::default(), RingFeatures::all()] {
                let (mem, mut drv, mut dev) = pair(packed, 8, f);
                assert_eq!(drv.is_packed(), packed);
                assert_eq!(drv.size(), 8);
                let mut chain = Chain::with_capacity(8);
                // Three laps of the ring: every buffer comes back with its length.
                for round in 0..24u32 {
                    // The device waits for a kick (what a sleeping worker asks).
                    assert!(!dev.enable_notifications().unwrap());
                    let seg = Seg {
                        gpa: 0x10000 + 0x100 * u64::from(round % 8),
                        len: 64,
                        writable: true,
                    };
                    let id = drv.add(&[seg]).unwrap();
                    drv.publish();
                    assert!(drv.kick_prepare(), "{packed} {f:?}: notifications on");
                    let head = dev.pop(&mem, &mut chain).unwrap().expect("a buffer");
                    assert_eq!(chain.writable_len(), 64);
                    dev.push_used(head, 10 + round);
                    dev.flush_used();
                    assert!(dev.needs_call(), "{packed} {f:?}: callbacks on");
                    assert_eq!(
                        drv.pop_used(),
                        Some((id, 10 + round)),
                        "{packed} {f:?} round {round}"
                    );
                    assert_eq!(drv.pop_used(), None);
                }
                assert_eq!(drv.num_free(), 8);
                assert_eq!(drv.outstanding(), 0);
                // The device turns kicks off: the driver does not kick.
                dev.disable_notifications();
                drv.add(&[Seg {
                    gpa: 0x10000,
                    len: 64,
                    writable: false,
                }])
                .unwrap();
                drv.publish();
                assert!(!drv.kick_prepare(), "{packed} {f:?}: kicks suppressed");
                // The driver turns calls off: the device does not call.
                drv.disable_cb();
                let head = dev.pop(&mem, &mut chain).unwrap().unwrap();
                dev.push_used(head, 0);
                dev.flush_used();
                assert!(!dev.needs_call(), "{packed} {f:?}: calls suppressed");
                assert!(!drv.call_owed());
                // Re-enabling finds the pending buffer.
                assert!(!drv.enable_cb(), "{packed} {f:?}: a used buffer is pending");
                assert!(drv.pop_used().is_some());
                assert_eq!(drv.bad_used_entries(), 0);
                assert_eq!(drv.layout().is_packed(), packed);
            }
        }
    }

    #[test]
    fn packed_layout_fits_in_the_split_footprint_and_names_its_areas() {
        let (s, sn) = AnyLayout::contiguous(false, 256, 0x1000);
        let (p, pn) = AnyLayout::contiguous(true, 256, 0x1000);
        assert!(pn <= sn);
        assert_eq!(p.end(), 0x1000 + pn);
        assert_eq!(s.end(), 0x1000 + sn);
        let AnyLayout::Packed(pl) = p else { panic!() };
        assert_eq!(p.vring_addrs(), (pl.desc, pl.driver_event, pl.device_event));
        assert_eq!(
            p.device_written(),
            vec![(pl.desc, 16 * 256), (pl.device_event, 4)]
        );
        let AnyLayout::Split(sl) = s else { panic!() };
        assert_eq!(s.device_written(), vec![(sl.used, 6 + 8 * 256)]);
        assert!(
            AnyLayout::contiguous(true, 100, 0).0.is_valid(),
            "packed: any size"
        );
        assert!(!AnyLayout::contiguous(false, 100, 0).0.is_valid());
    }
}
