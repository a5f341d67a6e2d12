#!/usr/bin/env bash
# How long `vadapt serve` takes to stop: SIGTERM to exit, with many VM ports,
# optionally on a machine kept busy. The figure the stop deadline
# (vadapt/src/stop_signals.rs, STOP_DEADLINE) is set from.
#
#   scripts/stop-latency.sh [--ports N] [--runs N] [--busy] [--bin PATH]
#
#   --ports N   VM ports (server sockets, no frontend), default 64
#   --runs N    stops measured, default 30
#   --busy      run `stress-ng --cpu <nproc>` beside it (or, without
#               stress-ng, one shell busy loop per CPU)
#   --bin PATH  the vadapt binary, default target/release/vadapt
#
# Each run starts the daemon, waits until its control socket answers
# (`vadapt stats`), sends SIGTERM and times the exit; a run whose exit
# status is not 0 (the deadline passed) is counted and named. Prints each
# run's milliseconds, then the median, min and max.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORTS=64
RUNS=30
BUSY=0
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/vadapt"
while (($#)); do
    case "$1" in
    --ports) PORTS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --busy) BUSY=1; shift ;;
    --bin) BIN="$2"; shift 2 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -x "$BIN" ]] || { echo "no vadapt binary at $BIN (cargo build --release -p vadapt)" >&2; exit 1; }

DIR="$(mktemp -d /tmp/vadapt-stop-latency.XXXXXX)"
LOAD_PIDS=()
cleanup() {
    for p in "${LOAD_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT

if ((BUSY)); then
    if command -v stress-ng >/dev/null; then
        stress-ng --cpu "$(nproc)" --quiet &
        LOAD_PIDS+=($!)
    else
        for _ in $(seq "$(nproc)"); do
            bash -c 'while :; do :; done' &
            LOAD_PIDS+=($!)
        done
    fi
    sleep 1
fi

args=(--log-level warn serve --control "$DIR/control.sock")
for i in $(seq 0 $((PORTS - 1))); do
    args+=(--vm "name=vm$i,socket=$DIR/vm$i.sock")
done

times=()
failed=0
for r in $(seq "$RUNS"); do
    "$BIN" "${args[@]}" 2>>"$DIR/log" &
    pid=$!
    up=0
    for _ in $(seq 600); do
        if "$BIN" stats --control "$DIR/control.sock" >/dev/null 2>&1; then up=1; break; fi
        sleep 0.05
    done
    ((up)) || { echo "run $r: the daemon did not come up" >&2; kill -9 "$pid"; exit 1; }
    t0=$(date +%s%N)
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    times+=("$ms")
    if ((rc != 0)); then
        failed=$((failed + 1))
        echo "run $r: ${ms} ms, exit status $rc"
    else
        echo "run $r: ${ms} ms"
    fi
    left=$(find "$DIR" -name '*.sock' | wc -l)
    ((left == 0)) || echo "run $r: $left socket files left behind" >&2
done

sorted=$(printf '%s\n' "${times[@]}" | sort -n)
n=${#times[@]}
median=$(echo "$sorted" | sed -n "$(((n + 1) / 2))p")
echo "stop latency, $PORTS VM ports, $n runs$( ((BUSY)) && echo ', machine busy'): median ${median} ms, min $(echo "$sorted" | head -1) ms, max $(echo "$sorted" | tail -1) ms; $failed runs past the deadline (exit status not 0)"
