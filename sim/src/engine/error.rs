//! Why a simulation could not run to its end.

/// The simulation could not run to its end.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    /// More events than allowed happened within one simulated second: the
    /// scenario (or a policy) makes the model spin.
    #[error(
        "event cap hit: more than {cap} events in simulated second {second} \
         (max_events_per_sim_s; a policy polling an idle ring without sleeping does this)"
    )]
    EventCap {
        /// The simulated second, counted from 0.
        second: u64,
        /// The cap.
        cap: u64,
    },
    /// A policy could not be built.
    #[error("policy `{policy}` could not be built: {reason}")]
    BuildPolicy {
        /// Policy label.
        policy: String,
        /// Why.
        reason: String,
    },
}
