"""``python -m vadapt_lab.netap_ml {grid-sim,train,eval-sim}``: see the package docstring."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vadapt_lab.netap_ml", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grid-sim", help="run the paper's training grid in the simulator")
    g.add_argument("--vadapt", type=Path, default=Path("target/release/vadapt"))
    g.add_argument("--scenario", type=Path, default=Path("sim/scenarios/netap-ml-grid.toml"))
    g.add_argument("--repo", type=Path, default=Path("."), help="git tree for the revision")
    g.add_argument("--cores", type=int, default=2, help="threads of each sweep")
    g.add_argument("--out", type=Path, required=True, help="CSV to write")

    t = sub.add_parser("train", help="compare LR/ABR/KRR/RFR and export the forest")
    t.add_argument("data", type=Path, help="grid CSV (grid-sim's output)")
    t.add_argument("--out", type=Path, required=True, help="forest JSON to write")
    t.add_argument("--golden", type=Path, help="golden file for the Rust evaluator")
    t.add_argument("--max-bytes", type=int, default=2_000_000, help="largest forest JSON")
    t.add_argument("--iter", type=int, default=8, help="randomized-search candidates per model")
    t.add_argument("--seed", type=int, default=1)

    e = sub.add_parser("eval-sim", help="the paper's Table 1 / Figure 4 in the simulator")
    e.add_argument("--vadapt", type=Path, default=Path("target/release/vadapt"))
    e.add_argument("--repo", type=Path, default=Path("."))
    e.add_argument("--runs", type=int, default=10)
    e.add_argument("--out", type=Path, required=True, help="folder for runs, table1.csv, PNG")

    a = ap.parse_args(argv)
    t0 = time.monotonic()
    if a.command == "grid-sim":
        from vadapt_lab.netap_ml.grid import run_sim_grid

        n = run_sim_grid(a.vadapt, a.scenario, a.out, a.repo, cores=a.cores)
        print(f"wrote {n} rows to {a.out} in {time.monotonic() - t0:.1f} s")
    elif a.command == "eval-sim":
        from vadapt_lab.netap_ml.evaluate import evaluate, report

        print(report(evaluate(a.vadapt, a.repo, a.out, a.runs)))
        print(f"wrote {a.out} in {time.monotonic() - t0:.1f} s")
    else:
        from vadapt_lab.netap_ml.train import train_command

        train_command(a.data, a.out, a.golden, a.max_bytes, a.iter, a.seed)
        print(f"done in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
