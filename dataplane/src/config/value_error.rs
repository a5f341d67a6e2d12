//! A value a key cannot take, as the `FromStr` of a key's type says it.

/// A value a key cannot take: the reason of a [`ConfigError::Field`](super::ConfigError::Field), and
/// the error of the `FromStr` of a key's type.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// Not one of the words the key takes.
    #[error("`{value}`: expected {expected}")]
    Expected {
        /// The value as written.
        value: String,
        /// The words the key takes, e.g. "`server` or `client`".
        expected: &'static str,
    },
    /// Not one of the words the key takes (worded as `is not`).
    #[error("`{value}` is not {expected}")]
    NotOneOf {
        /// The value as written.
        value: String,
        /// The words the key takes, e.g. "auto, copy or zerocopy".
        expected: &'static str,
    },
    /// Not a `:`-separated list of MAC addresses (`allowed_macs=`).
    #[error(
        "`{0}` is not MAC addresses separated by `:` (write each as 02-00-00-00-00-b1, or as \
         02:00:00:00:00:b1)"
    )]
    MacList(String),
    /// Not a `+`-separated list of prefixes (`allowed_ips=`).
    #[error(transparent)]
    PrefixList(#[from] vadapt_wire::IpPrefixError),
}

impl ValueError {
    /// `value` is not one of `expected` (worded "`value`: expected …").
    pub(crate) fn expected(value: &str, expected: &'static str) -> Self {
        ValueError::Expected {
            value: value.to_owned(),
            expected,
        }
    }
}
