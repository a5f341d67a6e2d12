//! What a synthetic guest is asked to do, and the checks that need no backend.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::load::{Load, Pacing};
use vadapt_wire::stamped_frame::MIN_SIZE;

/// Default emulated cost of a kick or a handled call (ns); see the crate documentation.
pub const DEFAULT_EXIT_COST_NS: u64 = 2000;
/// Default emulated cost of one application write in TCP-stream mode, the part that does not
/// depend on its size (ns): measured on this project's machine, see the crate documentation
/// and `examples/write_cost.rs`.
pub const DEFAULT_WRITE_COST_NS: u64 = 585;
/// Default emulated cost of one application write per KiB written (ns/KiB): the copy and
/// what else grows with the write, from the same measurement (64- and 1024-byte writes).
pub const DEFAULT_WRITE_COST_NS_PER_KIB: u64 = 464;
/// Largest emulated cost of one write (ns): a second per `send()` is no workload, and the
/// spin does not look at the end of the run.
pub const MAX_WRITE_COST_NS: u64 = 1_000_000_000;
/// Largest message without `VIRTIO_NET_F_MRG_RXBUF` (bytes of L2 payload): a 1500-byte MTU.
pub const MTU: u32 = 1500;
/// Largest message at all (bytes of L2 payload): a 9000-byte jumbo frame.
pub const MAX_SIZE: u32 = 9000;
/// Default P95 reporting period: the core manager's period.
pub const DEFAULT_REPORT_PERIOD: Duration = Duration::from_millis(100);
/// Largest application message in TCP-stream mode (bytes): messages are a byte stream there,
/// cut into segments whatever their size; this only bounds the arithmetic.
pub const MAX_TCP_MESSAGE: u32 = 1 << 20;
/// Most sending threads one guest runs (a VM with more vCPUs than this is not the point).
pub const MAX_THREADS: u32 = 256;

/// The traffic pattern of each thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One-way stream of raw Ethernet frames, one message each (the packet-rate workload).
    Stream,
    /// One-way TCP stream as a Linux sender with TSO puts it on the ring (netperf
    /// TCP_STREAM): messages coalesced into segments of up to 64 KiB with a virtio-net header
    /// asking the device for the checksum and the segmentation ([`crate::tcp_stream`]).
    TcpStream,
    /// One request outstanding per thread, timed until its reply comes back (netperf TCP_RR,
    /// sockperf ping-pong), through an echo port or a second guest in [`Mode::Echo`].
    RequestResponse,
    /// Answer every request addressed to this guest's MAC (swap addresses, keep the
    /// payload's stamp) and send nothing else: the server side of guest-to-guest
    /// request/response (netserver). `load` is ignored.
    Echo,
}

/// Whether the guest drives packed virtqueues (`VIRTIO_F_RING_PACKED`, bit 34) or split ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PackedRing {
    /// Packed when the backend offers it, split otherwise (a Linux guest's virtio-net driver
    /// acknowledges the bit whenever the device offers it).
    Auto,
    /// Packed, and refuse to run against a backend that does not offer it.
    On,
    /// Split, whatever the backend offers: the default, as QEMU's virtio-net device is
    /// `packed=off` unless told otherwise, so a Linux guest under QEMU drives split rings.
    #[default]
    Off,
}

/// The RSS config the guest sets (`VIRTIO_NET_CTRL_MQ_RSS_CONFIG`) when it negotiated
/// `VIRTIO_NET_F_RSS`, as `ethtool -X` and `ethtool -N rx-flow-hash` would make Linux's
/// driver send it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RssRequest {
    /// The Toeplitz key (the device advertises up to 40 bytes).
    pub key: Vec<u8>,
    /// The indirection table: receive queue numbers, a power of two of them.
    pub table: Vec<u16>,
    /// `VIRTIO_NET_RSS_HASH_TYPE_*` bits.
    pub hash_types: u32,
    /// Queue of frames no enabled type covers.
    pub unclassified_queue: u16,
}

impl RssRequest {
    /// The command's data for a driver using `pairs` transmit queues.
    pub fn encode(&self, pairs: u16) -> Vec<u8> {
        vadapt_wire::rss_config::encode(
            self.hash_types,
            &self.table,
            self.unclassified_queue,
            pairs,
            &self.key,
        )
    }
}

/// Most bytes of indirection table the guest sends: 1024 entries, with room in the command
/// page for the rest of the config.
pub const MAX_RSS_TABLE_BYTES: usize = 2048;

