//! The suite: every benchmark with its name, title and run function, in run
//! order. The report reads results in this order too.

use super::ctx::Ctx;
use super::error::BenchError;
use super::{b1, b2, b3, b4, b5, b6, b7, b8, b9, timer};
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
pub(super) const SUITE: [Bench; 10] = [
    Bench {
        name: "b1",
        title: b1::TITLE,
        run: b1::run,
    },
    Bench {
        name: "b2",
        title: b2::TITLE,
        run: b2::run,
    },
    Bench {
        name: "b3",
        title: b3::TITLE,
        run: b3::run,
    },
    Bench {
        name: "b4",
        title: b4::TITLE,
        run: b4::run,
    },
    Bench {
        name: "b5",
        title: b5::TITLE,
        run: b5::run,
    },
    Bench {
        name: "b7",
        title: b7::TITLE,
        run: b7::run,
    },
    Bench {
        name: "b8",
        title: b8::TITLE,
        run: b8::run,
    },
    Bench {
        name: "b9",
        title: b9::TITLE,
        run: b9::run,
    },
    Bench {
        name: "timer",
        title: timer::TITLE,
        run: timer::run,
    },
    Bench {
        name: "b6",
        title: b6::TITLE,
        run: b6::run,
    },
];

/// Names of the suite's benchmarks, in run order.
pub fn names() -> Vec<&'static str> {
    SUITE.iter().map(|b| b.name).collect()
}
