//! The one error type of `vadapt bench`: what went wrong in a benchmark step.

use std::path::PathBuf;

/// Why a benchmark (or the whole suite) stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// SIGINT/SIGTERM (or a test) asked the run to stop.
    #[error("interrupted")]
    Interrupted,
    /// A child process could not be started.
    #[error("cannot start {what}")]
    Spawn {
        /// The program.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A child process exited while the step still needed it.
    #[error("{name} exited unexpectedly (status {status})\n{tail}")]
    ChildExited {
        /// Child name.
        name: String,
        /// Exit status as text.
        status: String,
        /// Last lines of its output.
        tail: String,
    },
    /// A child did not print what the step waited for in time.
    #[error("{name}: {what} did not happen within {secs} s\n{tail}")]
    Timeout {
        /// Child name (or the resource waited on).
        name: String,
        /// What was awaited.
        what: String,
        /// Bound, seconds.
        secs: f64,
        /// Last lines of its output.
        tail: String,
    },
    /// The daemon's control socket failed.
    #[error("vadapt control request failed")]
    Control(#[from] vadapt_dataplane::control::ControlError),
    /// The daemon refused a request.
    #[error("vadapt refused: {0}")]
    Refused(String),
    /// A child's output could not be understood.
    #[error("cannot parse {what}: {detail}")]
    Parse {
        /// What was parsed.
        what: String,
        /// Why / the offending text.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("cannot access {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A result file could not be written or read.
    #[error("result file failed")]
    Results(#[from] vadapt_results::ResultError),
    /// A measurement came out unusable (e.g. a guest run ended early).
    #[error("{0}")]
    Failed(String),
}

impl BenchError {
    /// `Io` for `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> BenchError {
        let path = path.into();
        move |source| BenchError::Io { path, source }
    }
}
