//! GrowShrink policy (to be written).
use crate::config::{ConfigError, GrowShrinkParams};
use crate::*;
/// GrowShrink.
#[derive(Debug)]
pub struct GrowShrink { _p: GrowShrinkParams }
impl GrowShrink {
    /// Check parameters.
    pub fn validate(_p: &GrowShrinkParams) -> Result<(), ConfigError> { Ok(()) }
    /// Build.
    pub fn new(p: GrowShrinkParams) -> Result<Self, ConfigError> { Ok(GrowShrink { _p: p }) }
}
impl Policy for GrowShrink {
    fn name(&self) -> &'static str { "growshrink" }
    fn budget(&self) -> Budget { Budget { packets: 64, bytes: u64::MAX } }
    fn start(&mut self, _now: Instant) -> Decision { Decision::WAIT_KICK }
    fn on_pass(&mut self, _pass: &PassReport) -> Decision { Decision::WAIT_KICK }
    fn status(&self) -> PolicyStatus { PolicyStatus::default() }
}
