//! vadapt-sim: a discrete-event simulator of a virtualised host that runs
//! vadapt's **real** policy code (`vadapt-policy`) at the papers' scale.
//!
//! Each simulated queue worker steps a [`vadapt_policy::Executor`], the same
//! one the daemon's queue workers step, over a policy built by
//! [`vadapt_policy::PolicyConfig::build`] (or the fixed-interval policy of
//! sweeps, [`vadapt_policy::fixed::FixedInterval`]): it waits as each
//! [`vadapt_policy::Step`] says, runs a service pass within its budget, and
//! reports the pass back. There is no copy of policy or executor logic here:
//! the engine only models the time and CPU that each step takes.
//!
//! # The model, and where its numbers come from
//!
//! Costs live in a [`Calibration`] (`sim/calibration/default.toml`, every
//! value marked MEASURED or PLACEHOLDER there); workload parameters in the
//! scenario.
//!
//! * **Cores and scheduler** ([`sched`]): `host.cores` physical cores shared
//!   by every runnable thread — vCPU threads running guest senders/servers and
//!   queue workers in a pass — by processor sharing (equal shares, at most one
//!   core each: CFS's fluid limit). Oversubscription costs one
//!   `context_switch_ns` per `host.sched_slice_us` per core; every worker
//!   wake-up costs `wakeup_cpu_ns + context_switch_ns` of worker CPU
//!   (MEASURED: ~27 µs per wake-up in these VMs, `docs/architecture.md`). Short polling
//!   intervals thus burn CPU that the vCPUs need.
//! * **Core groups, pinning and what oversubscription costs** ([`cores`],
//!   `[host.core_alloc]`): threads run only on their group's cores — one
//!   time-shared group (the default: every thread on every core), or a vCPU
//!   group and an NQ group on disjoint cores (static isolation, vSPACE).
//!   In a time-shared group a queue worker's wake-up preempts the vCPU
//!   serving a request (rate = worker wake-ups ÷ cores; cost = 2 context
//!   switches + the worker's run, or a whole 3 ms CFS slice when a third
//!   thread is queued on the core); re-pinning migrates threads (50 µs cache
//!   refill each, PLACEHOLDER). A control period (100 ms) runs the policy
//!   crate's own `VspaceManager::on_period` and `CoreSets::place` (modes P,
//!   E, R with a CPU-bound best-effort VM) or a CoreNap-like time-sharing
//!   allocator. Every constant and its source is in the [`cores`] docs.
//!   Stream loads are unaffected (their vCPUs are not preempted in the
//!   model; only the per-group shares apply), unless `host.vcpu_sched =
//!   "slices"`: then sender groups take the vCPU cores in turns of
//!   `sched_slice_us`, as CFS runs CPU-bound threads, instead of all at once
//!   at a fraction of a core.
//! * **VMs and closed-loop senders** (netperf TCP_STREAM-like): `threads`
//!   sender threads on at most `vcpus` vCPUs; a thread spends `send_msg_ns +
//!   msg_size * send_byte_ps` per message and `xmit_segment_ns` per segment;
//!   small messages coalesce into `segment_bytes` segments (TCP with Nagle /
//!   autocork), one descriptor chain each; with `coalesce = "since-room"`
//!   a segment carries what was written since the ring last had room, as
//!   the synthetic guest's `tcp-stream` writers post (one message a segment
//!   while the queue runs, a pile-up of up to `segment_bytes` a thread
//!   while it is stopped). Defaults are chosen so that one
//!   thread on one core sends ~0.85 Gb/s of 64-byte messages, the NetAP
//!   paper's per-thread rate (~5 Gb/s on ~5.5 guest cores, its Tables 3–4).
//!   Senders are fluid between events: only ring indices that matter (the
//!   host's kick index, a full ring) create events.
//! * **Virtqueues** ([`ring`]): finite (`ring_size`, 256 by default, QEMU's
//!   TX queue size) with `VIRTIO_RING_F_EVENT_IDX` semantics: the guest kicks
//!   only when it passes the host's `avail_event`. A full ring stops the
//!   guest's queue: its senders block, its vCPUs halt (freeing the core), and
//!   it asks for a call after 3/4 of the outstanding chains are used
//!   (Linux `virtqueue_enable_cb_delayed`).
//! * **Kicks and calls**: a kick is a VM exit costing `kick_ns` of vCPU time
//!   and wakes a waiting worker after `wake_latency_ns`; a call is an
//!   interrupt injection costing `call_ns` of vCPU time, and a halted vCPU
//!   resumes after `wake_latency_ns`.
//! * **Service passes**: a pass takes the chains pending at its start, up to
//!   the policy's budget and the NIC queue's room, and costs
//!   `pass_overhead_ns + n * (per_packet_ns + nic_packet_ns) + bytes *
//!   per_byte_ps` of worker CPU (MEASURED: 27–68 cycles/packet at 2.6 GHz for
//!   the copy loop). Chains are returned (used) at the pass end.
//! * **Timers**: a sleep ends `timer_overshoot_ns` late (Linux's default 50 µs
//!   timer slack); wake-up latencies and overshoots get ±`jitter` seeded noise.
//! * **NIC** ([`nic`]): a FIFO of `nic_queue_packets` drained at
//!   `line_rate_gbps` (10 Gb/s default) with 24 bytes of wire overhead per
//!   frame; a full queue pushes back on the workers. Throughput is payload
//!   bytes leaving the wire.
//! * **Open-loop request/response** (memcached-like): Poisson arrivals at a
//!   piecewise-linear rate spread over the VM's queues; the worker moves
//!   requests into the guest (one call per batch), `server_threads` serve them
//!   FIFO with an exp / const / lognormal service time (scaled by the vCPU's
//!   CPU share at dispatch), responses go back through the TX ring (kicking a
//!   waiting worker) and the NIC. Latency = departure − arrival.
//! * **NAPI-like receive** (optional `[host.napi]`, [`napi`]): a
//!   request/response load's packets land in a NIC RX ring and reach the
//!   worker through a hardIRQ and softIRQ polls on the worker's core (64
//!   packets a poll, rounds of 300 or 2 ms, deferral to ksoftirqd), which
//!   preempt or share that core with the worker: the baseline (NAPI) of
//!   the EE-KBP paper.
//! * **Frequency and power** (optional `[host.power]`): the policy's
//!   `FreqHint` sets its worker's frequency (slower work at lower
//!   frequencies); energy integrates `active_w` for busy core time (vCPUs at
//!   the top frequency, workers at theirs) and `idle_w` of the lowest state for
//!   idle cores.
//!
//! Left out, on purpose: RX of TCP ACKs for the stream load, per-core run
//! queues (the [`cores`] model places threads on cores at random instead),
//! the load balancer's migrations in a time-shared group, preemption of
//! vCPUs by other vCPUs, SMT, NUMA, guest RX ring stalls for the RR load.
//!
//! # Determinism
//!
//! Same scenario + seed → the same result and byte-identical output files:
//! seeded `SmallRng`s, a `BinaryHeap` event queue ordered by (time, sequence
//! number), queues processed in index order, no wall-clock reads.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod calibration;
pub mod cli;
pub mod cores;
mod engine;
pub mod napi;
pub mod nic;
mod output;
pub mod plot;
mod producer;
pub mod result;
mod result_file;
pub mod ring;
mod run;
pub mod scenario;
pub mod sched;
pub mod sweep;
mod vcpu_slices;

pub use calibration::Calibration;
pub use cli::{run_cli, SimArgs, SimCommand, SweepArgs};
pub use engine::{SimError, Trace, TracedPass};
pub use output::WriteError;
pub use result::SimResult;
pub use run::{run_scenario, trace_scenario};
pub use scenario::{Scenario, ScenarioError};
pub use sweep::{sweep, ParamRange, SweepError, SweepReport};
