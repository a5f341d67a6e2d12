//! virtio-net facts the data plane needs: feature bits, the offloads
//! negotiated, the frame sizes vadapt forwards, the control queue and the
//! config space. The bytes on the wire (MAC addresses, the virtio-net
//! header, Ethernet) are `vadapt_wire`'s.

use vadapt_wire::ethernet::ETH_HDR_LEN;
use vadapt_wire::vnet_hdr::{Offload, HDR_LEN_LEGACY, HDR_LEN_MRG};
use vadapt_wire::Mac;

/// `VIRTIO_NET_F_CSUM`: the device takes frames with partial checksums
/// (`VIRTIO_NET_HDR_F_NEEDS_CSUM`).
pub const VIRTIO_NET_F_CSUM: u64 = 1 << 0;
/// `VIRTIO_NET_F_GUEST_CSUM`: the driver takes frames with partial checksums.
pub const VIRTIO_NET_F_GUEST_CSUM: u64 = 1 << 1;
/// `VIRTIO_NET_F_CTRL_GUEST_OFFLOADS`: guest offloads switched through the
/// control queue.
pub const VIRTIO_NET_F_CTRL_GUEST_OFFLOADS: u64 = 1 << 2;
/// `VIRTIO_NET_F_MTU`: the config space's `mtu` field holds the device's
/// MTU, and the driver does not send bigger packets. Offered only by a
/// port that has an `mtu` ([`offered_features`]).
pub const VIRTIO_NET_F_MTU: u64 = 1 << 3;
/// `VIRTIO_NET_F_GUEST_TSO4`: the driver takes TCPv4 GSO frames.
pub const VIRTIO_NET_F_GUEST_TSO4: u64 = 1 << 7;
/// `VIRTIO_NET_F_GUEST_TSO6`: the driver takes TCPv6 GSO frames.
pub const VIRTIO_NET_F_GUEST_TSO6: u64 = 1 << 8;
/// `VIRTIO_NET_F_GUEST_ECN`: the driver takes GSO frames with ECN (CWR).
pub const VIRTIO_NET_F_GUEST_ECN: u64 = 1 << 9;
/// `VIRTIO_NET_F_HOST_TSO4`: the device takes TCPv4 GSO frames.
pub const VIRTIO_NET_F_HOST_TSO4: u64 = 1 << 11;
/// `VIRTIO_NET_F_HOST_TSO6`: the device takes TCPv6 GSO frames.
pub const VIRTIO_NET_F_HOST_TSO6: u64 = 1 << 12;
/// `VIRTIO_NET_F_HOST_ECN`: the device takes GSO frames with ECN (CWR).
pub const VIRTIO_NET_F_HOST_ECN: u64 = 1 << 13;
/// `VIRTIO_NET_F_MAC`: the device has a MAC address in its config space.
pub const VIRTIO_NET_F_MAC: u64 = 1 << 5;
/// `VIRTIO_NET_F_MRG_RXBUF`: the driver can merge receive buffers.
pub const VIRTIO_NET_F_MRG_RXBUF: u64 = 1 << 15;
/// `VIRTIO_NET_F_STATUS`: the config space has a link status field.
pub const VIRTIO_NET_F_STATUS: u64 = 1 << 16;
/// `VIRTIO_NET_F_CTRL_VQ`: a control virtqueue exists.
pub const VIRTIO_NET_F_CTRL_VQ: u64 = 1 << 17;
/// `VIRTIO_NET_F_GUEST_ANNOUNCE`: the guest announces itself (gratuitous
/// ARP, unsolicited neighbour advertisements) when the device asks, as
/// QEMU's virtio-net does after a live migration (it serves the control
/// queue and the config status itself), so the switch learns the guest's
/// MAC on its new port at once.
pub const VIRTIO_NET_F_GUEST_ANNOUNCE: u64 = 1 << 21;
/// `VIRTIO_NET_F_MQ`: multiqueue, steered through the control queue.
pub const VIRTIO_NET_F_MQ: u64 = 1 << 22;
/// `VIRTIO_NET_F_HASH_REPORT` (bit 57): the device reports each received
/// frame's hash in `virtio_net_hdr_v1_hash`. Not offered (the receive
/// header would grow by 8 bytes); the constant names what a
/// `VIRTIO_NET_CTRL_MQ_HASH_CONFIG` needs.
pub const VIRTIO_NET_F_HASH_REPORT: u64 = 1 << 57;
/// `VIRTIO_NET_F_RSS` (bit 60): the driver steers received frames with
/// its own Toeplitz key and indirection table
/// (`VIRTIO_NET_CTRL_MQ_RSS_CONFIG`, see `queue::rss`). Offered by a port
/// whose `rss` is on ([`offered_features`]).
pub const VIRTIO_NET_F_RSS: u64 = 1 << 60;
/// `VIRTIO_RING_F_INDIRECT_DESC`.
pub const VIRTIO_RING_F_INDIRECT_DESC: u64 = 1 << 28;
/// `VIRTIO_RING_F_EVENT_IDX`.
pub const VIRTIO_RING_F_EVENT_IDX: u64 = 1 << 29;
/// `VHOST_F_LOG_ALL` (bit 26): the frontend may ask the device to log
/// every page it writes into guest memory (live migration).
pub const VHOST_F_LOG_ALL: u64 = 1 << 26;

