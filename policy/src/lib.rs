//! vadapt's policy core: when does a queue worker service its virtqueues?
//!
//! A policy is a pure state machine. The worker (in the data plane, or in the
//! simulator) runs this cycle forever:
//!
//! ```text
//!   decision = policy.start(now)
//!   loop {
//!       wait as `decision.action` says            (Poll: not at all)
//!       service every queue once, at most `policy.budget()` packets each
//!       decision = policy.on_pass(&PassReport { .. what the pass saw .. })
//!   }
//! ```
//!
//! That cycle is carried out by one [`Executor`], which the daemon's queue
//! workers and the simulator both step; how a worker waits as a step says
//! (guest notifications, the re-check, kick thresholds, what ended the wait)
//! is the one [`wait_protocol`] both follow.
//!
//! The three actions are the only things a worker can be told to do
//! (`docs/architecture.md`): poll again now; sleep for a bounded time with guest
//! notifications off; or re-enable notifications, re-check the rings (closing
//! the race with a guest that added work meanwhile) and block until a kick.
//! Each decision also carries a CPU-frequency hint that the core manager may
//! carry out (EE-KBP).
//!
//! Nothing here reads a clock or does I/O: time comes in through
//! [`PassReport::now`], so the daemon and the simulator run the same code.
//!
//! The crate also holds the pure half of core management, [`vspace`]: every
//! period the caller reports how busy the VM's vCPU threads and the queue
//! workers were, and [`VspaceManager`] answers how many cores each group gets
//! next (vSPACE modes P, E and R) while it learns the groups' utilisation
//! thresholds from SLO violations.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod busypoll;
pub mod config;
pub mod eekbp;
pub mod executor;
pub mod fixed;
pub mod forest;
pub mod golden;
pub mod growshrink;
pub mod interrupt;
pub mod netap;
pub mod netap_ml;
pub mod retune;
pub mod ring_guard;
pub mod time;
pub mod vspace;
pub mod wait_protocol;
pub mod workload_estimate;

pub mod error;
pub mod interface;

pub use config::{PolicyConfig, PolicyKind};
pub use error::ConfigError;
pub use executor::{kick_fill, Executor, PassStats, Step, Wake, IDLE_RECHECK};
pub use interface::{
    Action, Budget, Decision, FreqHint, PassReport, Policy, PolicyStatus, WakeCause, MAX_SLEEP,
};
pub use retune::{Retune, RetuneError};
pub use ring_guard::{GuardState, RingGuard, RingGuarded};
pub use time::{Duration, Instant};
pub use vspace::{
    CoreAllocation, CoreAllocator, CoreSets, GroupLoad, PeriodMeasurement, PeriodOutcome,
    ThresholdExplorer, Thresholds, VspaceConfig, VspaceConfigError, VspaceManager, VspaceMode,
};
pub use wait_protocol::{
    begin_wait, end_wait, Begun, KickThreshold, Notifications, WaitKind, Woke,
};
