//! The completion of a partial checksum left by a guest that negotiated
//! `VIRTIO_NET_F_CSUM`. The Internet checksum itself (RFC 1071) is
//! `vadapt_virtq::inet_checksum`, shared with the synthetic guest, which
//! writes such partial checksums; it is re-exported here so that the offload
//! code names one module.

use super::vnet_hdr::ChecksumAt;
pub use vadapt_virtq::inet_checksum::{checksum, fold, sum_words};

/// Completes the checksum a guest left partial (`VIRTIO_NET_HDR_F_NEEDS_CSUM`):
/// the 16-bit field at `at.start + at.offset` holds the folded sum of the
/// pseudo-header, and the checksum covers the frame from `at.start` to its
/// end — what Linux's `skb_checksum_help` does. A result of 0 is written as
/// `0xffff`, the same value in ones' complement, because 0 means "no
/// checksum" in UDP.
///
/// `at` must have been checked against this frame's length
/// ([`super::VnetHdr::check`]); returns `false` and writes nothing if the
/// field does not fit, so an unchecked `at` cannot index out of bounds.
pub fn complete_partial_checksum(frame: &mut [u8], at: ChecksumAt) -> bool {
    let start = usize::from(at.start);
    let field = start + usize::from(at.offset);
    if field + 2 > frame.len() {
        return false;
    }
    let sum = checksum(&frame[start..], 0);
    let value = if sum == 0 { 0xffff } else { sum };
    frame[field..field + 2].copy_from_slice(&value.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completed_checksum_verifies_and_zero_becomes_ffff() {
        // A fake L4 segment: 4 bytes, then the checksum field, then data,
        // with the pseudo-header sum 0x1234 in the field as a guest leaves it.
        let mut f = vec![0u8; 14];
        f.extend_from_slice(&[1, 2, 3, 4, 0x12, 0x34, 9, 8, 7]);
        let at = ChecksumAt {
            start: 14,
            offset: 4,
        };
        assert!(complete_partial_checksum(&mut f, at));
        // Verifying: the sum over the segment plus the pseudo-header is all ones.
        let seg = &f[14..];
        assert_eq!(fold(sum_words(seg, 0x1234)), 0xffff);

        // A segment whose sum is 0xffff would give 0: written as 0xffff.
        let mut z = vec![0xff, 0xff, 0, 0];
        assert!(complete_partial_checksum(
            &mut z,
            ChecksumAt {
                start: 0,
                offset: 2
            }
        ));
        assert_eq!(&z[2..], &[0xff, 0xff]);
    }

    #[test]
    fn a_field_past_the_end_is_refused() {
        let mut f = vec![0u8; 10];
        let at = ChecksumAt {
            start: 8,
            offset: 1,
        };
        assert!(!complete_partial_checksum(&mut f, at));
        assert_eq!(f, vec![0u8; 10]);
    }
}
