//! The uplink as the switch sees it: an [`Egress`] whose frames wait in a
//! backlog per NIC queue for that queue's worker, and the notification
//! between the switch and the workers (as a VM port's,
//! [`crate::port::VmPort`]).

use super::busy_poll::{NapiDefer, NapiGuard};
use crate::config::UplinkPortConfig;
use crate::frames::{Backlog, FrameBatch};
use crate::metrics::{DropReason, PortStats};
use crate::policing::LimitsSlot;
use crate::queue::policy_slot::{PolicyRequestError, PolicySlot};
use crate::switch::{Egress, Ingress, PortId};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use vadapt_policy::{PolicyConfig, PolicyKind, Retune};
use vmm_sys_util::eventfd::EventFd;

/// The sysfs root the interface's settings are under.
const SYS: &str = "/sys";

/// One NIC queue's side of the switch.
#[derive(Debug)]
pub(crate) struct QueueSlot {
    /// Frames from the switch waiting for the TX ring.
    pub(crate) backlog: Backlog,
    /// Wakes the queue's worker blocked waiting for the NIC.
    pub(crate) wake: EventFd,
    /// True while the worker is blocked.
    pub(crate) waiting: AtomicBool,
    /// While the worker sleeps a timed sleep with a kick threshold
    /// (NetAP's ring-full safety net): the backlog length that wakes it
    /// early; 0 otherwise.
    pub(crate) wake_at: AtomicUsize,
    /// The queue's policy: asked for, switched and retuned here, taken by
    /// its worker (as a VM port's, one per NIC queue: each queue's worker
    /// runs an instance of its own).
    pub(crate) policy: PolicySlot,
}

/// An uplink port on the switch.
#[derive(Debug)]
pub struct Uplink {
    /// Configuration.
    pub cfg: UplinkPortConfig,
    /// Port counters, a queue per NIC queue.
    pub stats: Arc<PortStats>,
    pub(crate) queues: Vec<QueueSlot>,
    ingress: OnceLock<Ingress>,
    /// TSC cycles a nanosecond for the workers' clocks, if the TSC is used.
    pub(crate) tsc_per_ns: Option<f64>,
    /// Rate limits on what the wire sends into the switch (`cfg.limits` at
    /// first; `vadapt set-limits` changes them), one set of buckets shared
    /// by the queue workers ([`LimitsSlot::with_shared`]).
    pub(crate) limits: LimitsSlot,
    /// The interface's IRQ deferral while the uplink runs EE-KBP. A leaf
    /// lock: nothing else is locked while it is held.
    napi: Mutex<NapiSlot>,
}

/// The interface's IRQ deferral for preferred busy polling
/// ([`super::busy_poll`]): set while the uplink runs and its policy is
/// EE-KBP.
#[derive(Debug, Default)]
struct NapiSlot {
    /// Where the old settings are recorded: set while the uplink runs.
    record_dir: Option<PathBuf>,
    /// The settings changed, written back when dropped.
    guard: Option<NapiGuard>,
}

