//! The offload a frame keeps on its way through the switch, and its
//! software fallback at the egress (issue #15, guest side).
//!
//! A sender's partial checksum or TCP segment of up to 64 KiB is checked at
//! ingress ([`keep`]) and travels whole, marked, in its
//! [`FrameBatch`](crate::frames::FrameBatch): a receiver that negotiated
//! (and has not turned off) the matching `GUEST_*` offload takes it as it
//! is, with the header rebuilt here — the cheapest place to cut a segment is
//! nowhere, which is what vhost-net with tap does between two VMs. Every
//! other egress (a VM without the offload, a TAP, a sink) cuts and
//! completes it with [`Cutter`], the one place that does, so that each
//! egress decides for itself and the switch and the small-frame path stay
//! as they were.

use crate::frames::Offloaded;
use crate::net::LARGEST_FRAME;
use vadapt_wire::vnet_hdr::{
    Offload, VnetHdr, F_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6,
};
use vadapt_wire::{complete_partial_checksum, SegmentError, TcpSegmenter};

/// Checks that `frame` can be cut as `offload` asks (a GSO frame must be
/// the TCP segment it claims to be, each segment at most `max_segment`
/// bytes: the sender's largest frame, [`crate::net::max_frame`] of its
/// MTU) and rebuilds the header a receiver that takes it whole gets:
/// only `NEEDS_CSUM` among the flags, `hdr_len` as measured. Also says how
/// many frames, of how many bytes, cutting it makes: the sender's port
/// counts those, so that its packet counts (and the policies and estimates
/// fed by them) do not depend on where the frame is cut.
///
/// `offload` must come from [`VnetHdr::check`] for this frame's length.
pub fn keep(frame: &[u8], offload: Offload, max_segment: usize) -> Result<Offloaded, SegmentError> {
    let at = match offload {
        Offload::None => None,
        Offload::Checksum(at) => Some(at),
        Offload::Tcp(_, at) => at,
    };
    let mut hdr = VnetHdr {
        flags: if at.is_some() { F_NEEDS_CSUM } else { 0 },
        gso_type: GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: at.map_or(0, |a| a.start),
        csum_offset: at.map_or(0, |a| a.offset),
    };
    // A frame is < 64 KiB + 18 bytes, so a u32 holds these.
    let (mut cut_frames, mut cut_bytes) = (1, frame.len() as u32);
    if let Offload::Tcp(gso, _) = offload {
        let seg = TcpSegmenter::new(frame, gso, max_segment)?;
        cut_frames = seg.segments() as u32;
        cut_bytes = (0..seg.segments()).map(|i| seg.segment_len(i) as u32).sum();
        hdr.gso_type = if gso.ipv6 { GSO_TCPV6 } else { GSO_TCPV4 };
        if gso.ecn {
            hdr.gso_type |= GSO_ECN;
        }
        hdr.gso_size = gso.mss;
        // `new` bounded the headers by the frame, which is < 64 KiB + 18.
        hdr.hdr_len = u16::try_from(seg.header_len()).unwrap_or(u16::MAX);
    }
    Ok(Offloaded {
        offload,
        hdr,
        cut_frames,
        cut_bytes,
    })
}

/// A marked frame as the plain frames an egress without the offload
/// takes: its segments (TCP GSO) or itself with the checksum completed.
/// Frame `i` can be written in any order, into any buffer of
/// [`Cutter::len`] bytes ([`Cutter::write_vec`] grows one). Segments were
/// bounded by their sender's MTU when the frame was kept; here they are
/// bounded only by [`LARGEST_FRAME`], and each egress checks its own MTU.
#[derive(Debug, Clone, Copy)]
pub enum Cutter<'a> {
    /// The frame, to copy and complete (or copy as it is).
    Whole(&'a [u8], Offload),
    /// The frame's segments.
    Segments(TcpSegmenter<'a>),
}

impl<'a> Cutter<'a> {
    /// How `frame`, marked with `offload`, is cut. Fails only if the frame
    /// is not what [`keep`] checked (a caller bug, or a frame never kept).
    pub fn new(frame: &'a [u8], offload: Offload) -> Result<Self, SegmentError> {
        match offload {
            Offload::Tcp(gso, _) => Ok(Cutter::Segments(TcpSegmenter::new(
                frame,
                gso,
                LARGEST_FRAME,
            )?)),
            _ if frame.len() > LARGEST_FRAME => Err(SegmentError::SegmentTooLarge {
                len: frame.len(),
                max: LARGEST_FRAME,
            }),
            other => Ok(Cutter::Whole(frame, other)),
        }
    }

    /// Frames the egress gets, ≥ 1.
    pub fn count(&self) -> usize {
        match self {
            Cutter::Whole(..) => 1,
            Cutter::Segments(s) => s.segments(),
        }
    }

    /// True if the frame is cut into segments (for the `segmented` count).
    pub fn segments(&self) -> bool {
        matches!(self, Cutter::Segments(_))
    }

    /// Length of frame `i`, bytes.
    ///
    /// # Panics
    /// If `i >= self.count()`.
    pub fn len(&self, i: usize) -> usize {
        match self {
            Cutter::Whole(f, _) => {
                assert_eq!(i, 0);
                f.len()
            }
            Cutter::Segments(s) => s.segment_len(i),
        }
    }

    /// Writes frame `i`, complete, into the front of `out`; returns its length.
    ///
    /// # Panics
    /// If `i >= self.count()` or `out` is shorter than [`Cutter::len`]`(i)`.
    pub fn write(&self, i: usize, out: &mut [u8]) -> usize {
        match self {
            Cutter::Whole(f, offload) => {
                assert_eq!(i, 0);
                let out = &mut out[..f.len()];
                out.copy_from_slice(f);
                if let Offload::Checksum(at) = *offload {
                    // `keep`'s caller checked `at` against this length.
                    complete_partial_checksum(out, at);
                }
                f.len()
            }
            Cutter::Segments(s) => s.write_segment(i, out),
        }
    }

    /// As [`write`](Self::write), into scratch space that grows to hold
    /// frame `i` (a jumbo segment) and keeps that size.
    ///
    /// # Panics
    /// If `i >= self.count()`.
    pub fn write_vec(&self, i: usize, out: &mut Vec<u8>) -> usize {
        let len = self.len(i);
        if out.len() < len {
            out.resize(len, 0);
        }
        self.write(i, out)
    }
}

/// Tests: the frames of `b` as an egress without offloads gets them: marked
/// frames cut ([`Cutter`]), plain ones as they are.
#[cfg(test)]
pub(crate) fn cut_all(b: &crate::frames::FrameBatch) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..b.len() {
        let f = b.get(i);
        let Some(k) = b.offloaded(i) else {
            out.push(f.to_vec());
            continue;
        };
        let c = Cutter::new(f, k.offload).expect("a kept frame cuts");
        for s in 0..c.count() {
            let mut buf = Vec::new();
            let n = c.write_vec(s, &mut buf);
            assert_eq!(n, c.len(s));
            buf.truncate(n);
            out.push(buf);
        }
    }
    out
}
