//! The device's answer to one control-queue command (virtio 1.2
//! §5.1.6.5): which commands a VM port takes, checked against what the
//! frontend negotiated and the port's pairs, and what each one changes.
//! The ring around the commands is [`super::ctrl_queue`]'s.
//!
//! | class, command | taken when | effect |
//! |---|---|---|
//! | `MQ` 4, `VQ_PAIRS_SET` 0 | `VIRTIO_NET_F_MQ`, 1..=max pairs | none: the rings a frontend enables (`SET_VRING_ENABLE`) stay what frames are spread over |
//! | `MQ` 4, `RSS_CONFIG` 1 | `VIRTIO_NET_F_RSS` and a config [`RssConfig::parse`] takes | the port's [`RssState`]: the guest's key, hash types and table steer its received frames |
//! | `MQ` 4, `HASH_CONFIG` 2 | `VIRTIO_NET_F_HASH_REPORT`, which vadapt does not offer: always refused | — |
//! | `GUEST_OFFLOADS` 5, `SET` 0 | `VIRTIO_NET_F_CTRL_GUEST_OFFLOADS` | [`GuestOffloadState::ctrl_command`] |
//!
//! Anything else is answered `VIRTIO_NET_ERR`. Every byte is the guest's:
//! a refusal is a value ([`CtrlRefused`]), never a panic, and leaves every
//! state as it was.

use super::guest_offloads::{GuestOffloadState, GuestOffloadsRefused};
use super::rss::{RssConfig, RssRefused, RssState};
use crate::net::{
    ctrl, VIRTIO_NET_F_CTRL_GUEST_OFFLOADS, VIRTIO_NET_F_HASH_REPORT, VIRTIO_NET_F_MQ,
    VIRTIO_NET_F_RSS,
};

/// Why a control command was answered `VIRTIO_NET_ERR`.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CtrlRefused {
    /// Not a command vadapt takes.
    #[error("unknown control command class {class} command {command}")]
    UnknownCommand {
        /// `virtio_net_ctrl_hdr.class`.
        class: u8,
        /// `virtio_net_ctrl_hdr.cmd`.
        command: u8,
    },
    /// A command whose feature the frontend did not negotiate.
    #[error("{command} without {feature} negotiated")]
    NotNegotiated {
        /// The command.
        command: &'static str,
        /// The feature it needs.
        feature: &'static str,
    },
    /// `VQ_PAIRS_SET`'s data is not one le16.
    #[error("VQ_PAIRS_SET carries {0} bytes, not 2")]
    PairsBadLength(usize),
    /// `VQ_PAIRS_SET` outside 1..=max pairs.
    #[error("VQ_PAIRS_SET {asked}: must be 1..={pairs}")]
    PairsOutOfRange {
        /// Pairs asked for.
        asked: u16,
        /// `max_virtqueue_pairs`.
        pairs: u16,
    },
    /// `GUEST_OFFLOADS_SET` refused.
    #[error("GUEST_OFFLOADS_SET refused")]
    GuestOffloads(#[source] GuestOffloadsRefused),
    /// `RSS_CONFIG` refused.
    #[error("RSS_CONFIG refused")]
    Rss(#[source] RssRefused),
}

/// What an accepted command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtrlAccepted {
    /// `VQ_PAIRS_SET`: the pairs the driver says it uses.
    VqPairs(u16),
    /// `GUEST_OFFLOADS_SET`: the offload bits now enabled.
    GuestOffloads(u64),
    /// `RSS_CONFIG`: the config now in force, as (hash types, table
    /// entries, key bytes).
    Rss {
        /// Hash types enabled.
        hash_types: u32,
        /// Indirection table entries.
        entries: usize,
        /// Key bytes.
        key_len: usize,
    },
}

/// What a command may look at and change: the port's state and what the
/// frontend negotiated.
#[derive(Debug, Clone, Copy)]
pub struct CtrlTarget<'a> {
    /// Features the frontend acked.
    pub features: u64,
    /// The port's queue pairs (`max_virtqueue_pairs`).
    pub pairs: u16,
    /// The port's guest-side offloads.
    pub offloads: &'a GuestOffloadState,
    /// The port's RSS config.
    pub rss: &'a RssState,
}

