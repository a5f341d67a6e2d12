//! Receive-side scaling as the guest asks for it (`VIRTIO_NET_F_RSS`):
//! the Toeplitz key, the hash types and the indirection table its driver
//! sets with `VIRTIO_NET_CTRL_MQ_RSS_CONFIG` (virtio 1.2 §5.1.6.5.7), and
//! the receive queue they give a frame ([`RssConfig::queue_of`]).
//!
//! The device's rule (§5.1.6.5.7.2): hash the frame over the first type the
//! driver enabled that fits it (TCP or UDP ports with addresses, else the
//! addresses alone, §5.1.6.4.3), take entry `hash & indirection_table_mask`
//! of the table; a frame no enabled type covers goes to
//! `unclassified_queue`. The hash is [`vadapt_wire::toeplitz`], the same
//! function as vadapt's default steering, with the guest's key.
//!
//! The `_EX` types (IPv6 extension headers' addresses) are not supported:
//! [`SUPPORTED_HASH_TYPES`] does not have them, and a config that asks for
//! them is refused.
//!
//! The config is the port's ([`RssState`]): the control queue service
//! writes it, [`crate::port::VmPort`]'s `deliver` reads it once per batch,
//! a device reset or a new feature negotiation clears it. A refused command
//! leaves the config in force as it was.

use std::sync::{Arc, RwLock};
use vadapt_wire::toeplitz::{toeplitz, RssInput, RssL4};

pub use vadapt_wire::rss_config::{
    encode, HASH_IPV4, HASH_IPV6, HASH_TCPV4, HASH_TCPV6, HASH_UDPV4, HASH_UDPV6,
};

pub use crate::net::RSS_SUPPORTED_HASH_TYPES as SUPPORTED_HASH_TYPES;
pub use crate::net::{RSS_MAX_KEY_SIZE as MAX_KEY_SIZE, RSS_MAX_TABLE_LEN as MAX_TABLE_LEN};

/// Why a `VIRTIO_NET_CTRL_MQ_RSS_CONFIG` was refused (`VIRTIO_NET_ERR`).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum RssRefused {
    /// The data ends before a field, or goes on after the key.
    #[error("RSS_CONFIG carries {len} bytes, {expected}")]
    BadLength {
        /// Bytes the command carried.
        len: usize,
        /// What the fields read so far call for.
        expected: &'static str,
    },
    /// `indirection_table_mask + 1` is not a power of two.
    #[error("indirection table of {0} entries: not a power of two")]
    TableNotPowerOfTwo(u32),
    /// More entries than `rss_max_indirection_table_length`.
    #[error("indirection table of {0} entries: more than {MAX_TABLE_LEN}")]
    TableTooLong(u32),
    /// A key longer than `rss_max_key_size`.
    #[error("hash key of {0} bytes: longer than {MAX_KEY_SIZE}")]
    KeyTooLong(u8),
    /// Hash types the device did not advertise.
    #[error("hash types {0:#x} are not supported")]
    UnsupportedHashTypes(u32),
    /// A table entry or the unclassified queue beyond the port's pairs.
    #[error("receive queue {queue} named, the port has {pairs} pairs")]
    QueueBeyondPairs {
        /// The queue named.
        queue: u16,
        /// The port's queue pairs (`max_virtqueue_pairs`).
        pairs: u16,
    },
    /// `max_tx_vq` 0 or beyond the port's pairs.
    #[error("max_tx_vq {max_tx_vq}: must be 1..={pairs}")]
    BadMaxTxVq {
        /// The field.
        max_tx_vq: u16,
        /// The port's queue pairs.
        pairs: u16,
    },
}

/// The guest's RSS config, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RssConfig {
    /// `hash_types`: a subset of [`SUPPORTED_HASH_TYPES`].
    pub hash_types: u32,
    /// The Toeplitz key, at most [`MAX_KEY_SIZE`] bytes (a key shorter than
    /// 4 bytes hashes everything to 0, as [`toeplitz`] does).
    pub key: Vec<u8>,
    /// The indirection table: receive queue numbers (0 = receiveq1), a
    /// power of two of them, at most [`MAX_TABLE_LEN`].
    pub table: Vec<u16>,
    /// Receive queue of frames no enabled hash type covers.
    pub unclassified_queue: u16,
    /// `max_tx_vq`: transmit queues the driver uses.
    pub max_tx_vq: u16,
}

/// Little-endian reader over a command's data; every read is bounded.
struct Fields<'a> {
    data: &'a [u8],
    at: usize,
}

