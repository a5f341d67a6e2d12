//! Whether a host feature (cpufreq, RAPL) can be used, and if not, why.

/// Whether a host feature can be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// The feature works on this host.
    Available,
    /// It does not; `reason` says why, in a sentence fit for a log line.
    Unavailable {
        /// Why, e.g. "/sys/devices/system/cpu/cpu0/cpufreq does not exist".
        reason: String,
    },
}

impl Availability {
    /// True for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}
