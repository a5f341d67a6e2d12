//! Software TCP segmentation (TSO done by the host): one TCP segment of up
//! to 64 KiB behind Ethernet (optionally one VLAN tag) and IPv4 or IPv6 is
//! cut into frames of at most `mss` payload bytes each.
//!
//! What each segment gets follows Linux's `tcp_gso_segment` /
//! `inet_gso_segment` / `ipv6_gso_segment` (and DPDK's `rte_gso`):
//!
//! * the headers copied from the original, Ethernet to TCP options;
//! * IPv4: total length of the segment, identification incremented per
//!   segment (Linux without `SKB_GSO_TCP_FIXEDID`), header checksum
//!   recomputed; IPv6: payload length of the segment (extension headers
//!   copied as they are);
//! * TCP: sequence number advanced by the payload before it, FIN and PSH
//!   only on the last segment, CWR only on the first, and the checksum
//!   computed in full over the pseudo-header and the segment — the partial
//!   sum the guest left is not trusted.
//!
//! Headers are parsed with `etherparse` (lengths, IHL, extension headers,
//! data offset); the cutting and fixing is ours. Writing segment `i` needs
//! only the original frame and an output slot: no allocation, any order.

use crate::checksum::{checksum, sum_words};
use crate::ethernet::{
    ethertype_at, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_OFFSET, ETHERTYPE_QINQ, ETHERTYPE_VLAN,
    ETH_HDR_LEN, ETH_VLAN_HDR_LEN,
};
use crate::tcp::{TCP_CSUM_OFFSET, TCP_CWR, TCP_FIN, TCP_FLAGS_OFFSET, TCP_PSH};
use crate::vnet_hdr::{TcpGso, MAX_SEGMENTS};
use etherparse::err;
use etherparse::{IpNumber, Ipv4Slice, Ipv6Slice, TcpHeaderSlice};

