"""The real-daemon drivers' parsing and aggregation (no daemon, no load)."""

import json
import socket
import threading

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import RandomForestRegressor
from stats_snapshot import snapshot

from vadapt_lab.netap_ml import FEATURES, compare, grid_real
from vadapt_lab.netap_ml import daemon as dm
from vadapt_lab.netap_ml import evaluate_real as er
from vadapt_lab.netap_ml import export as ex


def snap(sink_pkts, frame, cpu, timer, intervals=(("vm1", 700),), connected=True):
    """VM ports without queues, each worker with ``timer`` timer wake-ups."""
    return snapshot(sink_pkts, frame, cpu, intervals, timer=timer, connected=connected)


def test_stats_readers_take_payload_cpu_wakeups_and_intervals():
    s = snap(1000, 78, 0.5, 40, (("vm1", 700), ("vm2", 2101)))
    assert dm.sink_payload_bytes(s) == 1000 * 64
    assert dm.sink_payload_bytes(s, "tcp-stream") == 1000 * (78 - 66), "IPv4 and TCP headers too"
    assert dm.worker_totals(s) == (1.0, 82)
    assert dm.port_intervals(s) == {"vm1": 700, "vm2": 2101}
    assert dm.vm_ports_connected(s) and not dm.vm_ports_connected(
        snap(0, 78, 0, 0, connected=False)
    )
    with pytest.raises(dm.TestbedError, match="sink0"):
        dm.sink_payload_bytes({"ports": []})


def test_point_row_is_rates_over_the_window():
    a, b = snap(1000, 526, 1.0, 100), snap(251000, 526, 1.5, 1100)
    r = grid_real.point_row(a, b, 2.0, 0.25)
    assert r["gbps"] == pytest.approx(250000 * 512 * 8 / 2 / 1e9)
    assert r["host_cpu_pct"] == pytest.approx(25.0)
    assert r["guest_cpu_pct"] == pytest.approx(12.5)
    assert r["wakeups_per_s"] == pytest.approx(500.0)
    assert grid_real.COLUMNS[-1] == "machine" and "gbps" in grid_real.COLUMNS


def test_fixed_interval_and_config_name_every_port(tmp_path):
    p = dm.fixed_interval(2100)
    assert p == {"kind": "fixed-interval", "interval_us": 2100}
    text = dm.config_text(tmp_path, 2, 3, p)
    assert text.count("[[vm]]") == 2 and "queues = 3" in text and 'name = "vm2"' in text
    assert 'policy = { kind = "fixed-interval", interval_us = 2100 }' in text
    assert f'mac = "{dm.SINK_MAC}"' in text and "cpus = [1]" in text
    assert "netap_ml_model" not in text, "the shipped forest by default"
    with_model = dm.config_text(tmp_path, 2, 3, p, tmp_path / "forest.json")
    # A top-level key: before the first table, or TOML would put it in [[vm]].
    head = with_model.split("[[vm]]")[0]
    assert f'netap_ml_model = "{(tmp_path / "forest.json").resolve()}"' in head
    assert dm.toml_value({"a": [1, 2.5], "b": True, "c": {"d": "x"}}) == (
        '{ a = [1, 2.5], b = true, c = { d = "x" } }'
    )
    g = dm.guest_argv(dm.Path("v"), tmp_path / "s", 3, 64, 2.5)
    assert g[:3] == ["taskset", "-c", "0"] and g[g.index("--duration") + 1] == "2500ms"
    i = g.index("--mode") + 1
    assert g[i] == "stream", "raw frames by default"
    assert dm.guest_argv(dm.Path("v"), tmp_path / "s", 3, 64, 2.5, "tcp-stream")[i] == "tcp-stream"
    with pytest.raises(dm.TestbedError, match="udp"):
        dm.guest_argv(dm.Path("v"), tmp_path / "s", 3, 64, 2.5, "udp")


def test_control_request_speaks_one_json_line_and_raises_on_error(tmp_path):
    path = tmp_path / "c.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(2)
    seen = []

    def serve():
        for answer in ({"status": "ok"}, {"status": "error", "error": "no port vm9"}):
            conn, _ = srv.accept()
            with conn:
                seen.append(json.loads(conn.makefile().readline()))
                conn.sendall(json.dumps(answer).encode() + b"\n")

    t = threading.Thread(target=serve)
    t.start()
    assert dm.request(path, {"cmd": "set-policy", "port": "vm1"}) == {"status": "ok"}
    with pytest.raises(dm.TestbedError, match="no port vm9"):
        dm.request(path, {"cmd": "stats"})
    t.join()
    srv.close()
    assert seen == [{"cmd": "set-policy", "port": "vm1"}, {"cmd": "stats"}]


def synthetic(seed=0):
    """Curves peaking at 1000 µs for 1 VM and 3000 µs for 2 VMs."""
    rows = []
    for vms in (1, 2):
        for size in (64, 512):
            for iv in range(50, 4001, 50):
                peak = 1000 * (2 * vms - 1)
                rows.append((vms, 1, size, iv, 5 - abs(iv - peak) / 1000 * size / 512))
    return pd.DataFrame(rows, columns=[*FEATURES, "gbps"])