/// `VHOST_USER_F_PROTOCOL_FEATURES` (vhost-user only, bit 30).
pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// `VIRTIO_F_VERSION_1`.
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;
/// `VIRTIO_F_IN_ORDER`.
pub const VIRTIO_F_IN_ORDER: u64 = 1 << 35;
/// `VIRTIO_F_RING_PACKED` (bit 34): packed virtqueues.
pub const VIRTIO_F_RING_PACKED: u64 = 1 << 34;

/// Every device feature vadapt offers to every port (issue #2's list, and issue #15's
/// offloads). Host side: the transmit path checks each frame's partial
/// checksum or TCP segment. Guest side: a receiver that negotiated (and has
/// not turned off) `GUEST_CSUM`/`GUEST_TSO*` gets such frames whole, with
/// their header, as vhost-net with tap gives them; every other egress gets
/// them cut and checksummed in software (see [`crate::offload::egress`]).
pub const OFFERED_FEATURES: u64 = VIRTIO_F_VERSION_1
    | VIRTIO_NET_F_CSUM
    | VIRTIO_NET_F_HOST_TSO4
    | VIRTIO_NET_F_HOST_TSO6
    | VIRTIO_NET_F_HOST_ECN
    | VIRTIO_NET_F_GUEST_CSUM
    | VIRTIO_NET_F_GUEST_TSO4
    | VIRTIO_NET_F_GUEST_TSO6
    | VIRTIO_NET_F_GUEST_ECN
    | VIRTIO_NET_F_CTRL_GUEST_OFFLOADS
    | VIRTIO_NET_F_MAC
    | VIRTIO_NET_F_MRG_RXBUF
    | VIRTIO_RING_F_EVENT_IDX
    | VIRTIO_F_IN_ORDER
    | VIRTIO_RING_F_INDIRECT_DESC
    | VIRTIO_NET_F_STATUS
    | VIRTIO_NET_F_CTRL_VQ
    | VIRTIO_NET_F_MQ
    | VIRTIO_NET_F_GUEST_ANNOUNCE
    | VHOST_F_LOG_ALL
    | VHOST_USER_F_PROTOCOL_FEATURES;

/// The features a port with `mtu` offers: [`OFFERED_FEATURES`],
/// `VIRTIO_NET_F_MTU` if it has one, `VIRTIO_F_RING_PACKED` unless
/// `packed` is off, and `VIRTIO_NET_F_RSS` unless `rss` is off.
pub fn offered_features(mtu: Option<u16>, packed: bool, rss: bool) -> u64 {
    let mut f = OFFERED_FEATURES;
    if mtu.is_some() {
        f |= VIRTIO_NET_F_MTU;
    }
    if packed {
        f |= VIRTIO_F_RING_PACKED;
    }
    if rss {
        f |= VIRTIO_NET_F_RSS;
    }
    f
}

/// `VIRTIO_NET_S_LINK_UP` in the config space's status field.
pub const VIRTIO_NET_S_LINK_UP: u16 = 1;

