"""NetAP's departures from the paper: the real-daemon and simulator drivers' pure
parts, and one quick real run (skipped without a release build)."""

import csv
import fcntl
import math
from pathlib import Path

import pandas as pd
import pytest
from stats_snapshot import snapshot

from vadapt_lab import netap_departures as nd
from vadapt_lab import netap_departures_sim as ns
from vadapt_lab.netap_ml import daemon as dm

REPO = Path(__file__).resolve().parents[2]
VADAPT = REPO / "target" / "release" / "vadapt"
BENCH_LOCK = Path("/tmp/vadapt-bench.lock")
"""Held by every load-generating run on the shared machine (`flock`)."""


def snap(sink_pkts, frame, kicks, cpu, intervals=(("vm1", 700), ("vm2", 700))):
    """Two VM ports with per-queue kicks and ``PORT/q0`` workers, and a busy sink worker."""
    return snapshot(
        sink_pkts, frame, cpu, intervals, kicks=kicks, sink_cpu=100.0, worker_suffix="/q0"
    )


def test_variants_are_the_three_netaps_then_interrupt():
    v = nd.variants(500)
    assert list(v)[-1] == nd.BASELINE and v[nd.BASELINE] == {"kind": "interrupt"}
    netaps = [p for p in v.values() if p["kind"] == "netap"]
    assert len(netaps) == 3 and all(p["round_ms"] == 500 for p in netaps)
    assert sum(p.get("notify_during_sleep", False) for p in netaps) == 1
    assert sum(p.get("kick_threshold_permille") == 0 for p in netaps) == 1
    assert nd.warmup_s(netaps[0]) == nd.NETAP_WARMUP_ROUNDS * 0.5
    assert nd.warmup_s(v[nd.BASELINE]) == nd.INTERRUPT_WARMUP_S
    assert nd.schedule_s(v, 2.0) == 3 * (nd.NETAP_WARMUP_ROUNDS * 0.5 + 2) + 1 + 2


def test_window_metrics_count_vm_ports_only():
    a = snap(1000, 1514, kicks=10, cpu=1.0)
    b = snap(1000 + 10**6, 1514, kicks=60, cpu=1.5)
    m = nd.window_metrics(a, b, 2.0)
    payload = 10**6 * (1514 - dm.FRAME_HEADERS["tcp-stream"])
    assert m["gbps"] == pytest.approx(payload * 8 / 2 / 1e9)
    # 2 ports x 2 queues x 50 kicks; the sink's queue and worker are not counted.
    assert m["kicks_per_gb"] == pytest.approx(200 / (payload / 1e9))
    assert m["cpu_s_per_gb"] == pytest.approx(2 * 0.5 / (payload / 1e9))
    assert m["settled"] and m["intervals_us"] == "vm1=700 vm2=700"
    moved = nd.window_metrics(a, snap(2000, 1514, 60, 1.5, (("vm1", 700), ("vm2", 900))), 1.0)
    assert not moved["settled"]
    idle = nd.window_metrics(a, a, 1.0)
    assert idle["gbps"] == 0 and math.isnan(idle["kicks_per_gb"])


def row(rnd, size, variant, gbps, kicks=1.0, cpu=1.0):
    return {
        "round": rnd,
        "msg_size": size,
        "variant": variant,
        "gbps": gbps,
        "kicks_per_gb": kicks,
        "cpu_s_per_gb": cpu,
        "settled": True,
        "intervals_us": "vm1=0 vm2=700",
    }


def test_ratios_are_to_interrupt_of_the_same_round_and_size():
    rows = nd.add_ratios(
        [
            row(1, 64, "netap", 1.2, kicks=10, cpu=2),
            row(1, 64, nd.BASELINE, 1.0, kicks=100, cpu=4),
            row(2, 64, "netap", 1.5),
            row(2, 64, nd.BASELINE, 3.0),
            row(1, 1024, "netap", 9.0),
        ]
    )
    assert rows[0]["gbps_vs_interrupt"] == pytest.approx(1.2)
    assert rows[0]["kicks_per_gb_vs_interrupt"] == pytest.approx(0.1)
    assert rows[0]["cpu_s_per_gb_vs_interrupt"] == pytest.approx(0.5)
    assert rows[2]["gbps_vs_interrupt"] == pytest.approx(0.5)
    assert rows[1]["gbps_vs_interrupt"] == 1
    assert math.isnan(rows[4]["gbps_vs_interrupt"]), "no interrupt row for 1024 B"


