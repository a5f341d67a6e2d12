//! The vhost-user conversation itself, in the order QEMU holds it: `SET_OWNER`,
//! `GET_FEATURES`, `GET_PROTOCOL_FEATURES` / `SET_PROTOCOL_FEATURES`, `GET_QUEUE_NUM`,
//! `GET_CONFIG`, `SET_FEATURES`, `SET_MEM_TABLE`, then per ring `SET_VRING_NUM`,
//! `SET_VRING_BASE`, `SET_VRING_ADDR`, `SET_VRING_CALL`, `SET_VRING_KICK`, and
//! `SET_VRING_ENABLE` for the rings of the pairs in use; at the end `GET_VRING_BASE` for
//! every ring.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::packed::VIRTIO_F_RING_PACKED;
use vadapt_virtq::{AnyDriverQueue, AnyLayout, RingFeatures};
use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserVringAddrFlags,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_net::{
    VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_RSS_CONFIG, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET,
    VIRTIO_NET_F_CTRL_VQ, VIRTIO_NET_F_MAC, VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF,
    VIRTIO_NET_F_MTU, VIRTIO_NET_F_RSS,
};

use super::ctrl_queue::{send_command, CtrlOutcome};
use super::dirty_log::FrontendLog;
use super::error::{proto, FrontendError};
use super::features::{
    has_feature, negotiate_features, tx_offloads, VHOST_F_LOG_ALL, VHOST_USER_F_PROTOCOL_FEATURES,
};
use super::memory_plan::{plan_memory, CtrlPlan, TxBufs};
use super::net_config::NetConfig;
use super::queue_pair::build_pair;
use super::watchdog::Watchdog;
use crate::config::{GuestConfig, Mode, PackedRing, RssRequest, MTU};
use crate::driver::queue::{Notifiers, QueuePair, RX_BUF_LEN};

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
    /// The device's MTU, if it offered one (`VIRTIO_NET_F_MTU`), bytes.
    pub mtu: Option<u16>,
    /// vhost-user queue indexes configured (for teardown).
    rings: Vec<usize>,
    /// What the control queue said to `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`.
    pub ctrl_mq: CtrlOutcome,
    /// What it said to the configured RSS config (`VIRTIO_NET_CTRL_MQ_RSS_CONFIG`).
    pub ctrl_rss: CtrlOutcome,
    /// Queue pairs in use.
    pairs: u16,
    /// The control queue, when set up (kept so its eventfds outlive the backend's use).
    ctrl: Option<CtrlChannel>,
    /// The dirty-page log, with `--dirty-log`.
    pub dirty_log: Option<FrontendLog>,
}