/// Everything a guest run needs. Build with [`GuestConfig::new`] and adjust fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuestConfig {
    /// vhost-user socket of the backend (the guest connects as the frontend).
    pub socket: PathBuf,
    /// Sending threads (netperf threads); each is one flow.
    pub threads: u32,
    /// Message size: bytes of L2 payload, the frame being 14 + `size` bytes; in
    /// [`Mode::TcpStream`], bytes of application data per write.
    pub size: u32,
    /// Offered load.
    pub load: Load,
    /// How a paced thread waits for its next packets ([`Mode::Stream`] at a rate only).
    pub pacing: Pacing,
    /// Traffic pattern.
    pub mode: Mode,
    /// How long to run.
    pub duration: Duration,
    /// Emulated cost of each kick and each handled call (ns, busy-wait); 0 disables it.
    pub exit_cost_ns: u64,
    /// [`Mode::TcpStream`]: emulated cost of each application write of `size` bytes, the
    /// fixed part (ns, busy-wait on the sending thread); other modes ignore it. With this and
    /// [`GuestConfig::write_cost_ns_per_kib`] both 0, a closed-loop writer is infinitely fast.
    pub write_cost_ns: u64,
    /// [`Mode::TcpStream`]: the part of each write's cost that grows with its size (ns per
    /// KiB); other modes ignore it.
    pub write_cost_ns_per_kib: u64,
    /// The guest's MAC address; `None` = the device's (config space, when the backend offers
    /// `VIRTIO_NET_F_MAC`), else [`GuestConfig::FALLBACK_MAC`].
    pub mac: Option<[u8; 6]>,
    /// Destination MAC address of every frame.
    pub dst_mac: [u8; 6],
    /// Queue pairs to use; `None` = one per thread. Capped by what the backend offers.
    pub queues: Option<u16>,
    /// Descriptors per virtqueue, 2..=32768: a power of two unless `packed` is
    /// [`PackedRing::On`] (a packed ring may have any size).
    pub ring_size: u16,
    /// Packets added per publish/kick decision: 1 is one `sendmsg` per packet as netperf
    /// does; larger values emulate `xmit_more` batching.
    pub tx_batch: u16,
    /// NAPI budget: packets handled per RX poll before yielding (Linux: 64).
    pub napi_budget: u32,
    /// Request/response: how long to wait for a reply before counting it lost.
    pub rr_timeout: Duration,
    /// Longest time the connection handshake (and, at the end, stopping the rings) may take
    /// before the guest gives up on the backend.
    pub vhost_timeout: Duration,
    /// Serve a QMP socket here (`query-cpus-fast` lists the sending threads, `stop` / `cont`
    /// pause them), so that the core manager finds this guest as it finds a QEMU VM.
    pub qmp: Option<PathBuf>,
    /// Serve a QEMU guest agent socket here (`guest-get-vcpus`, `guest-set-vcpus`,
    /// `guest-exec` of `ethtool -L`; see [`vadapt_qemu::server::qga_session`]).
    pub qga: Option<PathBuf>,
    /// Request/response: send each period's P95 round trip to this daemon control socket
    /// (`cores-report`, for vSPACE's threshold explorer).
    pub cores_control: Option<PathBuf>,
    /// Length of a P95 reporting period (the core manager's period, 100 ms, by default).
    pub report_period: Duration,
    /// Log dirty pages as QEMU does during a live migration, and check at the end that the
    /// backend marked every page it wrote (see [`crate::frontend::FrontendLog`]).
    pub dirty_log: bool,
    /// Packed or split virtqueues.
    pub packed: PackedRing,
    /// Set this RSS config through the control queue when the backend offers
    /// `VIRTIO_NET_F_RSS` (the report's `ctrl_rss` says what became of it).
    pub rss: Option<RssRequest>,
}

impl GuestConfig {
    /// MAC address used when neither `--mac` nor the device gives one (locally administered).
    pub const FALLBACK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    /// Default destination (locally administered; unknown to a switch, so flooded to sinks).
    pub const DEFAULT_DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

