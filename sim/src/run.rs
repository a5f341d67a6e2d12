//! Running a scenario: the simulator's entry points into the engine.

use crate::engine::{Engine, SimError, Trace};
use crate::result::SimResult;
use crate::scenario::Scenario;

/// Run `scenario` with `seed`, recording the executor calls of one queue
/// worker (the first `max_passes` passes of queue `queue`).
pub fn trace_scenario(
    scenario: &Scenario,
    seed: u64,
    queue: usize,
    max_passes: usize,
) -> Result<Trace, SimError> {
    let trace = Trace {
        queue,
        max_passes,
        ..Trace::default()
    };
    let (_, t) = Engine::new(scenario, seed)?
        .with_trace(trace)
        .run_traced()?;
    Ok(t.unwrap_or_default())
}

/// Run `scenario` to its end with `seed`.
pub fn run_scenario(scenario: &Scenario, seed: u64) -> Result<SimResult, SimError> {
    let mut r = Engine::new(scenario, seed)?.run()?;
    r.seed = seed;
    Ok(r)
}