impl Uplink {
    /// An uplink for `cfg` with backlogs of `backlog` frames, not yet on
    /// the switch; its queues run the port's policy, or `default_policy`
    /// where it names none (validated when the uplink starts). Its workers
    /// read the time from the TSC at `tsc_per_ns` cycles a nanosecond
    /// ([`crate::clock::PassClock`]), or from `clock_gettime` when `None`.
    pub fn new(
        cfg: UplinkPortConfig,
        backlog: usize,
        default_policy: PolicyConfig,
        tsc_per_ns: Option<f64>,
    ) -> std::io::Result<Arc<Self>> {
        let stats = Arc::new(PortStats::new(
            &cfg.name,
            crate::metrics::PortKind::Uplink,
            usize::from(cfg.queues),
        ));
        let policy = cfg.policy.unwrap_or(default_policy);
        *stats.policy.lock().unwrap_or_else(|e| e.into_inner()) = policy.kind().to_string();
        let queues = (0..cfg.queues)
            .map(|_| {
                Ok(QueueSlot {
                    backlog: Backlog::new(backlog),
                    wake: EventFd::new(libc::EFD_NONBLOCK)?,
                    waiting: AtomicBool::new(false),
                    wake_at: AtomicUsize::new(0),
                    policy: PolicySlot::new(policy),
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Arc::new(Uplink {
            limits: LimitsSlot::new(cfg.limits),
            cfg,
            stats,
            queues,
            ingress: OnceLock::new(),
            tsc_per_ns,
            napi: Mutex::new(NapiSlot::default()),
        }))
    }

    /// Port name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Largest frame taken either way (not a GSO frame), bytes.
    pub fn max_frame(&self) -> usize {
        crate::net::max_frame(self.cfg.mtu.unwrap_or(crate::net::DEFAULT_MTU))
    }

    /// Our way into the switch: set once, right after the switch attached us.
    pub fn attach(&self, ingress: Ingress) {
        let _ = self.ingress.set(ingress);
    }

    /// Our way into the switch (`None` before [`Uplink::attach`]).
    pub fn ingress(&self) -> Option<&Ingress> {
        self.ingress.get()
    }

    /// Our switch port id (`usize::MAX` before [`Uplink::attach`]).
    pub fn port_id(&self) -> PortId {
        self.ingress.get().map_or(usize::MAX, Ingress::port)
    }

    /// The policy the queues run (the last switch's, or the configured one).
    pub fn policy_config(&self) -> PolicyConfig {
        self.queues[0].policy.config()
    }

    /// Switch every queue's worker to `policy`, each after its current
    /// pass (`vadapt set-policy`, as [`crate::port::VmPort::set_policy`]).
    /// Refused, nothing changed, if `policy` is invalid.
    pub fn set_policy(&self, policy: PolicyConfig) -> Result<(), PolicyRequestError> {
        policy.validate()?;
        for (q, slot) in self.queues.iter().enumerate() {
            slot.policy.switch(policy)?;
            self.kick_worker(q);
        }
        *self.stats.policy.lock().unwrap_or_else(|e| e.into_inner()) = policy.kind().to_string();
        if let Err(e) = self.napi_follow(policy.kind()) {
            tracing::warn!(
                port = self.name(),
                error = %vadapt_host::error_chain::error_chain(&e),
                "cannot set the NIC's IRQ deferral for EE-KBP: its busy polling runs without it"
            );
        }
        Ok(())
    }

    /// The interface's IRQ deferral for `kind` while the uplink runs
    /// (after [`Uplink::napi_start`]): EE-KBP's set, and the old settings
    /// back for any other policy. Does nothing when the uplink is not
    /// running.
    pub(crate) fn napi_follow(
        &self,
        kind: PolicyKind,
    ) -> Result<(), super::busy_poll::BusyPollError> {
        let mut slot = self.napi.lock().unwrap_or_else(|e| e.into_inner());
        let Some(dir) = slot.record_dir.clone() else {
            return Ok(());
        };
        if kind != PolicyKind::Eekbp {
            slot.guard = None;
        } else if slot.guard.is_none() {
            slot.guard = Some(NapiGuard::take(
                Path::new(SYS),
                &self.cfg.iface,
                &dir,
                NapiDefer::EEKBP,
                self.name(),
            )?);
        }
        Ok(())
    }

    /// The uplink starts: the interface's IRQ deferral follows the policy
    /// from now on, the old settings recorded in `record_dir`.
    pub(crate) fn napi_start(
        &self,
        record_dir: &Path,
    ) -> Result<(), super::busy_poll::BusyPollError> {
        self.napi
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record_dir = Some(record_dir.into());
        let r = self.napi_follow(self.policy_config().kind());
        if r.is_err() {
            self.napi_stop();
        }
        r
    }

    /// The uplink stops: the interface's old IRQ deferral back.
    pub(crate) fn napi_stop(&self) {
        let mut slot = self.napi.lock().unwrap_or_else(|e| e.into_inner());
        slot.record_dir = None;
        slot.guard = None;
    }

    /// Change a parameter of every queue's running policy (`vadapt
    /// retune`): refused, nothing changed, if the policy has no such
    /// parameter or the value is invalid.
    pub fn retune(&self, r: Retune) -> Result<(), PolicyRequestError> {
        // Every queue runs the same policy config: the first one's check
        // answers for all.
        self.queues[0].policy.retune(r)?;
        for (q, slot) in self.queues.iter().enumerate() {
            if q > 0 {
                slot.policy.retune(r)?;
            }
            self.kick_worker(q);
        }
        Ok(())
    }

    /// Wake queue `q`'s worker if it is blocked.
    pub(crate) fn kick_worker(&self, q: usize) {
        let _ = self.queues[q].wake.write(1);
    }
}

impl Egress for Uplink {
    /// Frames for the wire: onto the backlog of NIC queue `flow` modulo the
    /// queue count (the sender's queue: one flow stays on one queue).
    fn deliver(&self, frames: &FrameBatch, which: &[u16], flow: u16) {
        let q = usize::from(flow) % self.queues.len();
        let slot = &self.queues[q];
        let (_, dropped) = slot.backlog.push(frames, which);
        if dropped > 0 {
            self.stats.queues[q].drop(DropReason::BacklogFull, dropped);
        }
        // Pairs with the worker's store of `waiting` (or `wake_at`) before
        // its re-check.
        std::sync::atomic::fence(Ordering::SeqCst);
        let at = slot.wake_at.load(Ordering::Relaxed);
        if slot.waiting.load(Ordering::Relaxed) || (at > 0 && slot.backlog.held() >= at) {
            self.kick_worker(q);
        }
    }
}
