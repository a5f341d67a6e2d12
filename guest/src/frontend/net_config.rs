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
    /// `mtu` (0 if the backend's config space ends before it); meaningful
    /// only with `VIRTIO_NET_F_MTU` ([`NetConfig::mtu`]).
    pub mtu_field: u16,
}

impl NetConfig {
    /// Bytes of `virtio_net_config` the guest reads: up to and with `mtu`.
    pub const LEN: usize = 12;

    /// Parses the first 10 bytes of `virtio_net_config` (little-endian, as with VERSION_1),
    /// and `mtu` if the 2 after them are there.
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
            mtu_field: match b.get(10..12) {
                Some(m) => u16::from_le_bytes([m[0], m[1]]),
                None => 0,
            },
        })
    }

    /// The device's MTU, as Linux's driver takes it: the `mtu` field if
    /// `VIRTIO_NET_F_MTU` was negotiated (`f_mtu`) and the field is at
    /// least 68 (Linux refuses the feature below that), else `None`.
    pub fn mtu(&self, f_mtu: bool) -> Option<u16> {
        Some(self.mtu_field).filter(|&m| f_mtu && m >= 68)
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
        assert_eq!(c.mtu_field, 1500);
        assert_eq!(c.mtu(true), Some(1500));
        assert_eq!(
            c.mtu(false),
            None,
            "without VIRTIO_NET_F_MTU the field means nothing"
        );
        assert_eq!(NetConfig::parse(&b[..10]).unwrap().mtu(true), None);
        assert_eq!(NetConfig::parse(&b[..9]), None);
        let tiny = [2, 0, 0, 0, 0, 9, 1, 0, 4, 0, 20, 0];
        assert_eq!(NetConfig::parse(&tiny).unwrap().mtu(true), None);
    }
}