/// The MTU of a port without an `mtu` of its own, bytes (Ethernet's).
pub const DEFAULT_MTU: u16 = 1500;

/// Bytes a frame has beyond its MTU's worth of packet: the Ethernet header
/// (14) and one VLAN tag (4). vadapt does not look for the tag: any frame
/// of up to MTU + 18 bytes is taken, one comparison a frame, as before
/// ports had an MTU (1518 for 1500).
pub const FRAME_OVERHEAD: usize = 18;

/// Largest frame (without virtio-net header, not GSO) a port of `mtu`
/// takes from its guest or delivers to it: `mtu` + [`FRAME_OVERHEAD`].
pub const fn max_frame(mtu: u16) -> usize {
    mtu as usize + FRAME_OVERHEAD
}

/// Largest Ethernet frame (without virtio-net header) of a port without
/// an `mtu`: a 1500-byte MTU plus Ethernet and VLAN headers. Such a port
/// does not offer `VIRTIO_NET_F_MTU`, so a well-behaved guest sends no
/// more but in GSO frames (see [`MAX_GSO_FRAME`]), which are cut for an
/// egress that does not take them whole.
pub const MAX_FRAME: usize = max_frame(DEFAULT_MTU);
/// Largest frame that is not a GSO frame vadapt carries at all: the
/// largest MTU a port may have ([`crate::config::MAX_MTU`]) plus
/// [`FRAME_OVERHEAD`]. The largest segment a GSO frame is cut into, too:
/// a guest with a 9000-byte MTU asks for segments of up to 9014 bytes.
pub const LARGEST_FRAME: usize = max_frame(crate::config::MAX_MTU);
/// Largest GSO frame a guest may transmit with `HOST_TSO*`: a 64 KiB IP
/// datagram behind Ethernet and a VLAN tag.
pub const MAX_GSO_FRAME: usize = 65_535 + 18;
/// Smallest frame: an Ethernet header.
pub const MIN_FRAME: usize = ETH_HDR_LEN;

/// Control queue classes and commands (virtio 1.2 §5.1.6.5).
pub mod ctrl {
    /// `VIRTIO_NET_CTRL_RX` class.
    pub const CLASS_RX: u8 = 0;
    /// `VIRTIO_NET_CTRL_MAC` class.
    pub const CLASS_MAC: u8 = 1;
    /// `VIRTIO_NET_CTRL_MQ` class.
    pub const CLASS_MQ: u8 = 4;
    /// `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`: a le16 of queue pairs in use.
    pub const MQ_VQ_PAIRS_SET: u8 = 0;
    /// `VIRTIO_NET_CTRL_MQ_RSS_CONFIG`: `struct virtio_net_rss_config`
    /// (virtio 1.2 §5.1.6.5.7.1).
    pub const MQ_RSS_CONFIG: u8 = 1;
    /// `VIRTIO_NET_CTRL_MQ_HASH_CONFIG`: `struct virtio_net_hash_config`
    /// (virtio 1.2 §5.1.6.5.6.4), with `VIRTIO_NET_F_HASH_REPORT` only.
    pub const MQ_HASH_CONFIG: u8 = 2;
    /// `VIRTIO_NET_CTRL_GUEST_OFFLOADS` class.
    pub const CLASS_GUEST_OFFLOADS: u8 = 5;
    /// `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET`: a le64 of `VIRTIO_NET_F_GUEST_*` bits.
    pub const GUEST_OFFLOADS_SET: u8 = 0;
    /// `VIRTIO_NET_OK`.
    pub const OK: u8 = 0;
    /// `VIRTIO_NET_ERR`.
    pub const ERR: u8 = 1;
}

/// Header length for the negotiated features.
pub fn hdr_len(features: u64) -> usize {
    if features & (VIRTIO_F_VERSION_1 | VIRTIO_NET_F_MRG_RXBUF) != 0 {
        HDR_LEN_MRG
    } else {
        HDR_LEN_LEGACY
    }
}

