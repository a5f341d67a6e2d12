//! Why a vSPACE configuration was refused.

/// A vSPACE parameter was out of its valid range. Returned by
/// [`VspaceConfig::validate`](super::config::VspaceConfig::validate) and by
/// every constructor that checks its part of the configuration
/// ([`CoreAllocator::new`](super::core_alloc::CoreAllocator::new),
/// [`ThresholdExplorer::new`](super::thresholds::ThresholdExplorer::new),
/// [`VspaceManager::new`](super::manager::VspaceManager::new)).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum VspaceConfigError {
    /// A parameter is invalid; `param` names it as written in config files.
    #[error("invalid vSPACE parameter `{param}`: {reason}")]
    InvalidParam {
        /// Parameter name, e.g. `margin` or `thresholds.weight`.
        param: &'static str,
        /// Why it is invalid.
        reason: String,
    },
}

/// Shorthand for [`VspaceConfigError::InvalidParam`].
pub(crate) fn invalid(param: &'static str, reason: impl Into<String>) -> VspaceConfigError {
    VspaceConfigError::InvalidParam {
        param,
        reason: reason.into(),
    }
}
