"""A smaller training grid measured on the real daemon, to set beside the simulator's.

VMs {1, 2} x threads {1, 3} x message sizes {64, 512} B x 20 polling
intervals (50..3850 µs step 200) = 160 points, with the synthetic guest
(``daemon.Testbed``). Each (VMs, threads, size) combination is one testbed
whose guests run through all its intervals; each point switches every port
to the daemon's fixed-interval policy at the interval (``daemon.fixed_interval``), waits the warm-up
(1 s) and measures over the window (2 s). A fresh policy per point, but the
same guests and daemon: starting them per point would add ~1 s a point.

The CSV has the columns of ``sim-grid.csv`` (``grid.COLUMNS``) and the same
units, plus ``machine``:

- ``gbps``: payload throughput the sink received, all VMs, Gb/s (frame bytes
  less the 14-byte Ethernet header; the simulator's is TCP payload on its
  wire, see docs/netap-ml.md for what differs);
- ``host_cpu_pct``: the queue workers' CPU, % of one core;
- ``guest_cpu_pct``: the guest processes' CPU (all threads), % of one core;
- ``wakeups_per_s``: the workers' wake-ups (timer, kick, recheck, timeout);
- ``seed`` is empty (nothing is seeded), ``point_s`` = warm-up + window,
  ``warmup_s`` the warm-up, ``scenario`` the command lines and the policy
  each point sets, ``calibration`` / ``calibration_sha256`` are empty (no
  simulator), ``git_rev`` the tree's revision, ``machine`` the host.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from pathlib import Path

from vadapt_lab.netap_ml import daemon as dm
from vadapt_lab.netap_ml.grid import COLUMNS as SIM_COLUMNS
from vadapt_lab.netap_ml.grid import git_revision, write_rows

COLUMNS = (*SIM_COLUMNS, "machine")
"""CSV columns: the simulator grid's, then the host."""

REAL_GRID = {
    "vms": (1, 2),
    "threads": (1, 3),
    "msg_size": (64, 512),
    "interval_us": tuple(range(50, 4000, 200)),
}
"""2 x 2 x 2 x 20 = 160 points."""

QUICK_GRID = {
    "vms": (2,),
    "threads": (3,),
    "msg_size": (64,),
    "interval_us": (50, 1050, 2050, 3850),
}
"""Smoke test: 4 points of the heaviest combination."""

CONNECT_SLACK_S = 5.0
"""Guest run time beyond the points: start-up and connection."""


def point_row(
    before: dict, after: dict, window_s: float, guest_cpu_s: float, mode: str = dm.MODES[0]
) -> dict[str, float]:
    """Throughput, CPU and wake-ups between two stats snapshots ``window_s`` apart."""
    cpu0, wk0 = dm.worker_totals(before)
    cpu1, wk1 = dm.worker_totals(after)
    payload = dm.sink_payload_bytes(after, mode) - dm.sink_payload_bytes(before, mode)
    return {
        "gbps": payload * 8 / window_s / 1e9,
        "host_cpu_pct": (cpu1 - cpu0) / window_s * 100,
        "guest_cpu_pct": guest_cpu_s / window_s * 100,
        "wakeups_per_s": (wk1 - wk0) / window_s,
    }


def scenario(bed: dm.Testbed, interval_us: int, warmup_s: float, window_s: float) -> str:
    """The command lines of ``bed`` and what one point does."""
    return (
        f"{bed.commands()}; then set-policy on every port to "
        f"{json.dumps(dm.fixed_interval(interval_us))}, {warmup_s:g} s warm-up, "
        f"{window_s:g} s window"
    )


def run_real_grid(
    vadapt: Path,
    out_csv: Path,
    repo: Path,
    grid: dict[str, tuple[int, ...]] = REAL_GRID,
    warmup_s: float = 1.0,
    window_s: float = 2.0,
    work: Path | None = None,
    mode: str = dm.MODES[0],
) -> int:
    """Measure ``grid`` and write ``out_csv``; returns the rows written."""
    prov = {
        "seed": "",
        "point_s": warmup_s + window_s,
        "warmup_s": warmup_s,
        "calibration": "",
        "calibration_sha256": "",
        "git_rev": git_revision(repo),
        "machine": dm.machine(),
    }
    intervals = grid["interval_us"]
    combos = list(itertools.product(grid["vms"], grid["threads"], grid["msg_size"]))
    guest_s = len(intervals) * (warmup_s + window_s) + CONNECT_SLACK_S
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mlreal-grid-", dir=work) as tmp:
        for i, (vms, threads, size) in enumerate(combos):
            bed = dm.Testbed(
                vadapt,
                Path(tmp) / f"{vms}-{threads}-{size}",
                vms,
                threads,
                size,
                dm.fixed_interval(intervals[0]),
                guest_s,
                mode,
            )
            with bed:
                for iv in intervals:
                    bed.set_policy_all(dm.fixed_interval(iv))
                    time.sleep(warmup_s)
                    a, ga, ta = bed.stats(), bed.guest_cpu_seconds(), time.monotonic()
                    time.sleep(window_s)
                    b, gb, tb = bed.stats(), bed.guest_cpu_seconds(), time.monotonic()
                    row = point_row(a, b, tb - ta, gb - ga, mode)
                    rows.append(
                        {"vms": vms, "threads": threads, "msg_size": size, "interval_us": iv}
                        | {k: repr(v) for k, v in row.items()}
                        | prov
                        | {"scenario": scenario(bed, iv, warmup_s, window_s)}
                    )
            best = max(rows[-len(intervals) :], key=lambda r: float(r["gbps"]))
            print(
                f"[{i + 1}/{len(combos)}] vms={vms} threads={threads} msg_size={size}: "
                f"best {best['interval_us']} us at {float(best['gbps']):.3f} Gb/s "
                f"({time.monotonic() - t0:.1f} s so far)",
                flush=True,
            )
    return write_rows(out_csv, rows, COLUMNS)
