//! The vhost-user protocol for one VM port, on the `vhost` crate's
//! [`BackendReqHandler`](vhost::vhost_user::BackendReqHandler): a [`Connection`] is the negotiated state of one
//! frontend's connection (served by [`super::serve`]).
//!
//! Every message that changes what the worker serves (features, memory
//! table, a vring's size/addresses/base/kick/call/enable) first stops the
//! worker — which returns each ring's position — applies the change, and
//! starts a new worker over the rings that are then ready. `GET_VRING_BASE`
//! stops the ring, as the spec requires, and answers with the position the
//! stopped worker handed back, so a reconnecting frontend resumes exactly.
//!
//! Ring `2 × queues` is the control queue, for a frontend that gives it to
//! the backend (QEMU and DPDK do not); it is served beside the worker, by
//! [`super::ctrl_thread`], and stopped and started with it.

use super::ctrl_thread::{self, CtrlThread};
use super::port_queues::PortQueues;
use super::vm_port::VmPort;
use crate::migration::{MappedLog, RingLog};
use crate::net::{self, VHOST_USER_F_PROTOCOL_FEATURES};
use crate::queue::ctrl_queue::CtrlQueue;
use crate::queue::eventfd_io;
use crate::queue::ring::{Pair, Ring};
use crate::worker::{Runtime, Served};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vadapt_virtq::device::DeviceQueue;
use vadapt_virtq::layout::{is_valid_size, QueueLayout};
use vadapt_virtq::mem::{GuestMemory, MappedRegion};
use vadapt_virtq::packed::is_valid_packed_size;
use vadapt_virtq::RingFeatures;
use vadapt_virtq::{AnyDeviceQueue, PackedDeviceQueue, PackedLayout};
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{
    Backend, Error as VhostError, GpuBackend, Result as VhostResult, VhostUserBackendReqHandlerMut,
};
use vhost::VhostUserMemoryRegionBase;

/// Protocol features offered.
pub fn offered_protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::LOG_SHMFD
        | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
        | VhostUserProtocolFeatures::RARP
}

/// Most memory regions accepted in one memory table (QEMU sends at most 8).
pub(super) const MAX_REGIONS: usize = 32;

#[derive(Debug, Default)]
pub(super) struct Vring {
    num: u16,
    pub(super) addrs: Option<(u64, u64, u64)>,
    base: u16,
    kick: Option<File>,
    call: Option<File>,
    /// The used ring's guest-physical address for dirty-page logging
    /// (`log_guest_addr`, when `SET_VRING_ADDR` set `VHOST_VRING_F_LOG`).
    log_addr: Option<u64>,
    enabled: bool,
    /// A `SET_VRING_ENABLE` for this ring reached us.
    enable_seen: bool,
    started: bool,
}

/// Why a ring's addresses (`SET_VRING_ADDR`) were refused.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum RingAddrError {
    /// No memory table was set yet, so no address can be checked.
    #[error("no memory table yet")]
    NoMemoryTable,
    /// An area of the ring is not inside the frontend's guest memory.
    #[error("{what} at {addr:#x} ({len} bytes) is outside guest memory")]
    OutsideGuestMemory {
        /// Which area: `descriptor table`, `available ring`, ….
        what: &'static str,
        /// Its address (frontend address).
        addr: u64,
        /// Its length (bytes).
        len: u64,
    },
}

/// What serves the control queue.
enum CtrlService {
    /// A thread of its own ([`CtrlThread`]).
    Thread(CtrlThread),
    /// Served in [`Connection::step`] ([`Runtime::Stepped`]).
    Inline(Box<CtrlQueue>),
}

