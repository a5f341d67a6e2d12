//! The device config space the guest reads (`virtio_net_config`).

/// Device config space fields the guest reads (`virtio_net_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NetConfig {
    /// `mac`.
    pub mac: [u8; 6],
    /// `status`.
    pub status: u16,
    /// `max_virtqueue_pairs`.
    pub max_virtqueue_pairs: u16,
}

impl NetConfig {
    /// Parses the first 10 bytes of `virtio_net_config` (little-endian, as with VERSION_1).
    pub fn parse(b: &[u8]) -> Option<NetConfig> {
        if b.len() < 10 {
            return None;
        }
        let mut mac = [0; 6];
        mac.copy_from_slice(&b[..6]);
        Some(NetConfig {
            mac,
            status: u16::from_le_bytes([b[6], b[7]]),
            max_virtqueue_pairs: u16::from_le_bytes([b[8], b[9]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_net_config() {
        let b = [2, 0, 0, 0, 0, 9, 1, 0, 4, 0, 0xdc, 5];
        let c = NetConfig::parse(&b).unwrap();
        assert_eq!(c.mac, [2, 0, 0, 0, 0, 9]);
        assert_eq!(c.status, 1);
        assert_eq!(c.max_virtqueue_pairs, 4);
        assert_eq!(NetConfig::parse(&b[..9]), None);
    }
}
