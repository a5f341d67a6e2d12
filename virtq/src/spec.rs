//! Constants and the descriptor format of the split virtqueue, from the
//! virtio 1.2 specification (OASIS, "Virtual I/O Device (VIRTIO) Version 1.2",
//! section 2.7 "Split Virtqueues"). Defined here rather than taken from
//! `virtio-bindings` so that the data path has no dependency beyond `libc`
//! and so each value sits next to the section that defines it.
//!
//! All multi-byte ring fields are little-endian (spec 2.7, "Legacy
//! Interfaces" aside); the accessors in this crate convert with
//! `from_le`/`to_le`, which compile to nothing on x86-64 and aarch64-le.

/// Size of one descriptor in the descriptor table, bytes (spec 2.7.5:
/// `le64 addr; le32 len; le16 flags; le16 next`).
pub const DESC_SIZE: u64 = 16;

/// Descriptor flag: the buffer continues via the `next` field (spec 2.7.5).
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
/// Descriptor flag: the buffer is device write-only (spec 2.7.5); otherwise
/// device read-only.
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
/// Descriptor flag: the buffer holds a table of indirect descriptors
/// (spec 2.7.5.3).
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;

/// `avail.flags` bit: the driver asks the device not to send used-buffer
/// notifications (interrupts, vhost-user "calls"); only meaningful without
/// `VIRTIO_F_EVENT_IDX` (spec 2.7.6, 2.7.7).
pub const VRING_AVAIL_F_NO_INTERRUPT: u16 = 1;
/// `used.flags` bit: the device asks the driver not to send
/// available-buffer notifications ("kicks"); only meaningful without
/// `VIRTIO_F_EVENT_IDX` (spec 2.7.8, 2.7.10).
pub const VRING_USED_F_NO_NOTIFY: u16 = 1;

/// Feature bit 28, `VIRTIO_F_INDIRECT_DESC` (spec 6, "Reserved Feature
/// Bits"; called `VIRTIO_RING_F_INDIRECT_DESC` in Linux).
pub const VIRTIO_RING_F_INDIRECT_DESC: u32 = 28;
/// Feature bit 29, `VIRTIO_F_EVENT_IDX` (spec 6; `VIRTIO_RING_F_EVENT_IDX`
/// in Linux): `used_event`/`avail_event` replace the flag bits.
pub const VIRTIO_RING_F_EVENT_IDX: u32 = 29;
/// Feature bit 35, `VIRTIO_F_IN_ORDER` (spec 6, 2.7.9): buffers are used in
/// the order they were made available.
pub const VIRTIO_F_IN_ORDER: u32 = 35;

/// Largest queue size of a split virtqueue (spec 2.7: "Queue Size ... the
/// maximum Queue Size value is 32768").
pub const MAX_QUEUE_SIZE: u16 = 32768;

/// Alignment of the descriptor table, bytes (spec 2.7, table "Virtqueue
/// Part Alignment").
pub const DESC_ALIGN: u64 = 16;
/// Alignment of the available ring, bytes (spec 2.7).
pub const AVAIL_ALIGN: u64 = 2;
/// Alignment of the used ring, bytes (spec 2.7).
pub const USED_ALIGN: u64 = 4;

/// One split-ring descriptor as plain values (host byte order).
///
/// The in-memory form is 16 little-endian bytes; see [`Descriptor::to_bytes`]
/// and [`Descriptor::from_bytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Guest-physical address of the buffer (or of the indirect table).
    pub addr: u64,
    /// Length of the buffer, bytes.
    pub len: u32,
    /// `VIRTQ_DESC_F_*` bits.
    pub flags: u16,
    /// Index of the next descriptor when `flags` has `VIRTQ_DESC_F_NEXT`.
    pub next: u16,
}

impl Descriptor {
    /// Decodes the 16-byte little-endian wire form.
    pub fn from_bytes(b: [u8; 16]) -> Self {
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[0..8]);
        let mut len = [0u8; 4];
        len.copy_from_slice(&b[8..12]);
        Descriptor {
            addr: u64::from_le_bytes(addr),
            len: u32::from_le_bytes(len),
            flags: u16::from_le_bytes([b[12], b[13]]),
            next: u16::from_le_bytes([b[14], b[15]]),
        }
    }

    /// Encodes the 16-byte little-endian wire form.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.flags.to_le_bytes());
        b[14..16].copy_from_slice(&self.next.to_le_bytes());
        b
    }

    /// `true` if `VIRTQ_DESC_F_NEXT` is set.
    pub fn has_next(&self) -> bool {
        self.flags & VIRTQ_DESC_F_NEXT != 0
    }

    /// `true` if `VIRTQ_DESC_F_WRITE` is set (device writes the buffer).
    pub fn is_write_only(&self) -> bool {
        self.flags & VIRTQ_DESC_F_WRITE != 0
    }

    /// `true` if `VIRTQ_DESC_F_INDIRECT` is set.
    pub fn is_indirect(&self) -> bool {
        self.flags & VIRTQ_DESC_F_INDIRECT != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_round_trips_through_wire_form() {
        let d = Descriptor {
            addr: 0x1122_3344_5566_7788,
            len: 0x99aa_bbcc,
            flags: 0x0102,
            next: 0x0304,
        };
        let b = d.to_bytes();
        assert_eq!(b[0], 0x88, "little-endian addr");
        assert_eq!(b[12], 0x02, "little-endian flags");
        assert_eq!(Descriptor::from_bytes(b), d);
    }
}