impl Fields<'_> {
    fn take(&mut self, n: usize, expected: &'static str) -> Result<&[u8], RssRefused> {
        let bad = RssRefused::BadLength {
            len: self.data.len(),
            expected,
        };
        let end = self.at.checked_add(n).ok_or(bad)?;
        let b = self.data.get(self.at..end).ok_or(bad)?;
        self.at = end;
        Ok(b)
    }

    fn u16(&mut self, expected: &'static str) -> Result<u16, RssRefused> {
        let b = self.take(2, expected)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
}

impl RssConfig {
    /// Parses and checks `struct virtio_net_rss_config` (`data`, the
    /// command's bytes after its header; any length, guest-controlled) for
    /// a port of `pairs` queue pairs. Work is bounded by `data.len()`.
    pub fn parse(data: &[u8], pairs: u16) -> Result<RssConfig, RssRefused> {
        let mut f = Fields { data, at: 0 };
        let t = f.take(4, "fewer than the 10 bytes before the table")?;
        let hash_types = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        let mask = f.u16("fewer than the 10 bytes before the table")?;
        let unclassified_queue = f.u16("fewer than the 10 bytes before the table")?;
        let entries = u32::from(mask) + 1;
        if !entries.is_power_of_two() {
            return Err(RssRefused::TableNotPowerOfTwo(entries));
        }
        if entries > u32::from(MAX_TABLE_LEN) {
            return Err(RssRefused::TableTooLong(entries));
        }
        let raw = f.take(2 * entries as usize, "shorter than its table")?;
        let table: Vec<u16> = raw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let max_tx_vq = f.u16("without max_tx_vq and the key length")?;
        let key_len = f.take(1, "without the key length")?[0];
        if key_len > MAX_KEY_SIZE {
            return Err(RssRefused::KeyTooLong(key_len));
        }
        let key = f
            .take(usize::from(key_len), "shorter than its key")?
            .to_vec();
        if f.at != data.len() {
            return Err(RssRefused::BadLength {
                len: data.len(),
                expected: "more than its key",
            });
        }
        let extra = hash_types & !SUPPORTED_HASH_TYPES;
        if extra != 0 {
            return Err(RssRefused::UnsupportedHashTypes(extra));
        }
        if let Some(&queue) = table
            .iter()
            .chain([&unclassified_queue])
            .find(|&&q| q >= pairs)
        {
            return Err(RssRefused::QueueBeyondPairs { queue, pairs });
        }
        if max_tx_vq == 0 || max_tx_vq > pairs {
            return Err(RssRefused::BadMaxTxVq { max_tx_vq, pairs });
        }
        Ok(RssConfig {
            hash_types,
            key,
            table,
            unclassified_queue,
            max_tx_vq,
        })
    }

    /// The hash of `frame` by the first enabled type that covers it (TCP
    /// or UDP with ports, else the addresses), `None` if none does.
    pub fn hash(&self, frame: &[u8]) -> Option<u32> {
        let input = RssInput::of_frame(frame)?;
        let (ip, tcp, udp) = if input.is_ipv6() {
            (HASH_IPV6, HASH_TCPV6, HASH_UDPV6)
        } else {
            (HASH_IPV4, HASH_TCPV4, HASH_UDPV4)
        };
        let with_ports = match input.l4() {
            Some(RssL4::Tcp) => self.hash_types & tcp != 0,
            Some(RssL4::Udp) => self.hash_types & udp != 0,
            None => false,
        };
        if with_ports {
            Some(toeplitz(&self.key, input.as_bytes()))
        } else if self.hash_types & ip != 0 {
            Some(toeplitz(&self.key, input.addresses()))
        } else {
            None
        }
    }

    /// The receive queue of `frame`: `table[hash & mask]`, or the
    /// unclassified queue for a frame no enabled type covers.
    pub fn queue_of(&self, frame: &[u8]) -> u16 {
        match self.hash(frame) {
            // `table.len()` is a power of two (checked by `parse`).
            Some(h) => self.table[h as usize & (self.table.len() - 1)],
            None => self.unclassified_queue,
        }
    }
}

/// A port's RSS config in force: `None` until the guest sets one (and
/// after a reset), then the last one accepted.
#[derive(Debug, Default)]
pub struct RssState {
    config: RwLock<Option<Arc<RssConfig>>>,
}

