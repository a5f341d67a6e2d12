//! Why the frontend could not set up the device.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::MTU;
use crate::driver::queue::QueueError;

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
    /// A message over the MTU the backend offers (`VIRTIO_NET_F_MTU`).
    #[error("--size {size} exceeds the {mtu}-byte MTU the backend offers (VIRTIO_NET_F_MTU)")]
    SizeOverDeviceMtu {
        /// `--size`, bytes of L2 payload.
        size: u32,
        /// The device's MTU, bytes.
        mtu: u16,
    },
    /// `--packed on`, and the backend does not offer `VIRTIO_F_RING_PACKED`.
    #[error("--packed on: the backend does not offer VIRTIO_F_RING_PACKED (bit 34); use --packed auto to fall back to split rings")]
    NoPackedRing,
    /// `--dirty-log`, and the backend offers no dirty-page logging
    /// (`VHOST_F_LOG_ALL` with `VHOST_USER_PROTOCOL_F_LOG_SHMFD`).
    #[error("--dirty-log: the backend does not offer VHOST_F_LOG_ALL with VHOST_USER_PROTOCOL_F_LOG_SHMFD")]
    NoDirtyLog,
    /// The dirty-page log could not be created.
    #[error("--dirty-log: cannot create the log")]
    DirtyLog(#[source] io::Error),
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

/// Maps a failed vhost-user request `op` to [`FrontendError::Protocol`].
pub(super) fn proto(op: &'static str) -> impl FnOnce(vhost::Error) -> FrontendError {
    move |source| FrontendError::Protocol { op, source }
}