/// One frontend connection's negotiated state.
pub struct Connection {
    pub(super) port: Arc<VmPort>,
    features: u64,
    pub(super) protocol: u64,
    pub(super) mem: Option<GuestMemory>,
    /// The regions `mem` is made of (memory hotplug rebuilds it from them).
    pub(super) regions: Vec<MappedRegion>,
    /// The frontend's dirty-page log (`SET_LOG_BASE`, see
    /// [`super::log_base`]); written while `VHOST_F_LOG_ALL` is acked.
    pub(super) log: Option<Arc<MappedLog>>,
    /// Marks outside `log` already reported.
    pub(super) log_outside_reported: u64,
    pub(super) vrings: Vec<Vring>,
    /// The running rings, while a worker serves them.
    worker: Option<Served>,
    /// The control queue's server, while its ring runs.
    ctrl: Option<CtrlService>,
    /// Set when the frontend sent something that ends the connection (the
    /// serve loop closes it after the reply).
    pub(super) fatal: Option<String>,
    /// What the `vhost` crate's handler knows of REPLY_ACK, which it
    /// sends only when its `GET_FEATURES` offered
    /// `VHOST_USER_F_PROTOCOL_FEATURES` (we always do) and the frontend's
    /// last `SET_PROTOCOL_FEATURES` held `REPLY_ACK`, taken by us or not.
    /// Mirrored here (and not forgotten at [`Connection::reset`], as the
    /// crate does not forget it) so that the serve loop can answer a
    /// request the crate refused before it acked
    /// ([`Connection::acks_replies`]).
    features_offered: bool,
    /// The value of the frontend's last `SET_PROTOCOL_FEATURES`, as the
    /// crate keeps it.
    protocol_acked: u64,
    /// `ADD_MEM_REG` requests that reached [`Connection::add_region`]: the
    /// serve loop tells from it one the crate refused before asking us.
    pub(super) add_region_calls: u64,
    /// Where the running rings are served.
    runtime: Runtime,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("port", &self.port.name())
            .field("features", &format_args!("{:#x}", self.features))
            .finish_non_exhaustive()
    }
}

fn invalid(what: &'static str) -> VhostError {
    VhostError::InvalidOperation(what)
}

impl Connection {
    /// Fresh state for a new frontend on `port`.
    pub fn new(port: Arc<VmPort>) -> Self {
        // The data rings, then the control queue.
        let n = 2 * usize::from(port.cfg.queues) + 1;
        Connection {
            port,
            features: 0,
            protocol: 0,
            mem: None,
            regions: Vec::new(),
            log: None,
            log_outside_reported: 0,
            vrings: (0..n).map(|_| Vring::default()).collect(),
            worker: None,
            ctrl: None,
            fatal: None,
            features_offered: false,
            protocol_acked: 0,
            add_region_calls: 0,
            runtime: Runtime::Thread,
        }
    }

    /// A connection whose running queues `runtime` serves (a new
    /// connection's: each worker a thread of its own).
    pub fn served_by(port: Arc<VmPort>, runtime: Runtime) -> Self {
        Connection {
            runtime,
            ..Connection::new(port)
        }
    }

    /// A connection whose running queues no thread serves
    /// ([`Runtime::Stepped`]): the caller runs their passes with
    /// [`Connection::step`], on its own thread. For the fuzzer
    /// (`fuzz/src/vhost_user.rs`) and tests, which drive the real handler
    /// and queue service in-process, deterministically, without starting a
    /// thread at every ring change. Everything else is as with a worker of
    /// its own: the same stops and restarts at each message, the same
    /// [`PortQueues`] and [`crate::worker::QueueSet`]. The daemon never
    /// uses it.
    pub fn stepped(port: Arc<VmPort>) -> Self {
        Self::served_by(port, Runtime::Stepped)
    }

    /// With [`Connection::stepped`]: one pass over the running queues if
    /// their wait has ended, or regardless when `force` (a worker woken
    /// early). False when no queues run (or they stopped themselves), so
    /// no pass was made.
    pub fn step(&mut self, force: bool) -> bool {
        if let (Some(CtrlService::Inline(q)), Some(mem)) = (self.ctrl.as_mut(), self.mem.as_ref()) {
            ctrl_thread::serve_and_count(q, mem, &self.port, self.features);
        }
        self.worker.as_mut().is_some_and(|w| w.step(force))
    }

    fn vring(&mut self, index: u32) -> VhostResult<&mut Vring> {
        self.vrings
            .get_mut(index as usize)
            .ok_or(VhostError::InvalidParam)
    }

