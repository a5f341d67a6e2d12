//! Why a result file could not be written or read.

use std::path::PathBuf;

/// Writing or reading a [`ResultFile`](crate::ResultFile) failed.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    /// Serialising the file to JSON failed.
    #[error("cannot encode results for {path}")]
    Encode {
        /// The file that was to be written.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// Writing the file failed.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Reading the file failed (other than its absence).
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a result file.
    #[error("cannot parse {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
}
