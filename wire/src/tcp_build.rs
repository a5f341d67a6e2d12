//! The headers of one TCP-stream segment as Linux's TCP and virtio-net driver hand it to the
//! device: `virtio_net_hdr_v1`, Ethernet, IPv4 and TCP with the timestamps option. Pure code:
//! the caller supplies the payload's place and length, the timestamp and the offloads the
//! device took; [`TcpFlow::write_headers`] writes the 78 header bytes and advances the flow.
//!
//! # What is written, and why
//!
//! * **virtio-net header.** With `VIRTIO_NET_F_CSUM`: `flags = NEEDS_CSUM`, `csum_start` 34
//!   (the TCP header, from the frame's start), `csum_offset` 16 (TCP's checksum field), as
//!   `virtio_net_hdr_from_skb` writes for `CHECKSUM_PARTIAL`. With `HOST_TSO4` and more than
//!   one MSS of payload: `gso_type = GSO_TCPV4`, `gso_size` = [`MSS`], `hdr_len` 66 (the
//!   linear part, which for a TCP skb built by `sendmsg` is the headers; the payload is in
//!   page fragments). A segment of at most one MSS goes without GSO (`gso_type` NONE,
//!   `gso_size` and `hdr_len` 0), as Linux sends it.
//! * **IPv4.** 20 bytes, DF set, TTL 64, `total length` = the whole segment (headers + all of
//!   its payload, ≤ 65535), identification advanced by the number of MSS frames the segment
//!   becomes (Linux's `ip_select_ident_segs`), header checksum computed.
//! * **TCP.** 32 bytes: 20 + `NOP NOP TS` (Linux's default, `tcp_timestamps=1`). ACK set (an
//!   established connection), PSH set (Linux marks the tail skb of every `sendmsg` with
//!   `tcp_push`, and under a stream of small writes the skb that leaves is the one the last
//!   write marked; the host's segmenter keeps it on the last MSS frame only). Sequence number
//!   advanced by the payload of each segment; fixed acknowledgment number and window (no
//!   receiver answers, see the guest's README). With `NEEDS_CSUM`, the checksum field holds
//!   the folded pseudo-header sum of the whole segment (`~tcp_v4_check(len, saddr, daddr, 0)`),
//!   not a checksum, which is what Linux leaves for `CHECKSUM_PARTIAL`.
//! * **Without `VIRTIO_NET_F_CSUM`** the TCP checksum is computed in full (Linux's
//!   `skb_checksum_help` before the driver); that needs the payload bytes, so the caller passes
//!   them. Without `HOST_TSO4` the caller keeps every segment to one MSS (Linux segments in
//!   software before the driver).
//!
//! Addresses: [`ip_for_mac`] maps a MAC to `10.0.m4.m5` (its last two bytes), so each guest
//! and sink has a stable, distinct address without configuration. Ports: the sender thread
//! `t` uses source port `40000 + t` and destination port 5201 (iperf3's), one flow per thread.

use crate::checksum::{checksum, fold, sum_words};
use crate::ethernet::{ETHERTYPE_IPV4, ETH_HDR_LEN};
use crate::tcp::{IPPROTO_TCP, TCP_ACK, TCP_CSUM_OFFSET, TCP_PSH};
use crate::vnet_hdr::{VnetHdr, F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4, HDR_LEN_MRG};