/// Why a frame cannot be segmented as its header asked (dropped as
/// `bad_vnet_hdr`).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SegmentError {
    /// Shorter than its Ethernet (and VLAN) header.
    #[error("frame shorter than its link header")]
    TruncatedLink,
    /// The EtherType is neither IPv4 nor IPv6.
    #[error("EtherType {0:#06x} is not IP")]
    NotIp(u16),
    /// The IP version differs from the one `gso_type` named.
    #[error("gso_type says IPv{requested}, the frame is not")]
    IpVersionMismatch {
        /// 4 or 6, as `gso_type` said.
        requested: u8,
    },
    /// The IPv4 header (or its lengths) is malformed.
    #[error("malformed IPv4 header")]
    Ipv4(#[source] err::ipv4::SliceError),
    /// The IPv6 header, its extension headers or its lengths are malformed.
    #[error("malformed IPv6 header")]
    Ipv6(#[source] err::ipv6::SliceError),
    /// The IP payload is a fragment.
    #[error("IP fragment")]
    Fragmented,
    /// The IP payload is not TCP.
    #[error("IP protocol {0} is not TCP")]
    NotTcp(u8),
    /// The TCP header is malformed.
    #[error("malformed TCP header")]
    Tcp(#[source] err::tcp::HeaderSliceError),
    /// `gso_size` 0.
    #[error("MSS 0")]
    ZeroMss,
    /// The TCP segment carries no payload.
    #[error("GSO frame without TCP payload")]
    NoPayload,
    /// A segment would be longer than the egress takes.
    #[error("{len}-byte segments, the egress takes at most {max}")]
    SegmentTooLarge {
        /// Headers plus one MSS, bytes.
        len: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// More than [`MAX_SEGMENTS`] segments.
    #[error("{0} segments (at most {MAX_SEGMENTS})")]
    TooManySegments(usize),
}

/// A checked TCP segment and how to cut it: offsets into the frame and the
/// segment count. Built by [`TcpSegmenter::new`]; every offset lies inside
/// the frame.
#[derive(Debug, Clone, Copy)]
pub struct TcpSegmenter<'a> {
    frame: &'a [u8],
    /// Offset of the IP header, bytes.
    l3: usize,
    /// Offset of the TCP header, bytes.
    l4: usize,
    /// Offset of the TCP payload (the length of all headers), bytes.
    payload: usize,
    /// End of the IP datagram (Ethernet padding after it is left out), bytes.
    end: usize,
    /// Payload bytes per segment, > 0.
    mss: usize,
    ipv6: bool,
    segments: usize,
}

/// Offset of `inner` in `outer`, a subslice of it.
fn offset_in(outer: &[u8], inner: &[u8]) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

impl<'a> TcpSegmenter<'a> {
    /// Parses `frame` as Ethernet / IPv4 or IPv6 / TCP, checks it against
    /// `gso`, and that every segment fits in `max_frame` bytes.
    pub fn new(frame: &'a [u8], gso: TcpGso, max_frame: usize) -> Result<Self, SegmentError> {
        let ether_type = |at: usize| ethertype_at(frame, at).ok_or(SegmentError::TruncatedLink);
        let mut l3 = ETH_HDR_LEN;
        let mut et = ether_type(ETHERTYPE_OFFSET)?;
        if et == ETHERTYPE_VLAN || et == ETHERTYPE_QINQ {
            et = ether_type(ETH_VLAN_HDR_LEN - 2)?;
            l3 = ETH_VLAN_HDR_LEN;
        }
        let ip = &frame[l3..];
        let p = match (et, gso.ipv6) {
            (ETHERTYPE_IPV4, false) => Ipv4Slice::from_slice(ip)
                .map_err(SegmentError::Ipv4)?
                .payload()
                .clone(),
            (ETHERTYPE_IPV6, true) => Ipv6Slice::from_slice(ip)
                .map_err(SegmentError::Ipv6)?
                .payload()
                .clone(),
            (ETHERTYPE_IPV4 | ETHERTYPE_IPV6, v6) => {
                return Err(SegmentError::IpVersionMismatch {
                    requested: if v6 { 6 } else { 4 },
                })
            }
            (other, _) => return Err(SegmentError::NotIp(other)),
        };
        if p.fragmented {
            return Err(SegmentError::Fragmented);
        }
        if p.ip_number != IpNumber::TCP {
            return Err(SegmentError::NotTcp(p.ip_number.0));
        }
        let (l4, tcp_and_payload) = (offset_in(frame, p.payload), p.payload);
        let tcp = TcpHeaderSlice::from_slice(tcp_and_payload).map_err(SegmentError::Tcp)?;
        let payload = l4 + tcp.slice().len();
        let end = l4 + tcp_and_payload.len();
        let data = end - payload;
        if data == 0 {
            return Err(SegmentError::NoPayload);
        }
        let mss = usize::from(gso.mss);
        if mss == 0 {
            return Err(SegmentError::ZeroMss);
        }
        let segments = data.div_ceil(mss);
        if segments > MAX_SEGMENTS {
            return Err(SegmentError::TooManySegments(segments));
        }
        let largest = payload + mss.min(data);
        if largest > max_frame {
            return Err(SegmentError::SegmentTooLarge {
                len: largest,
                max: max_frame,
            });
        }
        Ok(TcpSegmenter {
            frame,
            l3,
            l4,
            payload,
            end,
            mss,
            ipv6: gso.ipv6,
            segments,
        })
    }

    /// Segments the frame is cut into, ≥ 1.
    pub fn segments(&self) -> usize {
        self.segments
    }

    /// Length of the headers every segment starts with, bytes.
    pub fn header_len(&self) -> usize {
        self.payload
    }

    /// The payload range of segment `i` in the original frame.
    fn payload_range(&self, i: usize) -> std::ops::Range<usize> {
        let start = self.payload + i * self.mss;
        start..(start + self.mss).min(self.end)
    }

    /// Length of segment `i`, bytes.
    ///
    /// # Panics
    /// If `i >= self.segments()`.
    pub fn segment_len(&self, i: usize) -> usize {
        assert!(i < self.segments);
        self.payload + self.payload_range(i).len()
    }

    /// Writes segment `i` into the front of `out` with every header fixed
    /// and both checksums complete; returns its length.
    ///
    /// # Panics
    /// If `i >= self.segments()` or `out` is shorter than
    /// [`segment_len(i)`](Self::segment_len) (caller bugs: `new` bounded
    /// every segment by `max_frame`).
    pub fn write_segment(&self, i: usize, out: &mut [u8]) -> usize {
        let range = self.payload_range(i);
        let len = self.segment_len(i);
        let (hdrs, l3, l4) = (self.payload, self.l3, self.l4);
        out[..hdrs].copy_from_slice(&self.frame[..hdrs]);
        out[hdrs..len].copy_from_slice(&self.frame[range]);
        let tcp_len = len - l4;
        let pseudo = if self.ipv6 {
            let payload_len = (len - l3 - 40) as u16;
            out[l3 + 4..l3 + 6].copy_from_slice(&payload_len.to_be_bytes());
            let acc = sum_words(&out[l3 + 8..l3 + 40], 0);
            sum_words(&(tcp_len as u32).to_be_bytes(), acc) + 6
        } else {
            let total = (len - l3) as u16;
            out[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            let id = u16::from_be_bytes([out[l3 + 4], out[l3 + 5]]).wrapping_add(i as u16);
            out[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
            let ihl = usize::from(out[l3] & 0x0f) * 4;
            out[l3 + 10..l3 + 12].fill(0);
            let ip_sum = checksum(&out[l3..l3 + ihl], 0);
            out[l3 + 10..l3 + 12].copy_from_slice(&ip_sum.to_be_bytes());
            sum_words(&out[l3 + 12..l3 + 20], 0) + 6 + tcp_len as u64
        };
        let seq = u32::from_be_bytes(out[l4 + 4..l4 + 8].try_into().expect("4 bytes"))
            .wrapping_add((i * self.mss) as u32);
        out[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let (flags, csum) = (l4 + TCP_FLAGS_OFFSET, l4 + TCP_CSUM_OFFSET);
        if i + 1 < self.segments {
            out[flags] &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            out[flags] &= !TCP_CWR;
        }
        out[csum..csum + 2].fill(0);
        let tcp_sum = checksum(&out[l4..len], pseudo);
        out[csum..csum + 2].copy_from_slice(&tcp_sum.to_be_bytes());
        len
    }
}
