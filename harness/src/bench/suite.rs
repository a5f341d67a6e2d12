//! The suite: every benchmark with its name, title and run function, in run
//! order. The report reads results in this order too.

use super::ctx::Ctx;
use super::error::BenchError;
use super::{
    adaptation, capture_cost, idle, latency, memory_per_port, nic_to_vm, ovs_pmd_sleep,
    papers_workload, partial_load, policer_accuracy, saturation, timer, vm_to_vm,
};
use vadapt_results::ResultFile;

/// One benchmark of the suite.
#[derive(Debug)]
pub(super) struct Bench {
    /// Short name, as `--only` takes it and the results file is named.
    pub(super) name: &'static str,
    /// One line: what it measures.
    pub(super) title: &'static str,
    /// Runs it, filling its results file.
    pub(super) run: fn(&Ctx, &mut ResultFile) -> Result<(), BenchError>,
}

/// The suite, in run order (OVS-DPDK last: lowest priority, slowest to set up).
pub(super) const SUITE: [Bench; 13] = [
    Bench {
        name: "b1",
        title: saturation::TITLE,
        run: saturation::run,
    },
    Bench {
        name: "capture",
        title: capture_cost::TITLE,
        run: capture_cost::run,
    },
    Bench {
        name: "b2",
        title: partial_load::TITLE,
        run: partial_load::run,
    },
    Bench {
        name: "b3",
        title: latency::TITLE,
        run: latency::run,
    },
    Bench {
        name: "b4",
        title: idle::TITLE,
        run: idle::run,
    },
    Bench {
        name: "b5",
        title: adaptation::TITLE,
        run: adaptation::run,
    },
    Bench {
        name: "b7",
        title: memory_per_port::TITLE,
        run: memory_per_port::run,
    },
    Bench {
        name: "b8",
        title: vm_to_vm::TITLE,
        run: vm_to_vm::run,
    },
    Bench {
        name: "b9",
        title: papers_workload::TITLE,
        run: papers_workload::run,
    },
    Bench {
        name: "b10",
        title: nic_to_vm::TITLE,
        run: nic_to_vm::run,
    },
    Bench {
        name: "policer",
        title: policer_accuracy::TITLE,
        run: policer_accuracy::run,
    },
    Bench {
        name: "timer",
        title: timer::TITLE,
        run: timer::run,
    },
    Bench {
        name: "b6",
        title: ovs_pmd_sleep::TITLE,
        run: ovs_pmd_sleep::run,
    },
];

/// Names of the suite's benchmarks, in run order.
pub fn names() -> Vec<&'static str> {
    SUITE.iter().map(|b| b.name).collect()
}
