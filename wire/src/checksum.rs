//! The Internet checksum (RFC 1071), for the virtio-net checksum offload on
//! both sides of the ring, and the completion of a partial checksum.
//!
//! The device side (the daemon's offloads) completes the partial checksums
//! a guest leaves ([`complete_partial_checksum`]) and recomputes them when
//! it cuts a TCP segment ([`crate::tcp_cut`]); the driver side (the
//! synthetic guest) writes the pseudo-header sum into the frames it hands
//! over with `VIRTIO_NET_HDR_F_NEEDS_CSUM`, and the IPv4 header checksum.

use crate::vnet_hdr::ChecksumAt;

/// Adds `data` to the running ones'-complement sum `acc` as big-endian
/// 16-bit words, an odd last byte padded with zero. `acc` is not folded,
/// and is only meaningful through [`fold`]: eight bytes are added at a time
/// as two 32-bit halves (the same sum modulo 0xffff, as Linux's
/// `csum_partial` does with wide words). A `u64` holds the sum of any
/// frame vadapt handles (each step adds less than 2^33).
pub fn sum_words(data: &[u8], mut acc: u64) -> u64 {
    let mut wide = data.chunks_exact(8);
    for w in &mut wide {
        let v = u64::from_be_bytes(w.try_into().expect("8 bytes"));
        acc += (v >> 32) + (v & 0xffff_ffff);
    }
    let mut words = wide.remainder().chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a running sum into 16 bits (end-around carry), not complemented.
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum field's value for `data` plus the sum `acc` already taken
/// (a pseudo-header): the complement of the folded sum.
pub fn checksum(data: &[u8], acc: u64) -> u16 {
    !fold(sum_words(data, acc))
}

/// Completes the checksum a guest left partial (`VIRTIO_NET_HDR_F_NEEDS_CSUM`):
/// the 16-bit field at `at.start + at.offset` holds the folded sum of the
/// pseudo-header, and the checksum covers the frame from `at.start` to its
/// end — what Linux's `skb_checksum_help` does. A result of 0 is written as
/// `0xffff`, the same value in ones' complement, because 0 means "no
/// checksum" in UDP.
///
/// `at` must have been checked against this frame's length
/// ([`crate::VnetHdr::check`]); returns `false` and writes nothing if the
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
    fn rfc1071_example_sums_and_folds() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to 0x2ddf0, folded 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(0x2_ddf0), 0xddf2);
        assert_eq!(fold(sum_words(&data, 0)), 0xddf2);
        // Split so that the 16-bit path takes part of it.
        assert_eq!(
            fold(sum_words(&data[6..], sum_words(&data[..6], 0))),
            0xddf2
        );
        assert_eq!(checksum(&data, 0), !0xddf2);
    }

    /// The wide sum folds to what a plain 16-bit sum folds to, any length
    /// and any starting sum.
    #[test]
    fn wide_and_word_sums_fold_alike() {
        let narrow = |d: &[u8], acc: u64| {
            let mut a = acc;
            for w in d.chunks(2) {
                a += u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0));
            }
            fold(a)
        };
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 97 % 256) as u8).collect();
        for len in (0..64).chain([1513, 1514, 2999, 3000]) {
            for acc in [0, 6, 0xffff, 0x1_2345] {
                assert_eq!(
                    fold(sum_words(&data[..len], acc)),
                    narrow(&data[..len], acc),
                    "{len} {acc}"
                );
            }
        }
        assert_eq!(fold(sum_words(&[0xff; 1024], 0)), 0xffff);
    }

    #[test]
    fn an_odd_last_byte_is_padded_with_zero() {
        assert_eq!(sum_words(&[0x12, 0x34, 0x56], 0), 0x1234 + 0x5600);
    }

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
