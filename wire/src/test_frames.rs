//! Test frames (feature `test-utils`, for this crate's tests, other
//! crates' and the fuzzers): TCP GSO frames as a Linux guest hands them to
//! virtio-net, with the virtio-net header it writes, and a check of
//! segments with `etherparse`'s own parser and checksum code (not ours).
//!
//! * [`ethernet_frame`] builds a plain Ethernet frame around a payload.
//! * [`tso_frame`] builds a frame of a [`Shape`] (IPv4 or IPv6, a VLAN tag
//!   or not, TCP options and flags) around a payload; [`linux_tso4`] is
//!   the header in front of a [`LINUX_V4`] one.
//! * [`segment_all`] cuts a frame with [`TcpSegmenter`].
//! * [`verify_segment`] checks any segment (parse, checksums, MSS), and
//!   [`verify_segments`] puts their payloads together; [`check_segments`] also checks what a
//!   [`Shape`]'s segments must carry (sequence numbers, flags, lengths).

use crate::checksum::{fold, sum_words};
use crate::ethernet::{ETH_HDR_LEN, ETH_VLAN_HDR_LEN};
use crate::mac::Mac;
use crate::tcp_cut::TcpSegmenter;
use crate::vnet_hdr::{TcpGso, VnetHdr, F_NEEDS_CSUM, GSO_TCPV4};
use etherparse::checksum::Sum16BitWords;
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TcpSlice, TransportSlice};

/// An Ethernet frame from `src` to `dst` of EtherType `ethertype`
/// carrying `payload` (no padding to 60 bytes: runts are frames too).
pub fn ethernet_frame(dst: Mac, src: Mac, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HDR_LEN + payload.len());
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// IPv4 source address of the test frames.
pub const SRC4: [u8; 4] = [10, 0, 0, 1];
/// IPv4 destination address of the test frames.
pub const DST4: [u8; 4] = [10, 0, 0, 2];
/// Initial TCP sequence number: wraps within the first 64 KiB.
pub const SEQ: u32 = 0xffff_f000;

/// What a test frame carries besides its payload.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// IPv6 rather than IPv4.
    pub ipv6: bool,
    /// An 802.1Q tag (VLAN 7) before the IP EtherType.
    pub vlan: bool,
    /// TCP option bytes (a multiple of 4, ≤ 40).
    pub options: usize,
    /// FIN set.
    pub fin: bool,
    /// PSH set.
    pub psh: bool,
    /// CWR set.
    pub cwr: bool,
}

/// A Linux guest's TCPv4 segment: timestamps, PSH.
pub const LINUX_V4: Shape = Shape {
    ipv6: false,
    vlan: false,
    options: 12, // NOP NOP timestamps, as Linux sends
    fin: false,
    psh: true,
    cwr: false,
};

/// A TSO frame as a Linux guest hands it to virtio-net: full lengths in
/// the IP header, and in the TCP checksum field the folded pseudo-header
/// sum of the whole segment (`~tcp_v4_check(len, saddr, daddr, 0)`), not
/// a checksum.
pub fn tso_frame(shape: Shape, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let mut opts = [0u8; 40];
    opts[..shape.options.min(2)].fill(1); // NOP padding
    let b = if shape.ipv6 {
        b.ipv6([0xfd; 16], [0xfe; 16], 64)
    } else {
        b.ipv4(SRC4, DST4, 64)
    };
    let mut t = b.tcp(40000, 5201, SEQ, 502).ack(77);
    if shape.fin {
        t = t.fin();
    }
    if shape.psh {
        t = t.psh();
    }
    if shape.cwr {
        t = t.cwr();
    }
    let t = t.options_raw(&opts[..shape.options]).unwrap();
    let mut f = Vec::new();
    t.write(&mut f, payload).unwrap();
    if shape.vlan {
        // An 802.1Q tag (VLAN 7) before the IP EtherType.
        f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    }
    // Replace the full TCP checksum with the partial one Linux leaves.
    let l3 = p_l3(shape);
    let l4 = l3 + if shape.ipv6 { 40 } else { 20 };
    let tcp_len = f.len() - l4;
    let pseudo = if shape.ipv6 {
        sum_words(&f[l3 + 8..l3 + 40], 6 + tcp_len as u64)
    } else {
        sum_words(&f[l3 + 12..l3 + 20], 6 + tcp_len as u64)
    };
    let partial = fold(pseudo);
    f[l4 + 16..l4 + 18].copy_from_slice(&partial.to_be_bytes());
    f
}