def test_report_gives_median_and_range_per_size_and_variant():
    rows = nd.add_ratios(
        [row(k, 64, v, g) for k, (v, g) in enumerate([("netap", 1.0), ("netap", 3.0)], 1)]
        + [row(k, 64, nd.BASELINE, 1.0) for k in (1, 2)]
    )
    rows[0]["settled"] = False
    table = nd.report(rows)
    lines = table.splitlines()
    assert len(lines) == 4 and lines[0].startswith("| msg B | policy")
    assert "| 64 | netap | 2 | 2 (1–3) | 2 (1–3) |" in lines[2]
    assert lines[2].endswith("| 1/2 | 2/4 |") and lines[3].endswith("| – | – |")
    assert nd.kick_driven_ports("vm1=0 vm2=700 vm3=0") == 2 and nd.kick_driven_ports("") == 0
    assert nd.spread([float("nan")]) == "–" and nd.spread([2.0]) == "2"


def test_variant_text_sets_the_pair_and_an_absolute_include(tmp_path):
    base = 'include = "../cal/default.toml"\n[[timeline]]\nat_s = 0\npolicy = { kind = "netap" }\n'
    text = ns.variant_text(base, tmp_path / "scen", 0.05, 0)
    assert 'policy = { kind = "netap", min_change = 0.05, max_rounds = 0 }' in text
    assert f'include = "{(tmp_path / "cal" / "default.toml").resolve()}"' in text
    off = ns.variant_text(base, tmp_path, 0.2, 300, {"kick_probe": False})
    assert "max_rounds = 300, kick_probe = false }" in off
    with pytest.raises(ns.SimDeparturesError, match="exactly one"):
        ns.variant_text(base + base, tmp_path, 0.2, 300)
    for name in (ns.STEADY, ns.CHANGING):
        shipped = (REPO / ns.SCENARIOS / name).read_text()
        assert shipped.count(ns.TEMPLATE) == 1, name


def samples(rounds, intervals):
    """A result frame's samples for one worker, a sample per second from 1 s."""
    return pd.DataFrame(
        {
            "table": "samples",
            "t_s": [float(t) for t in range(1, len(rounds) + 1)],
            "round_w0": rounds,
            "interval_us_w0": intervals,
        }
    )


def test_restarts_are_rounds_going_down_and_settling_is_the_last_move():
    s = samples([0, 1, 2, 3, 0, 1, 2, 0, 1], [100, 200, 300, 300, 100, 150, 150, 150, 200])
    s = pd.concat([s, period(4.0, 9.0, host_cpu_pct=7.0, p99_us=300.0)], ignore_index=True)
    assert ns.workers(s) == [0]
    assert ns.restart_times(s, 0) == [5.0, 8.0]
    assert ns.last_move(s, 0, 4.0, 7.0) == 6.0
    assert ns.last_move(s, 0, 6.0, 8.0) is None
    r = ns.step_row(s, 4.0, 9.0)
    assert (r["detect_s"], r["settled_s"], r["workers_restarted"], r["restarts"]) == (
        1.0,
        5.0,
        1,
        2,
    )
    assert (r["host_cpu_pct"], r["p99_us"]) == (7.0, 300.0)
    with pytest.raises(ns.SimDeparturesError, match="no period"):
        ns.step_row(s, 5.0, 9.0)
    flat = pd.concat([samples([1, 2, 3], [5, 5, 5]), period(0.0, 3.0)], ignore_index=True)
    none = ns.step_row(flat, 0.0, 3.0)
    assert none["restarts"] == 0 and math.isnan(none["detect_s"]) and math.isnan(none["settled_s"])


def period(from_s, to_s, name="steady", gbps=4.5, host_cpu_pct=20.0, p99_us=100.0):
    """A result frame's row of one period."""
    return pd.DataFrame(
        [
            {
                "table": "periods",
                "variant": name,
                "from_s": from_s,
                "to_s": to_s,
                "gbps": gbps,
                "host_cpu_pct": host_cpu_pct,
                "p99_us": p99_us,
            }
        ]
    )


def test_steady_row_reads_the_period_and_counts_restarts_inside_it():
    s = samples([0, 1, 0, 1, 0], [1, 2, 3, 4, 5])
    r = ns.steady_row(pd.concat([s, period(2.0, 5.0)], ignore_index=True))
    assert r == {"gbps": 4.5, "host_cpu_pct": 20.0, "restarts": 2}


@pytest.mark.skipif(not VADAPT.is_file(), reason="needs target/release/vadapt")
def test_quick_real_run_measures_every_variant(tmp_path):
    # Generates load: wait for any benchmark on the shared machine to finish.
    with open(BENCH_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = tmp_path / "q.csv"
        assert (
            nd.main(["--quick", "--vadapt", str(VADAPT), "--repo", str(REPO), "--csv", str(out)])
            == 0
        )
    rows = list(csv.DictReader(out.open()))
    assert [r["variant"] for r in rows] == list(nd.variants(200))
    assert all(float(r["gbps"]) > 0 for r in rows), rows
    assert [r for r in rows if r["variant"] == nd.BASELINE][0]["gbps_vs_interrupt"] == "1.0"
    back = nd.read_rows(out)
    assert back[0]["msg_size"] == 64 and isinstance(back[0]["gbps"], float)
    assert nd.report(back).count("\n") == len(back) + 1
