//! Why a policy's configuration was refused.

/// A parameter was out of its valid range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// The policy name is not one of [`crate::PolicyKind::ALL`].
    #[error(
        "unknown policy `{0}` (expected one of: interrupt, busy-poll, netap, netap-ml, growshrink, eekbp, fixed-interval[:US])"
    )]
    UnknownPolicy(String),
    /// A parameter is invalid; `param` names it as written in config files.
    #[error("invalid policy parameter `{param}`: {reason}")]
    InvalidParam {
        /// Parameter name, e.g. `min_interval_us`.
        param: &'static str,
        /// Why it is invalid.
        reason: String,
    },
}
