//! A configuration problem, naming the field as the user wrote it.

use std::path::PathBuf;

/// A configuration problem, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}")]
    ReadFile {
        /// File path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML for this schema (message has the line).
    #[error("{path}: {message}")]
    ParseFile {
        /// File path.
        path: PathBuf,
        /// toml's message, which names the key and the line.
        message: String,
    },
    /// A field has an invalid value.
    #[error("invalid `{field}`: {reason}")]
    Field {
        /// Field as written by the user, e.g. `vm.queues` or `--vm queues`.
        field: String,
        /// Why.
        reason: String,
    },
}

pub(crate) fn field(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}
