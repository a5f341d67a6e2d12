//! The Ethernet header: its length and the EtherTypes vadapt reads.
//!
//! An Ethernet II header is the destination MAC, the source MAC (see
//! [`crate::mac::Mac::dst_of`] and [`crate::mac::Mac::src_of`]) and a
//! big-endian EtherType; an 802.1Q or 802.1ad tag puts four more bytes
//! before the EtherType of the payload.

/// Length of an Ethernet header without a VLAN tag, bytes.
pub const ETH_HDR_LEN: usize = 14;
/// Length of an Ethernet header with one VLAN tag, bytes.
pub const ETH_VLAN_HDR_LEN: usize = ETH_HDR_LEN + 4;
/// Offset of the EtherType in an untagged header, bytes.
pub const ETHERTYPE_OFFSET: usize = 12;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ) service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// IEEE 802 local experimental EtherType 1: no protocol's, so never
/// mistaken for IP (the synthetic guest's frames, and test frames).
pub const ETHERTYPE_EXPERIMENTAL: u16 = 0x88b5;

/// The EtherType at `at` in `frame`, if the frame is long enough.
pub fn ethertype_at(frame: &[u8], at: usize) -> Option<u16> {
    frame
        .get(at..at.checked_add(2)?)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethertypes_are_read_big_endian_and_bounded() {
        let mut f = [0u8; ETH_VLAN_HDR_LEN];
        f[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        f[16..18].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        assert_eq!(ethertype_at(&f, ETHERTYPE_OFFSET), Some(0x8100));
        assert_eq!(ethertype_at(&f, 16), Some(0x86dd));
        assert_eq!(ethertype_at(&f, 17), None);
        assert_eq!(ethertype_at(&f, usize::MAX), None);
    }
}
