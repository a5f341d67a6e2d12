//! The OVS-DPDK harness of B6 (placeholder until the recipe is wired).

use super::error::BenchError;
use super::results::BenchFile;
use super::Ctx;

/// Run OVS-DPDK under the B2–B4 loads.
pub fn run(_ctx: &Ctx, _f: &mut BenchFile) -> Result<(), BenchError> {
    Err(BenchError::Failed(
        "the OVS-DPDK harness is not written yet".into(),
    ))
}

/// Tables of B6.
pub fn render(_f: &BenchFile) -> String {
    String::new()
}