/// IPv4 header without options (bytes).
pub const IPV4_HDR_LEN: usize = 20;
/// TCP header with `NOP NOP` and the 10-byte timestamps option (bytes).
pub const TCP_HDR_LEN: usize = 32;
/// Ethernet + IPv4 + TCP headers: the virtio-net header's `hdr_len` for a GSO segment (bytes).
pub const FRAME_HDRS_LEN: usize = ETH_HDR_LEN + IPV4_HDR_LEN + TCP_HDR_LEN;
/// Everything in front of the payload in a TX buffer: virtio-net header + frame headers.
pub const BUF_HDRS_LEN: usize = HDR_LEN_MRG + FRAME_HDRS_LEN;
/// Offset of the TCP header in the frame (`csum_start`).
pub const CSUM_START: u16 = (ETH_HDR_LEN + IPV4_HDR_LEN) as u16;
/// Offset of the checksum field in the TCP header (`csum_offset`).
pub const CSUM_OFFSET: u16 = TCP_CSUM_OFFSET as u16;
/// Payload bytes per wire frame: a 1500-byte MTU minus IPv4 and TCP-with-timestamps headers.
pub const MSS: u32 = 1500 - (IPV4_HDR_LEN + TCP_HDR_LEN) as u32;
/// Largest payload of one TSO segment: Linux's `tcp_xmit_size_goal`, the largest multiple of
/// the MSS under `gso_max_size` (65536) minus `MAX_TCP_HEADER`, i.e. 45 × 1448 = 65160 bytes.
pub const TSO_SIZE_GOAL: u32 = 45 * MSS;
/// Destination port of every flow (iperf3's).
pub const DST_PORT: u16 = 5201;
/// Source port of sender thread 0; thread `t` uses `SRC_PORT_BASE + t`.
pub const SRC_PORT_BASE: u16 = 40000;
/// Receive window advertised, as the field holds it (scaled by the receiver's shift).
pub const WINDOW: u16 = 502;

const IP_DF: u16 = 0x4000;
const TTL: u8 = 64;

/// The offloads the device took (`VIRTIO_NET_F_CSUM`, `VIRTIO_NET_F_HOST_TSO4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TxOffloads {
    /// Partial checksums (`NEEDS_CSUM`).
    pub csum: bool,
    /// TCPv4 segmentation (`GSO_TCPV4`); only meaningful with `csum` (the spec makes
    /// `HOST_TSO4` depend on `CSUM`).
    pub tso4: bool,
}

impl TxOffloads {
    /// Most payload bytes one buffer may carry: [`TSO_SIZE_GOAL`] with TSO, else one MSS.
    pub fn size_goal(self) -> u32 {
        if self.csum && self.tso4 {
            TSO_SIZE_GOAL
        } else {
            MSS
        }
    }
}

/// The IPv4 address this mode gives `mac`: `10.0.mac[4].mac[5]`.
pub fn ip_for_mac(mac: [u8; 6]) -> [u8; 4] {
    [10, 0, mac[4], mac[5]]
}

/// One TCP connection's sending side: addresses, ports and the fields that advance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpFlow {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
    /// Source TCP port.
    pub src_port: u16,
    /// Destination TCP port.
    pub dst_port: u16,
    /// Sequence number of the next payload byte.
    pub seq: u32,
    /// Acknowledgment number sent (the receiver's initial sequence number + 1; fixed).
    pub ack: u32,
    /// IPv4 identification of the next wire frame.
    pub ip_id: u16,
    /// Timestamp echo reply (fixed: the receiver never sends).
    pub ts_ecr: u32,
}

impl TcpFlow {
    /// The flow of sender thread `thread` from `src_mac` to `dst_mac`: addresses from the
    /// MACs ([`ip_for_mac`]), source port `40000 + thread`, and an initial sequence number
    /// that differs per thread (fixed, so runs are reproducible).
    pub fn new(thread: u32, src_mac: [u8; 6], dst_mac: [u8; 6]) -> TcpFlow {
        TcpFlow {
            dst_mac,
            src_mac,
            src_ip: ip_for_mac(src_mac),
            dst_ip: ip_for_mac(dst_mac),
            src_port: SRC_PORT_BASE.wrapping_add(thread as u16),
            dst_port: DST_PORT,
            seq: 0x1000_0000u32.wrapping_mul(thread.wrapping_add(1)) ^ 0x0bad_cafe,
            ack: 0x7e57_0001,
            ip_id: (thread as u16).wrapping_mul(0x1000),
            ts_ecr: 0x0001_0000,
        }
    }