    /// Defaults: 1 thread, 64-byte messages, closed loop, stream, 10 s, 2000 ns exit cost,
    /// the measured write cost ([`DEFAULT_WRITE_COST_NS`], [`DEFAULT_WRITE_COST_NS_PER_KIB`];
    /// TCP stream only), rings of 256, batch 1, NAPI budget 64, no QMP socket, no P95 reports
    /// (period 100 ms), split rings, no RSS config.
    pub fn new(socket: impl Into<PathBuf>) -> GuestConfig {
        GuestConfig {
            socket: socket.into(),
            threads: 1,
            size: 64,
            load: Load::ClosedLoop,
            pacing: Pacing::Exact,
            mode: Mode::Stream,
            duration: Duration::from_secs(10),
            exit_cost_ns: DEFAULT_EXIT_COST_NS,
            write_cost_ns: DEFAULT_WRITE_COST_NS,
            write_cost_ns_per_kib: DEFAULT_WRITE_COST_NS_PER_KIB,
            mac: None,
            dst_mac: Self::DEFAULT_DST_MAC,
            queues: None,
            ring_size: 256,
            tx_batch: 1,
            napi_budget: 64,
            rr_timeout: Duration::from_secs(1),
            vhost_timeout: Duration::from_secs(5),
            qmp: None,
            qga: None,
            cores_control: None,
            report_period: DEFAULT_REPORT_PERIOD,
            dirty_log: false,
            packed: PackedRing::Off,
            rss: None,
        }
    }

    /// The emulated cost of one application write (ns): in [`Mode::TcpStream`],
    /// `write_cost_ns + write_cost_ns_per_kib × size / 1024` (saturating; [`validate`] bounds
    /// it by [`MAX_WRITE_COST_NS`]); 0 in the other modes, where nothing is written through a
    /// socket.
    ///
    /// [`validate`]: GuestConfig::validate
    pub fn write_cost_per_message_ns(&self) -> u64 {
        if self.mode != Mode::TcpStream {
            return 0;
        }
        let per_size = self
            .write_cost_ns_per_kib
            .saturating_mul(u64::from(self.size))
            / 1024;
        self.write_cost_ns.saturating_add(per_size)
    }

    /// Checks everything that does not depend on the backend (the MTU check without
    /// `VIRTIO_NET_F_MRG_RXBUF` happens at connect time).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.threads == 0 {
            return Err(ConfigError::ZeroThreads);
        }
        if self.threads > MAX_THREADS {
            return Err(ConfigError::TooManyThreads(self.threads));
        }
        if self.mode == Mode::TcpStream {
            if self.size == 0 || self.size > MAX_TCP_MESSAGE {
                return Err(ConfigError::TcpSize(self.size));
            }
        } else if self.size < MIN_SIZE || self.size > MAX_SIZE {
            return Err(ConfigError::Size(self.size));
        }
        if self.write_cost_per_message_ns() > MAX_WRITE_COST_NS {
            return Err(ConfigError::WriteCost(self.write_cost_per_message_ns()));
        }
        if let Load::Rate { pps } = self.load {
            if !(pps.is_finite() && pps > 0.0) {
                return Err(ConfigError::Rate(pps));
            }
        }
        let paced_stream = self.mode == Mode::Stream && matches!(self.load, Load::Rate { .. });
        if self.pacing == Pacing::Burst && !paced_stream {
            return Err(ConfigError::BurstPacingNeedsPacedStream);
        }
        if self.duration.is_zero() {
            return Err(ConfigError::ZeroDuration);
        }
        if self.queues == Some(0) {
            return Err(ConfigError::ZeroQueues);
        }
        // A packed ring may have any size (spec 2.8.10.1); under `auto` the ring may turn
        // out split, whose size is a power of two.
        let power_of_two_needed = self.packed != PackedRing::On;
        if self.ring_size < 2
            || self.ring_size > 32768
            || (power_of_two_needed && !self.ring_size.is_power_of_two())
        {
            return Err(ConfigError::RingSize(self.ring_size));
        }
        if self.tx_batch == 0 || self.tx_batch > self.ring_size {
            return Err(ConfigError::TxBatch(self.tx_batch));
        }
        if self.napi_budget == 0 {
            return Err(ConfigError::NapiBudget);
        }
        if self.mac.is_some_and(|m| m[0] & 1 == 1) {
            return Err(ConfigError::MulticastMac);
        }
        if self.cores_control.is_some() && self.mode != Mode::RequestResponse {
            return Err(ConfigError::CoresControlNeedsRr);
        }
        if self.report_period.is_zero() {
            return Err(ConfigError::ZeroReportPeriod);
        }
        if let Some(r) = &self.rss {
            // The device checks the rest (queues, hash types, its own limits).
            let n = r.table.len();
            if !n.is_power_of_two() || 2 * n > MAX_RSS_TABLE_BYTES {
                return Err(ConfigError::RssTable(n));
            }
            if r.key.len() > 255 {
                return Err(ConfigError::RssKey(r.key.len()));
            }
        }
        Ok(())
    }
}

