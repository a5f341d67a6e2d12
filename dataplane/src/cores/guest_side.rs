//! vSPACE-Guest: the VM's online vCPUs and active queue pairs follow the
//! groups' sizes, through the QEMU guest agent when `qga = PATH` is
//! configured for the VM.
//!
//! The paper's guest side runs inside the VM and sets the number of active
//! vCPUs (cpusets) and vNQs (RSS/XPS) to match the host's groups. Here the
//! host asks the guest agent: `guest-set-vcpus` (the lowest-numbered vCPUs
//! stay online) for the vCPU group's size, and `guest-exec` of `ethtool -L
//! IFACE combined N` for the NQ group's size, capped by the port's queue
//! pairs. A guest's `ethtool -L` reaches vadapt as `SET_VRING_ENABLE`.
//!
//! Bounded, quiet and off the manager's period: a VM is asked at most once
//! per [`MIN_INTERVAL`], and only when what it should have differs from
//! what was last applied; after a failure it is asked again after
//! [`RETRY_AFTER`]; each distinct error is logged once. The exchange runs
//! on the VM's own [`PeerWorker`] thread: the period hands the target over
//! and picks up the outcome a later period, so an agent that answers late
//! or never delays only its own VM's guest side. The guest's vCPU list is
//! its word: it is deduplicated and capped at the VM's vCPU count
//! ([`qga::checked_vcpus`]) before anything is sent back.

use super::peer_worker::PeerWorker;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vadapt_host::error_chain::error_chain;
use vadapt_qemu::qga::{self, QgaLimits};

/// Least time between two requests to one VM's agent.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How long after a failed request the VM's agent is asked again.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// Deadlines of one request, on the worker thread.
const LIMITS: QgaLimits = QgaLimits {
    timeout: Duration::from_secs(2),
    max_line: 1 << 20,
    exec_timeout: Duration::from_secs(5),
};

/// What one VM's guest should have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestTarget {
    /// vCPUs online (at least 1).
    pub vcpus: usize,
    /// Active queue pairs (at least 1).
    pub queue_pairs: u16,
    /// The most vCPUs the guest may list: the VM's vCPU count where known,
    /// else [`qga::MAX_VCPUS`].
    pub max_vcpus: usize,
}

