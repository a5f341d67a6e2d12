//! The synthetic guest's own frames (its packet-rate traffic), and the virtio-net header in
//! front of them.
//!
//! A transmitted buffer is `virtio_net_hdr_v1` ([`HDR_LEN_MRG`] bytes, as with
//! `VIRTIO_F_VERSION_1`) followed by an Ethernet frame: 14-byte header (destination, source, EtherType) and `size` payload
//! bytes. The payload starts with a [`Stamp`] so that a reply (from an echo port or a second
//! guest) can be matched to its request and timed; the rest is a fixed filler.
//!
//! The frame carries the IEEE "local experimental" EtherType 0x88B5, so that it is never
//! mistaken for IP traffic if it reaches a TAP port.

use crate::ethernet::{ethertype_at, ETHERTYPE_EXPERIMENTAL, ETHERTYPE_OFFSET, ETH_HDR_LEN};
use crate::mac::Mac;
use crate::vnet_hdr::HDR_LEN_MRG;

/// EtherType of the guest's frames: IEEE 802 local experimental EtherType 1.
pub const ETHERTYPE: u16 = ETHERTYPE_EXPERIMENTAL;
/// Bytes of payload taken by the [`Stamp`]: sequence (8), send time (8), thread (4).
pub const STAMP_LEN: usize = 20;
/// Smallest message size the guest accepts (bytes of L2 payload): room for the stamp.
pub const MIN_SIZE: u32 = STAMP_LEN as u32;

/// What the guest writes at the start of every payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Per-thread sequence number of the message, starting at 0.
    pub seq: u64,
    /// Send time on the guest's clock (ns since the guest connected).
    pub sent_ns: u64,
    /// Index of the sending thread.
    pub thread: u32,
}

/// Length of the buffer [`write_packet`] fills for a message of `size` payload bytes
/// (bytes: virtio-net header + Ethernet header + payload).
pub const fn packet_len(size: u32) -> usize {
    HDR_LEN_MRG + ETH_HDR_LEN + size as usize
}

/// Writes the virtio-net header (all zero: no checksum offload, no GSO; `num_buffers` 0 as the
/// driver leaves it on transmit) and the frame into `buf`; returns the bytes written.
///
/// # Panics
/// If `buf` is shorter than [`packet_len`]`(size)` or `size` < [`MIN_SIZE`].
pub fn write_packet(buf: &mut [u8], dst: [u8; 6], src: [u8; 6], size: u32, stamp: Stamp) -> usize {
    assert!(size >= MIN_SIZE, "message size below the stamp length");
    let len = packet_len(size);
    let buf = &mut buf[..len];
    buf[..HDR_LEN_MRG].fill(0);
    let frame = &mut buf[HDR_LEN_MRG..];
    frame[..6].copy_from_slice(&dst);
    frame[6..ETHERTYPE_OFFSET].copy_from_slice(&src);
    frame[ETHERTYPE_OFFSET..ETH_HDR_LEN].copy_from_slice(&ETHERTYPE.to_be_bytes());
    let payload = &mut frame[ETH_HDR_LEN..];
    write_stamp(payload, stamp);
    // A fixed, non-zero filler: a backend that copies the payload touches real data.
    payload[STAMP_LEN..].fill(0xA5);
    len
}

/// Rewrites only the stamp of a packet previously built by [`write_packet`] (the buffer of a
/// descriptor slot is reused, so the headers and filler are already in place).
///
/// # Panics
/// If `buf` is shorter than the headers and the stamp.
pub fn restamp_packet(buf: &mut [u8], stamp: Stamp) {
    write_stamp(&mut buf[HDR_LEN_MRG + ETH_HDR_LEN..], stamp);
}

fn write_stamp(payload: &mut [u8], stamp: Stamp) {
    payload[..STAMP_LEN].copy_from_slice(&stamp_bytes(stamp));
}

