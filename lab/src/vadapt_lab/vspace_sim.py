"""Figure of the simulator's vSPACE evaluation (issue 13, evaluation 1).

    sim/scripts/vspace-eval.sh --threads 2 > /tmp/vspace-eval.md
    python -m vadapt_lab.vspace_sim /tmp/vspace-eval.md --out docs/img/sim

The input is the markdown that ``vspace_eval`` prints: its "# points" table
(one row per allocator and offered load). Written: ``vspace-allocators.png``,
P95 latency against offered load per allocator (log scale, the SLO as a
line) beside the power drawn and the cores of each group.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

POINTS_HEADER = "| allocator | kQPS | served kQPS | P95 µs |"
SLO_US = 1000.0


class EvalOutputError(ValueError):
    """The text is not ``vspace_eval``'s output."""


def parse_points(text: str) -> pd.DataFrame:
    """The "# points" table as a frame: allocator, kqps, served, p95_us, power_w, the
    cores per group (vcpu, nq, be, parked), and the time-sharing costs per request
    (preempt, slice_waits; NaN where the table has no such columns)."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(POINTS_HEADER))
    except StopIteration:
        raise EvalOutputError(f"no points table (a line starting {POINTS_HEADER!r})") from None
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6:
            raise EvalOutputError(f"short row: {line!r}")
        cores = [float(x) for x in cells[5].split("/")]
        rows.append(
            {
                "allocator": cells[0],
                "kqps": float(cells[1]),
                "served": float(cells[2]),
                "p95_us": float(cells[3]),
                "power_w": float(cells[4]),
                "vcpu": cores[0],
                "nq": cores[1],
                "be": cores[2],
                "parked": cores[3],
                "preempt": float(cells[6]) if len(cells) > 7 else float("nan"),
                "slice_waits": float(cells[7]) if len(cells) > 7 else float("nan"),
            }
        )
    if not rows:
        raise EvalOutputError("the points table has no rows")
    return pd.DataFrame(rows)


EXPLORER_HEADER = "| allocator | kQPS | rounds | state |"


def parse_explorer(text: str) -> list[dict]:
    """The "# explorer" table (Algorithm 3 over each vSPACE run), a dict a run:
    allocator, kqps, rounds, halted, the rounds by branch (adjusted: the violation
    branch; rewarded; kept), lowering (rounds that lowered a threshold), violating
    (SLO-violating periods) and each threshold's (min, max, final)."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(EXPLORER_HEADER))
    except StopIteration:
        raise EvalOutputError(f"no explorer table (a line starting {EXPLORER_HEADER!r})") from None
    runs = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 11:
            raise EvalOutputError(f"short row: {line!r}")
        try:
            th_vcpu, th_nq = (tuple(float(x) for x in c.split("/")) for c in cells[9:11])
            if len(th_vcpu) != 3 or len(th_nq) != 3:
                raise ValueError("a threshold is not min/max/final")
            runs.append(
                {
                    "allocator": cells[0],
                    "kqps": float(cells[1]),
                    "rounds": int(cells[2]),
                    "halted": cells[3] == "halted",
                    "adjusted": int(cells[4]),
                    "rewarded": int(cells[5]),
                    "kept": int(cells[6]),
                    "lowering": int(cells[7]),
                    "violating": int(cells[8]),
                    "th_vcpu": th_vcpu,
                    "th_nq": th_nq,
                }
            )
        except ValueError as e:
            raise EvalOutputError(f"bad row {line!r}: {e}") from None
    if not runs:
        raise EvalOutputError("the explorer table has no rows")
    return runs


def plot(points: pd.DataFrame, out: Path) -> Path:
    """Write ``vspace-allocators.png`` into ``out``; its path."""
    out.mkdir(parents=True, exist_ok=True)
    fig, (lat, power) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, g in points.groupby("allocator", sort=False):
        g = g.sort_values("kqps")
        lat.plot(g["kqps"], g["p95_us"], marker="o", ms=3, label=name)
        power.plot(g["kqps"], g["power_w"], marker="o", ms=3, label=name)
    lat.axhline(SLO_US, color="k", ls="--", lw=1, label="SLO (P95 1 ms)")
    lat.set_yscale("log")
    lat.set_xlabel("offered load, kQPS")
    lat.set_ylabel("P95 latency, µs")
    lat.set_title("memcached-like LC VM, 20 cores")
    lat.legend(fontsize=7)
    power.set_xlabel("offered load, kQPS")
    power.set_ylabel("power, W (model; vSPACE-R includes the BE VM)")
    power.set_title("power")
    fig.tight_layout()
    path = out / "vspace-allocators.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: parse the evaluation's markdown, write the figure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path, help="vspace_eval's markdown output")
    ap.add_argument("--out", type=Path, default=Path("docs/img/sim"))
    a = ap.parse_args(argv)
    try:
        points = parse_points(a.input.read_text(encoding="utf-8"))
    except (OSError, EvalOutputError) as e:
        print(f"vspace_sim: {a.input}: {e}", file=sys.stderr)
        return 1
    print(plot(points, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
