//! Tests of [`crate::tcp_cut`], apart from it because they share
//! [`crate::test_frames`], which itself uses the segmenter.

use crate::tcp_cut::*;
use crate::test_frames::{check_segments, gso, segment_all, tso_frame, Shape, LINUX_V4};
use crate::vnet_hdr::TcpGso;
use proptest::prelude::*;

#[test]
fn a_linux_64k_tso4_frame_becomes_1448_byte_segments() {
    // 65160 = 45 × 1448: the largest multiple of Linux's usual MSS that
    // fits a 64 KiB IPv4 datagram with timestamps.
    let payload: Vec<u8> = (0..45 * 1448).map(|i| (i * 7 % 251) as u8).collect();
    let f = tso_frame(LINUX_V4, &payload);
    let s = TcpSegmenter::new(&f, gso(LINUX_V4, 1448), 1514).unwrap();
    assert_eq!((s.segments(), s.header_len()), (45, 66));
    let segs = segment_all(&f, gso(LINUX_V4, 1448));
    assert!(segs.iter().all(|s| s.len() == 1514), "full-size frames");
    assert_eq!(check_segments(&segs, LINUX_V4, 1448), payload);
}

#[test]
fn the_last_segment_is_short_and_alone_has_fin_and_psh() {
    let shape = Shape {
        ipv6: true,
        vlan: true,
        fin: true,
        cwr: true,
        ..LINUX_V4
    };
    let payload = vec![0xa5; 1000];
    let segs = segment_all(&tso_frame(shape, &payload), gso(shape, 300));
    let lens: Vec<usize> = segs.iter().map(|s| s.len() - (18 + 40 + 32)).collect();
    assert_eq!(lens, [300, 300, 300, 100]);
    assert_eq!(check_segments(&segs, shape, 300), payload);
}

#[test]
fn a_payload_within_one_mss_is_one_segment_with_checksums_completed() {
    let payload = b"hello".to_vec();
    let f = tso_frame(LINUX_V4, &payload);
    let segs = segment_all(&f, gso(LINUX_V4, 1448));
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].len(), f.len());
    assert_eq!(check_segments(&segs, LINUX_V4, 1448), payload);
}

#[test]
fn frames_that_are_not_what_gso_type_says_are_refused() {
    let f = tso_frame(LINUX_V4, &[1; 3000]);
    let v6 = TcpGso {
        ipv6: true,
        ecn: false,
        mss: 1448,
    };
    let e = |f: &[u8], g| TcpSegmenter::new(f, g, 1514).unwrap_err();
    assert_eq!(e(&f, v6), SegmentError::IpVersionMismatch { requested: 6 });
    let g4 = gso(LINUX_V4, 1448);
    assert_eq!(e(&f[..13], g4), SegmentError::TruncatedLink);
    let mut arp = f.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(e(&arp, g4), SegmentError::NotIp(0x0806));
    let mut udp = f.clone();
    udp[14 + 9] = 17;
    assert_eq!(e(&udp, g4), SegmentError::NotTcp(17));
    let mut frag = f.clone();
    frag[14 + 6] = 0x20; // more fragments
    assert_eq!(e(&frag, g4), SegmentError::Fragmented);
    assert!(matches!(e(&f[..40], g4), SegmentError::Ipv4(_)));
    let mut long = f.clone();
    long[14 + 2..14 + 4].copy_from_slice(&9000u16.to_be_bytes());
    assert!(matches!(e(&long, g4), SegmentError::Ipv4(_)));
    let mut bad_doff = f.clone();
    bad_doff[34 + 12] = 0x40; // data offset 4 words
    assert!(matches!(e(&bad_doff, g4), SegmentError::Tcp(_)));
    let empty = tso_frame(LINUX_V4, &[]);
    assert_eq!(e(&empty, g4), SegmentError::NoPayload);
    assert_eq!(
        e(&f, gso(LINUX_V4, 9000)),
        SegmentError::SegmentTooLarge {
            len: 66 + 3000,
            max: 1514
        }
    );
}

#[test]
fn ethernet_padding_after_the_datagram_is_not_payload() {
    let mut f = tso_frame(LINUX_V4, &[3; 10]);
    f.extend_from_slice(&[0xee; 6]);
    let segs = segment_all(&f, gso(LINUX_V4, 4));
    assert_eq!(check_segments(&segs, LINUX_V4, 4), vec![3; 10]);
}

fn shapes() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        any::<bool>(),
        0usize..=10,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(ipv6, vlan, words, fin, psh, cwr)| Shape {
            ipv6,
            vlan,
            options: words * 4,
            fin,
            psh,
            cwr,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random payloads, MSS and header shapes: the segments reassemble
    /// to the payload, every IP and TCP checksum verifies, no segment
    /// carries more than an MSS, and sequence numbers and flags are
    /// Linux's.
    #[test]
    fn segments_reassemble_and_verify(
        shape in shapes(),
        payload in proptest::collection::vec(any::<u8>(), 1..20_000),
        mss in prop_oneof![1u16..64, 500u16..1500, 1400u16..9000],
    ) {
        let f = tso_frame(shape, &payload);
        let segs = segment_all(&f, gso(shape, mss));
        prop_assert_eq!(segs.len(), payload.len().div_ceil(usize::from(mss)));
        prop_assert_eq!(check_segments(&segs, shape, usize::from(mss)), payload);
    }
}