impl RssState {
    /// The config in force (one uncontended read lock and a reference
    /// count: once per delivered batch).
    pub fn get(&self) -> Option<Arc<RssConfig>> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `config` in force (`None`: back to the default steering).
    pub fn set(&self, config: Option<RssConfig>) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config.map(Arc::new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_wire::toeplitz::DEFAULT_KEY;

    /// An IPv4 frame of protocol `proto` with the given addresses and ports.
    fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = proto;
        f[14 + 12..14 + 16].copy_from_slice(&src);
        f[14 + 16..14 + 20].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    fn table(n: usize, pairs: u16) -> Vec<u16> {
        (0..n).map(|i| (i % usize::from(pairs)) as u16).collect()
    }

    #[test]
    fn a_config_parses_and_steers_by_the_specifications_vectors() {
        let t = table(128, 4);
        let c = RssConfig::parse(&encode(SUPPORTED_HASH_TYPES, &t, 3, 4, &DEFAULT_KEY), 4).unwrap();
        assert_eq!(
            (c.table.len(), c.unclassified_queue, c.max_tx_vq),
            (128, 3, 4)
        );
        // The RSS specification's first IPv4 row: 0x51ccc178 with TCP
        // ports, 0x323e8fc2 over the addresses.
        let tcp = ipv4(6, [66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766);
        assert_eq!(c.hash(&tcp), Some(0x51cc_c178));
        assert_eq!(c.queue_of(&tcp), t[0x51cc_c178 & 127]);
        let only_ip = RssConfig {
            hash_types: HASH_IPV4,
            ..c.clone()
        };
        assert_eq!(only_ip.hash(&tcp), Some(0x323e_8fc2), "TCPv4 not enabled");
        let only_udp = RssConfig {
            hash_types: HASH_UDPV4,
            ..c.clone()
        };
        assert_eq!(only_udp.hash(&tcp), None);
        assert_eq!(only_udp.queue_of(&tcp), 3, "unclassified");
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(c.queue_of(&arp), 3, "not IP: unclassified");
    }

    #[test]
    fn hostile_configs_are_refused() {
        let key = DEFAULT_KEY;
        let ok = encode(SUPPORTED_HASH_TYPES, &table(8, 2), 0, 2, &key);
        assert!(RssConfig::parse(&ok, 2).is_ok());
        for cut in 0..ok.len() {
            assert!(
                matches!(
                    RssConfig::parse(&ok[..cut], 2),
                    Err(RssRefused::BadLength { .. })
                ),
                "{cut} bytes"
            );
        }
        let mut long = ok.clone();
        long.push(0);
        assert!(matches!(
            RssConfig::parse(&long, 2),
            Err(RssRefused::BadLength { .. })
        ));
        let three = encode(1, &[0, 1, 0], 0, 2, &key);
        assert_eq!(
            RssConfig::parse(&three, 2),
            Err(RssRefused::TableNotPowerOfTwo(3))
        );
        let big = encode(1, &table(256, 2), 0, 2, &key);
        assert_eq!(
            RssConfig::parse(&big, 2),
            Err(RssRefused::TableTooLong(256))
        );
        let mut max_mask = encode(1, &[0], 0, 2, &key);
        max_mask[4..6].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(
            RssConfig::parse(&max_mask, 2),
            Err(RssRefused::TableTooLong(65536))
        );
        let key41 = encode(1, &[0], 0, 2, &[7; 41]);
        assert_eq!(RssConfig::parse(&key41, 2), Err(RssRefused::KeyTooLong(41)));
        let ex = encode(1 << 6, &[0], 0, 2, &key);
        assert_eq!(
            RssConfig::parse(&ex, 2),
            Err(RssRefused::UnsupportedHashTypes(1 << 6))
        );
        let beyond = encode(1, &[0, 2], 0, 2, &key);
        assert_eq!(
            RssConfig::parse(&beyond, 2),
            Err(RssRefused::QueueBeyondPairs { queue: 2, pairs: 2 })
        );
        let unclassified = encode(1, &[0, 1], 9, 2, &key);
        assert!(matches!(
            RssConfig::parse(&unclassified, 2),
            Err(RssRefused::QueueBeyondPairs { queue: 9, .. })
        ));
        for max_tx_vq in [0, 3] {
            let bad = encode(1, &[0, 1], 0, max_tx_vq, &key);
            assert!(matches!(
                RssConfig::parse(&bad, 2),
                Err(RssRefused::BadMaxTxVq { .. })
            ));
        }
    }

    #[test]
    fn the_state_holds_the_last_config_set() {
        let s = RssState::default();
        assert!(s.get().is_none());
        let c = RssConfig::parse(&encode(1, &[1], 0, 1, &[1, 2, 3, 4]), 2).unwrap();
        s.set(Some(c.clone()));
        assert_eq!(s.get().as_deref(), Some(&c));
        s.set(None);
        assert!(s.get().is_none());
    }

    proptest::proptest! {
        /// Arbitrary bytes never panic the parser, and whatever it accepts
        /// steers every frame to a queue within the pairs.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
                                       pairs in 1u16..17,
                                       frame in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            if let Ok(c) = RssConfig::parse(&data, pairs) {
                proptest::prop_assert!(c.queue_of(&frame) < pairs);
            }
        }
    }
}
