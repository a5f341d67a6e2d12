//! Why the daemon could not start, or a port could not be added.

use crate::control;
use crate::port::frontend_socket::ListenError;
use crate::switch::TapError;
use std::net::SocketAddr;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A vhost-user socket could not be created.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// A TAP port could not be created.
    #[error(transparent)]
    Tap(#[from] TapError),
    /// An uplink could not be started.
    #[error("cannot start uplink `{port}`")]
    Uplink {
        /// The port.
        port: String,
        /// Cause.
        #[source]
        source: crate::uplink::UplinkError,
    },
    /// The control socket could not be created.
    #[error(transparent)]
    Control(#[from] control::ControlError),
    /// The metrics endpoint could not be bound.
    #[error("cannot listen for metrics on {addr}")]
    Metrics {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The NetAP-ML model is unusable.
    #[error(transparent)]
    Model(#[from] crate::netap_ml_model::ModelError),
    /// The pool of queue workers could not start.
    #[error(transparent)]
    NqWorkers(#[from] crate::worker::pool::NqWorkersError),
    /// A stop was asked for (SIGINT, SIGTERM) before start-up was
    /// complete; what had started was undone.
    #[error("a stop was requested during start-up")]
    StopRequested,
    /// The daemon is stopping: no port is added any more.
    #[error("the daemon is stopping")]
    Stopping,
    /// The state file (run-time ports) could not be opened or used.
    #[error(transparent)]
    State(#[from] super::port_state::PortStateError),
    /// A port of the state file could not be restored (`state_strict`).
    #[error("cannot restore port `{port}` from the state file {file}: {why} (--strict)")]
    Restore {
        /// The port.
        port: String,
        /// The state file.
        file: std::path::PathBuf,
        /// Why.
        why: String,
    },
    /// A system resource (eventfd, thread) could not be created.
    #[error("cannot create port `{port}`")]
    Port {
        /// Port name.
        port: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}
