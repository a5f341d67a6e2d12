"""The paper's Table 1 timeline on the real daemon, scaled to a 2-core host.

Cases (``REAL_CASES``): R1 = 2 VMs x 3 threads x 64 B (B5's load, on the
real training grid), R2 = 2 VMs x 3 threads x 256 B (a size off the grid).
The paper's C1-C3 need 3-4 VMs x up to 5 threads; with the daemon on one
core and every guest on the other that is not a fair load here.

Each run (``daemon.Testbed``, synthetic guests, daemon on CPU 1, guests on
CPU 0): 0-10 s a fixed 2100 µs interval (``daemon.fixed_interval``), at 10 s
``set-policy`` on every port to NetAP or NetAP-ML (paper defaults, ring-full
safety net off, as ``evaluate``; NetAP-ML is told the workload through its
parameters, as the paper's ML-Predictor was), and at 20 s each port is
pinned at the interval it is polling at then (the paper keeps the found
interval; ``--keep-running`` lets the policies run on instead, as
``eval-sim`` does). Throughput is the sink's payload (frame bytes less the
Ethernet header), sampled every second from the daemon's counters and
averaged over 2-s windows; "during" = 10-20 s, "after" = 20-30 s; mean and
standard deviation over all 2-s windows of all runs, as Table 1.

Rounds to converge (1-s rounds): seconds after the switch until every
port's interval stays at its value at the end of the adaptation (at 20 s,
or at the end of the run with ``--keep-running``); a port whose interval
changed in the last second has not converged (NaN). With the paper's
constants NetAP's search takes 11 rounds, so within 10-20 s it does not
converge; its pinned interval is then its 11th probe.

The daemon's stats expose no "settled" flag, hence the interval trace.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from vadapt_lab.netap_ml import daemon as dm
from vadapt_lab.netap_ml.evaluate import pairs, plot, window

REAL_CASES = {"R1": (2, 3, 64), "R2": (2, 3, 256)}
"""Case: (VMs, threads per VM, message size in bytes)."""

FIXED_US = 2100
"""The interval of the first phase (the paper's)."""

TIMELINE = (10, 20, 30)
"""End of the fixed phase, of the adaptation, of the run, s (the paper's)."""

QUICK_TIMELINE = (4, 8, 12)
"""``--quick``: the same phases, 4 s each."""


def policy_config(policy: str, case: str) -> dict:
    """The ``set-policy`` parameters of ``policy`` (``netap`` or ``netap-ml``) for ``case``."""
    netap = {"kick_threshold_permille": 0}
    if policy == "netap":
        return {"kind": "netap"} | netap
    if policy == "netap-ml":
        vms, threads, size = REAL_CASES[case]
        return {
            "kind": "netap-ml",
            "vms": vms,
            "threads": threads,
            "msg_size": size,
            "netap": netap,
        }
    raise ValueError(f"unknown policy {policy!r} (netap, netap-ml)")


def second_sample(before: dict, after: dict, dt: float, t: int) -> dict:
    """One 1-s sample between two stats snapshots: ``t_s``, ``gbps``, ``iv_<port>`` (µs)."""
    payload = dm.sink_payload_bytes(after) - dm.sink_payload_bytes(before)
    row = {"t_s": t, "gbps": payload * 8 / dt / 1e9}
    row |= {f"iv_{p}": iv for p, iv in dm.port_intervals(after).items()}
    return row


def run_once(
    vadapt: Path,
    work: Path,
    case: str,
    policy: str,
    timeline=TIMELINE,
    keep_found=True,
    mode: str = dm.MODES[0],
    model: Path | None = None,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """One run of guests in ``mode``, NetAP-ML on forest ``model`` (default: the shipped
    one): its 1-s samples, and the interval each port was pinned at (if ``keep_found``)."""
    fixed_end, adapt_end, end = timeline
    vms, threads, size = REAL_CASES[case]
    bed = dm.Testbed(
        vadapt, work, vms, threads, size, dm.fixed_interval(FIXED_US), end + 5, mode, model
    )
    samples, kept = [], {}
    with bed:
        t0 = time.monotonic()
        prev, prev_t = bed.stats(), t0
        for sec in range(1, end + 1):
            time.sleep(max(0.0, t0 + sec - time.monotonic()))
            now, now_t = bed.stats(), time.monotonic()
            samples.append(second_sample(prev, now, now_t - prev_t, sec))
            prev, prev_t = now, now_t
            if sec == fixed_end:
                bed.set_policy_all(policy_config(policy, case))
            elif sec == adapt_end and keep_found:
                kept = dm.port_intervals(now)
                for port, iv in kept.items():
                    bed.set_policy(port, dm.fixed_interval(iv))
    return pd.DataFrame(samples), kept


def converged_after(samples: pd.DataFrame, switch_s: int, until_s: int) -> float:
    """Seconds after ``switch_s`` until every port's interval stays at its value at
    ``until_s``; NaN if one changed in the last second before ``until_s``."""
    s = samples[(samples["t_s"] > switch_s) & (samples["t_s"] <= until_s)].sort_values("t_s")
    worst = 0.0
    for col in [c for c in s.columns if c.startswith("iv_")]:
        iv = s[col].to_numpy()
        if len(iv) < 2 or iv[-1] != iv[-2]:
            return float("nan")
        k = len(iv) - 1
        while k > 0 and iv[k - 1] == iv[-1]:
            k -= 1
        # Sample k is the first to show the final interval (B5's definition).
        worst = max(worst, float(s["t_s"].iloc[k] - switch_s))
    return worst


def summarise(runs: dict, timeline=TIMELINE, keep_found=True) -> pd.DataFrame:
    """Table rows per (case, policy) from ``runs[(case, policy)]`` = [(samples, kept), ...]."""
    fixed_end, adapt_end, end = timeline
    table = []
    for (case, policy), rs in runs.items():
        during, after, conv, kept = [], [], [], []
        for samples, k in rs:
            s = pairs(samples)
            during += list(window(s, fixed_end, adapt_end))
            after += list(window(s, adapt_end, end))
            conv.append(converged_after(samples, fixed_end, adapt_end if keep_found else end))
            kept += list(k.values())
        table.append(
            {
                "case": case,
                "policy": policy,
                "runs": len(rs),
                "during_mean": float(np.mean(during)),
                "during_std": float(np.std(during)),
                "after_mean": float(np.mean(after)),
                "after_std": float(np.std(after)),
                "converged_runs": int(np.sum(~np.isnan(conv))),
                "rounds_median": float(np.nanmedian(conv)) if not np.isnan(conv).all() else np.nan,
                "kept_interval_us_median": float(np.median(kept)) if kept else np.nan,
            }
        )
    return pd.DataFrame(table)


def best_fixed(grid_csv: Path | None, case: str) -> tuple[float, float] | None:
    """Best measured interval of ``case`` in a ``grid-real`` CSV: (µs, Gb/s), if it is there."""
    if grid_csv is None or not grid_csv.exists():
        return None
    g = pd.read_csv(grid_csv)
    vms, threads, size = REAL_CASES[case]
    c = g.query("vms == @vms and threads == @threads and msg_size == @size")
    if c.empty:
        return None
    b = c.loc[c["gbps"].idxmax()]
    return float(b["interval_us"]), float(b["gbps"])


def report(df: pd.DataFrame, grid_csv: Path | None = None) -> str:
    """The table: NetAP vs NetAP-ML per case and window, ratio, rounds, best fixed."""
    lines = [
        "| case | window | NetAP mean ± std | NetAP-ML mean ± std | ML / NetAP mean "
        "| ML std / NetAP std |",
        "|---|---|---|---|---|---|",
    ]
    for case in df["case"].unique():
        a = df.query("case == @case and policy == 'netap'")
        m = df.query("case == @case and policy == 'netap-ml'")
        if a.empty or m.empty:
            continue
        a, m = a.iloc[0], m.iloc[0]
        for w in ("during", "after"):
            lines.append(
                f"| {case} | {w} | {a[f'{w}_mean']:.3f} ± {a[f'{w}_std']:.3f} "
                f"| {m[f'{w}_mean']:.3f} ± {m[f'{w}_std']:.3f} "
                f"| {m[f'{w}_mean'] / a[f'{w}_mean']:.3f} "
                f"| {m[f'{w}_std'] / a[f'{w}_std'] if a[f'{w}_std'] > 0 else float('nan'):.2f} |"
            )
    lines += [
        "",
        "| case | policy | runs | converged in the adaptation | rounds (median) "
        "| kept interval µs (median) | after / best fixed (grid-real) |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in df.iterrows():
        b = best_fixed(grid_csv, r["case"])
        vs = f"{r['after_mean'] / b[1]:.3f} (best {b[0]:.0f} µs, {b[1]:.3f})" if b else "n/a"
        lines.append(
            f"| {r['case']} | {r['policy']} | {r['runs']} | {r['converged_runs']} of {r['runs']} "
            f"| {r['rounds_median']:.0f} | {r['kept_interval_us_median']:.0f} | {vs} |"
        )
    return "\n".join(lines)


def evaluate_real(
    vadapt: Path,
    out: Path,
    cases: list[str],
    runs: int = 3,
    timeline=TIMELINE,
    keep_found: bool = True,
    grid_csv: Path | None = None,
    mode: str = dm.MODES[0],
    model: Path | None = None,
) -> pd.DataFrame:
    """Every case, both policies, ``runs`` runs of guests in ``mode`` (NetAP-ML on forest
    ``model``, default the shipped one): samples, table.csv and figure.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    results, curves = {}, {}
    for case in cases:
        for policy in ("netap", "netap-ml"):
            rs = []
            for k in range(1, runs + 1):
                samples, kept = run_once(
                    vadapt,
                    out / f"{case}-{policy}-{k}",
                    case,
                    policy,
                    timeline,
                    keep_found,
                    mode,
                    model,
                )
                samples.to_csv(out / f"{case}-{policy}-{k}.csv", index=False)
                rs.append((samples, kept))
                print(f"{case} {policy} run {k}/{runs}: kept {kept or 'running'}", flush=True)
            results[(case, policy)] = rs
            curves[(case, policy)] = pd.concat(
                [pairs(s).set_index("t_s")["gbps"] for s, _ in rs], axis=1
            ).mean(axis=1)
    df = summarise(results, timeline, keep_found)
    df.to_csv(out / "table.csv", index=False)
    plot(curves, out / "figure.png", {c: REAL_CASES[c] for c in cases}, timeline[:2])
    (out / "table.md").write_text(report(df, grid_csv) + "\n")
    return df
