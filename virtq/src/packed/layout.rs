//! Where a packed virtqueue's three parts live (spec 2.8.10, 2.8.13) and
//! their sizes.

use crate::spec::{DESC_SIZE, MAX_QUEUE_SIZE};

/// Alignment of the descriptor ring, bytes (spec 2.8.10.1).
pub const PACKED_DESC_ALIGN: u64 = 16;
/// Alignment and size of each event suppression structure, bytes.
pub const EVENT_ALIGN: u64 = 4;

/// Addresses of a packed virtqueue's parts, guest-physical unless a
/// constructor is told otherwise. vhost-user's `SET_VRING_ADDR` names
/// them `desc`, `avail` (the driver area) and `used` (the device area).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PackedLayout {
    /// Number of descriptors: any value in `1..=32768`.
    pub size: u16,
    /// Address of the descriptor ring (16-byte aligned, `16 * size` bytes).
    pub desc: u64,
    /// Address of the driver event suppression structure (the driver area:
    /// written by the driver, read by the device; 4-byte aligned, 4 bytes).
    pub driver_event: u64,
    /// Address of the device event suppression structure (the device area:
    /// written by the device, read by the driver; 4-byte aligned, 4 bytes).
    pub device_event: u64,
}

/// `true` if `size` is a valid packed-queue size: `1..=32768`, not
/// necessarily a power of two (spec 2.8.10.1).
pub fn is_valid_packed_size(size: u16) -> bool {
    size != 0 && size <= MAX_QUEUE_SIZE
}

/// Bytes of the descriptor ring for `size` entries.
pub(crate) fn packed_ring_bytes(size: u16) -> u64 {
    DESC_SIZE * u64::from(size)
}

impl PackedLayout {
    /// Places the ring at `base` rounded up to 16, then the driver and the
    /// device event structures. Returns the layout and the bytes from
    /// `base` to the end of the device event structure.
    ///
    /// # Panics
    /// If `base` is within 1 MiB of `u64::MAX` (a caller bug).
    pub fn contiguous(size: u16, base: u64) -> (PackedLayout, u64) {
        assert!(
            base < u64::MAX - (1 << 20),
            "base address too close to the end"
        );
        let desc = (base + PACKED_DESC_ALIGN - 1) & !(PACKED_DESC_ALIGN - 1);
        let driver_event = desc + packed_ring_bytes(size);
        let device_event = driver_event + EVENT_ALIGN;
        (
            PackedLayout {
                size,
                desc,
                driver_event,
                device_event,
            },
            device_event + EVENT_ALIGN - base,
        )
    }

    /// `true` if the size is valid and every part has its spec alignment.
    pub fn is_valid(&self) -> bool {
        is_valid_packed_size(self.size)
            && self.desc % PACKED_DESC_ALIGN == 0
            && self.driver_event % EVENT_ALIGN == 0
            && self.device_event % EVENT_ALIGN == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_size_up_to_32768_and_spec_alignment() {
        assert!(!is_valid_packed_size(0));
        assert!(is_valid_packed_size(3));
        assert!(is_valid_packed_size(32768));
        assert!(!is_valid_packed_size(32769));
        let (l, total) = PackedLayout::contiguous(5, 0x1001);
        assert_eq!(
            (l.desc, l.driver_event, l.device_event),
            (0x1010, 0x1060, 0x1064)
        );
        assert_eq!(total, 0x1068 - 0x1001);
        assert!(l.is_valid());
        assert!(!PackedLayout {
            device_event: 0x1066,
            ..l
        }
        .is_valid());
    }
}
