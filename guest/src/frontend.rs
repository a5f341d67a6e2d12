//! The guest's vhost-user **frontend** (QEMU's role): connect to the backend, negotiate like
//! QEMU with a Linux virtio-net driver behind it, share one memfd of guest memory, and hand
//! out queue pairs. (The device side of a virtqueue, the backend's, is `vadapt_virtq::device`.)
//!
//! Order of messages (as QEMU sends them): `SET_OWNER`, `GET_FEATURES`,
//! `GET_PROTOCOL_FEATURES` / `SET_PROTOCOL_FEATURES`, `GET_QUEUE_NUM`, `GET_CONFIG`,
//! `SET_FEATURES`, `SET_MEM_TABLE`, then per ring `SET_VRING_NUM`, `SET_VRING_BASE`,
//! `SET_VRING_ADDR`, `SET_VRING_CALL`, `SET_VRING_KICK`, and `SET_VRING_ENABLE` for the rings
//! of the pairs in use. The whole exchange runs under a watchdog (`vhost_timeout`), so a
//! backend that stops answering turns into an error, not a hang.

use std::fs::File;
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use vadapt_virtq::driver::{DriverQueue, Seg};
use vadapt_virtq::layout::QueueLayout;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::RingFeatures;
use vhost::vhost_user::message::{VhostUserConfigFlags, VhostUserHeaderFlag};
use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_config::{VIRTIO_F_IN_ORDER, VIRTIO_F_VERSION_1};
use virtio_bindings::virtio_net::{
    VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, VIRTIO_NET_F_CSUM, VIRTIO_NET_F_CTRL_VQ,
    VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_MAC, VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF,
    VIRTIO_NET_F_STATUS, VIRTIO_NET_OK,
};
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

use crate::config::{GuestConfig, Mode, MTU};
use crate::driver::queue::{
    Notifiers, QueueError, QueuePair, RxQueue, TxQueue, RX_BUF_LEN, SEGMENT_SLOT_LEN,
};
use crate::tcp_stream;
use vadapt_wire::stamped_frame::{self as frame, Stamp};
use vadapt_wire::tcp_build::{TxOffloads, TSO_SIZE_GOAL};

/// `VHOST_USER_F_PROTOCOL_FEATURES`: the backend speaks protocol-feature negotiation.
const VHOST_USER_F_PROTOCOL_FEATURES: u32 = 30;
/// Page size used to align the parts of guest memory (bytes).
const PAGE: u64 = 4096;

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

/// Why the guest could not set up its device over vhost-user.
#[derive(Debug, thiserror::Error)]
pub enum FrontendError {
    /// The socket could not be reached.
    #[error("--socket {path}: cannot connect")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// What `connect` said.
        #[source]
        source: io::Error,
    },
    /// A vhost-user request failed or timed out.
    #[error("vhost-user {op} failed")]
    Protocol {
        /// The request.
        op: &'static str,
        /// The vhost crate's error.
        #[source]
        source: vhost::Error,
    },
    /// The backend did not answer in time (the socket was shut down to end the wait).
    #[error("vhost-user backend did not answer {op} within {after:?}")]
    Timeout {
        /// The request left unanswered.
        op: &'static str,
        /// The time allowed.
        after: Duration,
    },
    /// The backend does not offer `VIRTIO_F_VERSION_1` (legacy devices are out of scope).
    #[error("the backend does not offer VIRTIO_F_VERSION_1")]
    NoVersion1,
    /// A message over the MTU without mergeable RX buffers.
    #[error("--size {0} exceeds the {MTU}-byte MTU and the backend does not offer VIRTIO_NET_F_MRG_RXBUF")]
    SizeOverMtu(u32),
    /// Guest memory could not be created.
    #[error("cannot create guest memory")]
    Memory(#[source] vadapt_virtq::mem::MemError),
    /// A driver ring could not be created.
    #[error("cannot create virtqueue {index}: {reason}")]
    Ring {
        /// vhost-user queue index.
        index: usize,
        /// What the ring code said.
        reason: String,
    },
    /// A queue could not be set up.
    #[error("cannot set up queue pair {pair}")]
    Queue {
        /// Pair number.
        pair: u16,
        /// The cause.
        #[source]
        source: QueueError,
    },
}