def test_predict_matches_scikit_learn_bit_for_bit(tmp_path):
    df = synthetic()
    f = RandomForestRegressor(n_estimators=4, random_state=1).fit(df[list(FEATURES)], df["gbps"])
    path = tmp_path / "m.json"
    ex.write(path, ex.forest_json(f, {}))
    doc = ex.read(path)
    rows = ex.golden_rows(ex.forest_thresholds(f), np.random.default_rng(3))
    want = f.predict(pd.DataFrame(rows, columns=list(FEATURES)))
    assert [v.hex() for v in ex.predict(doc, rows)] == [v.hex() for v in want]
    (tmp_path / "bad.json").write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(ValueError, match="not a vadapt-netap-ml-forest"):
        ex.read(tmp_path / "bad.json")


def test_best_interval_ties_go_to_the_longer_interval():
    assert compare.best_interval([50, 100, 150], [1.0, 2.0, 2.0]) == 150
    assert compare.best_interval([50, 100, 150], [3.0, 2.0, 2.0]) == 50


def test_comparison_scores_picks_and_normalised_error(tmp_path):
    sim = synthetic()
    f = RandomForestRegressor(n_estimators=10, random_state=1).fit(sim[list(FEATURES)], sim["gbps"])
    model = tmp_path / "m.json"
    ex.write(model, ex.forest_json(f, {}))
    # "Real" data: the same curves at a tenth of the level, every 200 µs.
    real = sim[sim["interval_us"].isin(range(50, 4000, 200))].copy()
    real["gbps"] /= 10
    sim_csv, real_csv = tmp_path / "sim.csv", tmp_path / "real.csv"
    sim.to_csv(sim_csv, index=False)
    real.to_csv(real_csv, index=False)
    r = compare.compare(model, sim_csv, real_csv)
    assert r["sim"]["rows"] == len(sim) // 5 and r["real"]["rows"] == len(real)
    # Scaled curves: a large raw error, a small normalised one, the same picks.
    assert r["real"]["rmse_gbps"] > 2
    assert r["real"]["rmse_normalised"] < 0.1
    t = r["real_argmax"]
    assert set(t["best_us"]) == {1050, 3050} and t["best_in_range"].all()
    assert (abs(t["picked_us"] - 1000 * (2 * t["vms"] - 1)) <= 200).all()
    assert r["real_corr"][0] > 0.9
    text = compare.report(r)
    assert "real daemon" in text and "4 of 4" in text


def test_correlation_of_constant_picks_is_nan():
    t = pd.DataFrame({"picked_us": [700, 700], "best_us": [50, 650]})
    assert all(np.isnan(compare.correlations(t)))


def second(t, gbps, iv1, iv2):
    return {"t_s": t, "gbps": gbps, "iv_vm1": iv1, "iv_vm2": iv2}


def timeline(settle_vm2_at):
    """30 s: 2100 µs until 10 s, a search, vm1 settles at 15 s, vm2 at ``settle_vm2_at``."""
    rows = []
    for t in range(1, 31):
        iv1 = 2100 if t <= 10 else (500 + t if t < 15 else 700)
        iv2 = 2100 if t <= 10 else (900 + t if t < settle_vm2_at else 800)
        rows.append(second(t, 1.0 if t <= 10 else 2.0 + (t % 2), iv1, iv2))
    return pd.DataFrame(rows)


def test_convergence_is_the_slowest_ports_first_second_at_its_final_interval():
    assert er.converged_after(timeline(17), 10, 20) == 7.0
    assert np.isnan(er.converged_after(timeline(20), 10, 20))


def test_summary_windows_and_report():
    runs = {
        ("R1", "netap"): [(timeline(17), {"vm1": 700, "vm2": 800})],
        ("R1", "netap-ml"): [(timeline(12), {"vm1": 700, "vm2": 800})],
    }
    df = er.summarise(runs)
    a = df.query("policy == 'netap'").iloc[0]
    # 2-s windows of 10-20 s average seconds 2 and 3: 2.5 each.
    assert a["during_mean"] == pytest.approx(2.5) and a["during_std"] == pytest.approx(0.0)
    assert a["rounds_median"] == 7.0 and a["converged_runs"] == 1
    assert df.query("policy == 'netap-ml'").iloc[0]["rounds_median"] == 5.0
    assert a["kept_interval_us_median"] == 750.0
    text = er.report(df)
    assert "| R1 | during | 2.500 ± 0.000 | 2.500 ± 0.000 | 1.000 |" in text
    assert "1 of 1" in text and "n/a" in text


def test_policy_configs_and_best_fixed_from_the_grid(tmp_path):
    ml = er.policy_config("netap-ml", "R1")
    assert (ml["vms"], ml["threads"], ml["msg_size"]) == er.REAL_CASES["R1"]
    assert ml["netap"]["kick_threshold_permille"] == 0
    assert er.policy_config("netap", "R1") == {"kind": "netap", "kick_threshold_permille": 0}
    with pytest.raises(ValueError, match="unknown policy"):
        er.policy_config("busy-poll", "R1")
    grid = tmp_path / "g.csv"
    pd.DataFrame(
        [(2, 3, 64, 50, 2.0), (2, 3, 64, 250, 2.5), (1, 1, 64, 50, 9.0)],
        columns=[*FEATURES, "gbps"],
    ).to_csv(grid, index=False)
    assert er.best_fixed(grid, "R1") == (250.0, 2.5)
    assert er.best_fixed(grid, "R2") is None and er.best_fixed(None, "R1") is None