/// The control queue as set up: its ring, eventfds, command page and vhost-user index.
struct CtrlChannel {
    vq: AnyDriverQueue,
    notify: Notifiers,
    plan: CtrlPlan,
    index: usize,
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
        let mut features = negotiate_features(offered, cfg.mode);
        features |= packed_ring_bit(offered, cfg.packed)?;
        if cfg.rss.is_some() && has_feature(offered, VIRTIO_NET_F_RSS) {
            // Linux's driver takes RSS whenever it is offered with MQ and CTRL_VQ.
            features |= 1 << VIRTIO_NET_F_RSS;
        }
        if cfg.dirty_log {
            // Logging needs the protocol features (for LOG_SHMFD, below) and LOG_ALL.
            if !(has_feature(features, VHOST_USER_F_PROTOCOL_FEATURES)
                && has_feature(offered, VHOST_F_LOG_ALL))
            {
                return Err(FrontendError::NoDirtyLog);
            }
            features |= 1 << VHOST_F_LOG_ALL;
        }
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
            let mut acked_p = offered_p
                & (VhostUserProtocolFeatures::MQ
                    | VhostUserProtocolFeatures::CONFIG
                    | VhostUserProtocolFeatures::REPLY_ACK);
            if cfg.dirty_log {
                if !offered_p.contains(VhostUserProtocolFeatures::LOG_SHMFD) {
                    return Err(FrontendError::NoDirtyLog);
                }
                acked_p |= VhostUserProtocolFeatures::LOG_SHMFD;
            }
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
                let len = NetConfig::LEN as u32;
                let buf = [0u8; NetConfig::LEN];
                match fe.get_config(0, len, VhostUserConfigFlags::WRITABLE, &buf) {
                    Ok((_, payload)) => net_cfg = NetConfig::parse(&payload),
                    Err(e) => tracing::warn!("GET_CONFIG refused ({e}); using defaults"),
                }
            }
        }

        let mtu = net_cfg.and_then(|c| c.mtu(has_feature(features, VIRTIO_NET_F_MTU)));
        check_message_size(cfg, features, mtu)?;
        if let Some(mtu) = mtu {
            tracing::info!(mtu, "the backend offers an MTU (VIRTIO_NET_F_MTU)");
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

        let packed = has_feature(features, VIRTIO_F_RING_PACKED);
        tracing::info!(
            ring = if packed { "packed" } else { "split" },
            "virtqueue kind negotiated"
        );
        let plan = plan_memory(pairs, cfg.ring_size, TxBufs::for_config(cfg), packed);
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
        let dirty_log = match cfg.dirty_log {
            true => {
                let log = FrontendLog::new(plan.size).map_err(FrontendError::DirtyLog)?;
                fe.set_log_base(0, Some(log.region()))
                    .map_err(proto("SET_LOG_BASE"))?;
                Some(log)
            }
            false => None,
        };

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
            mtu,
            rings: vec![],
            ctrl_mq: CtrlOutcome::NotNeeded,
            ctrl_rss: CtrlOutcome::NotNeeded,
            pairs,
            ctrl: None,
            dirty_log,
        };
        let mut out = Vec::with_capacity(usize::from(pairs));
        for (i, p) in plan.pairs.iter().enumerate() {
            let pair = build_pair(&dev.mem, i as u16, p, cfg, features, mac)?;
            if let Some(log) = dev.dirty_log.as_mut() {
                // What only the device writes: the used rings (a packed
                // ring's descriptors and device event area) and the
                // receive buffers (filled after this, so watched now).
                for l in [p.rx, p.tx] {
                    for (gpa, len) in l.device_written() {
                        log.watch(&dev.mem, gpa, len);
                    }
                }
                log.watch(
                    &dev.mem,
                    p.rx_bufs,
                    u64::from(RX_BUF_LEN) * u64::from(cfg.ring_size),
                );
            }
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
        let rss = cfg
            .rss
            .as_ref()
            .filter(|_| has_feature(features, VIRTIO_NET_F_RSS));
        if mq && (pairs > 1 || rss.is_some()) {
            let ctrl_index = 2 * usize::from(max_pairs);
            if (ctrl_index as u64) < queue_num {
                dev.start_ctrl(ctrl_index, plan.ctrl, ring_features)?;
            }
            if pairs > 1 {
                dev.ctrl_mq = dev.ctrl_command(
                    VIRTIO_NET_CTRL_MQ as u8,
                    VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET as u8,
                    &pairs.to_le_bytes(),
                )?;
                tracing::debug!(outcome = ?dev.ctrl_mq, pairs, "VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET");
            }
            if let Some(rss) = rss {
                dev.ctrl_rss = dev.set_rss(rss)?;
                tracing::info!(outcome = ?dev.ctrl_rss, "VIRTIO_NET_CTRL_MQ_RSS_CONFIG");
            }
        }
        Ok((dev, out))
    }

    fn new_ring(
        &self,
        index: usize,
        layout: AnyLayout,
        features: RingFeatures,
    ) -> Result<AnyDriverQueue, FrontendError> {
        AnyDriverQueue::new(&self.mem, layout, features).map_err(|e| FrontendError::Ring {
            index,
            reason: format!("{e:?}"),
        })
    }

    fn start_ring(
        &mut self,
        index: usize,
        l: AnyLayout,
        kick: &vmm_sys_util::eventfd::EventFd,
        call: &vmm_sys_util::eventfd::EventFd,
    ) -> Result<(), FrontendError> {
        let uva = |gpa: u64| -> u64 {
            // The memfd region has uva == host address; rings are inside it by construction.
            self.mem.translate(gpa, 1).map(|p| p as u64).unwrap_or(0)
        };
        let fe = &self.frontend;
        fe.set_vring_num(index, l.size())
            .map_err(proto("SET_VRING_NUM"))?;
        // A packed ring starts at position 0 with its avail wrap counter (bit 15) set; the
        // vhost crate sends 16 bits, which backends take as both halves (DPDK, vadapt).
        let base = if l.is_packed() { 0x8000 } else { 0 };
        fe.set_vring_base(index, base)
            .map_err(proto("SET_VRING_BASE"))?;
        // With logging on, the ring's used-ring writes are logged at its
        // guest-physical address (QEMU's `log_guest_addr`).
        let logged = self.dirty_log.is_some();
        // A packed ring's driver and device areas go in the avail and used fields.
        let (desc, avail, used) = l.vring_addrs();
        let addr = VringConfigData {
            queue_max_size: l.size(),
            queue_size: l.size(),
            flags: if logged {
                VhostUserVringAddrFlags::VHOST_VRING_F_LOG.bits()
            } else {
                0
            },
            desc_table_addr: uva(desc),
            used_ring_addr: uva(used),
            avail_ring_addr: uva(avail),
            log_addr: logged.then_some(used),
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

    /// Sets up the control queue at `index`, as Linux does when it probes a device with
    /// `VIRTIO_NET_F_CTRL_VQ`.
    fn start_ctrl(
        &mut self,
        index: usize,
        plan: CtrlPlan,
        features: RingFeatures,
    ) -> Result<(), FrontendError> {
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
        self.ctrl = Some(CtrlChannel {
            vq,
            notify,
            plan,
            index,
        });
        Ok(())
    }

    /// Sends command (`class`, `command`) with `data` on the control queue and waits
    /// (bounded) for its answer; [`CtrlOutcome::NoControlQueue`] if there is none. Any bytes
    /// may be sent: the device must refuse what it does not take.
    pub fn ctrl_command(
        &mut self,
        class: u8,
        command: u8,
        data: &[u8],
    ) -> Result<CtrlOutcome, FrontendError> {
        let Some(c) = self.ctrl.as_mut() else {
            return Ok(CtrlOutcome::NoControlQueue);
        };
        send_command(
            &self.mem, &mut c.vq, &c.notify, c.plan, c.index, class, command, data,
        )
    }

    /// Sets `rss` with `VIRTIO_NET_CTRL_MQ_RSS_CONFIG` (`max_tx_vq`: the pairs in use);
    /// [`CtrlOutcome::NotNeeded`] if `VIRTIO_NET_F_RSS` was not negotiated.
    pub fn set_rss(&mut self, rss: &RssRequest) -> Result<CtrlOutcome, FrontendError> {
        if !has_feature(self.features, VIRTIO_NET_F_RSS) {
            return Ok(CtrlOutcome::NotNeeded);
        }
        let data = rss.encode(self.pairs);
        self.ctrl_command(
            VIRTIO_NET_CTRL_MQ as u8,
            VIRTIO_NET_CTRL_MQ_RSS_CONFIG as u8,
            &data,
        )
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

/// The `VIRTIO_F_RING_PACKED` bit to acknowledge among `offered` under `--packed`: set when
/// offered unless `off`; `on` without the offer is an error.
fn packed_ring_bit(offered: u64, choice: PackedRing) -> Result<u64, FrontendError> {
    let bit = 1u64 << VIRTIO_F_RING_PACKED;
    match (choice, has_feature(offered, VIRTIO_F_RING_PACKED)) {
        (PackedRing::Off, _) | (PackedRing::Auto, false) => Ok(0),
        (PackedRing::On, false) => Err(FrontendError::NoPackedRing),
        (PackedRing::Auto | PackedRing::On, true) => Ok(bit),
    }
}

/// Checks that `cfg`'s messages fit the device: within its MTU if it
/// offered one (`mtu`, from `VIRTIO_NET_F_MTU`), and over 1500 bytes only
/// with mergeable receive buffers (the guest's are 2 KiB). In TCP stream a
/// message is application data, not a frame: frames stay within one MSS.
fn check_message_size(
    cfg: &GuestConfig,
    features: u64,
    mtu: Option<u16>,
) -> Result<(), FrontendError> {
    if cfg.mode == Mode::TcpStream {
        return Ok(());
    }
    if let Some(mtu) = mtu.filter(|&m| cfg.size > u32::from(m)) {
        return Err(FrontendError::SizeOverDeviceMtu {
            size: cfg.size,
            mtu,
        });
    }
    if cfg.size > MTU && !has_feature(features, VIRTIO_NET_F_MRG_RXBUF) {
        return Err(FrontendError::SizeOverMtu(cfg.size));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_ring_is_taken_when_offered_unless_refused_and_required_with_on() {
        let offered = 1u64 << VIRTIO_F_RING_PACKED;
        assert_eq!(packed_ring_bit(offered, PackedRing::Auto).unwrap(), offered);
        assert_eq!(packed_ring_bit(offered, PackedRing::On).unwrap(), offered);
        assert_eq!(packed_ring_bit(offered, PackedRing::Off).unwrap(), 0);
        assert_eq!(packed_ring_bit(0, PackedRing::Auto).unwrap(), 0);
        assert_eq!(packed_ring_bit(0, PackedRing::Off).unwrap(), 0);
        let e = packed_ring_bit(0, PackedRing::On).unwrap_err();
        assert!(matches!(e, FrontendError::NoPackedRing));
        assert!(e.to_string().contains("VIRTIO_F_RING_PACKED"), "{e}");
    }

    #[test]
    fn messages_fit_the_offered_mtu_and_jumbo_ones_need_mergeable_buffers() {
        let mrg = 1u64 << VIRTIO_NET_F_MRG_RXBUF;
        let cfg = |size| GuestConfig {
            size,
            ..GuestConfig::new("/s")
        };
        assert!(check_message_size(&cfg(9000), mrg, Some(9000)).is_ok());
        assert!(
            check_message_size(&cfg(9000), mrg, None).is_ok(),
            "no MTU offered"
        );
        let e = check_message_size(&cfg(9001), mrg, Some(9000)).unwrap_err();
        assert!(e.to_string().contains("9000-byte MTU"), "{e}");
        let e = check_message_size(&cfg(1600), mrg, Some(1500)).unwrap_err();
        assert!(matches!(
            e,
            FrontendError::SizeOverDeviceMtu {
                size: 1600,
                mtu: 1500
            }
        ));
        let e = check_message_size(&cfg(4000), 0, Some(9000)).unwrap_err();
        assert!(matches!(e, FrontendError::SizeOverMtu(4000)));
        let tcp = GuestConfig {
            mode: Mode::TcpStream,
            ..cfg(100_000)
        };
        assert!(check_message_size(&tcp, 0, Some(1500)).is_ok());
    }
}