fn proto(op: &'static str) -> impl FnOnce(vhost::Error) -> FrontendError {
    move |source| FrontendError::Protocol { op, source }
}

/// Bounds a series of vhost-user exchanges in time. The `vhost` crate retries a receive that
/// fails with `EAGAIN` forever, so socket timeouts would only turn a hang into a busy loop;
/// instead, when the deadline passes, this shuts the socket down, which makes the pending
/// receive see end-of-file and fail.
struct Watchdog {
    disarm: Option<mpsc::Sender<()>>,
    fired: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn arm(sock: &UnixStream, timeout: Duration) -> io::Result<Watchdog> {
        let sock = sock.try_clone()?;
        let (tx, rx) = mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&fired);
        let thread = std::thread::Builder::new()
            .name("vhost-watchdog".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(timeout) {
                    flag.store(true, Ordering::SeqCst);
                    let _ = sock.shutdown(Shutdown::Both);
                }
            })?;
        Ok(Watchdog {
            disarm: Some(tx),
            fired,
            thread: Some(thread),
        })
    }

    /// Stops the watchdog; returns whether it fired (and so broke the socket).
    fn disarm(mut self) -> bool {
        drop(self.disarm.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.fired.load(Ordering::SeqCst)
    }
}

/// Where every part of guest memory goes (guest-physical addresses, bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Total size of the memfd (bytes, page multiple).
    pub size: u64,
    /// Per queue pair: RX ring layout, TX ring layout, RX buffers start, TX buffers start.
    pub pairs: Vec<PairPlan>,
    /// Control queue ring and its one page of command buffers.
    pub ctrl: CtrlPlan,
}

/// Guest-physical placement of the control queue (set up only when used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtrlPlan {
    /// The ring ([`CTRL_RING_SIZE`] descriptors).
    pub ring: QueueLayout,
    /// One page for the command header, its data and the ack byte.
    pub buf: u64,
}

/// Descriptors of the control queue (Linux uses 64).
pub const CTRL_RING_SIZE: u16 = 64;

/// Guest-physical placement of one queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairPlan {
    /// RX ring (queue `2*i`).
    pub rx: QueueLayout,
    /// TX ring (queue `2*i+1`).
    pub tx: QueueLayout,
    /// First RX buffer; `ring_size` buffers of [`RX_BUF_LEN`].
    pub rx_bufs: u64,
    /// First TX buffer; `ring_size` buffers of [`TxBufs::stride`].
    pub tx_bufs: u64,
    /// TCP-stream mode: the payload area ([`TxBufs::payload`] bytes; 0 = none).
    pub tx_payload: u64,
}

/// How a pair's TX buffers are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxBufs {
    /// Bytes per TX slot.
    pub stride: u32,
    /// Bytes of the payload area shared by the slots (0 = none: raw frames).
    pub payload: u32,
}

impl TxBufs {
    /// The layout `cfg` needs: whole packets of `cfg.size` bytes per slot for raw frames;
    /// header slots plus one payload area of a full TSO segment for TCP stream.
    pub fn for_config(cfg: &GuestConfig) -> TxBufs {
        if cfg.mode == Mode::TcpStream {
            TxBufs {
                stride: SEGMENT_SLOT_LEN,
                payload: TSO_SIZE_GOAL,
            }
        } else {
            TxBufs {
                stride: tx_stride(cfg.size),
                payload: 0,
            }
        }
    }
}

fn page_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// TX buffer stride for messages of `size` bytes: the packet rounded up to a cache line.
pub fn tx_stride(size: u32) -> u32 {
    (frame::packet_len(size) as u32).div_ceil(64) * 64
}

