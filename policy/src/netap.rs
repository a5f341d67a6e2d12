//! NetAp policy (to be written).
use crate::config::{ConfigError, NetapParams};
use crate::*;
/// NetAp.
#[derive(Debug)]
pub struct NetAp { _p: NetapParams }
impl NetAp {
    /// Check parameters.
    pub fn validate(_p: &NetapParams) -> Result<(), ConfigError> { Ok(()) }
    /// Build.
    pub fn new(p: NetapParams) -> Result<Self, ConfigError> { Ok(NetAp { _p: p }) }
}
impl Policy for NetAp {
    fn name(&self) -> &'static str { "netap" }
    fn budget(&self) -> Budget { Budget { packets: 64, bytes: u64::MAX } }
    fn start(&mut self, _now: Instant) -> Decision { Decision::WAIT_KICK }
    fn on_pass(&mut self, _pass: &PassReport) -> Decision { Decision::WAIT_KICK }
    fn status(&self) -> PolicyStatus { PolicyStatus::default() }
}
