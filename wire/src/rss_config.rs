//! The bytes of `struct virtio_net_rss_config` (virtio 1.2 §5.1.6.5.7.1),
//! the command data of `VIRTIO_NET_CTRL_MQ_RSS_CONFIG`, and the hash-type
//! bits it carries (§5.1.6.4.3.1): what a driver writes
//! ([`encode`], the synthetic guest's) and a device reads (vadapt's
//! `queue::rss`, which checks every field of it).
//!
//! ```text
//! le32 hash_types; le16 indirection_table_mask; le16 unclassified_queue;
//! le16 indirection_table[mask + 1]; le16 max_tx_vq;
//! u8 hash_key_length; u8 hash_key_data[hash_key_length];
//! ```

/// `VIRTIO_NET_RSS_HASH_TYPE_IPv4`: the addresses of an IPv4 frame.
pub const HASH_IPV4: u32 = 1 << 0;
/// `VIRTIO_NET_RSS_HASH_TYPE_TCPv4`: addresses and ports of IPv4 TCP.
pub const HASH_TCPV4: u32 = 1 << 1;
/// `VIRTIO_NET_RSS_HASH_TYPE_UDPv4`: addresses and ports of IPv4 UDP.
pub const HASH_UDPV4: u32 = 1 << 2;
/// `VIRTIO_NET_RSS_HASH_TYPE_IPv6`: the addresses of an IPv6 frame.
pub const HASH_IPV6: u32 = 1 << 3;
/// `VIRTIO_NET_RSS_HASH_TYPE_TCPv6`: addresses and ports of IPv6 TCP.
pub const HASH_TCPV6: u32 = 1 << 4;
/// `VIRTIO_NET_RSS_HASH_TYPE_UDPv6`: addresses and ports of IPv6 UDP.
pub const HASH_UDPV6: u32 = 1 << 5;
/// The six types without IPv6 extension headers (the `_EX` ones are bits
/// 6-8).
pub const HASH_ALL_BUT_EX: u32 =
    HASH_IPV4 | HASH_TCPV4 | HASH_UDPV4 | HASH_IPV6 | HASH_TCPV6 | HASH_UDPV6;

/// Bytes before the indirection table (`hash_types`, mask, unclassified).
pub const HEAD_LEN: usize = 8;

/// `struct virtio_net_rss_config` with `table` (its length less one is the
/// mask: a driver gives a power of two of entries), `unclassified` queue,
/// `max_tx_vq` and `key`. Lengths beyond the fields' range are cut (a
/// table of more than 65 536 entries, a key of more than 255 bytes): a
/// test that wants a hostile config writes its bytes itself.
pub fn encode(
    hash_types: u32,
    table: &[u16],
    unclassified: u16,
    max_tx_vq: u16,
    key: &[u8],
) -> Vec<u8> {
    let table = &table[..table.len().min(1 << 16)];
    let key = &key[..key.len().min(255)];
    let mut v = Vec::with_capacity(HEAD_LEN + 2 * table.len() + 3 + key.len());
    v.extend_from_slice(&hash_types.to_le_bytes());
    v.extend_from_slice(&(table.len().saturating_sub(1) as u16).to_le_bytes());
    v.extend_from_slice(&unclassified.to_le_bytes());
    for q in table {
        v.extend_from_slice(&q.to_le_bytes());
    }
    v.extend_from_slice(&max_tx_vq.to_le_bytes());
    v.push(key.len() as u8);
    v.extend_from_slice(key);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_specifications() {
        let v = encode(HASH_TCPV4 | HASH_IPV4, &[1, 0], 1, 2, &[0xaa, 0xbb]);
        assert_eq!(
            v,
            [3, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 2, 0, 2, 0xaa, 0xbb],
            "types, mask 1, unclassified 1, table [1, 0], max_tx_vq 2, key of 2"
        );
        assert_eq!(HASH_ALL_BUT_EX, 0x3f);
    }
}
