//! A frame that arrived with a virtio-net header and sits whole in host
//! memory (a TAP read) into a [`FrameBatch`]: checked as the VM transmit
//! path checks a guest's frame, a partial checksum or a TCP GSO frame kept
//! whole and marked for the egress ([`super::egress`]).

use super::egress::keep;
use super::tx_request::{tx_offload, OffloadRefused};
use crate::frames::{FrameBatch, Offloaded, SLOT};
use crate::net::{HostOffloads, MAX_GSO_FRAME};
use vadapt_wire::{Offload, VnetHdr};

/// What became of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// The frame was added to the batch (`packets` 1), or not (0: a flush
    /// that left the batch full), with its bytes.
    Frames {
        /// Frames added.
        packets: u64,
        /// Their length, bytes.
        bytes: u64,
    },
    /// A GSO frame longer than [`MAX_GSO_FRAME`]: dropped.
    Oversize,
    /// Not a GSO frame, and longer than the source's `max_frame` (its
    /// MTU): dropped; the frame's length, bytes.
    OverMtu(usize),
    /// The header was refused: dropped.
    Refused(OffloadRefused),
}

/// Adds `frame`, which arrived behind `hdr` from a source that negotiated
/// `offloads` and whose frames (and GSO segments) are at most `max_frame`
/// bytes ([`crate::net::max_frame`] of its MTU), to `batch`, its offload
/// kept; a frame over a slot goes into the side store. When `batch` has no
/// room, `flush` is called with it (it must leave the batch empty) and the
/// frame goes into the emptied batch.
pub fn push_frame(
    hdr: &VnetHdr,
    frame: &[u8],
    offloads: HostOffloads,
    max_frame: usize,
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
    let len = frame.len();
    match offload {
        Offload::Tcp(..) if len > MAX_GSO_FRAME => return Pushed::Oversize,
        Offload::Tcp(..) => {}
        _ if len > max_frame => return Pushed::OverMtu(len),
        _ => {}
    }
    let kept = match offload {
        Offload::None if len > SLOT => Some(Offloaded::plain(len)),
        Offload::None => None,
        other => match keep(frame, other, max_frame) {
            Ok(k) => Some(k),
            Err(e) => return Pushed::Refused(OffloadRefused::Segment(e)),
        },
    };
    // A GSO frame goes into the side store whatever its length, as on
    // the VM transmit path.
    let added = if len > SLOT || matches!(offload, Offload::Tcp(..)) {
        if batch.next_large(len).is_none() {
            flush(batch);
        }
        match (batch.next_large(len), kept) {
            (Some(dst), Some(k)) => {
                dst.copy_from_slice(frame);
                batch.commit_large(k);
                true
            }
            // A flush that kept the batch full: nowhere to go.
            _ => false,
        }
    } else {
        if batch.is_full() {
            flush(batch);
        }
        match batch.next_slot() {
            Some(slot) => {
                slot[..len].copy_from_slice(frame);
                match kept {
                    Some(k) => batch.commit_offloaded(len, k),
                    None => batch.commit(len),
                }
                true
            }
            None => false,
        }
    };
    Pushed::Frames {
        packets: u64::from(added),
        bytes: if added { len as u64 } else { 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::MAX_FRAME;
    use crate::offload::egress::cut_all;
    use vadapt_wire::test_frames::{check_segments, tso_frame, Shape, LINUX_V4};
    use vadapt_wire::vnet_hdr::{F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4};
    use vadapt_wire::VnetHdrError;

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
        let r = push_frame(h, frame, HostOffloads::ALL, MAX_FRAME, &mut batch, |b| {
            flushes += 1;
            out.extend((0..b.len()).map(|i| b.get(i).to_vec()));
            b.clear();
        });
        out.extend((0..batch.len()).map(|i| batch.get(i).to_vec()));
        (r, out, flushes)
    }

    #[test]
    fn a_gso_frame_is_kept_whole_and_cuts_into_verifying_segments() {
        let payload: Vec<u8> = (0..10_000).map(|i| (i % 249) as u8).collect();
        let f = tso_frame(LINUX_V4, &payload);
        let mut batch = FrameBatch::new(4);
        let r = push_frame(
            &hdr(GSO_TCPV4, 1448),
            &f,
            HostOffloads::ALL,
            MAX_FRAME,
            &mut batch,
            |_| unreachable!("room for one"),
        );
        assert_eq!(
            r,
            Pushed::Frames {
                packets: 1,
                bytes: f.len() as u64
            }
        );
        assert_eq!(batch.get(0), &f[..], "whole, in the side store");
        let k = batch.offloaded(0).expect("marked");
        assert_eq!(
            (k.hdr.gso_type, k.hdr.gso_size, k.hdr.hdr_len),
            (GSO_TCPV4, 1448, 66)
        );
        let segs = cut_all(&batch);
        assert_eq!(segs.len(), 7);
        assert_eq!(check_segments(&segs, LINUX_V4, 1448), payload);
    }

    #[test]
    fn a_full_side_store_is_flushed_first() {
        let f = tso_frame(LINUX_V4, &[3; 60_000]);
        let mut batch = FrameBatch::new(4); // side store: one largest frame
        let mut flushed = 0;
        for _ in 0..3 {
            let r = push_frame(
                &hdr(GSO_TCPV4, 1448),
                &f,
                HostOffloads::ALL,
                MAX_FRAME,
                &mut batch,
                |b| {
                    flushed += b.len();
                    b.clear();
                },
            );
            assert!(matches!(r, Pushed::Frames { packets: 1, .. }));
        }
        assert_eq!((flushed, batch.len()), (2, 1));
    }

    #[test]
    fn a_partial_checksum_is_kept_for_the_egress_and_plain_frames_pass_unchanged() {
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
        assert_eq!(out, vec![f.clone()], "partial checksum and all");
        let mut batch = FrameBatch::new(4);
        push_frame(&csum, &f, HostOffloads::ALL, MAX_FRAME, &mut batch, |_| {});
        assert_eq!(check_segments(&cut_all(&batch), shape, 1448), b"abc");
        let (r, out, _) = push(&VnetHdr::default(), &f, 4);
        assert_eq!(
            r,
            Pushed::Frames {
                packets: 1,
                bytes: f.len() as u64
            }
        );
        assert_eq!(out, vec![f], "untouched");
    }

    #[test]
    fn a_jumbo_frame_within_the_mtu_goes_in_plain() {
        let jumbo = vec![7u8; crate::net::max_frame(9000)];
        let mut batch = FrameBatch::new(4);
        let r = push_frame(
            &VnetHdr::default(),
            &jumbo,
            HostOffloads::ALL,
            crate::net::max_frame(9000),
            &mut batch,
            |_| unreachable!("room for one"),
        );
        assert_eq!(
            r,
            Pushed::Frames {
                packets: 1,
                bytes: 9018
            }
        );
        assert_eq!((batch.get(0), batch.offloaded(0)), (&jumbo[..], None));
        let over = vec![7u8; 9019];
        let r = push_frame(
            &VnetHdr::default(),
            &over,
            HostOffloads::ALL,
            crate::net::max_frame(9000),
            &mut batch,
            |_| unreachable!(),
        );
        assert_eq!(r, Pushed::OverMtu(9019));
    }

    #[test]
    fn oversize_and_refused_frames_add_nothing() {
        let big = vec![0u8; MAX_FRAME + 1];
        assert_eq!(
            push(&VnetHdr::default(), &big, 4).0,
            Pushed::OverMtu(MAX_FRAME + 1)
        );
        let f = tso_frame(LINUX_V4, &[1; 100]);
        let (r, out, _) = push(&hdr(GSO_TCPV4, 0), &f, 4);
        assert_eq!(
            r,
            Pushed::Refused(OffloadRefused::Header(VnetHdrError::ZeroGsoSize))
        );
        assert!(out.is_empty());
    }
}
