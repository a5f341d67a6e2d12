#!/usr/bin/env python3
"""Compare two `vadapt bench --out` folders (before and after a change).

For every benchmark file in both, rows are matched by their labels (the
string fields and the load parameters); for each numeric metric the median
over the rounds is taken on both sides, and the after/before ratio printed
as a spread (count, median, 10th and 90th percentile), separately for the
anchors' rows (DPDK, OVS, kernel: code the change did not touch, so their
spread is the noise of the two runs) and for vadapt's rows.

Usage: python3 scripts/bench_compare.py BEFORE_DIR AFTER_DIR
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
from pathlib import Path

LOAD = ("frame", "threads", "ports", "queues", "rate_pps", "pps")


def groups(rows: list[dict]) -> dict:
    g: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        label = tuple((k, v) for k, v in sorted(r.items()) if isinstance(v, str) or k in LOAD)
        for k, v in r.items():
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
            if numeric and k != "run" and k not in LOAD:
                g[label][k].append(v)
    return g


def ratios(before: Path, after: Path) -> list[tuple[str, tuple, str, float]]:
    out = []
    for f in sorted(before.glob("*.json")):
        if f.name == "suite.json" or not (after / f.name).exists():
            continue
        gb = groups(json.loads(f.read_text())["rows"])
        ga = groups(json.loads((after / f.name).read_text())["rows"])
        for label, metrics in gb.items():
            for k, vb in metrics.items():
                va = ga.get(label, {}).get(k)
                mb = statistics.median(vb)
                if va and mb:
                    out.append((f.name, label, k, statistics.median(va) / mb))
    return out


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    v = sorted(values)
    p10, p90 = v[len(v) // 10], v[9 * len(v) // 10]
    return f"{len(v)} metrics, median {statistics.median(v):.3f}, p10 {p10:.3f}, p90 {p90:.3f}"


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rs = ratios(Path(sys.argv[1]), Path(sys.argv[2]))
    ours = [r for r in rs if ("backend", "vadapt") in r[1]]
    anchors = [
        r
        for r in rs
        if ("backend", "vadapt") not in r[1]
        and any(
            k in ("backend", "sender") and str(v).startswith(("dpdk", "ovs", "kernel"))
            for k, v in r[1]
        )
    ]
    print("after/before, median over rounds per metric:")
    print(f"  anchors (not our code; the runs' noise): {spread([r[3] for r in anchors])}")
    print(f"  vadapt: {spread([r[3] for r in ours])}")
    print(f"  all: {spread([r[3] for r in rs])}")
    by_file = collections.defaultdict(list)
    for r in rs:
        by_file[r[0]].append(r[3])
    for name, v in sorted(by_file.items()):
        print(f"  {name}: {spread(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
