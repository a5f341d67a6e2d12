"""How well the shipped, simulator-trained model predicts the real daemon.

Three questions, each on the simulator's held-out rows (the 20 % split
``train`` held out, same seed) and on the real-daemon grid (``grid-real``):

1. **Raw RMSE**, Gb/s. On real data this mostly measures the simulator's
   calibration: its host is the paper's (24 cores, 10 GbE, TCP senders),
   the real grid runs raw frames from a synthetic guest on a 2-core machine,
   so the absolute levels differ.
2. **RMSE after normalising each curve by its maximum** (one curve = one
   (VMs, threads, size) over its intervals; measured values by the measured
   maximum, predictions by the predicted maximum over the same intervals).
   This is the meaningful one for the policy: NetAP-ML uses only where the
   predicted curve peaks, which a per-curve scale does not move.
3. **The argmax**: for each curve, the interval the model picks (best of
   50..4000 step 50, ties to the longer, as ``policy/src/netap_ml.rs``)
   against the measured best; whether the measured best lies in the
   ± 500 µs search range around the pick; the measured throughput at the
   measured interval nearest to the pick, as a fraction of the measured
   best; and the correlation of picked and measured best intervals across
   curves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from vadapt_lab.netap_ml import FEATURES, PAPER_GRID, TARGET
from vadapt_lab.netap_ml import export as ex

CURVE = ["vms", "threads", "msg_size"]
"""Columns naming one curve (throughput against interval)."""

HALF_RANGE_US = 500
"""NetAP-ML's search half range (the paper's ± 500 µs)."""


def rmse(a, b) -> float:
    """Root-mean-square difference."""
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def best_interval(intervals, values) -> int:
    """Interval of the largest value; ties go to the longer interval (as the policy)."""
    iv, v = np.asarray(intervals), np.asarray(values)
    return int(iv[v == v.max()].max())


def picks(doc: dict, curves: pd.DataFrame) -> pd.Series:
    """The model's best interval over the paper's 80 intervals, per curve row."""
    grid = np.array(PAPER_GRID["interval_us"], dtype=np.float64)
    out = []
    for _, c in curves.iterrows():
        x = np.column_stack([np.full(len(grid), c[k], dtype=np.float64) for k in CURVE] + [grid])
        out.append(best_interval(grid, ex.predict(doc, x)))
    return pd.Series(out, index=curves.index, name="picked_us")


def normalised(df: pd.DataFrame, col: str) -> pd.Series:
    """``df[col]`` divided by its curve's maximum."""
    return df[col] / df.groupby(CURVE)[col].transform("max")


def argmax_table(doc: dict, df: pd.DataFrame) -> pd.DataFrame:
    """Per curve of ``df``: measured best, the model's pick, and how good the pick is."""
    rows = []
    for key, c in df.groupby(CURVE):
        c = c.sort_values("interval_us")
        best = best_interval(c["interval_us"], c[TARGET])
        rows.append(dict(zip(CURVE, key, strict=True)) | {"best_us": best})
        rows[-1]["best_gbps"] = float(c[TARGET].max())
    t = pd.DataFrame(rows)
    t["picked_us"] = picks(doc, t)
    at_pick = []
    for _, r in t.iterrows():
        c = df[(df[CURVE] == r[CURVE]).all(axis=1)]
        nearest = c.iloc[(c["interval_us"] - r["picked_us"]).abs().argmin()]
        at_pick.append(float(nearest[TARGET]) / r["best_gbps"] if r["best_gbps"] > 0 else np.nan)
    t["gbps_at_pick_over_best"] = at_pick
    t["best_in_range"] = (t["best_us"] - t["picked_us"]).abs() <= HALF_RANGE_US
    return t


def correlations(t: pd.DataFrame) -> tuple[float, float]:
    """(Pearson, Spearman) of picked against measured best intervals; NaN if one is constant."""
    if t["picked_us"].nunique() < 2 or t["best_us"].nunique() < 2:
        return float("nan"), float("nan")
    pearson = float(np.corrcoef(t["picked_us"], t["best_us"])[0, 1])
    spearman = float(t["picked_us"].corr(t["best_us"], method="spearman"))
    return pearson, spearman


def scores(doc: dict, scored: pd.DataFrame, curves: pd.DataFrame) -> dict[str, float]:
    """Raw and per-curve-normalised RMSE of the model on ``scored``, curves from ``curves``.

    ``curves`` holds the whole curves ``scored``'s rows belong to (for the sim's
    held-out rows, the full grid), so the normalising maxima are the curves'.
    """
    full = curves.copy()
    full["pred"] = ex.predict(doc, full[list(FEATURES)].to_numpy())
    full["y_n"] = normalised(full, TARGET)
    full["pred_n"] = normalised(full, "pred")
    s = scored[list(FEATURES)].merge(full, on=list(FEATURES), how="left")
    return {
        "rows": len(s),
        "rmse_gbps": rmse(s["pred"], s[TARGET]),
        "rmse_normalised": rmse(s["pred_n"], s["y_n"]),
        "mean_gbps": float(s[TARGET].mean()),
    }


def compare(model: Path, sim_csv: Path, real_csv: Path, seed: int = 1) -> dict:
    """Every figure of the comparison (see the module doc)."""
    doc = ex.read(model)
    sim, real = pd.read_csv(sim_csv), pd.read_csv(real_csv)
    for name, df in (("sim", sim), ("real", real)):
        missing = [c for c in (*FEATURES, TARGET) if c not in df.columns]
        if missing:
            raise ValueError(f"{name} data lacks columns {missing}")
    x = sim[list(FEATURES)].astype(np.float64)
    _, x_te = train_test_split(x, test_size=0.2, random_state=seed)
    held_out = sim.loc[x_te.index]
    sim_t, real_t = argmax_table(doc, sim), argmax_table(doc, real)
    return {
        "sim": scores(doc, held_out, sim),
        "real": scores(doc, real, real),
        "sim_argmax": sim_t,
        "real_argmax": real_t,
        "sim_corr": correlations(sim_t),
        "real_corr": correlations(real_t),
    }


def report(r: dict) -> str:
    """The comparison as markdown."""
    lines = [
        "| data | rows | mean Gb/s | RMSE Gb/s (raw) | RMSE, curves normalised to their max "
        "| picks with the best in ± 500 µs | measured Gb/s at the pick / best (median, min) "
        "| corr. picked vs best interval (Pearson / Spearman) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, label in (("sim", "simulator, held-out 20 %"), ("real", "real daemon")):
        s, t = r[name], r[f"{name}_argmax"]
        p, sp = r[f"{name}_corr"]
        frac = t["gbps_at_pick_over_best"]
        lines.append(
            f"| {label} | {s['rows']} | {s['mean_gbps']:.3f} | {s['rmse_gbps']:.3f} "
            f"| {s['rmse_normalised']:.3f} | {int(t['best_in_range'].sum())} of {len(t)} "
            f"| {frac.median():.3f}, {frac.min():.3f} | {p:.2f} / {sp:.2f} |"
        )
    lines += [
        "",
        "Real-daemon curves:",
        "",
        "| VMs | threads | size B | measured best µs (Gb/s) | model's pick µs | best in ± 500 µs "
        "| measured at pick / best |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, t in r["real_argmax"].iterrows():
        lines.append(
            f"| {t['vms']} | {t['threads']} | {t['msg_size']} | {t['best_us']} "
            f"({t['best_gbps']:.3f}) | {t['picked_us']} | {'yes' if t['best_in_range'] else 'no'} "
            f"| {t['gbps_at_pick_over_best']:.3f} |"
        )
    return "\n".join(lines)
