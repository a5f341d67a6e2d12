//! Tests of [`crate::vnet_hdr`], apart from it because they use
//! [`crate::test_frames`], which itself builds headers.

use crate::test_frames::linux_tso4;
use crate::vnet_hdr::*;

#[test]
fn bytes_round_trip_little_endian() {
    let h = linux_tso4();
    let b = h.to_bytes();
    assert_eq!(b, [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0]);
    assert_eq!(VnetHdr::read(&b), Some(h));
    assert_eq!(VnetHdr::read(&b[..9]), None);
    assert!(VnetHdr::default().is_plain());
    assert!(!h.is_plain());
}

#[test]
fn good_headers_say_what_they_ask() {
    assert_eq!(VnetHdr::default().check(60), Ok(Offload::None));
    let csum = ChecksumAt {
        start: 34,
        offset: 16,
    };
    let h = linux_tso4();
    assert_eq!(
        h.check(66 + 64_000),
        Ok(Offload::Tcp(
            TcpGso {
                ipv6: false,
                ecn: false,
                mss: 1448
            },
            Some(csum)
        ))
    );
    let only_csum = VnetHdr {
        gso_type: GSO_NONE,
        gso_size: 0,
        ..h
    };
    assert_eq!(only_csum.check(100), Ok(Offload::Checksum(csum)));
    let v6_ecn = VnetHdr {
        gso_type: GSO_TCPV6 | GSO_ECN,
        ..h
    };
    assert!(matches!(
        v6_ecn.check(3000),
        Ok(Offload::Tcp(
            TcpGso {
                ipv6: true,
                ecn: true,
                ..
            },
            _
        ))
    ));
    // Driver-to-device frames may carry stray device-only flags: ignored.
    let stray = VnetHdr {
        flags: F_DATA_VALID | F_RSC_INFO,
        ..VnetHdr::default()
    };
    assert_eq!(stray.check(60), Ok(Offload::None));
}

#[test]
fn each_bad_field_has_its_error() {
    let h = linux_tso4();
    let cases = [
        (
            VnetHdr { gso_type: 2, ..h },
            VnetHdrError::UnknownGsoType(2),
        ),
        (
            VnetHdr {
                gso_type: GSO_ECN,
                ..h
            },
            VnetHdrError::UnknownGsoType(GSO_ECN),
        ),
        (
            VnetHdr {
                gso_type: GSO_UDP_L4,
                ..h
            },
            VnetHdrError::GsoTypeNotOffered(GSO_UDP_L4),
        ),
        (VnetHdr { gso_size: 0, ..h }, VnetHdrError::ZeroGsoSize),
        (
            VnetHdr { hdr_len: 2000, ..h },
            VnetHdrError::HdrLenBeyondFrame {
                hdr_len: 2000,
                frame_len: 1514,
            },
        ),
        (
            VnetHdr {
                csum_start: 1500,
                csum_offset: 13,
                ..h
            },
            VnetHdrError::ChecksumBeyondFrame {
                csum_start: 1500,
                csum_offset: 13,
                frame_len: 1514,
            },
        ),
        (
            VnetHdr {
                csum_start: u16::MAX,
                csum_offset: u16::MAX,
                ..h
            },
            VnetHdrError::ChecksumBeyondFrame {
                csum_start: u16::MAX,
                csum_offset: u16::MAX,
                frame_len: 1514,
            },
        ),
    ];
    for (hdr, want) in cases {
        assert_eq!(hdr.check(1514), Err(want), "{hdr:?}");
    }
    // The last byte of a checksum field may be the frame's last byte.
    let edge = VnetHdr {
        csum_start: 1500,
        csum_offset: 12,
        ..h
    };
    assert!(edge.check(1514).is_ok());
    let many = VnetHdr {
        gso_size: 1,
        hdr_len: 0,
        ..h
    };
    assert_eq!(
        many.check(65_536),
        Err(VnetHdrError::TooManySegments { segments: 65_536 })
    );
    assert!(many.check(65_535).is_ok());
}

#[test]
fn num_buffers_reads_le_and_treats_zero_as_one() {
    let mut h = [0u8; HDR_LEN_MRG];
    assert_eq!(num_buffers(&h), Some(1));
    h[10] = 3;
    assert_eq!(num_buffers(&h), Some(3));
    h[11] = 1;
    assert_eq!(num_buffers(&h), Some(259));
    assert_eq!(num_buffers(&h[..11]), None);
}
