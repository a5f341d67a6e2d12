//! Which virtio-net features the guest acknowledges, as a Linux driver behind QEMU does,
//! and the transmit offloads they give.

use virtio_bindings::virtio_config::{VIRTIO_F_IN_ORDER, VIRTIO_F_VERSION_1};
use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_CTRL_VQ, VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_MAC,
    VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF, VIRTIO_NET_F_MTU, VIRTIO_NET_F_STATUS,
};
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

use crate::config::Mode;
use vadapt_wire::tcp_build::TxOffloads;

/// `VHOST_USER_F_PROTOCOL_FEATURES`: the backend speaks protocol-feature negotiation.
pub(super) const VHOST_USER_F_PROTOCOL_FEATURES: u32 = 30;
/// `VHOST_F_LOG_ALL`: the device logs its writes to guest memory (`--dirty-log`).
pub(super) const VHOST_F_LOG_ALL: u32 = 26;

/// The feature bits a Linux virtio-net driver (behind QEMU) acknowledges when offered, for
/// what this guest uses in `mode`: raw frames need no checksum or segmentation offloads (they
/// are not IP, and would only change the header the guest writes); TCP stream
/// ([`Mode::TcpStream`]) also takes `VIRTIO_NET_F_CSUM` and `VIRTIO_NET_F_HOST_TSO4`, as a
/// Linux guest's TCP does.
pub fn wanted_features(mode: Mode) -> u64 {
    let offloads = if mode == Mode::TcpStream {
        (1u64 << VIRTIO_NET_F_CSUM) | (1u64 << VIRTIO_NET_F_HOST_TSO4)
    } else {
        0
    };
    offloads
        | [
            VIRTIO_F_VERSION_1,
            VIRTIO_NET_F_MAC,
            VIRTIO_NET_F_MTU,
            VIRTIO_NET_F_MRG_RXBUF,
            VIRTIO_RING_F_EVENT_IDX,
            VIRTIO_F_IN_ORDER,
            VIRTIO_RING_F_INDIRECT_DESC,
            VIRTIO_NET_F_STATUS,
            VIRTIO_NET_F_MQ,
            VIRTIO_NET_F_CTRL_VQ,
            VHOST_USER_F_PROTOCOL_FEATURES,
        ]
        .iter()
        .fold(0u64, |acc, bit| acc | (1u64 << bit))
}

/// Which offered features to acknowledge in `mode`: the wanted ones, with `MQ` only together
/// with `CTRL_VQ` and `HOST_TSO4` only together with `CSUM` (the spec makes each depend on the
/// other, and Linux drops them otherwise).
pub fn negotiate_features(offered: u64, mode: Mode) -> u64 {
    let mut acked = offered & wanted_features(mode);
    let has = |f: u64, bit: u32| f & (1u64 << bit) != 0;
    if has(acked, VIRTIO_NET_F_MQ) && !has(acked, VIRTIO_NET_F_CTRL_VQ) {
        acked &= !(1u64 << VIRTIO_NET_F_MQ);
    }
    if has(acked, VIRTIO_NET_F_HOST_TSO4) && !has(acked, VIRTIO_NET_F_CSUM) {
        acked &= !(1u64 << VIRTIO_NET_F_HOST_TSO4);
    }
    acked
}

/// The transmit offloads among acknowledged `features`, for TCP-stream segments.
pub fn tx_offloads(features: u64) -> TxOffloads {
    TxOffloads {
        csum: has_feature(features, VIRTIO_NET_F_CSUM),
        tso4: has_feature(features, VIRTIO_NET_F_CSUM)
            && has_feature(features, VIRTIO_NET_F_HOST_TSO4),
    }
}

/// `true` if `bit` is set in `features`.
pub fn has_feature(features: u64, bit: u32) -> bool {
    features & (1u64 << bit) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_only_wanted_and_mq_with_ctrl_vq() {
        let all = u64::MAX;
        let acked = negotiate_features(all, Mode::Stream);
        assert_eq!(acked, wanted_features(Mode::Stream));
        assert!(has_feature(acked, VIRTIO_NET_F_MQ));
        let no_ctrl = all & !(1 << VIRTIO_NET_F_CTRL_VQ);
        assert!(!has_feature(
            negotiate_features(no_ctrl, Mode::Stream),
            VIRTIO_NET_F_MQ
        ));
        // Raw frames never acknowledge offloads.
        assert!(!has_feature(
            acked,
            virtio_bindings::virtio_net::VIRTIO_NET_F_CSUM
        ));
        assert!(!has_feature(
            acked,
            virtio_bindings::virtio_net::VIRTIO_NET_F_GUEST_TSO4
        ));
    }

    #[test]
    fn tcp_stream_acks_csum_and_tso4_together_only() {
        let all = u64::MAX;
        let acked = negotiate_features(all, Mode::TcpStream);
        assert!(has_feature(acked, VIRTIO_NET_F_CSUM));
        assert!(has_feature(acked, VIRTIO_NET_F_HOST_TSO4));
        assert_eq!(
            tx_offloads(acked),
            TxOffloads {
                csum: true,
                tso4: true
            }
        );
        // No other offload.
        assert!(!has_feature(
            acked,
            virtio_bindings::virtio_net::VIRTIO_NET_F_HOST_TSO6
        ));
        let no_csum = negotiate_features(all & !(1 << VIRTIO_NET_F_CSUM), Mode::TcpStream);
        assert!(!has_feature(no_csum, VIRTIO_NET_F_HOST_TSO4));
        assert_eq!(
            tx_offloads(no_csum),
            TxOffloads {
                csum: false,
                tso4: false
            }
        );
        let no_tso = negotiate_features(all & !(1 << VIRTIO_NET_F_HOST_TSO4), Mode::TcpStream);
        assert_eq!(
            tx_offloads(no_tso),
            TxOffloads {
                csum: true,
                tso4: false
            }
        );
    }
}