/// The segmentation request for a frame of `shape` cut at `mss`.
pub fn gso(shape: Shape, mss: u16) -> TcpGso {
    TcpGso {
        ipv6: shape.ipv6,
        ecn: shape.cwr,
        mss,
    }
}

/// Every segment of `frame` cut as `g` asks, without a frame limit.
///
/// # Panics
/// If the segmenter refuses the frame.
pub fn segment_all(frame: &[u8], g: TcpGso) -> Vec<Vec<u8>> {
    let s = TcpSegmenter::new(frame, g, usize::MAX).unwrap();
    (0..s.segments())
        .map(|i| {
            let mut out = vec![0u8; s.segment_len(i)];
            assert_eq!(s.write_segment(i, &mut out), out.len());
            out
        })
        .collect()
}

/// The header Linux's virtio-net driver writes in front of a 1448-MSS
/// [`LINUX_V4`] frame: Ethernet (14) + IPv4 (20) + TCP with timestamps (32).
pub fn linux_tso4() -> VnetHdr {
    VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 66,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
    }
}

/// Checks one segment with `etherparse` (its parser and checksum code,
/// not ours): it parses as Ethernet / IP / TCP, its IPv4 header checksum
/// (over the raw header, reserved flag bit and all) and TCP checksum
/// verify, and it carries 1 to `mss` payload bytes. Returns the parsed
/// packet and its TCP part, or what failed.
pub fn verify_segment(seg: &[u8], mss: usize) -> Result<(SlicedPacket<'_>, TcpSlice<'_>), String> {
    let p = SlicedPacket::from_ethernet(seg).map_err(|e| format!("does not parse: {e}"))?;
    let Some(TransportSlice::Tcp(tcp)) = p.transport.clone() else {
        return Err(format!("not TCP: {:?}", p.transport));
    };
    let want = match &p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            if Sum16BitWords::new().add_slice(h.slice()).ones_complement() != 0 {
                return Err("IPv4 header checksum".into());
            }
            tcp.calc_checksum_ipv4(h.source(), h.destination())
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header();
            tcp.calc_checksum_ipv6(h.source(), h.destination())
        }
        other => return Err(format!("not IP: {other:?}")),
    }
    .map_err(|e| format!("TCP checksum: {e}"))?;
    // In ones' complement 0x0000 and 0xffff are the same value, and a
    // receiver verifies by summing the whole segment to all ones, so both
    // are right when the complement of the sum is 0. `etherparse` gives 0;
    // Linux's `skb_checksum_help` (and `complete_partial_checksum`) writes
    // 0xffff then, because 0 means "no checksum" in UDP.
    let same = tcp.checksum() == want || (want == 0 && tcp.checksum() == 0xffff);
    if !same {
        return Err(format!(
            "TCP checksum {:#x}, want {want:#x}",
            tcp.checksum()
        ));
    }
    let len = tcp.payload().len();
    if len == 0 || len > mss {
        return Err(format!("{len} payload bytes, MSS {mss}"));
    }
    Ok((p, tcp))
}

/// [`verify_segment`] for each of `segs`; returns their payloads put
/// together.
///
/// # Panics
/// On the first segment that fails, saying which and why.
pub fn verify_segments<S: AsRef<[u8]>>(segs: &[S], mss: usize) -> Vec<u8> {
    let mut data = Vec::new();
    for (i, seg) in segs.iter().enumerate() {
        let (_, tcp) = verified(seg.as_ref(), i, mss);
        data.extend_from_slice(tcp.payload());
    }
    data
}