    /// Writes the [`BUF_HDRS_LEN`] bytes in front of a segment of `payload_len` payload bytes
    /// into `out` (virtio-net header, Ethernet, IPv4, TCP) and advances the sequence number
    /// and the IP identification. `ts_val` is the TCP timestamp (ms on the sender's clock).
    /// `payload` is read only without `offloads.csum` (full checksum); it must then be the
    /// segment's payload.
    ///
    /// # Panics
    /// If `out` is shorter than [`BUF_HDRS_LEN`], `payload_len` is 0 or more than
    /// `offloads.size_goal()`, or (without `csum`) `payload.len() != payload_len` — caller
    /// bugs, the sender controls all of them.
    pub fn write_headers(
        &mut self,
        out: &mut [u8],
        payload_len: u32,
        payload: &[u8],
        offloads: TxOffloads,
        ts_val: u32,
    ) -> usize {
        assert!(payload_len > 0 && payload_len <= offloads.size_goal());
        let out = &mut out[..BUF_HDRS_LEN];
        let tcp_len = TCP_HDR_LEN as u32 + payload_len;
        let ip_total = IPV4_HDR_LEN as u32 + tcp_len;
        let gso = offloads.csum && offloads.tso4 && payload_len > MSS;

        // virtio_net_hdr_v1: the ten bytes of `VnetHdr`, then num_buffers (0 on transmit).
        let (net, frame) = out.split_at_mut(HDR_LEN_MRG);
        let mut hdr = VnetHdr::default();
        if offloads.csum {
            hdr.flags = F_NEEDS_CSUM;
            hdr.csum_start = CSUM_START;
            hdr.csum_offset = CSUM_OFFSET;
        }
        hdr.gso_type = if gso {
            hdr.hdr_len = FRAME_HDRS_LEN as u16;
            hdr.gso_size = MSS as u16;
            GSO_TCPV4
        } else {
            GSO_NONE
        };
        net[..VnetHdr::LEN].copy_from_slice(&hdr.to_bytes());
        net[VnetHdr::LEN..].fill(0);

        let (eth, rest) = frame.split_at_mut(ETH_HDR_LEN);
        eth[0..6].copy_from_slice(&self.dst_mac);
        eth[6..12].copy_from_slice(&self.src_mac);
        eth[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());

        let (ip, tcp) = rest.split_at_mut(IPV4_HDR_LEN);
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&(ip_total as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&self.ip_id.to_be_bytes());
        ip[6..8].copy_from_slice(&IP_DF.to_be_bytes());
        ip[8] = TTL;
        ip[9] = IPPROTO_TCP;
        ip[10..12].fill(0);
        ip[12..16].copy_from_slice(&self.src_ip);
        ip[16..20].copy_from_slice(&self.dst_ip);
        let ip_sum = checksum(ip, 0);
        ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());

        tcp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        tcp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        tcp[4..8].copy_from_slice(&self.seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&self.ack.to_be_bytes());
        tcp[12] = ((TCP_HDR_LEN / 4) as u8) << 4;
        tcp[13] = TCP_ACK | TCP_PSH;
        tcp[14..16].copy_from_slice(&WINDOW.to_be_bytes());
        tcp[16..18].fill(0);
        tcp[18..20].fill(0); // urgent pointer
        tcp[20..24].copy_from_slice(&[1, 1, 8, 10]); // NOP NOP TS len 10
        tcp[24..28].copy_from_slice(&ts_val.to_be_bytes());
        tcp[28..32].copy_from_slice(&self.ts_ecr.to_be_bytes());

        let pseudo = pseudo_header_sum(self.src_ip, self.dst_ip, tcp_len);
        let field = if offloads.csum {
            fold(pseudo)
        } else {
            assert_eq!(
                payload.len(),
                payload_len as usize,
                "payload for the checksum"
            );
            let sum = checksum(payload, sum_words(tcp, pseudo));
            if sum == 0 {
                0xffff
            } else {
                sum
            }
        };
        tcp[16..18].copy_from_slice(&field.to_be_bytes());

        self.seq = self.seq.wrapping_add(payload_len);
        self.ip_id = self.ip_id.wrapping_add(payload_len.div_ceil(MSS) as u16);
        BUF_HDRS_LEN
    }
}

