//! What the core manager asks of one VM's QMP socket, served on that VM's
//! own [`PeerWorker`] thread: find its vCPU threads, and `stop` or `cont`
//! it (vSPACE-R's best-effort VMs).
//!
//! Finding the vCPU threads ties each `thread-id` to the QMP peer's own
//! process ([`VmProcess`]): a thread id that is not a thread of the VM's
//! QEMU is refused and reported, never moved.

use super::peer_worker::PeerWorker;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vadapt_host::vm_process::VmProcess;
use vadapt_host::TaskId;
use vadapt_qemu::qmp::{QmpClient, QmpError, QmpLimits};

/// Bounds of one exchange on the worker thread: as long as a slow QEMU
/// needs (the thread waits, not the manager).
const LIMITS: QmpLimits = QmpLimits {
    timeout: Duration::from_secs(2),
    max_line: 1 << 20,
};

/// A request to a VM's QMP worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QmpRequest {
    /// Find the VM's QEMU and its vCPU threads.
    LookUp,
    /// Pause (`stop`) or resume (`cont`) the VM.
    Run(VmRun),
}

/// `stop` or `cont`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmRun {
    /// `stop`.
    Stop,
    /// `cont`.
    Cont,
}

impl VmRun {
    /// The QMP command.
    pub fn command(self) -> &'static str {
        match self {
            VmRun::Stop => "stop",
            VmRun::Cont => "cont",
        }
    }
}

/// The VM's vCPU threads, as far as they are its QEMU's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VcpuLookUp {
    /// The VM's QEMU.
    pub process: VmProcess,
    /// Its vCPU threads, sorted, each once.
    pub vcpus: Vec<TaskId>,
    /// Thread ids QMP named that are not threads of that process.
    pub refused: Vec<u32>,
}

/// Why a `stop` or `cont` did not happen: QMP's error, sorted by what it
/// means for the VM.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    /// Nothing listens on the socket: the VM is gone.
    #[error(transparent)]
    Gone(QmpError),
    /// QEMU refused, or did not answer in time.
    #[error(transparent)]
    Failed(QmpError),
}

/// Why a VM's vCPU threads could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum LookUpError {
    /// QMP could not be reached, or did not answer `query-cpus-fast`.
    #[error("QMP {}", .socket.display())]
    Qmp {
        /// The QMP socket.
        socket: PathBuf,
        /// Cause.
        #[source]
        source: QmpError,
    },
    /// The process at the other end of the socket could not be told.
    #[error("QMP {}: cannot tell which process serves it", .socket.display())]
    PeerPid {
        /// The QMP socket.
        socket: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The process is not the VM's QEMU.
    #[error(transparent)]
    Process(#[from] vadapt_host::vm_process::VmProcessError),
    /// QMP named no thread of the VM's QEMU.
    #[error("none of the thread ids QMP named is a thread of the VM's QEMU (pid {pid})")]
    NoVcpuThread {
        /// The QEMU process.
        pid: u32,
    },
}

/// A reply from a VM's QMP worker.
#[derive(Debug)]
pub enum QmpReply {
    /// The outcome of [`QmpRequest::LookUp`].
    LookedUp(Result<VcpuLookUp, LookUpError>),
    /// The outcome of [`QmpRequest::Run`].
    Ran(VmRun, Result<(), RunFailure>),
}

/// Where one VM's QMP is, and how its QEMU is recognised.
#[derive(Clone, Debug)]
pub struct VmQmp {
    /// The QMP socket.
    pub socket: PathBuf,
    /// The VM's pidfile, if configured.
    pub pidfile: Option<PathBuf>,
    /// `/proc`, or a fake tree in tests.
    pub proc_root: PathBuf,
}

impl VmQmp {
    /// Start the worker thread serving this VM's requests.
    pub fn spawn(self) -> std::io::Result<PeerWorker<QmpRequest, QmpReply>> {
        PeerWorker::spawn("vadapt-qmp", move |req| self.serve(req))
    }

    /// Serve one request (on the worker thread; waits are bounded).
    pub fn serve(&self, req: QmpRequest) -> QmpReply {
        match req {
            QmpRequest::LookUp => QmpReply::LookedUp(self.look_up()),
            QmpRequest::Run(run) => QmpReply::Ran(run, run_bounded(&self.socket, run, LIMITS)),
        }
    }

    fn look_up(&self) -> Result<VcpuLookUp, LookUpError> {
        let qmp = |source| LookUpError::Qmp {
            socket: self.socket.clone(),
            source,
        };
        let mut client = QmpClient::connect_with(&self.socket, LIMITS).map_err(qmp)?;
        let peer = client.peer_pid().map_err(|source| LookUpError::PeerPid {
            socket: self.socket.clone(),
            source,
        })?;
        let process =
            VmProcess::identify(&self.proc_root, &self.socket, peer, self.pidfile.as_deref())?;
        let threads = client.query_cpus_fast().map_err(qmp)?;
        let mut vcpus = Vec::new();
        let mut refused = Vec::new();
        for t in threads {
            match process.thread(&self.proc_root, t.thread_id) {
                Ok(task) => vcpus.push(task),
                Err(_) => refused.push(t.thread_id),
            }
        }
        vcpus.sort();
        vcpus.dedup();
        refused.sort_unstable();
        refused.dedup();
        if vcpus.is_empty() && !refused.is_empty() {
            return Err(LookUpError::NoVcpuThread { pid: process.pid });
        }
        Ok(VcpuLookUp {
            process,
            vcpus,
            refused,
        })
    }
}

/// `stop` or `cont` on a fresh connection to `socket`, with `limits`.
pub fn run_bounded(socket: &Path, run: VmRun, limits: QmpLimits) -> Result<(), RunFailure> {
    match QmpClient::connect_with(socket, limits).and_then(|mut c| c.execute(run.command())) {
        Ok(_) => Ok(()),
        Err(e @ QmpError::Connect { .. })
            if matches!(
                std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<std::io::Error>())
                    .map(std::io::Error::kind),
                Some(ErrorKind::NotFound | ErrorKind::ConnectionRefused)
            ) =>
        {
            Err(RunFailure::Gone(e))
        }
        Err(e) => Err(RunFailure::Failed(e)),
    }
}