/// Why the guest agent did not apply a change.
#[derive(Debug, thiserror::Error)]
pub enum GuestAgentError {
    /// The agent's worker thread could not be started.
    #[error("cannot start the guest agent's thread")]
    Spawn(#[source] std::io::Error),
    /// `guest-set-vcpus` failed.
    #[error("guest-set-vcpus")]
    SetVcpus(#[source] qga::QgaError),
    /// The guest's `ethtool -L` (queue pairs) failed.
    #[error("ethtool -L")]
    SetQueuePairs(#[source] qga::QgaError),
}

/// One request to the agent's worker: what to change.
#[derive(Clone, Copy, Debug)]
struct Request {
    target: GuestTarget,
    vcpus: bool,
    pairs: bool,
}

/// What the worker did: each part asked for, with its outcome (the peer
/// text in an error escaped by the agent client).
#[derive(Debug)]
struct Reply {
    target: GuestTarget,
    vcpus: Option<Result<(usize, usize), GuestAgentError>>,
    pairs: Option<Result<(), GuestAgentError>>,
}

/// One VM's guest side.
#[derive(Debug)]
pub struct GuestSide {
    qga: Option<PathBuf>,
    iface: String,
    /// What was last applied (vCPUs online as the guest reported them).
    applied_vcpus: Option<usize>,
    applied_pairs: Option<u16>,
    last_try: Option<Instant>,
    failed: bool,
    /// The last error, logged once.
    pub error: Option<String>,
    worker: Option<PeerWorker<Request, Reply>>,
}

/// What [`GuestSide::drive`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestOutcome {
    /// No agent, nothing to change, too soon, or no reply yet.
    Nothing,
    /// Changed: a line for `vadapt cores`.
    Applied(String),
    /// A request failed (the error is in [`GuestSide::error`]).
    Failed,
}

impl GuestSide {
    /// The guest side of a VM with agent socket `qga` and interface `iface`
    /// (`None`: `eth0`).
    pub fn new(qga: Option<PathBuf>, iface: Option<String>) -> Self {
        GuestSide {
            qga,
            iface: iface.unwrap_or_else(|| "eth0".into()),
            applied_vcpus: None,
            applied_pairs: None,
            last_try: None,
            failed: false,
            error: None,
            worker: None,
        }
    }

    /// Whether an agent is configured.
    pub fn has_agent(&self) -> bool {
        self.qga.is_some()
    }

    /// vCPUs online and queue pairs active, as last applied.
    pub fn applied(&self) -> (Option<usize>, Option<u16>) {
        (self.applied_vcpus, self.applied_pairs)
    }

    /// Whether a request is due at `now` for `target`.
    pub fn due(&self, now: Instant, target: GuestTarget) -> bool {
        if self.qga.is_none() {
            return false;
        }
        let changed = self.applied_vcpus != Some(target.vcpus)
            || self.applied_pairs != Some(target.queue_pairs);
        let wait = if self.failed {
            RETRY_AFTER
        } else {
            MIN_INTERVAL
        };
        changed
            && self
                .last_try
                .is_none_or(|t| now.saturating_duration_since(t) >= wait)
    }

    /// Whether a request is with the agent's worker and not answered yet.
    pub fn in_flight(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| !w.idle())
    }

    /// Take the outcome of the last request if it came, then hand the
    /// worker a request for `target` if one is due (see the module docs).
    /// Never waits for the agent. `vm` names it in log lines.
    pub fn drive(&mut self, vm: &str, now: Instant, target: GuestTarget) -> GuestOutcome {
        let outcome = match self.worker.as_ref().and_then(PeerWorker::take) {
            Some(reply) => self.settle(vm, reply),
            None => GuestOutcome::Nothing,
        };
        if self.due(now, target) && !self.in_flight() {
            self.submit(vm, now, target);
        }
        outcome
    }

    fn submit(&mut self, vm: &str, now: Instant, target: GuestTarget) {
        let Some(path) = self.qga.clone() else { return };
        self.last_try = Some(now);
        if self.worker.is_none() {
            let iface = self.iface.clone();
            match PeerWorker::spawn("vadapt-qga", move |req: Request| serve(&path, &iface, req)) {
                Ok(w) => self.worker = Some(w),
                Err(e) => {
                    self.fail(vm, &GuestAgentError::Spawn(e));
                    return;
                }
            }
        }
        let req = Request {
            target,
            vcpus: self.applied_vcpus != Some(target.vcpus),
            pairs: self.applied_pairs != Some(target.queue_pairs),
        };
        if let Some(w) = &self.worker {
            w.submit(req);
        }
    }

    /// Record what the worker did.
    fn settle(&mut self, vm: &str, reply: Reply) -> GuestOutcome {
        let mut done = Vec::new();
        let mut result = Ok(());
        match reply.vcpus {
            Some(Ok((before, after))) => {
                // A guest with fewer vCPUs, or some it cannot offline,
                // ends elsewhere: remember the target, not to ask again.
                self.applied_vcpus = Some(reply.target.vcpus);
                done.push(format!("vCPUs online {before} -> {after}"));
            }
            Some(Err(e)) => result = Err(e),
            None => {}
        }
        match reply.pairs {
            Some(Ok(())) => {
                self.applied_pairs = Some(reply.target.queue_pairs);
                done.push(format!("queue pairs {}", reply.target.queue_pairs));
            }
            Some(Err(e)) => result = Err(e),
            None => {}
        }
        match result {
            Ok(()) if done.is_empty() => GuestOutcome::Nothing,
            Ok(()) => {
                self.failed = false;
                self.error = None;
                let line = format!("{vm}: guest {}", done.join(", "));
                tracing::info!(vm, "core manager: {line}");
                GuestOutcome::Applied(line)
            }
            Err(e) => {
                self.fail(vm, &e);
                GuestOutcome::Failed
            }
        }
    }

    /// Record `e` as [`GuestSide::error`] (one line, its causes included),
    /// logged when it is not the last one again.
    fn fail(&mut self, vm: &str, e: &GuestAgentError) {
        let e = error_chain(e);
        self.failed = true;
        if self.error.as_deref() != Some(&e) {
            tracing::warn!(vm, error = %e, "core manager: the guest agent did not apply vSPACE-Guest's change; host side only until it does");
        }
        self.error = Some(e);
    }
}

/// Serve one request on the worker thread.
fn serve(path: &std::path::Path, iface: &str, req: Request) -> Reply {
    let t = req.target;
    let vcpus = req.vcpus.then(|| {
        qga::set_online_vcpus(path, t.vcpus, t.max_vcpus, LIMITS)
            .map(|ch| (ch.before, ch.after))
            .map_err(GuestAgentError::SetVcpus)
    });
    let pairs = (req.pairs && !matches!(vcpus, Some(Err(_)))).then(|| {
        qga::set_queue_pairs(path, iface, t.queue_pairs, LIMITS)
            .map_err(GuestAgentError::SetQueuePairs)
    });
    Reply {
        target: t,
        vcpus,
        pairs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(vcpus: usize, queue_pairs: u16) -> GuestTarget {
        GuestTarget {
            vcpus,
            queue_pairs,
            max_vcpus: qga::MAX_VCPUS,
        }
    }

    /// Drive until the worker's reply is taken (the drive itself never
    /// waits; the test does).
    fn settled(g: &mut GuestSide, now: Instant, target: GuestTarget) -> GuestOutcome {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match g.drive("vm1", now, target) {
                GuestOutcome::Nothing if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                other => return other,
            }
        }
    }

    #[test]
    fn without_an_agent_nothing_is_due() {
        let g = GuestSide::new(None, None);
        assert!(!g.has_agent());
        assert!(!g.due(Instant::now(), t(1, 1)));
    }

    #[test]
    fn requests_are_rate_limited_and_retried_later_after_a_failure() {
        let dir = std::env::temp_dir().join(format!("nq-guest-side-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        // No socket there: every request fails at connect.
        let mut g = GuestSide::new(Some(dir.join("absent.qga")), None);
        let t0 = Instant::now();
        assert!(g.due(t0, t(1, 1)));
        assert_eq!(g.drive("vm1", t0, t(1, 1)), GuestOutcome::Nothing);
        assert!(!g.due(t0, t(1, 1)), "asked: not again at once");
        assert_eq!(settled(&mut g, t0, t(1, 1)), GuestOutcome::Failed);
        assert!(
            g.error.as_deref().unwrap().starts_with("guest-set-vcpus"),
            "{:?}",
            g.error
        );
        assert!(
            !g.due(t0 + MIN_INTERVAL, t(1, 1)),
            "failed: waits RETRY_AFTER"
        );
        assert!(g.due(t0 + RETRY_AFTER, t(1, 1)));
        assert_eq!(
            g.drive("vm1", t0 + Duration::from_millis(1), t(1, 1)),
            GuestOutcome::Nothing
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