/// The stamp as it is laid out at the start of the payload (little-endian fields).
pub fn stamp_bytes(stamp: Stamp) -> [u8; STAMP_LEN] {
    let mut b = [0u8; STAMP_LEN];
    b[0..8].copy_from_slice(&stamp.seq.to_le_bytes());
    b[8..16].copy_from_slice(&stamp.sent_ns.to_le_bytes());
    b[16..20].copy_from_slice(&stamp.thread.to_le_bytes());
    b
}

/// What the guest understands of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxFrame {
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// Source MAC address.
    pub src: [u8; 6],
    /// The stamp, when the frame is one of ours (our EtherType and long enough).
    pub stamp: Option<Stamp>,
}

/// Parses an Ethernet frame (without the virtio-net header); `None` if shorter than a header.
pub fn parse_frame(frame: &[u8]) -> Option<RxFrame> {
    let ethertype = ethertype_at(frame, ETHERTYPE_OFFSET)?;
    let (dst, src) = (Mac::dst_of(frame)?.0, Mac::src_of(frame)?.0);
    let payload = &frame[ETH_HDR_LEN..];
    let stamp = (ethertype == ETHERTYPE && payload.len() >= STAMP_LEN).then(|| Stamp {
        seq: u64::from_le_bytes(payload[0..8].try_into().expect("8 bytes")),
        sent_ns: u64::from_le_bytes(payload[8..16].try_into().expect("8 bytes")),
        thread: u32::from_le_bytes(payload[16..20].try_into().expect("4 bytes")),
    });
    Some(RxFrame { dst, src, stamp })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    #[test]
    fn packet_layout_is_header_then_frame() {
        let mut buf = vec![0xFF; 200];
        let stamp = Stamp {
            seq: 7,
            sent_ns: 123_456,
            thread: 3,
        };
        let n = write_packet(&mut buf, B, A, 64, stamp);
        assert_eq!(n, 12 + 14 + 64);
        assert!(buf[..HDR_LEN_MRG].iter().all(|&b| b == 0));
        assert_eq!(&buf[12..18], &B);
        assert_eq!(&buf[18..24], &A);
        assert_eq!(&buf[24..26], &[0x88, 0xB5]);
        assert_eq!(buf[n - 1], 0xA5);
        assert_eq!(buf[n], 0xFF, "nothing written past the packet");
        let f = parse_frame(&buf[HDR_LEN_MRG..n]).unwrap();
        assert_eq!(
            f,
            RxFrame {
                dst: B,
                src: A,
                stamp: Some(stamp)
            }
        );
    }

    #[test]
    fn restamp_changes_only_the_stamp() {
        let mut buf = vec![0; 100];
        let n = write_packet(
            &mut buf,
            B,
            A,
            MIN_SIZE,
            Stamp {
                seq: 1,
                sent_ns: 2,
                thread: 0,
            },
        );
        let before = buf.clone();
        let s = Stamp {
            seq: u64::MAX,
            sent_ns: 9,
            thread: 1,
        };
        restamp_packet(&mut buf, s);
        assert_eq!(parse_frame(&buf[HDR_LEN_MRG..n]).unwrap().stamp, Some(s));
        assert_eq!(
            &buf[..HDR_LEN_MRG + ETH_HDR_LEN],
            &before[..HDR_LEN_MRG + ETH_HDR_LEN]
        );
    }

    #[test]
    fn foreign_and_short_frames() {
        assert_eq!(parse_frame(&[0; 13]), None);
        let mut f = [0u8; 60];
        f[12] = 0x08; // IPv4
        assert_eq!(parse_frame(&f).unwrap().stamp, None);
        f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        assert!(parse_frame(&f).unwrap().stamp.is_some());
        assert_eq!(
            parse_frame(&f[..ETH_HDR_LEN + STAMP_LEN - 1])
                .unwrap()
                .stamp,
            None
        );
    }
}
