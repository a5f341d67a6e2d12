"""Tests of the bench figures: statistics, loading and drawing from small fixture results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vadapt_lab import plots
from vadapt_lab.results import ResultsError, load_results


def row(table, backend, policy, variant="", frame=64, run=0, **m):
    return {
        "table": table,
        "sender": "guest",
        "backend": backend,
        "policy": policy,
        "variant": variant,
        "frame": frame,
        "run": run,
        **m,
    }


def write(d: Path, bench: str, rows: list[dict]) -> None:
    (d / f"{bench}.json").write_text(json.dumps({"bench": bench, "status": "ok", "rows": rows}))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    d = tmp_path / "res"
    d.mkdir()
    b1 = []
    for run in range(3):
        b1.append(row("dpdk-fe", "dpdk-vhost", "pmd", "in_order=1", run=run, mpps=10.0 + run))
        b1.append(row("dpdk-fe", "vadapt", "busy-poll", "in_order=1", run=run, mpps=8.0 + run))
        b1.append(row("guest", "vadapt", "netap", frame=1518, run=run, mpps=1.0))
    write(d, "b1", b1)
    b2 = [
        row("load", be, pol, f"{lv}%", run=run, cpu_s_per_mpkt=c * lv / 10)
        for run in range(3)
        for lv in (10, 50)
        for be, pol, c in (("dpdk-vhost", "pmd", 2.0), ("vadapt", "eekbp", 0.5))
    ]
    write(d, "b2", b2)
    b3 = [
        row("rr", "vadapt", pol, rate, run=run, p50_us=10.0, p99_us=20.0, p999_us=40.0)
        for run in range(3)
        for rate in ("low", "medium")
        for pol in ("busy-poll", "eekbp")
    ]
    write(d, "b3", b3)
    b4 = [row("idle", "vadapt", "eekbp", run=r, cpu_pct=0.1 * r) for r in range(3)]
    write(d, "b4", b4)
    b5 = [
        row("trace", "vadapt", "interrupt" if t <= 4 else "netap", vm, t=float(t),
            mbps=100.0, interval_us=0.0 if t <= 4 else 100.0 * t)
        for t in range(1, 10)
        for vm in ("vm1", "vm2")
    ]  # fmt: skip
    write(d, "b5", b5)
    return d


def test_summarize_takes_median_and_range_over_rounds(results: Path):
    df = load_results(results / "b1.json")
    s = plots.summarize(df, ["table", "backend", "policy"], "mpps")
    dpdk = s[s["backend"] == "dpdk-vhost"].iloc[0]
    assert (dpdk["median"], dpdk["min"], dpdk["max"], dpdk["n"]) == (11.0, 10.0, 12.0, 3)
    assert list(s["policy"]) == ["pmd", "busy-poll", "netap"]  # first-seen order


def test_summarize_ignores_rows_without_the_metric_and_names_a_missing_column():
    import pandas as pd

    df = pd.DataFrame([{"k": "a", "x": 1.0}, {"k": "a"}, {"k": "a", "x": 3.0}])
    s = plots.summarize(df, ["k"], "x")
    assert s.iloc[0]["median"] == 2.0 and s.iloc[0]["n"] == 2
    with pytest.raises(ResultsError, match="nope"):
        plots.summarize(df, ["k"], "nope")


def test_labels_match_the_markdown_tables():
    assert plots.label("dpdk-vhost", "pmd") == "DPDK vhost PMD"
    assert plots.label("vadapt", "eekbp") == "vadapt eekbp"
    assert plots.order_key("pmd") < plots.order_key("busy-poll") < plots.order_key("zzz")


def test_every_figure_is_drawn_from_fixture_results(results: Path, tmp_path: Path):
    out = tmp_path / "img"
    written = plots.draw_all(results, out)
    names = sorted(p.name for p in written)
    assert names == [
        "b1-throughput.png",
        "b2-cpu-per-mpkt.png",
        "b3-latency.png",
        "b4-idle.png",
        "b5-timeline.png",
    ]
    for p in written:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size > 5000


def test_missing_and_empty_results_are_skipped(tmp_path: Path, capsys):
    d = tmp_path / "res"
    d.mkdir()
    write(d, "b4", [])
    assert plots.draw_all(d, tmp_path / "img") == []
    out = capsys.readouterr().out
    assert "b1: no" in out and "b4: no rows" in out


def test_main_rejects_a_missing_directory(tmp_path: Path):
    assert plots.main([str(tmp_path / "absent"), "--out", str(tmp_path / "img")]) == 2
