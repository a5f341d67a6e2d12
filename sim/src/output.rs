//! Writing output files: the error every writer of results returns (runs,
//! sweeps, plots) and the two filesystem calls they share.

use std::path::Path;

/// Writing results failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Creating the directory or writing a file failed.
    #[error("cannot write {path}")]
    Io {
        /// The file or directory.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Serialising to JSON failed.
    #[error("cannot serialise results to JSON")]
    Json(#[source] serde_json::Error),
    /// Writing `result.json` failed.
    #[error("cannot store the run as a result file")]
    ResultFile(#[source] vadapt_results::ResultError),
    /// Drawing a plot failed.
    #[error("cannot draw {path}: {reason}")]
    Plot {
        /// The PNG file.
        path: String,
        /// What the plotting library said.
        reason: String,
    },
}

/// Create `dir` and its missing parents.
pub(crate) fn create_dir(dir: &Path) -> Result<(), WriteError> {
    std::fs::create_dir_all(dir).map_err(|source| WriteError::Io {
        path: dir.display().to_string(),
        source,
    })
}

/// Write `bytes` to `path`, replacing any file there.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    std::fs::write(path, bytes).map_err(|source| WriteError::Io {
        path: path.display().to_string(),
        source,
    })
}
