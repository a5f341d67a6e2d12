#!/bin/sh
# vSPACE evaluation (issue 13, evaluation 1): per core allocator, max QPS
# under the SLO (P95 <= 1 ms), power at 50 kQPS, cores lent to a CPU-bound
# best-effort VM by vSPACE-R. Markdown tables on stdout; docs/simulation.md
# ("vSPACE") records a run. Each point: a constant load, 6 s simulated, the
# first 3 s not measured.
#   sim/scripts/vspace-eval.sh [--threads N] [--qps 50,150] [--only vSPACE-E,...]
set -eu
cd "$(dirname "$0")/../.."
nice -n 19 cargo build --release -p vadapt-sim --example vspace_eval >&2
exec nice -n 19 "${CARGO_TARGET_DIR:-target}/release/examples/vspace_eval" sim/scenarios/vspace-memcached.toml \
    --duration-s 6 --warmup-s 3 "$@"
