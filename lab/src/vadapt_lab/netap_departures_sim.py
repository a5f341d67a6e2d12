"""NetAP's MinChange and MaxRound, measured in the simulator (docs/netap.md).

The paper names both (Algorithm 1, lines 11 and 17) and gives no values;
vadapt's 0.2 and 300 are its own. This command runs ``vadapt sim`` (the same
policy code as the daemon) on two scenarios of lab/data/netap-departures/
for every (``min_change``, ``max_rounds``) pair asked for:

- ``steady-2vm-3t.toml``: the papers' TCP workload, 660 simulated seconds,
  nothing changes. What a setting costs when there is nothing to find:
  throughput and host CPU over the ``steady`` period, and the searches it
  restarts (each restart is ~11 rounds of probing other intervals).
- ``changing-rr.toml``: an offered load that steps at 200 s and 400 s. How
  fast a setting notices: per step, the seconds until each worker's search
  restarts and until its interval stops moving again.

Each scenario's timeline has one ``policy = { kind = "netap" }`` line; the
command writes a copy per pair with that line carrying the pair, and the
calibration ``include`` made absolute so the copy can live elsewhere.
Restarts are read from the samples' ``round_w<i>`` (a worker's round within
its search): a restart is a sample whose round is lower than the one before.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd

from vadapt_lab.netap_ml.daemon import toml_value
from vadapt_lab.results import load_results

TEMPLATE = 'policy = { kind = "netap" }'
"""The scenario line each pair replaces."""

MIN_CHANGES = (0.05, 0.1, 0.2, 0.4)
MAX_ROUNDS = (50, 300, 0)
"""The pairs measured by default: every combination (0 = never restart on a count)."""

SCENARIOS = Path("lab/data/netap-departures")
STEADY, CHANGING = "steady-2vm-3t.toml", "changing-rr.toml"
STEPS_S = (200.0, 400.0)
"""When ``changing-rr.toml``'s offered load steps, simulated s."""


class SimDeparturesError(RuntimeError):
    """A scenario template or a simulator run is not what this command expects."""


def variant_text(
    base: str, base_dir: Path, min_change: float, max_rounds: int, extra: dict | None = None
) -> str:
    """``base`` scenario text with NetAP at (``min_change``, ``max_rounds``) and the
    ``extra`` NetAP parameters, and an absolute ``include`` (resolved against
    ``base_dir``)."""
    if base.count(TEMPLATE) != 1:
        raise SimDeparturesError(f"the scenario needs exactly one line `{TEMPLATE}`")
    params = {"kind": "netap", "min_change": min_change, "max_rounds": max_rounds}
    policy = f"policy = {toml_value(params | (extra or {}))}"
    text = base.replace(TEMPLATE, policy)

    def absolute(m: re.Match) -> str:
        return f'include = "{(base_dir / m.group(1)).resolve()}"'

    return re.sub(r'^include = "([^"]+)"', absolute, text, count=1, flags=re.M)


def restart_times(samples: pd.DataFrame, worker: int) -> list[float]:
    """Sample times (s) at which ``worker``'s search restarted (its round went down)."""
    s = samples.sort_values("t_s")
    rounds = s[f"round_w{worker}"].tolist()
    times = s["t_s"].tolist()
    return [t for t, prev, cur in zip(times[1:], rounds, rounds[1:], strict=False) if cur < prev]


def last_move(samples: pd.DataFrame, worker: int, start: float, end: float) -> float | None:
    """Last sample time in (``start``, ``end``] at which ``worker``'s interval
    differs from the sample before; None if it never moved."""
    s = samples.sort_values("t_s")
    ivs = s[f"interval_us_w{worker}"].tolist()
    times = s["t_s"].tolist()
    moves = [
        t
        for t, prev, cur in zip(times[1:], ivs, ivs[1:], strict=False)
        if start < t <= end and cur != prev
    ]
    return moves[-1] if moves else None


def workers(samples: pd.DataFrame) -> list[int]:
    """Indices of the workers that have ``round_w<i>`` columns."""
    return sorted(int(c[len("round_w") :]) for c in samples.columns if c.startswith("round_w"))


def steady_row(df: pd.DataFrame, period: str = "steady") -> dict:
    """Throughput, host CPU and restarts of a steady run's ``period``."""
    p = df[(df["table"] == "periods") & (df["variant"] == period)].iloc[0]
    samples = df[df["table"] == "samples"]
    restarts = sum(
        sum(1 for t in restart_times(samples, w) if p["from_s"] < t <= p["to_s"])
        for w in workers(samples)
    )
    return {"gbps": p["gbps"], "host_cpu_pct": p["host_cpu_pct"], "restarts": restarts}


