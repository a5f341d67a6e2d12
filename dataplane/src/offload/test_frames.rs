//! Test frames for the offload tests: TCP GSO frames as a Linux guest
//! hands them to virtio-net, and a check of segments with `etherparse`'s
//! own parser and checksum code (not ours).

use super::checksum::sum_words;
use super::tcp_segment::TcpSegmenter;
use super::vnet_hdr::TcpGso;
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

pub(crate) const SRC4: [u8; 4] = [10, 0, 0, 1];
pub(crate) const DST4: [u8; 4] = [10, 0, 0, 2];
pub(crate) const SEQ: u32 = 0xffff_f000; // wraps within the first 64 KiB

/// What a test frame carries besides its payload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) ipv6: bool,
    pub(crate) vlan: bool,
    /// TCP option bytes (a multiple of 4, ≤ 40).
    pub(crate) options: usize,
    pub(crate) fin: bool,
    pub(crate) psh: bool,
    pub(crate) cwr: bool,
}

pub(crate) const LINUX_V4: Shape = Shape {
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
pub(crate) fn tso_frame(shape: Shape, payload: &[u8]) -> Vec<u8> {
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
    let l3 = if shape.vlan { 18 } else { 14 };
    let l4 = l3 + if shape.ipv6 { 40 } else { 20 };
    let tcp_len = f.len() - l4;
    let pseudo = if shape.ipv6 {
        sum_words(&f[l3 + 8..l3 + 40], 6 + tcp_len as u64)
    } else {
        sum_words(&f[l3 + 12..l3 + 20], 6 + tcp_len as u64)
    };
    let partial = super::checksum::fold(pseudo);
    f[l4 + 16..l4 + 18].copy_from_slice(&partial.to_be_bytes());
    f
}

pub(crate) fn gso(shape: Shape, mss: u16) -> TcpGso {
    TcpGso {
        ipv6: shape.ipv6,
        ecn: shape.cwr,
        mss,
    }
}

pub(crate) fn segment_all(frame: &[u8], g: TcpGso) -> Vec<Vec<u8>> {
    let s = TcpSegmenter::new(frame, g, usize::MAX).unwrap();
    (0..s.segments())
        .map(|i| {
            let mut out = vec![0u8; s.segment_len(i)];
            assert_eq!(s.write_segment(i, &mut out), out.len());
            out
        })
        .collect()
}

/// Checks every segment with `etherparse` (its own checksum code, not
/// ours) and returns the reassembled payload.
pub(crate) fn check_segments(segs: &[Vec<u8>], shape: Shape, mss: usize) -> Vec<u8> {
    let mut data = Vec::new();
    let n = segs.len();
    for (i, seg) in segs.iter().enumerate() {
        let p = SlicedPacket::from_ethernet(seg).expect("segment parses");
        let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
            panic!("segment {i} is not TCP");
        };
        let want_sum = match &p.net {
            Some(NetSlice::Ipv4(ip)) => {
                let h = ip.header();
                assert_eq!(
                    h.to_header().calc_header_checksum(),
                    h.header_checksum(),
                    "IPv4 header checksum of segment {i}"
                );
                assert_eq!(h.identification(), 0u16.wrapping_add(i as u16));
                assert_eq!(usize::from(h.total_len()), seg.len() - p_l3(shape));
                tcp.calc_checksum_ipv4(h.source(), h.destination()).unwrap()
            }
            Some(NetSlice::Ipv6(ip)) => {
                let h = ip.header();
                assert_eq!(
                    usize::from(h.payload_length()),
                    seg.len() - p_l3(shape) - 40
                );
                tcp.calc_checksum_ipv6(h.source(), h.destination()).unwrap()
            }
            other => panic!("segment {i}: not IP: {other:?}"),
        };
        assert_eq!(tcp.checksum(), want_sum, "TCP checksum of segment {i}");
        assert!(tcp.payload().len() <= mss && !tcp.payload().is_empty());
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

pub(crate) fn p_l3(shape: Shape) -> usize {
    if shape.vlan {
        18
    } else {
        14
    }
}

/// The frames of `b` as an egress without offloads gets them: marked
/// frames cut ([`super::egress::Cutter`]), plain ones as they are.
pub(crate) fn cut_all(b: &crate::frames::FrameBatch) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..b.len() {
        let f = b.get(i);
        let Some(k) = b.offloaded(i) else {
            out.push(f.to_vec());
            continue;
        };
        let c = super::egress::Cutter::new(f, k.offload).expect("a kept frame cuts");
        for s in 0..c.count() {
            let mut buf = vec![0u8; crate::net::MAX_FRAME];
            let n = c.write(s, &mut buf);
            assert_eq!(n, c.len(s));
            buf.truncate(n);
            out.push(buf);
        }
    }
    out
}