/// Lays out `pairs` queue pairs with rings of `ring_size` from guest-physical 0: rings first
/// (page-aligned, so the backend's ring accesses never share a page with packet data), then
/// the buffers (`tx` says how the TX buffers are laid out).
pub fn plan_memory(pairs: u16, ring_size: u16, tx: TxBufs) -> MemoryPlan {
    let mut at = 0u64;
    let mut plans = Vec::with_capacity(usize::from(pairs));
    for _ in 0..pairs {
        let (rx, rx_len) = QueueLayout::contiguous(ring_size, at);
        at = page_up(at + rx_len);
        let (tx, tx_len) = QueueLayout::contiguous(ring_size, at);
        at = page_up(at + tx_len);
        plans.push(PairPlan {
            rx,
            tx,
            rx_bufs: 0,
            tx_bufs: 0,
            tx_payload: 0,
        });
    }
    let (ring, ctrl_len) = QueueLayout::contiguous(CTRL_RING_SIZE, at);
    at = page_up(at + ctrl_len);
    let ctrl = CtrlPlan { ring, buf: at };
    at += PAGE;
    for p in &mut plans {
        p.rx_bufs = at;
        at = page_up(at + u64::from(RX_BUF_LEN) * u64::from(ring_size));
        p.tx_bufs = at;
        at = page_up(at + u64::from(tx.stride) * u64::from(ring_size));
        if tx.payload > 0 {
            p.tx_payload = at;
            at = page_up(at + u64::from(tx.payload));
        }
    }
    MemoryPlan {
        size: at,
        pairs: plans,
        ctrl,
    }
}

/// Creates queue pair `index` in `mem` as planned: rings zeroed, TX buffers pre-filled with
/// the packet template, RX buffers posted, RX callbacks on (NAPI), TX callbacks off (Linux's
/// non-NAPI TX path: no interrupt until the queue stops on a full ring). Nothing is said to a
/// backend: [`Connection::connect`] does that, tests drive the rings directly.
pub fn build_pair(
    mem: &GuestMemory,
    index: u16,
    p: &PairPlan,
    cfg: &GuestConfig,
    features: u64,
    mac: [u8; 6],
) -> Result<QueuePair, FrontendError> {
    let ring_features = RingFeatures::from_bits(features);
    let ring = |i: usize, l: QueueLayout| {
        DriverQueue::new(mem, l, ring_features).map_err(|e| FrontendError::Ring {
            index: i,
            reason: e.to_string(),
        })
    };
    let rxq = ring(2 * usize::from(index), p.rx)?;
    let txq = ring(2 * usize::from(index) + 1, p.tx)?;
    let qerr = |source| FrontendError::Queue {
        pair: index,
        source,
    };
    let mergeable = has_feature(features, VIRTIO_NET_F_MRG_RXBUF);
    let mut rx = RxQueue::new(rxq, mem, p.rx_bufs, cfg.ring_size, mergeable).map_err(qerr)?;
    let mut tx = if cfg.mode == Mode::TcpStream {
        TxQueue::new_segmented(
            txq,
            mem,
            p.tx_bufs,
            cfg.ring_size,
            p.tx_payload,
            &tcp_stream::payload_pattern(),
            ring_features.indirect,
        )
    } else {
        let mut template = vec![0u8; frame::packet_len(cfg.size)];
        let stamp = Stamp {
            seq: 0,
            sent_ns: 0,
            thread: 0,
        };
        frame::write_packet(&mut template, cfg.dst_mac, mac, cfg.size, stamp);
        TxQueue::new(
            txq,
            mem,
            p.tx_bufs,
            tx_stride(cfg.size),
            cfg.ring_size,
            &template,
        )
    }
    .map_err(qerr)?;
    // Linux posts its RX buffers before the device starts (`try_fill_recv`); the kick comes
    // once the rings are live (`Guest::connect`).
    rx.refill().map_err(qerr)?;
    let _ = rx.vq.enable_cb();
    tx.vq.disable_cb();
    Ok(QueuePair { index, rx, tx })
}

/// The frontend's connection to a backend: connected, negotiated, guest memory shared and the
/// rings started.
pub struct Connection {
    frontend: Frontend,
    /// The frontend's socket (a clone), for the watchdog.
    sock: UnixStream,
    /// Longest wait for a vhost-user exchange.
    vhost_timeout: Duration,
    /// Guest memory (one memfd region at guest-physical 0).
    pub mem: GuestMemory,
    _memfd: File,
    /// Feature bits acknowledged.
    pub features: u64,
    /// The guest's MAC address.
    pub mac: [u8; 6],
    /// Pairs the backend offers.
    pub max_pairs: u16,
    /// vhost-user queue indexes configured (for teardown).
    rings: Vec<usize>,
    /// What the control queue said to `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`.
    pub ctrl_mq: CtrlMq,
    /// The control queue, when set up (kept so its eventfds outlive the backend's use).
    ctrl: Option<(DriverQueue, Notifiers)>,
}

