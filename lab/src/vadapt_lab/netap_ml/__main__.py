"""``python -m vadapt_lab.netap_ml {grid-sim,grid-real,train,compare-real,eval-sim,eval-real}``.

See the package docstring.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from vadapt_lab.netap_ml import daemon as dm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vadapt_lab.netap_ml", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grid-sim", help="run the paper's training grid in the simulator")
    g.add_argument("--vadapt", type=Path, default=Path("target/release/vadapt"))
    g.add_argument("--scenario", type=Path, default=Path("sim/scenarios/netap-ml-grid.toml"))
    g.add_argument("--repo", type=Path, default=Path("."), help="git tree for the revision")
    g.add_argument("--cores", type=int, default=2, help="threads of each sweep")
    g.add_argument("--out", type=Path, required=True, help="CSV to write")

    r = sub.add_parser("grid-real", help="a smaller grid measured on the real daemon")
    r.add_argument("--vadapt", type=Path, default=Path("target/release/vadapt"))
    r.add_argument("--repo", type=Path, default=Path("."), help="git tree for the revision")
    r.add_argument("--warmup", type=float, default=1.0, help="seconds before each window")
    r.add_argument("--window", type=float, default=2.0, help="measured seconds per point")
    r.add_argument("--quick", action="store_true", help="4 points only (smoke test)")
    r.add_argument(
        "--mode",
        choices=dm.MODES,
        default=dm.MODES[0],
        help="the guests' traffic (default raw frames; see daemon.FRAME_HEADERS)",
    )
    r.add_argument("--out", type=Path, required=True, help="CSV to write")

    c = sub.add_parser("compare-real", help="the sim-trained model's error on real-daemon data")
    c.add_argument("--model", type=Path, default=Path("policy/models/netap-ml.json"))
    c.add_argument("--sim", type=Path, default=Path("lab/data/netap-ml/sim-grid.csv"))
    c.add_argument("--real", type=Path, default=Path("lab/data/netap-ml/real-grid.csv"))
    c.add_argument("--seed", type=int, default=1, help="the train/held-out split's (train's)")

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

    v = sub.add_parser("eval-real", help="the paper's Table 1 timeline on the real daemon")
    v.add_argument("--vadapt", type=Path, default=Path("target/release/vadapt"))
    v.add_argument(
        "--cases", default="R1", help="comma-separated, of R1 (2x3x64 B), R2 (2x3x256 B)"
    )
    v.add_argument("--runs", type=int, default=3)
    v.add_argument(
        "--keep-running",
        action="store_true",
        help="let the policies run after 20 s instead of pinning the found interval",
    )
    v.add_argument(
        "--grid",
        type=Path,
        default=Path("lab/data/netap-ml/real-grid.csv"),
        help="grid-real CSV for the best fixed interval (if the case is on it)",
    )
    v.add_argument("--quick", action="store_true", help="smoke test: R1, 1 run of 12 s")
    v.add_argument(
        "--mode",
        choices=dm.MODES,
        default=dm.MODES[0],
        help="the guests' traffic (default raw frames; see daemon.FRAME_HEADERS)",
    )
    v.add_argument(
        "--model",
        type=Path,
        default=None,
        help="forest JSON for NetAP-ML (the daemon's netap_ml_model; default: the shipped one)",
    )
    v.add_argument("--out", type=Path, required=True, help="folder for samples, table, PNG")

    a = ap.parse_args(argv)
    t0 = time.monotonic()
    if a.command == "grid-sim":
        from vadapt_lab.netap_ml.grid import run_sim_grid

        n = run_sim_grid(a.vadapt, a.scenario, a.out, a.repo, cores=a.cores)
        print(f"wrote {n} rows to {a.out} in {time.monotonic() - t0:.1f} s")
    elif a.command == "grid-real":
        from vadapt_lab.netap_ml.grid_real import QUICK_GRID, REAL_GRID, run_real_grid

        grid = QUICK_GRID if a.quick else REAL_GRID
        n = run_real_grid(a.vadapt, a.out, a.repo, grid, a.warmup, a.window, mode=a.mode)
        print(f"wrote {n} rows to {a.out} in {time.monotonic() - t0:.1f} s")
    elif a.command == "compare-real":
        from vadapt_lab.netap_ml.compare import compare, report

        print(report(compare(a.model, a.sim, a.real, a.seed)))
    elif a.command == "eval-real":
        from vadapt_lab.netap_ml import evaluate_real as er

        cases = ["R1"] if a.quick else a.cases.split(",")
        unknown = [c for c in cases if c not in er.REAL_CASES]
        if unknown:
            ap.error(f"unknown case(s) {unknown}; known: {list(er.REAL_CASES)}")
        timeline = er.QUICK_TIMELINE if a.quick else er.TIMELINE
        runs = 1 if a.quick else a.runs
        df = er.evaluate_real(
            a.vadapt,
            a.out,
            cases,
            runs,
            timeline,
            not a.keep_running,
            a.grid,
            mode=a.mode,
            model=a.model,
        )
        print(er.report(df, a.grid))
        print(f"wrote {a.out} in {time.monotonic() - t0:.1f} s")
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
