//! What a transmitted frame's virtio-net header asks of vadapt, given the
//! host-side offloads its frontend negotiated: the header's own check
//! ([`VnetHdr::check`]) plus "was this offload negotiated at all".

use crate::net::HostOffloads;
use vadapt_wire::{Offload, SegmentError, VnetHdr, VnetHdrError};

/// Why a transmitted frame's offload request was refused; the frame is
/// dropped and counted as `reason="bad_vnet_hdr"`.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum OffloadRefused {
    /// A header field is out of range for the frame.
    #[error("bad virtio-net header")]
    Header(#[source] VnetHdrError),
    /// The GSO frame is not the TCP segment its header says, or cannot be cut.
    #[error("GSO frame cannot be segmented")]
    Segment(#[source] SegmentError),
    /// The header asks for an offload the frontend did not negotiate.
    #[error("the header asks for {0}, which was not negotiated")]
    NotNegotiated(&'static str),
}

/// Checks `hdr` against the `frame_len`-byte frame behind it and against
/// `negotiated`; returns what the frame needs before it leaves.
pub fn tx_offload(
    hdr: &VnetHdr,
    frame_len: usize,
    negotiated: HostOffloads,
) -> Result<Offload, OffloadRefused> {
    let offload = hdr.check(frame_len).map_err(OffloadRefused::Header)?;
    let csum = match offload {
        Offload::None => None,
        Offload::Checksum(at) => Some(at),
        Offload::Tcp(gso, at) => {
            if gso.ipv6 && !negotiated.tso6 {
                return Err(OffloadRefused::NotNegotiated("TCPv6 segmentation"));
            }
            if !gso.ipv6 && !negotiated.tso4 {
                return Err(OffloadRefused::NotNegotiated("TCPv4 segmentation"));
            }
            if gso.ecn && !negotiated.ecn {
                return Err(OffloadRefused::NotNegotiated("ECN segmentation"));
            }
            at
        }
    };
    if csum.is_some() && !negotiated.csum {
        return Err(OffloadRefused::NotNegotiated("checksum completion"));
    }
    Ok(offload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_wire::vnet_hdr::{F_NEEDS_CSUM, GSO_ECN, GSO_TCPV4, GSO_TCPV6};

    #[test]
    fn only_negotiated_offloads_pass() {
        let tso4 = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 54,
            gso_size: 1460,
            csum_start: 34,
            csum_offset: 16,
        };
        assert!(matches!(
            tx_offload(&tso4, 3000, HostOffloads::ALL),
            Ok(Offload::Tcp(..))
        ));
        let csum_only = HostOffloads {
            csum: true,
            ..HostOffloads::default()
        };
        assert_eq!(
            tx_offload(&tso4, 3000, csum_only),
            Err(OffloadRefused::NotNegotiated("TCPv4 segmentation"))
        );
        let v6 = VnetHdr {
            gso_type: GSO_TCPV6,
            ..tso4
        };
        let no6 = HostOffloads {
            tso6: false,
            ..HostOffloads::ALL
        };
        assert_eq!(
            tx_offload(&v6, 3000, no6),
            Err(OffloadRefused::NotNegotiated("TCPv6 segmentation"))
        );
        let ecn = VnetHdr {
            gso_type: GSO_TCPV4 | GSO_ECN,
            ..tso4
        };
        let no_ecn = HostOffloads {
            ecn: false,
            ..HostOffloads::ALL
        };
        assert_eq!(
            tx_offload(&ecn, 3000, no_ecn),
            Err(OffloadRefused::NotNegotiated("ECN segmentation"))
        );
        let csum = VnetHdr {
            gso_type: 0,
            gso_size: 0,
            ..tso4
        };
        assert!(matches!(
            tx_offload(&csum, 100, csum_only),
            Ok(Offload::Checksum(_))
        ));
        let tso_no_csum = HostOffloads {
            csum: false,
            ..HostOffloads::ALL
        };
        assert_eq!(
            tx_offload(&csum, 100, tso_no_csum),
            Err(OffloadRefused::NotNegotiated("checksum completion"))
        );
        assert!(matches!(
            tx_offload(&csum, 40, HostOffloads::ALL),
            Err(OffloadRefused::Header(
                VnetHdrError::ChecksumBeyondFrame { .. }
            ))
        ));
    }
}
