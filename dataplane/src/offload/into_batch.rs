//! A frame that arrived with a virtio-net header and sits whole in host
//! memory (a TAP read) into a [`FrameBatch`] of complete frames: a partial
//! checksum completed, a TCP GSO frame cut into MSS frames, as the VM
//! transmit path does for guests.

use super::tcp_segment::TcpSegmenter;
use super::tx_request::{tx_offload, OffloadRefused};
use super::vnet_hdr::{Offload, VnetHdr};
use crate::frames::FrameBatch;
use crate::net::{HostOffloads, MAX_FRAME, MAX_GSO_FRAME};

/// What became of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Frames added to the batch (more than one when segmented) and their bytes.
    Frames {
        /// Frames added.
        packets: u64,
        /// Their length, bytes.
        bytes: u64,
    },
    /// Longer than [`MAX_FRAME`] (or [`MAX_GSO_FRAME`] for a GSO frame): dropped.
    Oversize,
    /// The header was refused: dropped.
    Refused(OffloadRefused),
}

/// Adds `frame`, which arrived behind `hdr` from a source that negotiated
/// `offloads`, to `batch` as complete frames of at most [`MAX_FRAME`]
/// bytes. When `batch` fills up, `flush` is called with it (it must leave
/// the batch empty) and filling goes on.
///
/// `frame` is modified in place by a checksum completion.
pub fn push_frame(
    hdr: &VnetHdr,
    frame: &mut [u8],
    offloads: HostOffloads,
    batch: &mut FrameBatch,
    mut flush: impl FnMut(&mut FrameBatch),
) -> Pushed {
    let offload = if hdr.is_plain() {
        Offload::None
    } else {
        match tx_offload(hdr, frame.len(), offloads) {
            Ok(o) => o,
            Err(e) => return Pushed::Refused(e),
        }
    };
    let mut room = |batch: &mut FrameBatch| {
        if batch.is_full() {
            flush(batch);
        }
        debug_assert!(!batch.is_full(), "flush leaves the batch empty");
    };
    match offload {
        Offload::Tcp(_, _) if frame.len() > MAX_GSO_FRAME => Pushed::Oversize,
        Offload::Tcp(gso, _) => {
            let seg = match TcpSegmenter::new(frame, gso, MAX_FRAME) {
                Ok(s) => s,
                Err(e) => return Pushed::Refused(OffloadRefused::Segment(e)),
            };
            let (mut packets, mut bytes) = (0, 0);
            for i in 0..seg.segments() {
                room(batch);
                let Some(slot) = batch.next_slot() else {
                    break; // a flush that kept the batch full: nowhere to go
                };
                let n = seg.write_segment(i, slot);
                batch.commit(n);
                packets += 1;
                bytes += n as u64;
            }
            Pushed::Frames { packets, bytes }
        }
        _ if frame.len() > MAX_FRAME => Pushed::Oversize,
        other => {
            if let Offload::Checksum(at) = other {
                // `tx_offload` checked `at` against the frame's length.
                super::checksum::complete_partial_checksum(frame, at);
            }
            room(batch);
            if !batch.push(frame) {
                return Pushed::Frames {
                    packets: 0,
                    bytes: 0,
                };
            }
            Pushed::Frames {
                packets: 1,
                bytes: frame.len() as u64,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::vnet_hdr::VnetHdrError;
    use super::*;
    use crate::offload::test_frames::{check_segments, tso_frame, Shape, LINUX_V4};
    use crate::offload::vnet_hdr::{F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4};

    const ALL: HostOffloads = HostOffloads {
        csum: true,
        tso4: true,
        tso6: true,
        ecn: true,
    };

    fn hdr(gso_type: u8, mss: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type,
            hdr_len: 66,
            gso_size: mss,
            csum_start: 34,
            csum_offset: 16,
        }
    }

    /// Pushes `frame` into a batch of `cap`; returns the outcome and every
    /// frame that left, flushed or left in the batch.
    fn push(h: &VnetHdr, frame: &[u8], cap: usize) -> (Pushed, Vec<Vec<u8>>, usize) {
        let mut batch = FrameBatch::new(cap);
        let mut out = Vec::new();
        let mut flushes = 0;
        let mut f = frame.to_vec();
        let r = push_frame(h, &mut f, ALL, &mut batch, |b| {
            flushes += 1;
            out.extend((0..b.len()).map(|i| b.get(i).to_vec()));
            b.clear();
        });
        out.extend((0..batch.len()).map(|i| batch.get(i).to_vec()));
        (r, out, flushes)
    }

    #[test]
    fn a_gso_frame_is_segmented_across_flushes() {
        let payload: Vec<u8> = (0..10_000).map(|i| (i % 249) as u8).collect();
        let f = tso_frame(LINUX_V4, &payload);
        let (r, out, flushes) = push(&hdr(GSO_TCPV4, 1448), &f, 4);
        assert_eq!(
            r,
            Pushed::Frames {
                packets: 7,
                bytes: out.iter().map(|s| s.len() as u64).sum()
            }
        );
        assert_eq!(flushes, 1, "4 segments, a flush, 3 more");
        assert_eq!(check_segments(&out, LINUX_V4, 1448), payload);
    }

    #[test]
    fn a_partial_checksum_is_completed_and_plain_frames_pass_unchanged() {
        let shape = Shape {
            ipv6: true,
            ..LINUX_V4
        };
        let f = tso_frame(shape, b"abc");
        let csum = VnetHdr {
            csum_start: 54,
            ..hdr(GSO_NONE, 0)
        };
        let (r, out, _) = push(&csum, &f, 4);
        assert_eq!(
            r,
            Pushed::Frames {
                packets: 1,
                bytes: f.len() as u64
            }
        );
        assert_eq!(check_segments(&out, shape, 1448), b"abc");
        let (r, out, _) = push(&VnetHdr::default(), &f, 4);
        assert_eq!(
            r,
            Pushed::Frames {
                packets: 1,
                bytes: f.len() as u64
            }
        );
        assert_eq!(out, vec![f], "untouched, partial checksum and all");
    }

    #[test]
    fn oversize_and_refused_frames_add_nothing() {
        let big = vec![0u8; MAX_FRAME + 1];
        assert_eq!(push(&VnetHdr::default(), &big, 4).0, Pushed::Oversize);
        let f = tso_frame(LINUX_V4, &[1; 100]);
        let (r, out, _) = push(&hdr(GSO_TCPV4, 0), &f, 4);
        assert_eq!(
            r,
            Pushed::Refused(OffloadRefused::Header(VnetHdrError::ZeroGsoSize))
        );
        assert!(out.is_empty());
    }
}
