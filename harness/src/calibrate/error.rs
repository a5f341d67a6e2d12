//! Why calibration or validation failed.

use std::path::PathBuf;

/// Calibration or validation failed.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// The daemon did not start.
    #[error("cannot start the daemon")]
    StartDaemon(#[source] vadapt_dataplane::daemon::DaemonError),
    /// A synthetic guest failed to connect or run.
    #[error("synthetic guest `{vm}` failed")]
    Guest {
        /// VM port name.
        vm: String,
        /// The guest's error.
        #[source]
        source: vadapt_guest::GuestError,
    },
    /// A synthetic guest ended early or its thread panicked.
    #[error("synthetic guest `{vm}` did not finish: {reason}")]
    GuestEnded {
        /// VM port name.
        vm: String,
        /// What happened.
        reason: String,
    },
    /// A thread, eventfd or directory could not be set up.
    #[error("cannot set up {what}")]
    Setup {
        /// What.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A measurement produced nothing usable.
    #[error("measurement `{what}` is unusable: {reason}")]
    Measure {
        /// Which measurement.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The daemon refused a policy change.
    #[error("cannot change the policy")]
    SetPolicy(#[source] vadapt_dataplane::daemon::DaemonError),
    /// The output could not be written.
    #[error("cannot write {path}")]
    Write {
        /// File or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file written does not parse as a calibration (a bug here).
    #[error("the calibration written does not parse back: {0}")]
    Roundtrip(String),
    /// A validation scenario is invalid.
    #[error("invalid scenario")]
    Scenario(#[source] vadapt_sim::ScenarioError),
    /// A validation scenario describes something the real run cannot reproduce.
    #[error("{file}: cannot be run on the real daemon: {reason}")]
    Unsupported {
        /// Scenario file.
        file: String,
        /// Why.
        reason: String,
    },
    /// The simulation failed.
    #[error("simulation of {file} failed")]
    Sim {
        /// Scenario file.
        file: String,
        /// The cause.
        #[source]
        source: vadapt_sim::SimError,
    },
    /// A plot could not be drawn.
    #[error("cannot draw the validation plots")]
    Plot(#[source] vadapt_sim::WriteError),
}

pub(super) type Result<T> = std::result::Result<T, CalibrateError>;