/// Outcome of announcing the number of queue pairs on the control queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CtrlMq {
    /// Not sent: one pair, or `MQ`/`CTRL_VQ` not negotiated.
    NotNeeded,
    /// Not sent: the backend's queue count leaves no index for the control queue (QEMU
    /// handles the control queue itself and never gives it to a vhost-user backend, so many
    /// backends, DPDK's among them, have none). The pairs are enabled with
    /// `SET_VRING_ENABLE` either way.
    NoControlQueue,
    /// Sent and acknowledged with `VIRTIO_NET_OK`.
    Acked,
    /// Sent and refused (status byte other than `VIRTIO_NET_OK`).
    Refused(u8),
    /// Sent, and no answer within the timeout.
    NoAnswer,
}

/// How long the guest waits for the control queue's answer (ms). Linux spins on it without
/// limit; a synthetic guest must not hang on a backend that ignores the queue.
const CTRL_TIMEOUT_MS: u64 = 1000;

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

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // vhost's `Frontend` has no Debug; show what identifies the connection.
        f.debug_struct("Connection")
            .field("features", &format_args!("{:#x}", self.features))
            .field("mac", &self.mac)
            .field("max_pairs", &self.max_pairs)
            .field("rings", &self.rings)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects, negotiates, shares memory and starts `pairs` queue pairs (returned apart
    /// from the connection so that threads can own them).
    pub fn connect(cfg: &GuestConfig) -> Result<(Connection, Vec<QueuePair>), FrontendError> {
        let connect_err = |source| FrontendError::Connect {
            path: cfg.socket.clone(),
            source,
        };
        let sock = UnixStream::connect(&cfg.socket).map_err(connect_err)?;
        let watchdog = Watchdog::arm(&sock, cfg.vhost_timeout).map_err(connect_err)?;
        let res = Self::handshake(cfg, sock);
        match (res, watchdog.disarm()) {
            (Err(FrontendError::Protocol { op, .. }), true) => Err(FrontendError::Timeout {
                op,
                after: cfg.vhost_timeout,
            }),
            (res, _) => res,
        }
    }

    fn handshake(
        cfg: &GuestConfig,
        sock: UnixStream,
    ) -> Result<(Connection, Vec<QueuePair>), FrontendError> {
        let keep = sock.try_clone().map_err(|source| FrontendError::Connect {
            path: cfg.socket.clone(),
            source,
        })?;
        let mut fe = Frontend::from_stream(sock, 2);

        fe.set_owner().map_err(proto("SET_OWNER"))?;
        let offered = fe.get_features().map_err(proto("GET_FEATURES"))?;
        if !has_feature(offered, VIRTIO_F_VERSION_1) {
            return Err(FrontendError::NoVersion1);
        }
        let features = negotiate_features(offered, cfg.mode);
        if cfg.mode == Mode::TcpStream {
            let off = tx_offloads(features);
            if !(off.csum && off.tso4) {
                tracing::warn!(
                    csum = off.csum,
                    tso4 = off.tso4,
                    "--mode tcp-stream: the backend does not offer VIRTIO_NET_F_CSUM and \
                     VIRTIO_NET_F_HOST_TSO4; sending MSS-sized frames{} instead, as Linux \
                     without device offloads",
                    if off.csum { "" } else { " with full checksums" }
                );
            }
        }

        let mut queue_num = 2u64;
        let mut net_cfg = None;
        if has_feature(features, VHOST_USER_F_PROTOCOL_FEATURES) {
            let offered_p = fe
                .get_protocol_features()
                .map_err(proto("GET_PROTOCOL_FEATURES"))?;
            let acked_p = offered_p
                & (VhostUserProtocolFeatures::MQ
                    | VhostUserProtocolFeatures::CONFIG
                    | VhostUserProtocolFeatures::REPLY_ACK);
            fe.set_protocol_features(acked_p)
                .map_err(proto("SET_PROTOCOL_FEATURES"))?;
            if acked_p.contains(VhostUserProtocolFeatures::REPLY_ACK) {
                // Ask for an ack on every request without a reply, so that a refused
                // SET_MEM_TABLE or SET_VRING_ADDR is an error here rather than a silent stall.
                fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
            if acked_p.contains(VhostUserProtocolFeatures::MQ) {
                queue_num = fe.get_queue_num().map_err(proto("GET_QUEUE_NUM"))?;
            }
            if acked_p.contains(VhostUserProtocolFeatures::CONFIG) {
                // A backend may refuse GET_CONFIG; the guest then falls back to defaults.
                let len = 10u32;
                match fe.get_config(0, len, VhostUserConfigFlags::WRITABLE, &[0u8; 10]) {
                    Ok((_, payload)) => net_cfg = NetConfig::parse(&payload),
                    Err(e) => tracing::warn!("GET_CONFIG refused ({e}); using defaults"),
                }
            }
        }

        // In TCP stream a message is application data, not a frame: frames stay within one MSS.
        if cfg.mode != Mode::TcpStream
            && cfg.size > MTU
            && !has_feature(features, VIRTIO_NET_F_MRG_RXBUF)
        {
            return Err(FrontendError::SizeOverMtu(cfg.size));
        }
        let mac = cfg
            .mac
            .or_else(|| {
                net_cfg
                    .filter(|_| has_feature(features, VIRTIO_NET_F_MAC))
                    .map(|c| c.mac)
            })
            .unwrap_or(GuestConfig::FALLBACK_MAC);
        let max_pairs = match net_cfg {
            Some(c) if has_feature(features, VIRTIO_NET_F_MQ) && c.max_virtqueue_pairs > 0 => {
                c.max_virtqueue_pairs
            }
            _ => (queue_num / 2).clamp(1, u64::from(u16::MAX)) as u16,
        };
        let pairs = cfg
            .queues
            .unwrap_or(cfg.threads.min(u32::from(u16::MAX)) as u16)
            .min(max_pairs);

        fe.set_features(features).map_err(proto("SET_FEATURES"))?;

        let plan = plan_memory(pairs, cfg.ring_size, TxBufs::for_config(cfg));
        let (mem, memfd) = GuestMemory::new_memfd(plan.size).map_err(FrontendError::Memory)?;
        let regions: Vec<VhostUserMemoryRegionInfo> = mem
            .regions()
            .iter()
            .map(|r| VhostUserMemoryRegionInfo {
                guest_phys_addr: r.gpa,
                memory_size: r.size,
                userspace_addr: r.uva,
                mmap_offset: 0,
                mmap_handle: memfd.as_raw_fd(),
            })
            .collect();
        fe.set_mem_table(&regions).map_err(proto("SET_MEM_TABLE"))?;

        let ring_features = RingFeatures::from_bits(features);
        let mut dev = Connection {
            frontend: fe,
            sock: keep,
            vhost_timeout: cfg.vhost_timeout,
            mem,
            _memfd: memfd,
            features,
            mac,
            max_pairs,
            rings: vec![],
            ctrl_mq: CtrlMq::NotNeeded,
            ctrl: None,
        };
        let mut out = Vec::with_capacity(usize::from(pairs));
        for (i, p) in plan.pairs.iter().enumerate() {
            let pair = build_pair(&dev.mem, i as u16, p, cfg, features, mac)?;
            dev.start_ring(2 * i, p.rx, &pair.rx.notify.kick, &pair.rx.notify.call)?;
            dev.start_ring(2 * i + 1, p.tx, &pair.tx.notify.kick, &pair.tx.notify.call)?;
            out.push(pair);
        }
        if has_feature(features, VHOST_USER_F_PROTOCOL_FEATURES) {
            for &ring in &dev.rings {
                dev.frontend
                    .set_vring_enable(ring, true)
                    .map_err(proto("SET_VRING_ENABLE"))?;
            }
        }
        let mq =
            has_feature(features, VIRTIO_NET_F_MQ) && has_feature(features, VIRTIO_NET_F_CTRL_VQ);
        if mq && pairs > 1 {
            let ctrl_index = 2 * usize::from(max_pairs);
            dev.ctrl_mq = if (ctrl_index as u64) < queue_num {
                dev.set_queue_pairs(ctrl_index, plan.ctrl, ring_features, pairs)?
            } else {
                CtrlMq::NoControlQueue
            };
            tracing::debug!(outcome = ?dev.ctrl_mq, pairs, "VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET");
        }
        Ok((dev, out))
    }

    fn new_ring(
        &self,
        index: usize,
        layout: QueueLayout,
        features: RingFeatures,
    ) -> Result<DriverQueue, FrontendError> {
        DriverQueue::new(&self.mem, layout, features).map_err(|e| FrontendError::Ring {
            index,
            reason: format!("{e:?}"),
        })
    }

    fn start_ring(
        &mut self,
        index: usize,
        l: QueueLayout,
        kick: &vmm_sys_util::eventfd::EventFd,
        call: &vmm_sys_util::eventfd::EventFd,
    ) -> Result<(), FrontendError> {
        let uva = |gpa: u64| -> u64 {
            // The memfd region has uva == host address; rings are inside it by construction.
            self.mem.translate(gpa, 1).map(|p| p as u64).unwrap_or(0)
        };
        let fe = &self.frontend;
        fe.set_vring_num(index, l.size)
            .map_err(proto("SET_VRING_NUM"))?;
        fe.set_vring_base(index, 0)
            .map_err(proto("SET_VRING_BASE"))?;
        let addr = VringConfigData {
            queue_max_size: l.size,
            queue_size: l.size,
            flags: 0,
            desc_table_addr: uva(l.desc),
            used_ring_addr: uva(l.used),
            avail_ring_addr: uva(l.avail),
            log_addr: None,
        };
        fe.set_vring_addr(index, &addr)
            .map_err(proto("SET_VRING_ADDR"))?;
        fe.set_vring_call(index, call)
            .map_err(proto("SET_VRING_CALL"))?;
        fe.set_vring_kick(index, kick)
            .map_err(proto("SET_VRING_KICK"))?;
        self.rings.push(index);
        Ok(())
    }

    /// Sets up the control queue at `index` and sends `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`
    /// (`pairs`), as Linux does after probing a multiqueue device; waits (bounded) for the
    /// ack by polling the used ring, as Linux spins on `virtqueue_get_buf`.
    fn set_queue_pairs(
        &mut self,
        index: usize,
        plan: CtrlPlan,
        features: RingFeatures,
        pairs: u16,
    ) -> Result<CtrlMq, FrontendError> {
        let mut vq = self.new_ring(index, plan.ring, features)?;
        let notify = Notifiers::new().map_err(|source| FrontendError::Queue {
            pair: u16::MAX,
            source,
        })?;
        vq.disable_cb();
        self.start_ring(index, plan.ring, &notify.kick, &notify.call)?;
        if has_feature(self.features, VHOST_USER_F_PROTOCOL_FEATURES) {
            self.frontend
                .set_vring_enable(index, true)
                .map_err(proto("SET_VRING_ENABLE"))?;
        }
        // virtio_net_ctrl_hdr {class, cmd}, virtio_net_ctrl_mq {virtqueue_pairs: le16}, ack.
        let hdr = [
            VIRTIO_NET_CTRL_MQ as u8,
            VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET as u8,
        ];
        let ack_gpa = plan.buf + 16;
        let ack_init = [0xFFu8];
        let write = |gpa: u64, b: &[u8]| self.mem.write(gpa, b).map_err(FrontendError::Memory);
        write(plan.buf, &hdr)?;
        write(plan.buf + 8, &pairs.to_le_bytes())?;
        write(ack_gpa, &ack_init)?;
        let segs = [
            Seg {
                gpa: plan.buf,
                len: 2,
                writable: false,
            },
            Seg {
                gpa: plan.buf + 8,
                len: 2,
                writable: false,
            },
            Seg {
                gpa: ack_gpa,
                len: 1,
                writable: true,
            },
        ];
        vq.add(&segs).map_err(|e| FrontendError::Ring {
            index,
            reason: e.to_string(),
        })?;
        vq.publish();
        if vq.kick_prepare() {
            notify.kick();
        }
        let start = std::time::Instant::now();
        let outcome = loop {
            if vq.pop_used().is_some() {
                let mut ack = [0u8];
                self.mem
                    .read(ack_gpa, &mut ack)
                    .map_err(FrontendError::Memory)?;
                break if u32::from(ack[0]) == VIRTIO_NET_OK {
                    CtrlMq::Acked
                } else {
                    CtrlMq::Refused(ack[0])
                };
            }
            if start.elapsed() >= Duration::from_millis(CTRL_TIMEOUT_MS) {
                tracing::warn!(
                    "control queue: no answer to VQ_PAIRS_SET within {CTRL_TIMEOUT_MS} ms"
                );
                break CtrlMq::NoAnswer;
            }
            std::thread::sleep(Duration::from_micros(100));
        };
        self.ctrl = Some((vq, notify));
        Ok(outcome)
    }

    /// The vhost-user socket, to watch for the backend hanging up.
    pub fn socket_fd(&self) -> RawFd {
        self.frontend.as_raw_fd()
    }

    /// Stops every ring (`GET_VRING_BASE`, after which the backend no longer touches guest
    /// memory) and returns the first error, if any. Bounded by the socket timeout.
    pub fn stop_rings(&self) -> Result<(), FrontendError> {
        let watchdog = Watchdog::arm(&self.sock, self.vhost_timeout).map_err(|source| {
            FrontendError::Connect {
                path: PathBuf::from("(vhost-user socket)"),
                source,
            }
        })?;
        let res = self.stop_rings_inner();
        match (res, watchdog.disarm()) {
            (Err(FrontendError::Protocol { op, .. }), true) => Err(FrontendError::Timeout {
                op,
                after: self.vhost_timeout,
            }),
            (res, _) => res,
        }
    }

    fn stop_rings_inner(&self) -> Result<(), FrontendError> {
        let mut first = Ok(());
        for &ring in &self.rings {
            if let Err(e) = self.frontend.get_vring_base(ring) {
                if first.is_ok() {
                    first = Err(FrontendError::Protocol {
                        op: "GET_VRING_BASE",
                        source: e,
                    });
                }
                // A broken socket fails every following request the same way.
                break;
            }
        }
        first
    }
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

    #[test]
    fn tcp_stream_plan_has_header_slots_and_a_payload_area() {
        let tx = TxBufs {
            stride: SEGMENT_SLOT_LEN,
            payload: TSO_SIZE_GOAL,
        };
        let plan = plan_memory(2, 1024, tx);
        for p in &plan.pairs {
            assert!(p.tx_payload >= p.tx_bufs + u64::from(SEGMENT_SLOT_LEN) * 1024);
            assert_eq!(p.tx_payload % PAGE, 0);
        }
        assert!(plan.pairs[1].rx_bufs >= plan.pairs[0].tx_payload + u64::from(TSO_SIZE_GOAL));
        assert!(plan.size >= plan.pairs[1].tx_payload + u64::from(TSO_SIZE_GOAL));
    }

    #[test]
    fn memory_plan_has_no_overlaps() {
        let tx = TxBufs {
            stride: tx_stride(1500),
            payload: 0,
        };
        let plan = plan_memory(3, 256, tx);
        let mut spans = vec![];
        for p in &plan.pairs {
            for l in [p.rx, p.tx] {
                assert!(l.is_valid());
                spans.push((l.desc, l.used + 6 + 8 * 256));
            }
            spans.push((p.rx_bufs, p.rx_bufs + 2048 * 256));
            spans.push((p.tx_bufs, p.tx_bufs + u64::from(tx_stride(1500)) * 256));
        }
        let c = plan.ctrl;
        assert!(c.ring.is_valid());
        spans.push((c.ring.desc, c.ring.used + 6 + 8 * u64::from(CTRL_RING_SIZE)));
        spans.push((c.buf, c.buf + PAGE));
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{w:?} overlap");
        }
        assert!(spans.last().unwrap().1 <= plan.size);
        assert_eq!(plan.size % PAGE, 0);
        assert_eq!(tx_stride(64), 128); // 12 + 14 + 64 = 90 -> 128
    }

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
