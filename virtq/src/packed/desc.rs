//! The packed ring's descriptor and event suppression formats and flag
//! values (virtio 1.2, 2.8.13 "Packed Virtqueue Layout" and 2.8.14 "Event
//! Suppression Structure Format").

use crate::spec::{Descriptor, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};

/// Feature bit 34, `VIRTIO_F_RING_PACKED` (spec 6).
pub const VIRTIO_F_RING_PACKED: u32 = 34;

/// Descriptor flag: available, when equal to the writer's wrap counter
/// (spec 2.8.1).
pub const VIRTQ_DESC_F_AVAIL: u16 = 1 << 7;
/// Descriptor flag: used, when equal to the device's used wrap counter and
/// to `AVAIL` (spec 2.8.1).
pub const VIRTQ_DESC_F_USED: u16 = 1 << 15;

/// Event suppression flags: notify on every buffer.
pub const RING_EVENT_FLAGS_ENABLE: u16 = 0;
/// Event suppression flags: do not notify.
pub const RING_EVENT_FLAGS_DISABLE: u16 = 1;
/// Event suppression flags: notify when the descriptor at `off_wrap` is
/// reached (only with `VIRTIO_RING_F_EVENT_IDX`).
pub const RING_EVENT_FLAGS_DESC: u16 = 2;

/// One packed-ring descriptor as plain values (host byte order); in memory
/// 16 little-endian bytes: `le64 addr; le32 len; le16 id; le16 flags`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackedDescriptor {
    /// Guest-physical address of the buffer (or of the indirect table).
    pub addr: u64,
    /// Length of the buffer, bytes; in a used descriptor, bytes written.
    pub len: u32,
    /// Buffer id: the driver's name for the buffer, echoed in the used
    /// descriptor.
    pub id: u16,
    /// `VIRTQ_DESC_F_*` bits, including `AVAIL` and `USED`.
    pub flags: u16,
}

impl PackedDescriptor {
    /// Decodes the 16-byte little-endian wire form.
    pub fn from_bytes(b: [u8; 16]) -> Self {
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[0..8]);
        PackedDescriptor {
            addr: u64::from_le_bytes(addr),
            len: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            id: u16::from_le_bytes([b[12], b[13]]),
            flags: u16::from_le_bytes([b[14], b[15]]),
        }
    }

    /// Encodes the 16-byte little-endian wire form.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.id.to_le_bytes());
        b[14..16].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// `true` if `NEXT` is set.
    pub fn has_next(&self) -> bool {
        self.flags & VIRTQ_DESC_F_NEXT != 0
    }

    /// `true` if `INDIRECT` is set.
    pub fn is_indirect(&self) -> bool {
        self.flags & VIRTQ_DESC_F_INDIRECT != 0
    }

    /// The buffer part as the split format's descriptor, which the chain
    /// checks take: address, length and `WRITE` (the other flags mean
    /// nothing to a buffer).
    pub(crate) fn as_buffer(&self) -> Descriptor {
        Descriptor {
            addr: self.addr,
            len: self.len,
            flags: self.flags & VIRTQ_DESC_F_WRITE,
            next: 0,
        }
    }
}

/// `true` if `flags` mark a descriptor available for a reader whose avail
/// wrap counter is `wrap`: `AVAIL == wrap` and `USED != wrap` (spec 2.8.1).
#[inline]
pub(crate) fn is_avail(flags: u16, wrap: bool) -> bool {
    (flags & VIRTQ_DESC_F_AVAIL != 0) == wrap && (flags & VIRTQ_DESC_F_USED != 0) != wrap
}

/// `true` if `flags` mark a descriptor used for a reader whose used wrap
/// counter is `wrap`: `AVAIL == USED == wrap` (spec 2.8.1).
#[inline]
pub(crate) fn is_used(flags: u16, wrap: bool) -> bool {
    (flags & VIRTQ_DESC_F_AVAIL != 0) == wrap && (flags & VIRTQ_DESC_F_USED != 0) == wrap
}

/// The `AVAIL`/`USED` bits the driver writes with wrap counter `wrap`.
#[inline]
pub(crate) fn avail_bits(wrap: bool) -> u16 {
    if wrap {
        VIRTQ_DESC_F_AVAIL
    } else {
        VIRTQ_DESC_F_USED
    }
}

/// The `AVAIL`/`USED` bits the device writes with used wrap counter `wrap`.
#[inline]
pub(crate) fn used_bits(wrap: bool) -> u16 {
    if wrap {
        VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED
    } else {
        0
    }
}

/// One event suppression structure as plain values; in memory `le16
/// off_wrap; le16 flags`, read and written as one 32-bit word so that each
/// side sees a consistent pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventSuppression {
    /// Ring position (bits 0–14) and wrap counter (bit 15) of the
    /// descriptor to notify at, with [`RING_EVENT_FLAGS_DESC`].
    pub off_wrap: u16,
    /// One of the `RING_EVENT_FLAGS_*` values (bits 0–1; the rest
    /// reserved).
    pub flags: u16,
}

impl EventSuppression {
    /// From the 32-bit word in host order (after `u32::from_le`).
    pub fn from_word(w: u32) -> Self {
        EventSuppression {
            off_wrap: w as u16,
            flags: (w >> 16) as u16,
        }
    }

    /// The 32-bit word in host order (before `u32::to_le`).
    pub fn to_word(self) -> u32 {
        u32::from(self.off_wrap) | (u32::from(self.flags) << 16)
    }

    /// The mode, bits 0–1 of `flags`.
    pub fn mode(self) -> u16 {
        self.flags & 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_round_trips_through_wire_form() {
        let d = PackedDescriptor {
            addr: 0x1122_3344_5566_7788,
            len: 0x99aa_bbcc,
            id: 0x0102,
            flags: 0x8081,
        };
        let b = d.to_bytes();
        assert_eq!((b[0], b[12], b[14]), (0x88, 0x02, 0x81), "little-endian");
        assert_eq!(PackedDescriptor::from_bytes(b), d);
    }

    #[test]
    fn avail_and_used_follow_the_wrap_counter() {
        for wrap in [false, true] {
            assert!(is_avail(avail_bits(wrap), wrap));
            assert!(!is_avail(avail_bits(wrap), !wrap));
            assert!(!is_used(avail_bits(wrap), wrap));
            assert!(is_used(used_bits(wrap), wrap));
            assert!(!is_used(used_bits(wrap), !wrap));
            assert!(!is_avail(used_bits(wrap), wrap));
            assert!(!is_avail(used_bits(!wrap), wrap));
        }
        let e = EventSuppression {
            off_wrap: 0x8005,
            flags: RING_EVENT_FLAGS_DESC,
        };
        assert_eq!(EventSuppression::from_word(e.to_word()), e);
        assert_eq!(e.to_word().to_le_bytes(), [5, 0x80, 2, 0]);
    }
}
