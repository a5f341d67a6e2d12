//! Why the daemon could not start, or a request to change it while it
//! runs (a port added or removed, limits or a policy changed, a reload)
//! was refused.

use super::port_state::PortStateError;
use crate::control::{self, ReloadReport};
use crate::port::frontend_socket::ListenError;
use crate::queue::policy_slot::PolicyRequestError;
use crate::switch::TapError;
use std::net::SocketAddr;
use std::path::PathBuf;
use vadapt_host::error_chain::error_chain;

/// Why the daemon could not start, or a change to it was refused. The
/// control socket answers a refused request with [`error_chain`] of it
/// (this error and its causes, `: `-separated).
///
/// [`error_chain`]: vadapt_host::error_chain::error_chain
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
    State(#[from] PortStateError),
    /// A port of the state file has the name of a port of the config
    /// file (`state_strict`).
    #[error(
        "cannot restore port `{port}` from the state file {file}: the config file has a port \
         of that name (--strict)"
    )]
    RestoreClash {
        /// The port.
        port: String,
        /// The state file.
        file: PathBuf,
    },
    /// A port of the state file could not be made (`state_strict`).
    // The cause is in the message, before `(--strict)`, so it is not a
    // `#[source]` as well (it would be said twice).
    #[error(
        "cannot restore port `{port}` from the state file {file}: {} (--strict)",
        error_chain(.cause)
    )]
    Restore {
        /// The port.
        port: String,
        /// The state file.
        file: PathBuf,
        /// Why it could not be made.
        cause: Box<DaemonError>,
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
    /// No port has this name.
    #[error("no port `{port}` (ports: {})", .ports.join(", "))]
    NoPort {
        /// The name asked for.
        port: String,
        /// The ports there are.
        ports: Vec<String>,
    },
    /// No VM port or uplink (the ports that run a policy) has this name.
    #[error("no VM port or uplink `{port}` (those running: {})", .running.join(", "))]
    NoPolicyPort {
        /// The name asked for.
        port: String,
        /// The VM ports and uplinks there are.
        running: Vec<String>,
    },
    /// A port was to be added at run time and could not be made.
    #[error("cannot add {kind} port `{port}`")]
    AddPort {
        /// `vm`, `sink`, `echo`, `tap` or `uplink`.
        kind: &'static str,
        /// The port.
        port: String,
        /// Cause.
        #[source]
        source: Box<DaemonError>,
    },
    /// A port added at run time could not be written to the state file;
    /// it was removed again.
    #[error("port `{port}` not added")]
    KeepPort {
        /// The port.
        port: String,
        /// Cause.
        #[source]
        source: PortStateError,
    },
    /// A port could not be removed from the state file; nothing changed.
    #[error("port `{port}` not removed")]
    ForgetPort {
        /// The port.
        port: String,
        /// Cause.
        #[source]
        source: PortStateError,
    },
    /// A run-time port's new rate limits could not be written to the state
    /// file; nothing changed.
    #[error("limits of `{port}` not changed")]
    KeepLimits {
        /// The port.
        port: String,
        /// Cause.
        #[source]
        source: PortStateError,
    },
    /// A run-time port's new policy runs, but the state file could not
    /// keep it: a restart brings the port back with its earlier policy.
    #[error("policy of `{port}` set, but not kept for a restart")]
    KeepPolicy {
        /// The port.
        port: String,
        /// Cause.
        #[source]
        source: PortStateError,
    },
    /// Rate limits were asked of a port of a kind that has none.
    #[error("port `{port}` is a {kind} port: rate limits apply to VM, TAP and uplink ports")]
    NoLimits {
        /// The port.
        port: String,
        /// `sink` or `echo`.
        kind: &'static str,
    },
    /// A VM port's or an uplink's policy could not take a change.
    #[error(transparent)]
    SetPolicy(PolicyRequestError),
    /// A VM port's or an uplink's running policy could not be retuned.
    #[error("port `{port}`")]
    Retune {
        /// The port.
        port: String,
        /// Cause.
        #[source]
        source: PolicyRequestError,
    },
    /// A reload was asked of a daemon given no configuration to read
    /// again ([`Daemon::set_config_source`](super::Daemon::set_config_source)).
    #[error("this daemon has no configuration to read again")]
    NoConfigSource,
    /// The configuration could not be read again; nothing changed.
    #[error("reload refused, nothing changed")]
    ReadConfig(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A reload stopped at a port that could not be added; what was
    /// applied before it stays.
    // The cause is in the message, before the report, so it is not a
    // `#[source]` as well (it would be said twice).
    #[error("port `{port}`: {} (applied before it: {applied})", error_chain(.cause))]
    ReloadStopped {
        /// The port that could not be added.
        port: String,
        /// What the reload had applied when it stopped.
        applied: Box<ReloadReport>,
        /// Why the port could not be added.
        cause: Box<DaemonError>,
    },
}