/// Segment `i`, checked by [`verify_segment`], or a panic saying why not.
fn verified(seg: &[u8], i: usize, mss: usize) -> (SlicedPacket<'_>, TcpSlice<'_>) {
    verify_segment(seg, mss).unwrap_or_else(|e| panic!("segment {i}: {e}"))
}

/// [`verify_segments`], and what segments of a [`tso_frame`] of `shape`
/// must carry: IPv4 identification advanced per segment and lengths of the
/// segment, sequence numbers advanced by the payload before, FIN and PSH on
/// the last segment only, CWR on the first only. Returns the payloads put
/// together.
///
/// # Panics
/// On the first segment that fails.
pub fn check_segments(segs: &[Vec<u8>], shape: Shape, mss: usize) -> Vec<u8> {
    let mut data = Vec::new();
    let n = segs.len();
    for (i, seg) in segs.iter().enumerate() {
        let (p, tcp) = verified(seg, i, mss);
        match &p.net {
            Some(NetSlice::Ipv4(ip)) => {
                let h = ip.header();
                assert_eq!(h.identification(), 0u16.wrapping_add(i as u16));
                assert_eq!(usize::from(h.total_len()), seg.len() - p_l3(shape));
            }
            Some(NetSlice::Ipv6(ip)) => {
                let h = ip.header();
                assert_eq!(
                    usize::from(h.payload_length()),
                    seg.len() - p_l3(shape) - 40
                );
            }
            _ => unreachable!("`verified` checked IP"),
        }
        assert_eq!(
            tcp.sequence_number(),
            SEQ.wrapping_add(data.len() as u32),
            "sequence number of segment {i}"
        );
        let last = i + 1 == n;
        assert_eq!(tcp.fin(), shape.fin && last, "FIN on segment {i}");
        assert_eq!(tcp.psh(), shape.psh && last, "PSH on segment {i}");
        assert_eq!(tcp.cwr(), shape.cwr && i == 0, "CWR on segment {i}");
        assert!(tcp.ack() && tcp.acknowledgment_number() == 77);
        data.extend_from_slice(tcp.payload());
    }
    data
}

/// Offset of the IP header in a frame of `shape`, bytes.
pub fn p_l3(shape: Shape) -> usize {
    if shape.vlan {
        ETH_VLAN_HDR_LEN
    } else {
        ETH_HDR_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-MSS segment of [`LINUX_V4`] with its checksum completed,
    /// then a payload word raised so that the complement of its sum is 0:
    /// the field is then right as 0 or 0xffff, and wrong as anything else.
    #[test]
    fn a_checksum_of_zero_verifies_written_either_way() {
        let frame = tso_frame(LINUX_V4, &[0x5a; 200]);
        let mut seg = segment_all(&frame, gso(LINUX_V4, 1448)).remove(0);
        let tcp_at = ETH_HDR_LEN + 20;
        let field = tcp_at + 16;
        let c = u16::from_be_bytes([seg[field], seg[field + 1]]);
        assert!(verify_segment(&seg, 1448).is_ok());
        // Add `c` (ones' complement) to the first payload word: the sum
        // over the segment grows by `c`, so its complement falls to 0.
        let word = tcp_at + 32;
        let w = u16::from_be_bytes([seg[word], seg[word + 1]]);
        let raised = fold(u64::from(w) + u64::from(c));
        seg[word..word + 2].copy_from_slice(&raised.to_be_bytes());
        for (value, right) in [(0u16, true), (0xffff, true), (1, false), (c, c == 0)] {
            seg[field..field + 2].copy_from_slice(&value.to_be_bytes());
            assert_eq!(
                verify_segment(&seg, 1448).is_ok(),
                right,
                "field {value:#x}"
            );
        }
    }
}
