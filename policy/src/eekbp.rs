//! EeKbp policy (to be written).
use crate::config::{ConfigError, EekbpParams};
use crate::*;
/// EeKbp.
#[derive(Debug)]
pub struct EeKbp { _p: EekbpParams }
impl EeKbp {
    /// Check parameters.
    pub fn validate(_p: &EekbpParams) -> Result<(), ConfigError> { Ok(()) }
    /// Build.
    pub fn new(p: EekbpParams) -> Result<Self, ConfigError> { Ok(EeKbp { _p: p }) }
}
impl Policy for EeKbp {
    fn name(&self) -> &'static str { "eekbp" }
    fn budget(&self) -> Budget { Budget { packets: 64, bytes: u64::MAX } }
    fn start(&mut self, _now: Instant) -> Decision { Decision::WAIT_KICK }
    fn on_pass(&mut self, _pass: &PassReport) -> Decision { Decision::WAIT_KICK }
    fn status(&self) -> PolicyStatus { PolicyStatus::default() }
}