/// A knob out of range; each message names the command-line flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// No thread.
    #[error("--threads must be at least 1")]
    ZeroThreads,
    /// Too many threads.
    #[error("--threads {0} is more than the {MAX_THREADS} supported")]
    TooManyThreads(u32),
    /// Message size out of range.
    #[error(
        "--size {0} is out of range: messages are {MIN_SIZE}..={MAX_SIZE} bytes of L2 payload"
    )]
    Size(u32),
    /// TCP-stream message size out of range.
    #[error("--size {0} is out of range: TCP-stream messages are 1..={MAX_TCP_MESSAGE} bytes")]
    TcpSize(u32),
    /// Write cost beyond any workload.
    #[error(
        "--write-cost-ns and --write-cost-ns-per-kib make each write cost {0} ns, more than \
         the {MAX_WRITE_COST_NS} ns allowed"
    )]
    WriteCost(u64),
    /// A write cost outside TCP-stream mode.
    #[error(
        "--write-cost-ns and --write-cost-ns-per-kib apply to --mode tcp-stream only (other \
         modes write no socket)"
    )]
    WriteCostNeedsTcpStream,
    /// Rate not positive.
    #[error("--rate must be positive, got {0} pps")]
    Rate(f64),
    /// Burst pacing without a paced raw-frame stream to pace.
    #[error("--pacing burst needs --mode stream and a --rate (it paces raw frames)")]
    BurstPacingNeedsPacedStream,
    /// Zero duration.
    #[error("--duration must be longer than 0")]
    ZeroDuration,
    /// Zero queue pairs.
    #[error("--queues must be at least 1")]
    ZeroQueues,
    /// Ring size not a power of two in range (any size in range with `--packed on`).
    #[error(
        "--ring-size {0} must be a power of two in 2..=32768 (any size in range with --packed on)"
    )]
    RingSize(u16),
    /// Batch out of range.
    #[error("--tx-batch {0} must be in 1..=ring size")]
    TxBatch(u16),
    /// Zero NAPI budget.
    #[error("the NAPI budget must be at least 1")]
    NapiBudget,
    /// A multicast source address.
    #[error("--mac must be a unicast address (lowest bit of the first byte clear)")]
    MulticastMac,
    /// P95 reports without round trips to measure.
    #[error("--cores-control needs --mode rr (it reports the P95 of round trips)")]
    CoresControlNeedsRr,
    /// Zero reporting period.
    #[error("--report-period must be longer than 0")]
    ZeroReportPeriod,
    /// An RSS table that is not a power of two of entries, or does not fit a command.
    #[error("--rss-table has {0} entries: it must be a power of two, at most 1024")]
    RssTable(usize),
    /// `--rss-key` or `--rss-hash-types` alone.
    #[error("--rss-key and --rss-hash-types need --rss-table")]
    RssWithoutTable,
    /// An RSS key longer than its length byte can say.
    #[error("--rss-key has {0} bytes: at most 255")]
    RssKey(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(GuestConfig::new("/tmp/x.sock").validate(), Ok(()));
    }

    #[test]
    fn packed_on_takes_a_ring_size_that_is_no_power_of_two() {
        let cfg = GuestConfig {
            ring_size: 100,
            packed: PackedRing::On,
            ..GuestConfig::new("/s")
        };
        assert_eq!(cfg.validate(), Ok(()));
    }

    #[test]
    fn tcp_stream_takes_any_message_size_and_large_rings() {
        for size in [1, 64, 9001, 65536] {
            let cfg = GuestConfig {
                mode: Mode::TcpStream,
                size,
                ring_size: 1024,
                ..GuestConfig::new("/tmp/x.sock")
            };
            assert_eq!(cfg.validate(), Ok(()), "{size}");
        }
    }

    #[test]
    fn write_cost_is_per_message_in_tcp_stream_only() {
        let tcp = GuestConfig {
            mode: Mode::TcpStream,
            write_cost_ns: 500,
            write_cost_ns_per_kib: 400,
            size: 64,
            ..GuestConfig::new("/tmp/x.sock")
        };
        // 500 + 400 × 64 / 1024.
        assert_eq!(tcp.write_cost_per_message_ns(), 525);
        let kib = GuestConfig {
            size: 1024,
            ..tcp.clone()
        };
        assert_eq!(kib.write_cost_per_message_ns(), 900);
        // Raw frames and request/response write no socket: the default costs nothing there.
        for mode in [Mode::Stream, Mode::RequestResponse, Mode::Echo] {
            let cfg = GuestConfig {
                mode,
                ..tcp.clone()
            };
            assert_eq!(cfg.write_cost_per_message_ns(), 0, "{mode:?}");
            assert_eq!(cfg.validate(), Ok(()));
        }
        let defaults = GuestConfig {
            mode: Mode::TcpStream,
            ..GuestConfig::new("/tmp/x.sock")
        };
        assert_eq!(
            defaults.write_cost_per_message_ns(),
            DEFAULT_WRITE_COST_NS + DEFAULT_WRITE_COST_NS_PER_KIB * 64 / 1024
        );
    }

    #[test]
    fn each_bad_knob_is_named() {
        let base = GuestConfig::new("/tmp/x.sock");
        let cases: Vec<(GuestConfig, &str)> = vec![
            (
                GuestConfig {
                    threads: 0,
                    ..base.clone()
                },
                "--threads",
            ),
            (
                GuestConfig {
                    threads: 1000,
                    ..base.clone()
                },
                "--threads",
            ),
            (
                GuestConfig {
                    size: 10,
                    ..base.clone()
                },
                "--size",
            ),
            (
                GuestConfig {
                    size: 9001,
                    ..base.clone()
                },
                "--size",
            ),
            (
                GuestConfig {
                    size: 0,
                    mode: Mode::TcpStream,
                    ..base.clone()
                },
                "--size",
            ),
            (
                GuestConfig {
                    mode: Mode::TcpStream,
                    write_cost_ns: MAX_WRITE_COST_NS + 1,
                    ..base.clone()
                },
                "--write-cost-ns",
            ),
            (
                GuestConfig {
                    mode: Mode::TcpStream,
                    size: MAX_TCP_MESSAGE,
                    write_cost_ns_per_kib: u64::MAX,
                    ..base.clone()
                },
                "--write-cost-ns",
            ),
            (
                GuestConfig {
                    load: Load::Rate { pps: 0.0 },
                    ..base.clone()
                },
                "--rate",
            ),
            (
                GuestConfig {
                    load: Load::Rate { pps: f64::NAN },
                    ..base.clone()
                },
                "--rate",
            ),
            (
                GuestConfig {
                    duration: Duration::ZERO,
                    ..base.clone()
                },
                "--duration",
            ),
            (
                GuestConfig {
                    queues: Some(0),
                    ..base.clone()
                },
                "--queues",
            ),
            (
                GuestConfig {
                    ring_size: 100,
                    ..base.clone()
                },
                "--ring-size",
            ),
            (
                GuestConfig {
                    ring_size: 1,
                    ..base.clone()
                },
                "--ring-size",
            ),
            (
                GuestConfig {
                    ring_size: 1,
                    packed: PackedRing::On,
                    ..base.clone()
                },
                "--ring-size",
            ),
            (
                GuestConfig {
                    ring_size: 100,
                    packed: PackedRing::Auto,
                    ..base.clone()
                },
                "--ring-size",
            ),
            (
                GuestConfig {
                    tx_batch: 0,
                    ..base.clone()
                },
                "--tx-batch",
            ),
            (
                GuestConfig {
                    tx_batch: 512,
                    ..base.clone()
                },
                "--tx-batch",
            ),
            (
                GuestConfig {
                    mac: Some([1, 0, 0, 0, 0, 1]),
                    ..base.clone()
                },
                "--mac",
            ),
            (
                GuestConfig {
                    cores_control: Some("/run/vadapt.sock".into()),
                    ..base.clone()
                },
                "--cores-control",
            ),
            (
                GuestConfig {
                    report_period: Duration::ZERO,
                    ..base.clone()
                },
                "--report-period",
            ),
        ];
        for (cfg, flag) in cases {
            let err = cfg.validate().expect_err(flag).to_string();
            assert!(err.starts_with(flag), "{err}");
            assert!(!err.contains('\n'));
        }
    }
}