impl CtrlTarget<'_> {
    fn needs(
        &self,
        feature: u64,
        command: &'static str,
        name: &'static str,
    ) -> Result<(), CtrlRefused> {
        if self.features & feature == 0 {
            return Err(CtrlRefused::NotNegotiated {
                command,
                feature: name,
            });
        }
        Ok(())
    }

    /// Answers command (`class`, `command`) with its `data` (any length):
    /// applied and `Ok`, or refused with nothing changed.
    pub fn answer(&self, class: u8, command: u8, data: &[u8]) -> Result<CtrlAccepted, CtrlRefused> {
        match (class, command) {
            (ctrl::CLASS_MQ, ctrl::MQ_VQ_PAIRS_SET) => {
                self.needs(VIRTIO_NET_F_MQ, "VQ_PAIRS_SET", "VIRTIO_NET_F_MQ")?;
                let b = <[u8; 2]>::try_from(data)
                    .map_err(|_| CtrlRefused::PairsBadLength(data.len()))?;
                let asked = u16::from_le_bytes(b);
                if asked == 0 || asked > self.pairs {
                    return Err(CtrlRefused::PairsOutOfRange {
                        asked,
                        pairs: self.pairs,
                    });
                }
                Ok(CtrlAccepted::VqPairs(asked))
            }
            (ctrl::CLASS_MQ, ctrl::MQ_RSS_CONFIG) => {
                self.needs(VIRTIO_NET_F_RSS, "RSS_CONFIG", "VIRTIO_NET_F_RSS")?;
                let c = RssConfig::parse(data, self.pairs).map_err(CtrlRefused::Rss)?;
                let accepted = CtrlAccepted::Rss {
                    hash_types: c.hash_types,
                    entries: c.table.len(),
                    key_len: c.key.len(),
                };
                self.rss.set(Some(c));
                Ok(accepted)
            }
            (ctrl::CLASS_MQ, ctrl::MQ_HASH_CONFIG) => {
                self.needs(
                    VIRTIO_NET_F_HASH_REPORT,
                    "HASH_CONFIG",
                    "VIRTIO_NET_F_HASH_REPORT",
                )?;
                // Unreachable while HASH_REPORT is never offered (the
                // frontend cannot ack it); refused rather than half done.
                Err(CtrlRefused::UnknownCommand { class, command })
            }
            (ctrl::CLASS_GUEST_OFFLOADS, _) => {
                self.needs(
                    VIRTIO_NET_F_CTRL_GUEST_OFFLOADS,
                    "GUEST_OFFLOADS_SET",
                    "VIRTIO_NET_F_CTRL_GUEST_OFFLOADS",
                )?;
                match self.offloads.ctrl_command(class, command, data) {
                    (_, Some(GuestOffloadsRefused::UnknownCommand { class, command })) => {
                        Err(CtrlRefused::UnknownCommand { class, command })
                    }
                    (_, Some(e)) => Err(CtrlRefused::GuestOffloads(e)),
                    (_, None) => Ok(CtrlAccepted::GuestOffloads(u64::from_le_bytes(
                        <[u8; 8]>::try_from(data).unwrap_or_default(),
                    ))),
                }
            }
            _ => Err(CtrlRefused::UnknownCommand { class, command }),
        }
    }

    /// [`CtrlTarget::answer`] as the status byte the guest reads
    /// ([`ctrl::OK`] or [`ctrl::ERR`]), with the outcome.
    pub fn status(
        &self,
        class: u8,
        command: u8,
        data: &[u8],
    ) -> (u8, Result<CtrlAccepted, CtrlRefused>) {
        let r = self.answer(class, command, data);
        (if r.is_ok() { ctrl::OK } else { ctrl::ERR }, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4};
    use crate::queue::rss::{encode, SUPPORTED_HASH_TYPES};

    const ALL: u64 = VIRTIO_NET_F_MQ
        | VIRTIO_NET_F_RSS
        | VIRTIO_NET_F_CTRL_GUEST_OFFLOADS
        | VIRTIO_NET_F_GUEST_CSUM
        | VIRTIO_NET_F_GUEST_TSO4;

    fn with<R>(
        features: u64,
        f: impl FnOnce(CtrlTarget<'_>, &GuestOffloadState, &RssState) -> R,
    ) -> R {
        let offloads = GuestOffloadState::default();
        offloads.negotiate(features);
        let rss = RssState::default();
        let t = CtrlTarget {
            features,
            pairs: 4,
            offloads: &offloads,
            rss: &rss,
        };
        f(t, &offloads, &rss)
    }

    #[test]
    fn vq_pairs_set_is_checked_against_the_pairs() {
        with(ALL, |t, _, _| {
            assert_eq!(
                t.answer(4, 0, &4u16.to_le_bytes()),
                Ok(CtrlAccepted::VqPairs(4))
            );
            assert_eq!(
                t.answer(4, 0, &1u16.to_le_bytes()),
                Ok(CtrlAccepted::VqPairs(1))
            );
            for bad in [0u16, 5, u16::MAX] {
                assert_eq!(
                    t.answer(4, 0, &bad.to_le_bytes()),
                    Err(CtrlRefused::PairsOutOfRange {
                        asked: bad,
                        pairs: 4
                    })
                );
            }
            assert_eq!(t.answer(4, 0, &[1]), Err(CtrlRefused::PairsBadLength(1)));
            assert_eq!(
                t.answer(4, 0, &[1, 0, 0]),
                Err(CtrlRefused::PairsBadLength(3))
            );
        });
        with(0, |t, _, _| {
            assert!(matches!(
                t.answer(4, 0, &1u16.to_le_bytes()),
                Err(CtrlRefused::NotNegotiated { .. })
            ));
        });
    }

    #[test]
    fn rss_config_is_applied_and_a_refused_one_leaves_the_last_in_force() {
        with(ALL, |t, _, rss| {
            let key = [0x11u8; 40];
            let good = encode(SUPPORTED_HASH_TYPES, &[3, 2, 1, 0], 1, 4, &key);
            assert_eq!(t.status(4, 1, &good).0, ctrl::OK);
            let before = rss.get().expect("in force");
            assert_eq!(before.table, vec![3, 2, 1, 0]);
            let bad = encode(SUPPORTED_HASH_TYPES, &[0, 1, 2], 1, 4, &key);
            let (status, r) = t.status(4, 1, &bad);
            assert_eq!(status, ctrl::ERR);
            assert!(matches!(
                r,
                Err(CtrlRefused::Rss(RssRefused::TableNotPowerOfTwo(3)))
            ));
            assert_eq!(
                rss.get(),
                Some(before),
                "the refused config changed nothing"
            );
        });
        with(ALL & !VIRTIO_NET_F_RSS, |t, _, rss| {
            let good = encode(1, &[0], 0, 1, &[]);
            assert!(matches!(
                t.answer(4, 1, &good),
                Err(CtrlRefused::NotNegotiated { .. })
            ));
            assert!(rss.get().is_none());
        });
    }

    #[test]
    fn guest_offloads_go_through_their_own_answer_and_the_rest_is_refused() {
        with(ALL, |t, offloads, _| {
            assert_eq!(
                t.answer(5, 0, &VIRTIO_NET_F_GUEST_CSUM.to_le_bytes()),
                Ok(CtrlAccepted::GuestOffloads(VIRTIO_NET_F_GUEST_CSUM))
            );
            assert!(!offloads.accepted().tso4);
            assert!(matches!(
                t.answer(5, 0, &(1u64 << 40).to_le_bytes()),
                Err(CtrlRefused::GuestOffloads(_))
            ));
            assert_eq!(
                t.answer(5, 1, &[0; 8]),
                Err(CtrlRefused::UnknownCommand {
                    class: 5,
                    command: 1
                })
            );
            assert!(matches!(
                t.answer(4, 2, &[0; 20]),
                Err(CtrlRefused::NotNegotiated { .. })
            ));
            for (class, command) in [(0, 0), (1, 1), (3, 0), (4, 3), (6, 0), (255, 255)] {
                assert_eq!(
                    t.status(class, command, &[]).0,
                    ctrl::ERR,
                    "class {class} command {command}"
                );
            }
        });
    }

    proptest::proptest! {
        /// Any command bytes get an answer, never a panic; a refusal
        /// changes neither the offloads nor the RSS config.
        #[test]
        fn arbitrary_commands_never_panic(class in 0u8..8, command in 0u8..4,
                                          data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            with(ALL, |t, offloads, rss| {
                let (before_o, before_r) = (offloads.accepted(), rss.get());
                let (status, r) = t.status(class, command, &data);
                proptest::prop_assert_eq!(status == ctrl::OK, r.is_ok());
                if r.is_err() {
                    proptest::prop_assert_eq!(offloads.accepted(), before_o);
                    proptest::prop_assert_eq!(rss.get(), before_r);
                }
                Ok(())
            })?;
        }
    }
}