def step_row(df: pd.DataFrame, step_s: float, until_s: float) -> dict:
    """How the workers answered a load step at ``step_s``: median seconds to their
    first restart and to their interval's last move before ``until_s`` (NaN when
    none restarted / moved), how many restarted, the restarts in all, and the
    host CPU and P99 latency of the period that starts at the step."""
    samples = df[df["table"] == "samples"]
    periods = df[(df["table"] == "periods") & (df["from_s"] == step_s)]
    if periods.empty:
        raise SimDeparturesError(f"the scenario has no period starting at the step, {step_s} s")
    nan = float("nan")
    detect, settle, restarted, total = [], [], 0, 0
    for w in workers(samples):
        rs = [t for t in restart_times(samples, w) if step_s < t <= until_s]
        total += len(rs)
        if rs:
            restarted += 1
            detect.append(rs[0] - step_s)
        mv = last_move(samples, w, step_s, until_s)
        if mv is not None:
            settle.append(mv - step_s)
    return {
        "detect_s": statistics.median(detect) if detect else nan,
        "settled_s": statistics.median(settle) if settle else nan,
        "workers_restarted": restarted,
        "restarts": total,
        "host_cpu_pct": periods.iloc[0]["host_cpu_pct"],
        "p99_us": periods.iloc[0]["p99_us"],
    }


def run_sim(vadapt: Path, scenario: Path, out: Path) -> pd.DataFrame:
    """``nice -n 19 vadapt sim SCENARIO --out OUT``; its result.json."""
    argv = ["nice", "-n", "19", str(vadapt), "sim", str(scenario), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SimDeparturesError(f"{shlex.join(argv)} failed:\n{done.stderr[-2000:]}")
    return load_results(out / "result.json")


def fmt(x: float, digits: int = 3) -> str:
    return "–" if x != x else f"{x:.{digits}g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vadapt_lab.netap_departures_sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--vadapt", type=Path, default=Path("target/release/vadapt"))
    ap.add_argument("--scenarios", type=Path, default=SCENARIOS, help="folder of the templates")
    ap.add_argument("--min-change", type=float, nargs="+", default=list(MIN_CHANGES))
    ap.add_argument("--max-rounds", type=int, nargs="+", default=list(MAX_ROUNDS))
    ap.add_argument(
        "--no-kick-probe",
        action="store_true",
        help="kick_probe = false in every run: the paper's search without vadapt's check",
    )
    ap.add_argument("--out", type=Path, required=True, help="folder for runs, CSVs and tables")
    args = ap.parse_args(argv)
    extra = {"kick_probe": False} if args.no_kick_probe else {}
    if not args.vadapt.is_file():
        ap.error(f"no vadapt binary at {args.vadapt} (cargo build --release)")
    args.out.mkdir(parents=True, exist_ok=True)
    steady, changing = [], []
    for mc in args.min_change:
        for mr in args.max_rounds:
            label = {"min_change": mc, "max_rounds": mr}
            for name, rows in ((STEADY, steady), (CHANGING, changing)):
                base = args.scenarios / name
                scen = args.out / f"{base.stem}-mc{mc}-mr{mr}.toml"
                scen.write_text(variant_text(base.read_text(), base.parent, mc, mr, extra))
                df = run_sim(args.vadapt, scen, args.out / scen.stem)
                if name == STEADY:
                    rows.append(label | steady_row(df))
                else:
                    bounds = [*STEPS_S, df.attrs["params"]["duration_s"]]
                    for step, until in zip(bounds, bounds[1:], strict=False):
                        rows.append(label | {"step_s": step} | step_row(df, step, until))
            print(f"min_change {mc} max_rounds {mr} done", file=sys.stderr, flush=True)
    for fname, rows in (("steady.csv", steady), ("changing.csv", changing)):
        with (args.out / fname).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    lines = [
        "| min_change | max_rounds | Gbit/s | host CPU % | restarts (all workers) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['min_change']} | {r['max_rounds']} | {fmt(r['gbps'], 4)} "
        f"| {fmt(r['host_cpu_pct'])} | {r['restarts']} |"
        for r in steady
    ]
    lines += [
        "",
        "| min_change | max_rounds | step at s | workers restarted | s to first restart "
        "(median) | s to last interval move (median) | restarts | host CPU % | P99 µs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['min_change']} | {r['max_rounds']} | {r['step_s']:g} | {r['workers_restarted']} "
        f"| {fmt(r['detect_s'])} | {fmt(r['settled_s'])} | {r['restarts']} "
        f"| {fmt(r['host_cpu_pct'])} | {fmt(r['p99_us'])} |"
        for r in changing
    ]
    table = "\n".join(lines)
    (args.out / "tables.md").write_text(table + "\n")
    print(table)
    print(f"(cpus: {os.cpu_count()}; runs in {args.out})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
