//! The ring-level feature bits this crate implements.

use crate::spec::{VIRTIO_F_IN_ORDER, VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// Negotiated ring features that change the data path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RingFeatures {
    /// `VIRTIO_F_EVENT_IDX` (bit 29): notifications are suppressed with
    /// `used_event`/`avail_event` instead of the flag bits.
    pub event_idx: bool,
    /// `VIRTIO_F_IN_ORDER` (bit 35): buffers are used in the order they were
    /// made available, so the device may report a batch with one entry.
    pub in_order: bool,
    /// `VIRTIO_F_INDIRECT_DESC` (bit 28): a descriptor may point to a table.
    pub indirect: bool,
}

impl RingFeatures {
    /// Reads the three bits from a negotiated feature word.
    pub fn from_bits(features: u64) -> Self {
        let has = |bit: u32| features & (1u64 << bit) != 0;
        RingFeatures {
            event_idx: has(VIRTIO_RING_F_EVENT_IDX),
            in_order: has(VIRTIO_F_IN_ORDER),
            indirect: has(VIRTIO_RING_F_INDIRECT_DESC),
        }
    }

    /// The feature word with exactly these bits set.
    pub fn to_bits(self) -> u64 {
        (u64::from(self.event_idx) << VIRTIO_RING_F_EVENT_IDX)
            | (u64::from(self.in_order) << VIRTIO_F_IN_ORDER)
            | (u64::from(self.indirect) << VIRTIO_RING_F_INDIRECT_DESC)
    }

    /// All three features on.
    pub fn all() -> Self {
        RingFeatures {
            event_idx: true,
            in_order: true,
            indirect: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_spec_bit_numbers() {
        assert_eq!(RingFeatures::from_bits(0), RingFeatures::default());
        let f = RingFeatures::from_bits((1 << 29) | (1 << 32));
        assert!(f.event_idx && !f.in_order && !f.indirect);
        assert!(RingFeatures::from_bits(1 << 35).in_order);
        assert!(RingFeatures::from_bits(1 << 28).indirect);
        assert_eq!(
            RingFeatures::from_bits(RingFeatures::all().to_bits()),
            RingFeatures::all()
        );
    }
}