/// The host-side offloads a frontend negotiated: what its transmitted
/// frames' virtio-net headers may ask of vadapt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostOffloads {
    /// `VIRTIO_NET_F_CSUM`: partial checksums.
    pub csum: bool,
    /// `VIRTIO_NET_F_HOST_TSO4`: TCPv4 GSO frames.
    pub tso4: bool,
    /// `VIRTIO_NET_F_HOST_TSO6`: TCPv6 GSO frames.
    pub tso6: bool,
    /// `VIRTIO_NET_F_HOST_ECN`: GSO frames with `VIRTIO_NET_HDR_GSO_ECN`.
    pub ecn: bool,
}

impl HostOffloads {
    /// Every host-side offload: what a frontend that negotiated them all,
    /// or a TAP that took `TUNSETOFFLOAD`, may send.
    pub const ALL: HostOffloads = HostOffloads {
        csum: true,
        tso4: true,
        tso6: true,
        ecn: true,
    };

    /// The host-side offloads among negotiated `features`.
    pub fn from_features(features: u64) -> Self {
        HostOffloads {
            csum: features & VIRTIO_NET_F_CSUM != 0,
            tso4: features & VIRTIO_NET_F_HOST_TSO4 != 0,
            tso6: features & VIRTIO_NET_F_HOST_TSO6 != 0,
            ecn: features & VIRTIO_NET_F_HOST_ECN != 0,
        }
    }

    /// True if any was negotiated: transmitted headers must be read.
    pub fn any(&self) -> bool {
        self.csum || self.tso4 || self.tso6 || self.ecn
    }
}

/// The guest-side offloads among feature bits, as `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET`
/// names them (the feature bits themselves).
pub const GUEST_OFFLOAD_BITS: u64 = VIRTIO_NET_F_GUEST_CSUM
    | VIRTIO_NET_F_GUEST_TSO4
    | VIRTIO_NET_F_GUEST_TSO6
    | VIRTIO_NET_F_GUEST_ECN;

/// The guest-side offloads a receiver takes now: what it negotiated, less
/// what it turned off with `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuestOffloads {
    /// `VIRTIO_NET_F_GUEST_CSUM`: frames with a partial checksum.
    pub csum: bool,
    /// `VIRTIO_NET_F_GUEST_TSO4`: TCPv4 GSO frames.
    pub tso4: bool,
    /// `VIRTIO_NET_F_GUEST_TSO6`: TCPv6 GSO frames.
    pub tso6: bool,
    /// `VIRTIO_NET_F_GUEST_ECN`: GSO frames with `VIRTIO_NET_HDR_GSO_ECN`.
    pub ecn: bool,
}

impl GuestOffloads {
    /// The guest-side offloads among `bits` (feature bits).
    pub fn from_bits(bits: u64) -> Self {
        GuestOffloads {
            csum: bits & VIRTIO_NET_F_GUEST_CSUM != 0,
            tso4: bits & VIRTIO_NET_F_GUEST_TSO4 != 0,
            tso6: bits & VIRTIO_NET_F_GUEST_TSO6 != 0,
            ecn: bits & VIRTIO_NET_F_GUEST_ECN != 0,
        }
    }

    /// True if the receiver takes a frame that asks `offload` as it is.
    /// A GSO frame also needs `csum` (Linux's driver turns GSO off without
    /// it, and the segments' checksums are partial).
    pub fn takes(&self, offload: &Offload) -> bool {
        match offload {
            Offload::None => true,
            Offload::Checksum(_) => self.csum,
            Offload::Tcp(gso, _) => {
                self.csum && if gso.ipv6 { self.tso6 } else { self.tso4 } && (!gso.ecn || self.ecn)
            }
        }
    }
}

/// `rss_max_key_size` in the config space: bytes of the longest RSS key
/// taken (40, the usual NIC key and the spec's example).
pub const RSS_MAX_KEY_SIZE: u8 = 40;
/// `rss_max_indirection_table_length`: entries of the largest RSS
/// indirection table taken (128, a common NIC table; Linux's driver asks
/// for up to this).
pub const RSS_MAX_TABLE_LEN: u16 = 128;
/// `supported_hash_types`: every RSS hash type but the `_EX` ones (IPv6
/// extension headers' addresses, bits 6-8), which vadapt does not parse.
pub const RSS_SUPPORTED_HASH_TYPES: u32 = vadapt_wire::rss_config::HASH_ALL_BUT_EX;

