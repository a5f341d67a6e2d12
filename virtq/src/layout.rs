//! Where a split virtqueue's three parts live (spec 2.7) and their sizes.

use crate::spec::{AVAIL_ALIGN, DESC_ALIGN, DESC_SIZE, MAX_QUEUE_SIZE, USED_ALIGN};

/// Addresses of a split virtqueue's parts. They are guest-physical addresses
/// unless a constructor is told otherwise (vhost-user `SET_VRING_ADDR` gives
/// the frontend's user-space addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueLayout {
    /// Number of descriptors (the negotiated Queue Size); a power of two in
    /// `1..=32768`.
    pub size: u16,
    /// Address of the descriptor table (16-byte aligned, `16 * size` bytes).
    pub desc: u64,
    /// Address of the available ring (2-byte aligned, `6 + 2 * size` bytes).
    pub avail: u64,
    /// Address of the used ring (4-byte aligned, `6 + 8 * size` bytes).
    pub used: u64,
}

/// `true` if `size` is a valid split-queue size: a power of two in
/// `1..=32768` (spec 2.7: "Queue Size value is always a power of 2").
pub fn is_valid_size(size: u16) -> bool {
    size != 0 && size <= MAX_QUEUE_SIZE && size.is_power_of_two()
}

/// Bytes of the descriptor table for `size` entries.
pub fn desc_table_bytes(size: u16) -> u64 {
    DESC_SIZE * u64::from(size)
}

/// Bytes of the available ring: `flags`, `idx`, `ring[size]`, `used_event`.
pub fn avail_ring_bytes(size: u16) -> u64 {
    6 + 2 * u64::from(size)
}

/// Bytes of the used ring: `flags`, `idx`, `ring[size]` of 8-byte elements,
/// `avail_event`.
pub fn used_ring_bytes(size: u16) -> u64 {
    6 + 8 * u64::from(size)
}

fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}

impl QueueLayout {
    /// Packs the three parts one after the other from `base` (rounded up to
    /// 16), each at its spec alignment. Returns the layout and the number of
    /// bytes from `base` to the end of the used ring.
    ///
    /// # Panics
    /// If `base` is within 1 MiB of `u64::MAX` (a caller bug, not guest data).
    pub fn contiguous(size: u16, base: u64) -> (QueueLayout, u64) {
        assert!(
            base < u64::MAX - (1 << 20),
            "base address too close to the end"
        );
        let desc = align_up(base, DESC_ALIGN);
        let avail = align_up(desc + desc_table_bytes(size), AVAIL_ALIGN);
        let used = align_up(avail + avail_ring_bytes(size), USED_ALIGN);
        let end = used + used_ring_bytes(size);
        (
            QueueLayout {
                size,
                desc,
                avail,
                used,
            },
            end - base,
        )
    }

    /// `true` if the size is valid and every part has its spec alignment.
    pub fn is_valid(&self) -> bool {
        is_valid_size(self.size)
            && self.desc % DESC_ALIGN == 0
            && self.avail % AVAIL_ALIGN == 0
            && self.used % USED_ALIGN == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_powers_of_two_up_to_32768() {
        assert!(!is_valid_size(0));
        assert!(is_valid_size(1));
        assert!(is_valid_size(256));
        assert!(is_valid_size(32768));
        assert!(!is_valid_size(3));
        assert!(!is_valid_size(65535));
    }

    #[test]
    fn contiguous_layout_follows_spec_alignment() {
        let (l, total) = QueueLayout::contiguous(256, 0x1001);
        assert_eq!(l.desc, 0x1010);
        assert_eq!(l.avail, 0x1010 + 4096);
        // avail ring is 6 + 512 = 518 bytes, rounded up to 4.
        assert_eq!(l.used, l.avail + 520);
        assert_eq!(total, l.used + 6 + 2048 - 0x1001);
        assert!(l.is_valid());
        let (l1, _) = QueueLayout::contiguous(1, 0);
        assert_eq!((l1.desc, l1.avail, l1.used), (0, 16, 24));
        assert!(!QueueLayout { used: 2, ..l1 }.is_valid());
    }
}
