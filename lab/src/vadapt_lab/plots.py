"""Figures of `vadapt bench` results.

    python -m vadapt_lab.plots RESULTS_DIR --out docs/img/bench

RESULTS_DIR holds the JSON files `vadapt bench` writes (`b1.json`, ...; each
``{"rows": [...], ...}`` with one flat row per measurement and round). Each
figure shows medians over rounds with min–max error bars; a benchmark whose
file is missing or has no rows is skipped with a message. Files written:

- ``b1-throughput.png``: Mpps per backend/policy, per sender and frame size
- ``b2-cpu-per-mpkt.png``: host CPU-seconds per million packets vs load, one line per backend
- ``b3-latency.png``: p50 / p99 / p99.9 round trip per backend, per rate
- ``b4-idle.png``: idle CPU per backend
- ``b5-timeline.png``: throughput and NetAP polling interval over time (interrupt, then NetAP)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on CI or servers

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from vadapt_lab.results import ResultsError, load_results  # noqa: E402

# Row order of backends in every figure: the anchor first, then vadapt's policies.
ORDER = ["pmd", "macswap", "busy-poll", "netap", "eekbp", "growshrink", "interrupt"]


def _save(fig, path: Path) -> Path:
    """Lay out, write at 90 dpi, close; the path written."""
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def label(backend: str, policy: str) -> str:
    """How a backend/policy pair is named in figures (as in BENCHMARKS.md)."""
    if backend == "dpdk-vhost":
        return "DPDK vhost PMD"
    if backend == "ovs-dpdk":
        return f"OVS-DPDK {policy}"
    return f"vadapt {policy}"


def order_key(policy: str) -> int:
    return ORDER.index(policy) if policy in ORDER else len(ORDER)


def summarize(df: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    """Median, min and max of `metric` over rounds for each combination of `keys`.

    Rows without the metric are ignored; the result has columns
    ``keys + ["median", "min", "max", "n"]`` in first-seen order of the keys.
    """
    if metric not in df.columns:
        raise ResultsError(f"no column {metric!r} in results")
    d = df.dropna(subset=[metric])
    g = d.groupby(keys, sort=False)[metric]
    out = g.agg(["median", "min", "max", "count"]).reset_index()
    return out.rename(columns={"count": "n"})


def load(results: Path, bench: str) -> pd.DataFrame | None:
    """Rows of `<results>/<bench>.json`, or None (with a message) when absent or empty."""
    path = results / f"{bench}.json"
    if not path.is_file():
        print(f"plots: {bench}: no {path}, skipped")
        return None
    df = load_results(path)
    if df.empty:
        print(f"plots: {bench}: no rows ({df.attrs.get('status', '?')}), skipped")
        return None
    return df


def _bars(ax, s: pd.DataFrame, title: str, ylabel: str) -> None:
    s = s.assign(o=s["policy"].map(order_key)).sort_values("o", kind="stable")
    names = [label(b, p) for b, p in zip(s["backend"], s["policy"], strict=True)]
    err = [s["median"] - s["min"], s["max"] - s["median"]]
    colors = ["tab:gray" if b != "vadapt" else "tab:blue" for b in s["backend"]]
    ax.bar(range(len(s)), s["median"], yerr=err, capsize=3, color=colors)
    ax.set_xticks(range(len(s)), names, rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel)


def plot_b1(df: pd.DataFrame, out: Path) -> Path:
    """Throughput per backend/policy: one panel per (sender table, variant, frame)."""
    s = summarize(df, ["table", "variant", "frame", "backend", "policy"], "mpps")
    panels = list(s.groupby(["table", "variant", "frame"], sort=False))
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.8 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    for ax, ((table, variant, frame), part) in zip(flat, panels, strict=False):
        sender = "DPDK virtio-user" if table == "dpdk-fe" else "synthetic guest"
        extra = f", {variant}" if variant else ""
        _bars(ax, part, f"{sender}, {frame} B{extra}", "Mpps")
    fig.suptitle("B1 saturation: median of rounds, bars = min–max")
    return _save(fig, out / "b1-throughput.png")


def plot_b2(df: pd.DataFrame, out: Path) -> Path:
    """Host CPU-seconds per Mpkt against offered load, one line per backend/policy."""
    d = df.assign(load=df["variant"].str.rstrip("%").astype(float))
    s = summarize(d, ["backend", "policy", "load"], "cpu_s_per_mpkt")
    fig, ax = plt.subplots(figsize=(6, 4))
    for (backend, policy), part in s.groupby(["backend", "policy"], sort=False):
        part = part.sort_values("load")
        err = [part["median"] - part["min"], part["max"] - part["median"]]
        ax.errorbar(
            part["load"], part["median"], yerr=err, marker="o", capsize=3,
            label=label(backend, policy),
        )  # fmt: skip
    ax.set_xlabel("offered load, % of busy-poll saturation")
    ax.set_ylabel("host CPU-seconds per million packets")
    ax.set_yscale("log")
    ax.set_title("B2 efficiency under partial load")
    ax.legend(fontsize=8)
    return _save(fig, out / "b2-cpu-per-mpkt.png")


def plot_b3(df: pd.DataFrame, out: Path) -> Path:
    """p50 / p99 / p99.9 per backend, one panel per rate."""
    rates = list(dict.fromkeys(df["variant"]))
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        part = df[df["variant"] == rate]
        keys = ["backend", "policy"]
        pcts = [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9")]
        stats = {name: summarize(part, keys, col) for col, name in pcts if col in part}
        base = next(iter(stats.values()))
        base = base.assign(o=base["policy"].map(order_key)).sort_values("o", kind="stable")
        names = [label(b, p) for b, p in zip(base["backend"], base["policy"], strict=True)]
        width = 0.8 / max(1, len(stats))
        for i, (name, st) in enumerate(stats.items()):
            st = st.set_index(keys).loc[list(zip(base["backend"], base["policy"], strict=True))]
            xs = [x + i * width for x in range(len(st))]
            err = [st["median"] - st["min"], st["max"] - st["median"]]
            ax.bar(xs, st["median"], width, yerr=err, capsize=2, label=name)
        ax.set_xticks([x + width for x in range(len(names))], names, rotation=30, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("round trip, µs")
        ax.set_title(f"{rate} rate", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("B3 request/response latency (median of rounds, bars = min–max)")
    return _save(fig, out / "b3-latency.png")


def plot_b4(df: pd.DataFrame, out: Path) -> Path:
    """Idle CPU per backend."""
    s = summarize(df, ["backend", "policy"], "cpu_pct")
    fig, ax = plt.subplots(figsize=(6, 4))
    _bars(ax, s, "B4 idle (guest connected, 1 packet/s)", "CPU % of one core")
    ax.set_yscale("symlog", linthresh=1)
    return _save(fig, out / "b4-idle.png")


def plot_b5(df: pd.DataFrame, out: Path) -> Path:
    """Throughput and polling interval over time, one line per VM, first round."""
    tr = df[df["table"] == "trace"]
    if tr.empty:
        raise ResultsError("b5 has no trace rows")
    first = tr[tr["run"] == tr["run"].min()]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for vm, part in first.groupby("variant", sort=True):
        a1.plot(part["t"], part["mbps"], marker=".", label=vm)
        a2.step(part["t"], part["interval_us"], where="post", label=vm)
    switch = first[first["policy"] == "netap"]["t"].min()
    for ax in (a1, a2):
        if pd.notna(switch):
            ax.axvline(switch - 1, color="gray", linestyle="--", linewidth=1)
        ax.legend(fontsize=8)
    a1.set_ylabel("Mbit/s (guest to host)")
    a2.set_ylabel("polling interval, µs")
    a2.set_xlabel("time, s (dashed: switch from interrupt to NetAP)")
    a1.set_title("B5 adaptation, 2 VMs × 3 threads (round 1)")
    return _save(fig, out / "b5-timeline.png")


PLOTS = {"b1": plot_b1, "b2": plot_b2, "b3": plot_b3, "b4": plot_b4, "b5": plot_b5}


def draw_all(results: Path, out: Path) -> list[Path]:
    """Every figure whose results exist; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for bench, fn in PLOTS.items():
        df = load(results, bench)
        if df is None:
            continue
        try:
            written.append(fn(df, out))
        except (ResultsError, KeyError, ValueError) as e:
            print(f"plots: {bench}: cannot draw: {e}", file=sys.stderr)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vadapt_lab.plots", description=__doc__.split("\n")[0]
    )
    ap.add_argument("results", type=Path, help="directory with vadapt bench's JSON files")
    ap.add_argument("--out", type=Path, default=Path("docs/img/bench"), help="where PNGs go")
    a = ap.parse_args(argv)
    if not a.results.is_dir():
        print(f"plots: {a.results} is not a directory", file=sys.stderr)
        return 2
    for p in draw_all(a.results, a.out):
        print(f"plots: wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
