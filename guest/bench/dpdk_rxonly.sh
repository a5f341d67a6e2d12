#!/bin/bash
# The synthetic guest's ceiling against DPDK's vhost PMD (testpmd rxonly, busy polling).
# 1 thread, closed loop; forwarding lcore on CPU 1, guest pinned to CPU 0.
# Env: RUNS (5), DUR (3s), EXIT (exit cost ns, 0), SIZE (64), BATCH (tx batch, 1),
#      GUEST (binary; default: release build of the `guest` example).
# Prints one line per run and the median; rates swing a lot on shared machines
# (docs/architecture.md, "Facts the code relies on"),
# so read guest CPU ns/packet beside Mpps.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GUEST=${GUEST:-${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/guest}
[ -x "$GUEST" ] || { echo "build first: cargo build --release -p vadapt-guest --example guest" >&2; exit 1; }
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not installed (apt-get install dpdk)" >&2; exit 1; }
DIR=$(mktemp -d); S=$DIR/vh.sock
dpdk-testpmd --lcores '0@0,1@1' --no-huge -m 1024 --no-pci --file-prefix=gbench$$ \
  --vdev "net_vhost0,iface=$S,queues=1" -- --total-num-mbufs=8192 --forward-mode=rxonly \
  --stats-period 1 --record-core-cycles > "$DIR/testpmd.log" 2>&1 &
PMD=$!
trap 'kill $PMD 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 1 120); do [ -S "$S" ] && break; sleep 0.5; done
echo "rev $(git -C "$ROOT" rev-parse --short HEAD)  size ${SIZE:-64}  exit-cost ${EXIT:-0} ns  tx-batch ${BATCH:-1}"
for r in $(seq 1 "${RUNS:-5}"); do
  taskset -c 0 "$GUEST" --socket "$S" --duration "${DUR:-3s}" --exit-cost-ns "${EXIT:-0}" \
    --size "${SIZE:-64}" --tx-batch "${BATCH:-1}" --json > "$DIR/run$r.json"
done
kill -INT $PMD; wait $PMD || true
python3 - "$DIR" "${RUNS:-5}" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
rates = []
for r in range(1, n + 1):
    j = json.load(open(f"{d}/run{r}.json"))
    mpps = j["sent_packets"] / j["elapsed"] / 1e6
    rates.append(mpps)
    print(f"run {r}: {mpps:7.3f} Mpps  guest cpu {j['cpu_seconds']*1e9/max(1, j['sent_packets']):5.0f} ns/pkt"
          f" ({100*j['cpu_seconds']/j['elapsed']:3.0f}% busy)  kicks {j['kicks']}  calls {j['calls']}"
          f"  stalls {j['ring_full_stalls']} ({j['stall_ns']/1e6:.0f} ms)")
print(f"median {statistics.median(rates):.3f} Mpps, max {max(rates):.3f} Mpps")
PY
grep -E "RX-total|CPU cycles" "$DIR/testpmd.log" | tail -2