/// Bytes of the config space vadapt fills ([`config_space`]).
pub const CONFIG_SPACE_LEN: usize = 24;

/// The virtio-net config space (`struct virtio_net_config`, virtio 1.2
/// §5.1.4, its first 24 bytes): mac (0), status (6), max_virtqueue_pairs
/// (8), mtu (10), speed (12, le32), duplex (16), rss_max_key_size (17),
/// rss_max_indirection_table_length (18, le16), supported_hash_types (20,
/// le32). `mtu` 0 (`None`) is what a device without `VIRTIO_NET_F_MTU`
/// reads there; speed and duplex say "unknown" (`VIRTIO_NET_F_SPEED_DUPLEX`
/// is not offered); the RSS fields are [`RSS_MAX_KEY_SIZE`],
/// [`RSS_MAX_TABLE_LEN`] and [`RSS_SUPPORTED_HASH_TYPES`], whether or not
/// the port offers `VIRTIO_NET_F_RSS` (a driver reads them only with it).
pub fn config_space(mac: Mac, max_pairs: u16, mtu: Option<u16>) -> [u8; CONFIG_SPACE_LEN] {
    let mut c = [0u8; CONFIG_SPACE_LEN];
    c[0..6].copy_from_slice(&mac.0);
    c[6..8].copy_from_slice(&VIRTIO_NET_S_LINK_UP.to_le_bytes());
    c[8..10].copy_from_slice(&max_pairs.to_le_bytes());
    c[10..12].copy_from_slice(&mtu.unwrap_or(0).to_le_bytes());
    c[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    c[16] = 0xff;
    c[17] = RSS_MAX_KEY_SIZE;
    c[18..20].copy_from_slice(&RSS_MAX_TABLE_LEN.to_le_bytes());
    c[20..24].copy_from_slice(&RSS_SUPPORTED_HASH_TYPES.to_le_bytes());
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_space_layout() {
        let c = config_space(Mac([1, 2, 3, 4, 5, 6]), 4, None);
        assert_eq!(&c[0..6], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(u16::from_le_bytes([c[6], c[7]]), VIRTIO_NET_S_LINK_UP);
        assert_eq!(u16::from_le_bytes([c[8], c[9]]), 4);
        assert_eq!(u16::from_le_bytes([c[10], c[11]]), 0, "no MTU offered");
        let c = config_space(Mac([1, 2, 3, 4, 5, 6]), 4, Some(9000));
        assert_eq!(u16::from_le_bytes([c[10], c[11]]), 9000);
        assert_eq!(c[17], 40, "rss_max_key_size");
        assert_eq!(u16::from_le_bytes([c[18], c[19]]), 128);
        assert_eq!(
            u32::from_le_bytes([c[20], c[21], c[22], c[23]]),
            0x3f,
            "IPv4, TCPv4, UDPv4, IPv6, TCPv6, UDPv6; no _EX types"
        );
    }

    #[test]
    fn f_mtu_is_offered_only_with_an_mtu() {
        assert_eq!(VIRTIO_NET_F_MTU, 1 << 3);
        assert_eq!(offered_features(None, false, false) & VIRTIO_NET_F_MTU, 0);
        assert_eq!(offered_features(None, false, false), OFFERED_FEATURES);
        assert_eq!(
            offered_features(None, true, false),
            OFFERED_FEATURES | VIRTIO_F_RING_PACKED
        );
        assert_eq!(
            offered_features(Some(9000), false, false),
            OFFERED_FEATURES | VIRTIO_NET_F_MTU
        );
        assert_eq!(
            offered_features(None, false, true),
            OFFERED_FEATURES | VIRTIO_NET_F_RSS
        );
        assert_eq!(OFFERED_FEATURES & VIRTIO_NET_F_HASH_REPORT, 0);
    }

    #[test]
    fn frame_limits_follow_the_mtu() {
        assert_eq!(MAX_FRAME, 1518, "as before ports had an MTU");
        assert_eq!(max_frame(9000), 9018);
        assert_eq!(LARGEST_FRAME, MAX_GSO_FRAME);
    }
}