    /// A ring runs once it has a size, addresses and a kick, and is enabled.
    ///
    /// With `VHOST_USER_F_PROTOCOL_FEATURES` the spec starts rings disabled
    /// until `SET_VRING_ENABLE(1)`. QEMU 7.2 sends that message before
    /// `SET_FEATURES`, and the `vhost` crate refuses it then (the feature is
    /// not acked yet), so it never reaches us. As DPDK's vhost library does in
    /// effect, a ring that no `SET_VRING_ENABLE` reached counts as enabled;
    /// an explicit disable (e.g. QEMU turning off unused queue pairs after
    /// `ethtool -L`) is honoured.
    fn ring_ready(&self, i: usize) -> bool {
        let v = &self.vrings[i];
        let protocol = self.features & VHOST_USER_F_PROTOCOL_FEATURES != 0;
        v.started && v.addrs.is_some() && v.num > 0 && (v.enabled || !protocol || !v.enable_seen)
    }

    /// The control queue's ring index.
    fn ctrl_index(&self) -> usize {
        2 * usize::from(self.port.cfg.queues)
    }

    /// Stop the control queue's server, recording where its ring stopped.
    fn stop_ctrl(&mut self) {
        let queue = match self.ctrl.take() {
            None => return,
            Some(CtrlService::Thread(t)) => t.stop(),
            Some(CtrlService::Inline(q)) => Some(*q),
        };
        let i = self.ctrl_index();
        match queue {
            Some(q) => self.vrings[i].base = q.last_avail(),
            None => {
                if let Some(held_back) = self.port.may_log("control queue thread panicked") {
                    tracing::error!(
                        port = self.port.name(),
                        held_back,
                        "control queue thread panicked"
                    );
                }
            }
        }
    }

    /// Stop the worker, recording where each ring stopped.
    pub(super) fn stop_worker(&mut self) {
        self.stop_ctrl();
        let Some(worker) = self.worker.take() else {
            return;
        };
        match worker.stop() {
            Some(bases) => {
                for b in bases {
                    self.vrings[b.ring].base = b.next_avail;
                }
            }
            None => {
                if let Some(held_back) = self.port.may_log("queue worker panicked") {
                    tracing::error!(port = self.port.name(), held_back, "queue worker panicked");
                }
            }
        }
        self.report_unlogged_writes();
        if let Some(log) = &self.log {
            // A log that shrank while no worker looked (only the control
            // queue wrote to it, say): said here, once.
            self.port.end_dirty_log(log);
        }
    }

    /// Writes whose pages fell outside the frontend's dirty-page log since
    /// the last report: pages a migration will not send again. One ERROR
    /// line per worker incarnation that had any (a log smaller than the
    /// guest memory the rings use is the frontend's mistake, and the
    /// migrated guest may be corrupted).
    fn report_unlogged_writes(&mut self) {
        let Some(log) = &self.log else { return };
        let outside = log.log().outside();
        if outside > self.log_outside_reported {
            if let Some(held_back) = self.port.may_log("writes outside the dirty-page log") {
                tracing::error!(
                    port = self.port.name(),
                    marks = outside - self.log_outside_reported,
                    covers_mib = log.log().covers() >> 20,
                    held_back,
                    "device writes outside the dirty-page log: their pages will not be sent again by the migration"
                );
            }
            self.log_outside_reported = outside;
        }
    }