/// The unfolded ones'-complement sum of the IPv4 pseudo-header of a TCP segment of `tcp_len`
/// bytes (header + payload).
pub fn pseudo_header_sum(src: [u8; 4], dst: [u8; 4], tcp_len: u32) -> u64 {
    sum_words(&dst, sum_words(&src, 0)) + u64::from(IPPROTO_TCP) + u64::from(tcp_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [0x52, 0x54, 0, 0, 0, 1];
    const SINK: [u8; 6] = [0x02, 0, 0, 0, 0x5e, 0x01];
    const OFFLOADED: TxOffloads = TxOffloads {
        csum: true,
        tso4: true,
    };

    fn le16(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }
    fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Header bytes + payload, as the device sees the buffer.
    fn buffer(flow: &mut TcpFlow, payload: &[u8], off: TxOffloads) -> Vec<u8> {
        let mut b = vec![0xEE; BUF_HDRS_LEN];
        let n = flow.write_headers(&mut b, payload.len() as u32, payload, off, 1234);
        assert_eq!(n, BUF_HDRS_LEN);
        b.extend_from_slice(payload);
        b
    }

    /// What the host does with `NEEDS_CSUM`: sum from `csum_start` to the end (the field
    /// holds the pseudo-header sum) and store the complement; then verify the result the way
    /// a receiver does: pseudo-header + segment sums to 0xffff.
    fn complete_and_verify(frame: &mut [u8], src: [u8; 4], dst: [u8; 4]) {
        let l4 = usize::from(CSUM_START);
        let at = crate::ChecksumAt {
            start: CSUM_START,
            offset: CSUM_OFFSET,
        };
        assert!(crate::complete_partial_checksum(frame, at));
        let tcp_len = (frame.len() - l4) as u32;
        assert_eq!(
            fold(sum_words(
                &frame[l4..],
                pseudo_header_sum(src, dst, tcp_len)
            )),
            0xffff,
            "TCP checksum verifies"
        );
    }

    #[test]
    fn a_tso_segment_has_linux_headers() {
        let mut flow = TcpFlow::new(2, A, SINK);
        let seq0 = flow.seq;
        let payload: Vec<u8> = (0..TSO_SIZE_GOAL).map(|i| (i * 7) as u8).collect();
        let b = buffer(&mut flow, &payload, OFFLOADED);
        // virtio-net header.
        assert_eq!(b[0], 1, "NEEDS_CSUM");
        assert_eq!(b[1], 1, "GSO_TCPV4");
        assert_eq!(le16(&b, 2), 66, "hdr_len");
        assert_eq!(le16(&b, 4), 1448, "gso_size");
        assert_eq!(le16(&b, 6), 34, "csum_start");
        assert_eq!(le16(&b, 8), 16, "csum_offset");
        assert_eq!(le16(&b, 10), 0, "num_buffers");
        let f = &b[HDR_LEN_MRG..];
        // Ethernet.
        assert_eq!(&f[0..6], &SINK);
        assert_eq!(&f[6..12], &A);
        assert_eq!(be16(f, 12), 0x0800);
        // IPv4: full segment length, DF, TCP, addresses from the MACs, header checksum.
        let ip = &f[14..34];
        assert_eq!(ip[0], 0x45);
        assert_eq!(be16(ip, 2) as usize, 20 + 32 + TSO_SIZE_GOAL as usize);
        assert_eq!(be16(ip, 6), 0x4000);
        assert_eq!((ip[8], ip[9]), (64, 6));
        assert_eq!(&ip[12..16], &[10, 0, 0, 1]);
        assert_eq!(&ip[16..20], &[10, 0, 0x5e, 1]);
        assert_eq!(fold(sum_words(ip, 0)), 0xffff, "IPv4 header checksum");
        // TCP.
        let tcp = &f[34..66];
        assert_eq!(be16(tcp, 0), 40002);
        assert_eq!(be16(tcp, 2), 5201);
        assert_eq!(be32(tcp, 4), seq0);
        assert_eq!(tcp[12] >> 4, 8, "data offset: 32 bytes");
        assert_eq!(tcp[13], 0x18, "ACK + PSH");
        assert_eq!(be16(tcp, 14), WINDOW);
        assert_eq!(&tcp[20..24], &[1, 1, 8, 10]);
        assert_eq!(be32(tcp, 24), 1234, "TSval");
        // The checksum field holds the pseudo-header sum, as Linux leaves it.
        let tcp_len = 32 + TSO_SIZE_GOAL;
        assert_eq!(
            be16(tcp, 16),
            fold(pseudo_header_sum([10, 0, 0, 1], [10, 0, 0x5e, 1], tcp_len))
        );
        let mut frame = f.to_vec();
        complete_and_verify(&mut frame, [10, 0, 0, 1], [10, 0, 0x5e, 1]);
        // The flow advanced by the payload and by one IP id per wire frame.
        assert_eq!(flow.seq, seq0.wrapping_add(TSO_SIZE_GOAL));
        assert_eq!(be16(ip, 4).wrapping_add(45), flow.ip_id);
    }

    #[test]
    fn one_mss_or_less_goes_without_gso_but_with_a_partial_checksum() {
        let mut flow = TcpFlow::new(0, A, SINK);
        for len in [1u32, 64, MSS] {
            let payload = vec![0xA5; len as usize];
            let b = buffer(&mut flow, &payload, OFFLOADED);
            assert_eq!(b[0], 1, "NEEDS_CSUM");
            assert_eq!(b[1], 0, "GSO_NONE");
            assert_eq!((le16(&b, 2), le16(&b, 4)), (0, 0), "hdr_len, gso_size");
            assert_eq!((le16(&b, 6), le16(&b, 8)), (34, 16));
            let mut frame = b[HDR_LEN_MRG..].to_vec();
            assert_eq!(be16(&frame, 16) as u32, 52 + len, "IPv4 total length");
            complete_and_verify(&mut frame, flow.src_ip, flow.dst_ip);
        }
        let b = buffer(&mut flow, &vec![1; MSS as usize + 1], OFFLOADED);
        assert_eq!(b[1], 1, "one byte over the MSS is GSO");
    }

    #[test]
    fn sequence_numbers_follow_the_payload_and_wrap() {
        let mut flow = TcpFlow::new(1, A, SINK);
        flow.seq = u32::MAX - 100;
        let start = flow.seq;
        let mut expect = start;
        for len in [64u32, 1448, 65160, 7] {
            let b = buffer(&mut flow, &vec![0; len as usize], OFFLOADED);
            assert_eq!(be32(&b, HDR_LEN_MRG + 34 + 4), expect);
            expect = expect.wrapping_add(len);
        }
        assert_eq!(flow.seq, expect);
        assert!(flow.seq < start, "wrapped");
    }

    #[test]
    fn without_csum_the_checksum_is_complete() {
        let off = TxOffloads {
            csum: false,
            tso4: false,
        };
        assert_eq!(off.size_goal(), MSS);
        let mut flow = TcpFlow::new(3, A, SINK);
        let payload: Vec<u8> = (0..MSS).map(|i| (i * 13 + 5) as u8).collect();
        let b = buffer(&mut flow, &payload, off);
        assert!(b[..HDR_LEN_MRG].iter().all(|&x| x == 0), "plain header");
        let f = &b[HDR_LEN_MRG..];
        let tcp_len = (f.len() - 34) as u32;
        assert_eq!(
            fold(sum_words(
                &f[34..],
                pseudo_header_sum(flow.src_ip, flow.dst_ip, tcp_len)
            )),
            0xffff
        );
        assert_eq!(fold(sum_words(&f[14..34], 0)), 0xffff);
    }

    #[test]
    fn checksum_offload_without_tso_keeps_segments_to_one_mss() {
        let off = TxOffloads {
            csum: true,
            tso4: false,
        };
        assert_eq!(off.size_goal(), MSS);
        assert_eq!(OFFLOADED.size_goal(), 65160);
        assert_eq!((BUF_HDRS_LEN, FRAME_HDRS_LEN, MSS), (78, 66, 1448));
    }

    #[test]
    #[should_panic]
    fn more_than_the_size_goal_is_a_caller_bug() {
        let mut flow = TcpFlow::new(0, A, SINK);
        let mut b = [0u8; BUF_HDRS_LEN];
        flow.write_headers(&mut b, TSO_SIZE_GOAL + 1, &[], OFFLOADED, 0);
    }

    #[test]
    fn threads_get_distinct_flows() {
        let a = TcpFlow::new(0, A, SINK);
        let b = TcpFlow::new(1, A, SINK);
        assert_ne!(a.src_port, b.src_port);
        assert_ne!(a.seq, b.seq);
        assert_eq!(ip_for_mac(SINK), [10, 0, 0x5e, 1]);
    }
}
