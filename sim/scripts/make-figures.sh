#!/usr/bin/env bash
# Regenerates every figure and table input of docs/simulation.md.
# Usage: sim/scripts/make-figures.sh [OUT_DIR]   (from the repository root)
# Needs a release build of the simulator driver:
#   cargo build --release -p vadapt-sim --example simrun
# (`vadapt sim ...` takes the same arguments once the binary wires it in.)
set -euo pipefail
OUT=${1:-/tmp/vadapt-sim-figures}
SIM=${SIM:-${CARGO_TARGET_DIR:-target}/release/examples/simrun}
IMG=docs/img/sim
mkdir -p "$OUT" "$IMG"
lscpu | grep 'Model name' > "$OUT/machine.txt"

# Figure 2: throughput vs fixed polling interval, per bundled scenario.
for f in sim/scenarios/netap-*.toml; do
  n=$(basename "$f" .toml)
  "$SIM" sim sweep "$f" --param interval=50..4000:50 --out "$OUT/sweep-$n" | tee "$OUT/sweep-$n.txt"
  cp "$OUT/sweep-$n/sweep.png" "$IMG/sweep-$n.png"
done

# NetAP timeline runs (convergence, gain over interrupt mode).
for f in sim/scenarios/netap-*.toml; do
  n=$(basename "$f" .toml)
  "$SIM" sim "$f" --out "$OUT/run-$n" | tee "$OUT/run-$n.txt"
  cp "$OUT/run-$n/throughput.png" "$IMG/run-$n-throughput.png"
  cp "$OUT/run-$n/intervals.png" "$IMG/run-$n-intervals.png"
done

# Table 1 grid: VMs {1,2,3,6} x threads {1,2,4,6}, intervals 100..5000 us.
for v in 1 2 3 6; do
  base=$(ls sim/scenarios/netap-${v}vm-*.toml | head -1)
  for t in 1 2 4 6; do
    "$SIM" sim sweep "$base" --set threads=$t --param interval=100..5000:100 \
      --out "$OUT/grid-${v}vm-${t}t" > "$OUT/grid-${v}vm-${t}t.txt"
  done
done

# vSPACE memcached ramp.
"$SIM" sim sim/scenarios/vspace-memcached.toml --out "$OUT/run-vspace-memcached" | tee "$OUT/run-vspace-memcached.txt"
cp "$OUT/run-vspace-memcached/latency.png" "$IMG/vspace-memcached-latency.png"
echo "outputs in $OUT, figures in $IMG"