    /// Ring `i`, if it is ready and its addresses are good.
    fn make_ring(&self, mem: &GuestMemory, i: usize) -> Option<Ring> {
        if !self.ring_ready(i) {
            return None;
        }
        let rf = RingFeatures::from_bits(self.features);
        let v = &self.vrings[i];
        let (desc, used, avail) = v.addrs.expect("ready implies addrs");
        // A packed ring's driver and device areas come in the split
        // ring's avail and used addresses (vhost-user, as vhost).
        let q = if self.features & net::VIRTIO_F_RING_PACKED != 0 {
            let layout = PackedLayout {
                size: v.num,
                desc,
                driver_event: avail,
                device_event: used,
            };
            PackedDeviceQueue::new(mem, layout, true, rf, v.base).map(AnyDeviceQueue::Packed)
        } else {
            let layout = QueueLayout {
                size: v.num,
                desc,
                avail,
                used,
            };
            DeviceQueue::new(mem, layout, true, rf, v.base).map(AnyDeviceQueue::Split)
        };
        let q = match q {
            Ok(q) => q,
            Err(e) => {
                if let Some(held_back) = self.port.may_log("ring addresses rejected") {
                    tracing::error!(port = self.port.name(), ring = i, error = %e, held_back,
                        "ring addresses rejected; ring not started");
                }
                return None;
            }
        };
        let kick = v.kick.as_ref().and_then(|f| f.try_clone().ok())?;
        set_nonblocking(&kick);
        Some(Ring {
            q,
            kick,
            call: v.call.as_ref().and_then(|f| f.try_clone().ok()),
            broken: false,
            log: self.ring_log(mem, v),
        })
    }

    /// Start the control queue's server if its ring is ready and the
    /// frontend acked `VIRTIO_NET_F_CTRL_VQ`.
    fn start_ctrl(&mut self, mem: &GuestMemory) {
        debug_assert!(self.ctrl.is_none());
        if self.features & net::VIRTIO_NET_F_CTRL_VQ == 0 {
            return;
        }
        let Some(ring) = self.make_ring(mem, self.ctrl_index()) else {
            return;
        };
        let queue = CtrlQueue::new(ring);
        if self.runtime.is_stepped() {
            self.ctrl = Some(CtrlService::Inline(Box::new(queue)));
            return;
        }
        match CtrlThread::start(Arc::clone(&self.port), mem.clone(), queue, self.features) {
            Ok(t) => self.ctrl = Some(CtrlService::Thread(t)),
            Err(e) => {
                if let Some(held_back) = self.port.may_log("cannot start the control queue") {
                    tracing::error!(port = self.port.name(), error = %e, held_back, "cannot start the control queue's thread");
                }
            }
        }
    }

    /// Start a worker over every ready ring (none: no worker).
    pub(super) fn start_worker(&mut self) {
        debug_assert!(self.worker.is_none());
        let Some(mem) = self.mem.clone() else { return };
        self.start_ctrl(&mem);
        let npairs = usize::from(self.port.cfg.queues);
        let mut pairs: Vec<Pair> = (0..npairs).map(|_| Pair::default()).collect();
        let mut any = false;
        for i in 0..2 * npairs {
            let Some(ring) = self.make_ring(&mem, i) else {
                continue;
            };
            if i % 2 == 0 {
                pairs[i / 2].rx = Some(ring);
            } else {
                pairs[i / 2].tx = Some(ring);
            }
            any = true;
        }
        let rx_pairs = pairs.iter().take_while(|p| p.rx.is_some()).count() as u16;
        self.port.rx_pairs.store(rx_pairs, Ordering::Release);
        if !any {
            return;
        }
        super::unshared_memory::check_rings_started(&self.port, &self.regions);
        let stop = Arc::new(AtomicBool::new(false));
        let queues = match PortQueues::new(
            Arc::clone(&self.port),
            mem,
            pairs,
            self.features,
            Arc::clone(&stop),
        ) {
            Ok(q) => q,
            Err(e) => {
                if let Some(held_back) = self.port.may_log("cannot set up the worker") {
                    tracing::error!(port = self.port.name(), error = %e, held_back, "cannot set up worker");
                }
                return;
            }
        };
        let id = self.port.port_id() as u64;
        let thread = format!("vadapt-w-{}", self.port.name());
        match self.runtime.serve(id, queues, &thread, self.port.cpu) {
            Ok(served) => self.worker = Some(served),
            Err(e) => {
                if let Some(held_back) = self.port.may_log("cannot start the worker") {
                    tracing::error!(port = self.port.name(), error = %e, held_back, "cannot start the worker's thread");
                }
            }
        }
    }

