//! The RARP frame that announces a VM's MAC after a live migration, on
//! behalf of a guest that cannot announce itself (vhost-user `SEND_RARP`).
//!
//! It is the frame QEMU's own announcement sends (RFC 903 "request
//! reverse", operation 3): broadcast, from the VM's MAC, with the VM's MAC
//! as sender and target hardware address and no protocol addresses. Its
//! only purpose is its source MAC: every learning switch on the way moves
//! the address to the port it arrived on.

use crate::ethernet::ETH_HDR_LEN;
use crate::mac::Mac;

/// EtherType of RARP.
pub const ETHERTYPE_RARP: u16 = 0x8035;
/// The announcement's length: the Ethernet minimum without the FCS.
pub const RARP_FRAME_LEN: usize = 60;

/// The RARP announcement of `mac` (see the module documentation).
pub fn rarp_announcement(mac: Mac) -> [u8; RARP_FRAME_LEN] {
    let mut f = [0u8; RARP_FRAME_LEN];
    f[0..6].copy_from_slice(&Mac::BROADCAST.0);
    f[6..12].copy_from_slice(&mac.0);
    f[12..14].copy_from_slice(&ETHERTYPE_RARP.to_be_bytes());
    let arp = &mut f[ETH_HDR_LEN..];
    arp[0..2].copy_from_slice(&1u16.to_be_bytes()); // hardware: Ethernet
    arp[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // protocol: IPv4
    arp[4] = 6; // hardware address length
    arp[5] = 4; // protocol address length
    arp[6..8].copy_from_slice(&3u16.to_be_bytes()); // request reverse
    arp[8..14].copy_from_slice(&mac.0); // sender hardware address
    arp[18..24].copy_from_slice(&mac.0); // target hardware address
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announcement_is_a_broadcast_rarp_request_from_the_mac() {
        let mac: Mac = "52:54:00:12:34:56".parse().unwrap();
        let f = rarp_announcement(mac);
        assert_eq!(Mac::dst_of(&f), Some(Mac::BROADCAST));
        assert_eq!(Mac::src_of(&f), Some(mac));
        assert_eq!(crate::ethernet::ethertype_at(&f, 12), Some(ETHERTYPE_RARP));
        // htype 1, ptype IPv4, hlen 6, plen 4, op 3 (request reverse).
        assert_eq!(&f[14..22], &[0, 1, 8, 0, 6, 4, 0, 3]);
        assert_eq!(&f[22..28], &mac.0, "sender hardware address");
        assert_eq!(&f[28..32], &[0; 4], "no sender protocol address");
        assert_eq!(&f[32..38], &mac.0, "target hardware address");
        assert!(f[38..].iter().all(|&b| b == 0), "target IP and padding");
    }
}