    /// Where ring `v` logs its writes, while the frontend asks for logging
    /// (`VHOST_F_LOG_ALL` acked and a log given): the used ring at its
    /// `log_guest_addr`, or at the guest address of its frontend address.
    fn ring_log(&self, mem: &GuestMemory, v: &Vring) -> Option<RingLog> {
        if self.features & net::VHOST_F_LOG_ALL == 0 {
            return None;
        }
        let Some(log) = &self.log else {
            if let Some(held_back) = self.port.may_log("LOG_ALL before SET_LOG_BASE") {
                tracing::debug!(
                    port = self.port.name(),
                    held_back,
                    "VHOST_F_LOG_ALL acked before any SET_LOG_BASE: nothing can be logged yet"
                );
            }
            return None;
        };
        if !log.is_live() {
            // It shrank under us: logging ended (said once, by
            // `VmPort::end_dirty_log`) until the frontend sends a new log.
            return None;
        }
        let (desc, used, _) = v.addrs?;
        let used_gpa = v.log_addr.or_else(|| mem.uva_to_gpa(used))?;
        if self.features & net::VIRTIO_F_RING_PACKED != 0 {
            // The device writes used descriptors into the descriptor ring,
            // and its event suppression into the device area (`log_addr`,
            // or the used address, points there).
            return Some(RingLog {
                log: Arc::clone(log),
                used_gpa: mem.uva_to_gpa(desc)?,
                used_len: 16 * u64::from(v.num),
                device_event_gpa: Some(used_gpa),
            });
        }
        Some(RingLog {
            log: Arc::clone(log),
            used_gpa,
            used_len: 6 + 8 * u64::from(v.num),
            device_event_gpa: None,
        })
    }

    /// Apply a change with the worker stopped, then restart it over the
    /// rings that are ready afterwards.
    pub(super) fn reconfigure<T>(&mut self, change: impl FnOnce(&mut Self) -> T) -> T {
        self.stop_worker();
        let out = change(self);
        self.start_worker();
        out
    }

    /// The three areas of ring `index` must lie inside the frontend's guest
    /// memory (frontend addresses; sizes from the ring's size, or one byte
    /// each when no size was set yet).
    fn check_ring_addrs(
        &self,
        index: u32,
        desc: u64,
        used: u64,
        avail: u64,
    ) -> Result<(), RingAddrError> {
        let Some(mem) = &self.mem else {
            return Err(RingAddrError::NoMemoryTable);
        };
        let n = u64::from(self.vrings[index as usize].num);
        // A packed ring's driver and device areas (in the avail and used
        // fields) are its 4-byte event suppression structures.
        let areas = if self.features & net::VIRTIO_F_RING_PACKED != 0 {
            [
                ("descriptor ring", desc, (16 * n).max(1)),
                ("driver event area", avail, 4),
                ("device event area", used, 4),
            ]
        } else {
            [
                ("descriptor table", desc, (16 * n).max(1)),
                ("available ring", avail, (6 + 2 * n).max(1)),
                ("used ring", used, (6 + 8 * n).max(1)),
            ]
        };
        for (what, addr, len) in areas {
            if mem.translate_uva(addr, len).is_none() {
                return Err(RingAddrError::OutsideGuestMemory { what, addr, len });
            }
        }
        Ok(())
    }

    /// Kick, call and err descriptors must be eventfds (see
    /// [`super::eventfd_io`]); anything else ends the connection.
    fn require_eventfd(&mut self, what: &str, index: u8, fd: Option<&File>) -> VhostResult<()> {
        match fd {
            Some(f) if !eventfd_io::is_eventfd(f) => {
                let msg = format!("{what} descriptor of ring {index} is not an eventfd");
                if let Some(held_back) = self.port.may_log("not an eventfd") {
                    tracing::error!(
                        port = self.port.name(),
                        held_back,
                        "{msg}; closing the connection"
                    );
                }
                self.fatal = Some(msg);
                Err(VhostError::InvalidParam)
            }
            _ => Ok(()),
        }
    }

    /// The features this port offers (`get_features`).
    fn offered_features(&self) -> u64 {
        let c = &self.port.cfg;
        net::offered_features(c.mtu, c.packed, c.rss)
    }

    /// Why the connection must end, if the frontend sent something that
    /// ends it (taken: asked again, `None`).
    pub fn take_fatal(&mut self) -> Option<String> {
        self.fatal.take()
    }

    /// Whether the `vhost` crate acks a `NEED_REPLY` request on this
    /// connection (REPLY_ACK, as the crate reckons it: see
    /// `features_offered`). The serve loop answers with it a request the
    /// crate refused before acking.
    pub(super) fn acks_replies(&self) -> bool {
        use vhost::vhost_user::message::VhostUserProtocolFeatures as P;
        self.features_offered && self.protocol_acked & P::REPLY_ACK.bits() != 0
    }

    /// Forget the frontend: stop the worker, drop memory and rings.
    pub fn reset(&mut self) {
        self.stop_worker();
        self.port.rx_pairs.store(0, Ordering::Release);
        self.port.clear_backlogs();
        self.port
            .mem_guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.mem = None;
        self.regions.clear();
        self.publish_memory();
        self.log = None;
        self.features = 0;
        self.port.guest_offloads.negotiate(0);
        self.port.rss.set(None);
        self.protocol = 0;
        self.fatal = None;
        for v in &mut self.vrings {
            *v = Vring::default();
        }
        if let Some(i) = self.port.ingress() {
            i.forget();
        }
    }
}

fn set_nonblocking(f: &File) {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL take no pointers.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

impl VhostUserBackendReqHandlerMut for Connection {
    fn set_owner(&mut self) -> VhostResult<()> {
        Ok(())
    }

    fn reset_owner(&mut self) -> VhostResult<()> {
        self.reset();
        Ok(())
    }

    fn reset_device(&mut self) -> VhostResult<()> {
        self.reset();
        Ok(())
    }

    fn get_features(&mut self) -> VhostResult<u64> {
        self.features_offered = true;
        Ok(self.offered_features())
    }

    fn set_features(&mut self, features: u64) -> VhostResult<()> {
        if features & !self.offered_features() != 0 {
            if let Some(held_back) = self.port.may_log("features never offered") {
                tracing::warn!(
                    port = self.port.name(),
                    features = format_args!("{features:#x}"),
                    held_back,
                    "frontend acked features we never offered"
                );
            }
            return Err(VhostError::InvalidParam);
        }
        self.stop_worker();
        self.features = features;
        self.port.guest_offloads.negotiate(features);
        // A new negotiation starts with the default steering, until the
        // driver sets its RSS config again.
        self.port.rss.set(None);
        if let Some(held_back) = self.port.may_log("features negotiated") {
            tracing::info!(
                port = self.port.name(),
                features = format_args!("{features:#x}"),
                event_idx = features & net::VIRTIO_RING_F_EVENT_IDX != 0,
                mrg_rxbuf = features & net::VIRTIO_NET_F_MRG_RXBUF != 0,
                in_order = features & net::VIRTIO_F_IN_ORDER != 0,
                guest_offloads = ?self.port.guest_offloads.accepted(),
                held_back,
                "features negotiated"
            );
        }
        self.start_worker();
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy_listening: Option<bool>,
    ) -> VhostResult<Option<Vec<VhostUserMemoryRegionBase>>> {
        self.set_memory_table(ctx, files)?;
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> VhostResult<()> {
        // A split ring's size is a power of two; a packed ring's any of
        // 1..=32768 (spec 2.8.10.1). A frontend sets the features first
        // (QEMU, DPDK); one that turns packed off after a size only a
        // packed ring may have gets its ring refused when it starts.
        let packed = self.features & net::VIRTIO_F_RING_PACKED != 0;
        let valid = if packed {
            is_valid_packed_size
        } else {
            is_valid_size
        };
        if num > u32::from(u16::MAX) || !valid(num as u16) {
            return Err(VhostError::InvalidParam);
        }
        self.vring(index)?;
        self.reconfigure(|c| c.vrings[index as usize].num = num as u16);
        Ok(())
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        log: u64,
    ) -> VhostResult<()> {
        self.vring(index)?;
        if let Err(why) = self.check_ring_addrs(index, descriptor, used, available) {
            if let Some(held_back) = self.port.may_log("SET_VRING_ADDR refused") {
                tracing::warn!(
                    port = self.port.name(),
                    ring = index,
                    held_back,
                    "SET_VRING_ADDR refused: {why}"
                );
            }
            super::unshared_memory::check_ring_addr_refused(&self.port, index, &self.regions);
            return Err(VhostError::InvalidParam);
        }
        let log_addr = flags
            .contains(VhostUserVringAddrFlags::VHOST_VRING_F_LOG)
            .then_some(log);
        self.reconfigure(|c| {
            let v = &mut c.vrings[index as usize];
            v.addrs = Some((descriptor, used, available));
            v.log_addr = log_addr;
        });
        Ok(())
    }

    /// A split ring's base is its next available index (16 bits). A
    /// packed ring's is the avail position and wrap counter in bits 0-15
    /// and the used ones in bits 16-31 (QEMU and DPDK): the used half is
    /// not kept, the device's used position starts at the avail one (as
    /// DPDK's), every buffer before it having been used.
    fn set_vring_base(&mut self, index: u32, base: u32) -> VhostResult<()> {
        let packed = self.features & net::VIRTIO_F_RING_PACKED != 0;
        if !packed && base > u32::from(u16::MAX) {
            return Err(VhostError::InvalidParam);
        }
        self.vring(index)?;
        // A packed position (bits 0-14) must lie inside a ring whose size
        // is known: refused here rather than found when the ring starts.
        let num = self.vrings[index as usize].num;
        if packed && num != 0 && (base & 0x7FFF) >= u32::from(num) {
            return Err(VhostError::InvalidParam);
        }
        self.reconfigure(|c| c.vrings[index as usize].base = base as u16);
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> VhostResult<VhostUserVringState> {
        if self.vring(index).is_err() {
            // The frontend waits for an answer the vhost crate does not send
            // when we fail: close the connection rather than leave it hanging.
            self.fatal = Some(format!(
                "GET_VRING_BASE for ring {index}, which does not exist"
            ));
            return Err(VhostError::InvalidParam);
        }
        self.stop_worker();
        let v = &mut self.vrings[index as usize];
        v.started = false;
        v.kick = None;
        let base = u32::from(v.base);
        self.start_worker();
        // A packed ring's used position, in the upper half, is the avail
        // one: the worker flushed every buffer it took when it stopped.
        let base = if self.features & net::VIRTIO_F_RING_PACKED != 0 {
            base | base << 16
        } else {
            base
        };
        Ok(VhostUserVringState::new(index, base))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> VhostResult<()> {
        self.vring(u32::from(index))?;
        self.require_eventfd("kick", index, fd.as_ref())?;
        self.stop_worker();
        // Without a kick fd (the "polling" flag) the ring still runs: we give
        // it a private eventfd nobody writes, so only polling finds work.
        let fd = match fd {
            Some(f) => f,
            None => vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK)
                .and_then(|e| e.try_clone())
                .map(|e| {
                    // SAFETY: we own the duplicated descriptor and hand it to `File`.
                    unsafe {
                        <File as std::os::fd::FromRawFd>::from_raw_fd(
                            std::os::fd::IntoRawFd::into_raw_fd(e),
                        )
                    }
                })
                .map_err(VhostError::ReqHandlerError)?,
        };
        let v = &mut self.vrings[usize::from(index)];
        v.kick = Some(fd);
        v.started = true;
        self.start_worker();
        Ok(())
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> VhostResult<()> {
        self.vring(u32::from(index))?;
        self.require_eventfd("call", index, fd.as_ref())?;
        self.reconfigure(|c| c.vrings[usize::from(index)].call = fd);
        Ok(())
    }

    fn set_vring_err(&mut self, index: u8, fd: Option<File>) -> VhostResult<()> {
        self.vring(u32::from(index))?;
        self.require_eventfd("err", index, fd.as_ref())?;
        Ok(())
    }

    fn get_protocol_features(&mut self) -> VhostResult<VhostUserProtocolFeatures> {
        Ok(offered_protocol_features())
    }

    fn set_protocol_features(&mut self, features: u64) -> VhostResult<()> {
        // The crate keeps the value whatever we answer (see `protocol_acked`).
        self.protocol_acked = features;
        // Refused, not masked: a frontend that acks what it was not offered
        // is broken or hostile. (The `vhost` crate records the bits anyway;
        // the requests they would open are refused here one by one.)
        let offered = offered_protocol_features().bits();
        if features & !offered != 0 {
            return Err(VhostError::ReqHandlerError(std::io::Error::other(format!(
                "frontend acked protocol features {features:#x}, some never offered \
                 (offered {offered:#x})"
            ))));
        }
        self.protocol = features;
        Ok(())
    }

    /// The data rings and the control queue (index `2 × queues`): a
    /// frontend that forwards its control queue needs the index; QEMU
    /// checks only that its queue pairs fit.
    fn get_queue_num(&mut self) -> VhostResult<u64> {
        Ok(2 * u64::from(self.port.cfg.queues) + 1)
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> VhostResult<()> {
        self.vring(index)?;
        self.reconfigure(|c| {
            let v = &mut c.vrings[index as usize];
            v.enabled = enable;
            v.enable_seen = true;
        });
        Ok(())
    }

    fn get_config(
        &mut self,
        offset: u32,
        size: u32,
        _flags: VhostUserConfigFlags,
    ) -> VhostResult<Vec<u8>> {
        let cfg = net::config_space(self.port.mac, self.port.cfg.queues, self.port.cfg.mtu);
        let start = offset as usize;
        let end = start
            .checked_add(size as usize)
            .ok_or(VhostError::InvalidParam)?;
        // Reads past our fields return zeros, as for a device with a larger config.
        let mut out = vec![0u8; size as usize];
        if start < cfg.len() {
            let n = cfg.len().min(end) - start;
            out[..n].copy_from_slice(&cfg[start..start + n]);
        }
        Ok(out)
    }

    fn set_config(
        &mut self,
        _offset: u32,
        _buf: &[u8],
        _flags: VhostUserConfigFlags,
    ) -> VhostResult<()> {
        Err(invalid("the virtio-net config space is read-only"))
    }

    fn set_backend_req_fd(&mut self, _backend: Backend) {}

    fn set_gpu_socket(&mut self, _gpu_backend: GpuBackend) -> VhostResult<()> {
        Err(invalid("not a GPU device"))
    }

    fn get_shared_object(&mut self, _uuid: VhostUserSharedMsg) -> VhostResult<File> {
        Err(invalid("shared objects are not supported"))
    }

    fn get_inflight_fd(
        &mut self,
        _inflight: &VhostUserInflight,
    ) -> VhostResult<(VhostUserInflight, File)> {
        Err(invalid("inflight tracking is not supported"))
    }

    fn set_inflight_fd(&mut self, _inflight: &VhostUserInflight, _file: File) -> VhostResult<()> {
        Err(invalid("inflight tracking is not supported"))
    }

    fn get_max_mem_slots(&mut self) -> VhostResult<u64> {
        Ok(MAX_REGIONS as u64)
    }

    fn add_mem_region(
        &mut self,
        region: &VhostUserSingleMemoryRegion,
        fd: File,
        _postcopy_listening: Option<bool>,
    ) -> VhostResult<Option<VhostUserMemoryRegionBase>> {
        self.add_region_calls += 1;
        self.add_region(region, fd)?;
        Ok(None)
    }

    fn remove_mem_region(&mut self, region: &VhostUserSingleMemoryRegion) -> VhostResult<()> {
        self.remove_region(region)
    }

    fn set_device_state_fd(
        &mut self,
        _direction: VhostTransferStateDirection,
        _phase: VhostTransferStatePhase,
        _fd: File,
    ) -> VhostResult<Option<File>> {
        Err(invalid("device state transfer is not supported"))
    }

    fn check_device_state(&mut self) -> VhostResult<()> {
        Err(invalid("device state transfer is not supported"))
    }

    fn get_shmem_config(&mut self) -> VhostResult<VhostUserShMemConfig> {
        Err(invalid("no shared memory regions"))
    }

    fn set_log_base(&mut self, log: &VhostUserLog, file: File) -> VhostResult<()> {
        self.set_log(log.mmap_offset, log.mmap_size, &file)
    }
}
