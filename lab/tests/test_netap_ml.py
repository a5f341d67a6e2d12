import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import RandomForestRegressor

from vadapt_lab.netap_ml import FEATURES, grid, train
from vadapt_lab.netap_ml import export as ex


def synthetic(n=300, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "vms": rng.choice([1, 2, 3, 6], n),
            "threads": rng.choice([1, 2, 3, 6], n),
            "msg_size": rng.choice([64, 128, 256], n),
            "interval_us": rng.choice(np.arange(50, 4001, 50), n),
        }
    )
    peak = 3000 / (df["threads"] * df["msg_size"] / 64) * df["vms"] / 2
    df["gbps"] = 8 - np.abs(df["interval_us"] - peak) / 500 + rng.normal(0, 0.1, n)
    return df


def walk(doc, x):
    """The format's semantics, as the Rust evaluator implements them."""
    x = [float(np.float32(v)) for v in x]
    total = 0.0
    for t in doc["trees"]:
        i = 0
        while t["feature"][i] != -1:
            th = ex.from_bits(t["threshold_or_value"][i])
            i = t["left"][i] if x[t["feature"][i]] <= th else t["right"][i]
        total += ex.from_bits(t["threshold_or_value"][i])
    return total / len(doc["trees"])


@pytest.mark.parametrize("v", [0.0, 1.5, 1225.0, -3.25, math.pi, 1e-300, 5e300])
def test_bits_round_trip_exactly(v):
    assert ex.from_bits(ex.bits(v)) == v
    assert ex.from_bits(ex.short_bits(v)) == v
    assert len(ex.short_bits(1225.0)) < 16


def test_exported_forest_walked_like_rust_matches_predict_bit_for_bit():
    df = synthetic()
    f = RandomForestRegressor(n_estimators=7, random_state=1).fit(df[list(FEATURES)], df["gbps"])
    doc = json.loads(ex.forest_json(f, {"k": 1}))
    assert doc["format"] == ex.FORMAT and doc["version"] == ex.VERSION
    assert doc["features"] == list(FEATURES) and len(doc["trees"]) == 7
    rows = ex.golden_rows(ex.forest_thresholds(f), np.random.default_rng(2))
    golden = json.loads(ex.golden_json(f, rows))
    assert len(golden["rows"]) == len(rows) == len(golden["predictions"])
    casts = 0
    for row, want in zip(golden["rows"], golden["predictions"], strict=True):
        x = [ex.from_bits(v) for v in row]
        assert walk(doc, x).hex() == ex.from_bits(want).hex()
        casts += any(float(np.float32(v)) != v for v in x)
    assert casts > 0


def test_walk_without_the_float32_cast_would_differ_somewhere():
    df = synthetic()
    f = RandomForestRegressor(n_estimators=5, random_state=1).fit(df[list(FEATURES)], df["gbps"])
    doc = json.loads(ex.forest_json(f, {}))
    rows = ex.golden_rows(ex.forest_thresholds(f), np.random.default_rng(2))
    y = f.predict(pd.DataFrame(rows, columns=list(FEATURES)))

    def walk64(x):
        total = 0.0
        for t in doc["trees"]:
            i = 0
            while t["feature"][i] != -1:
                th = ex.from_bits(t["threshold_or_value"][i])
                i = t["left"][i] if x[t["feature"][i]] <= th else t["right"][i]
            total += ex.from_bits(t["threshold_or_value"][i])
        return total / len(doc["trees"])

    assert any(walk64(list(r)) != p for r, p in zip(rows, y, strict=True))


def test_forest_on_other_features_is_refused():
    df = synthetic().rename(columns={"msg_size": "size"})
    f = RandomForestRegressor(n_estimators=2, random_state=1).fit(
        df[["vms", "threads", "size", "interval_us"]], df["gbps"]
    )
    with pytest.raises(ValueError, match="expected"):
        ex.forest_json(f, {})


def test_train_writes_model_golden_and_provenance(tmp_path, capsys):
    data = tmp_path / "grid.csv"
    synthetic(400).to_csv(data, index=False)
    out, golden = tmp_path / "m.json", tmp_path / "g.json"
    prov = train.train_command(data, out, golden, max_bytes=400_000, n_iter=1, seed=1)
    printed = capsys.readouterr().out
    for name in ("LR", "ABR", "KRR", "RFR", "unlimited forest", "shipped forest"):
        assert name in printed
    doc = json.loads(out.read_text())
    assert len(out.read_bytes()) <= 400_000
    assert doc["provenance"]["heldout_rmse_gbps"] == prov["heldout_rmse_gbps"] > 0
    assert set(doc["provenance"]["model_rmse_gbps"]) == {"LR", "ABR", "KRR", "RFR"}
    assert json.loads(golden.read_text())["predictions"]


def test_train_refuses_data_without_the_features(tmp_path):
    data = tmp_path / "grid.csv"
    synthetic().drop(columns="threads").to_csv(data, index=False)
    with pytest.raises(train.TrainError, match="threads"):
        train.load(data)


FAKE_VADAPT = """#!{python}
import json, pathlib, sys
a = sys.argv
sets = dict(a[i + 1].split("=") for i, v in enumerate(a) if v == "--set")
if sets["vms"] == "6":
    sys.exit("boom")
out = pathlib.Path(a[a.index("--out") + 1])
out.mkdir(parents=True)
pts = [dict(value=float(i), gbps=i / 1000 + int(sets["vms"]), host_cpu_pct=1.0,
            guest_cpu_pct=2.0, wakeups_per_s=3.0) for i in (50, 100)]
(out / "sweep.json").write_text(json.dumps(dict(points=pts, best_value=100.0, best_gbps=1.0)))
"""


def test_sim_grid_rows_carry_provenance_and_a_failed_sweep_is_named(tmp_path):
    repo = tmp_path / "repo"
    (repo / "sc").mkdir(parents=True)
    (repo / "cal.toml").write_text("machine = 'x'\n")
    scenario = repo / "sc" / "g.toml"
    scenario.write_text(
        'include = "../cal.toml"\nseed = 7\n[sweep]\nduration_s = 4\nwarmup_s = 1\n'
    )
    for cmd in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True)
    vadapt = tmp_path / "vadapt"
    vadapt.write_text(FAKE_VADAPT.format(python=sys.executable))
    vadapt.chmod(0o755)
    out = tmp_path / "grid.csv"
    small = {"vms": (1, 2), "threads": (1,), "msg_size": (64, 128), "interval_us": (50, 100)}
    n = grid.run_sim_grid(vadapt, scenario, out, repo, cores=1, grid=small)
    df = pd.read_csv(out)
    assert n == len(df) == 8
    assert list(df.columns) == list(grid.COLUMNS)
    assert set(df["scenario"]) == {"sc/g.toml"} and set(df["calibration"]) == {"cal.toml"}
    assert set(df["seed"]) == {7} and not df["git_rev"].iloc[0].endswith("-dirty")
    assert df.query("vms == 2 and interval_us == 100")["gbps"].iloc[0] == pytest.approx(2.1)
    with pytest.raises(grid.GridError, match="vms=6 threads=1 msg_size=64"):
        grid.run_sim_grid(vadapt, scenario, out, repo, grid=small | {"vms": (6,)})


def test_eval_scenarios_name_the_case_and_policy():
    from vadapt_lab.netap_ml import evaluate as ev

    text = ev.scenario_text("C2", "netap-ml", "/x/cal.toml")
    assert "count = 2" in text and "threads = 5" in text and "msg_size = 96" in text
    assert 'kind = "netap-ml", vms = 2, threads = 5, msg_size = 96' in text
    assert "probe_fixed_interval_us = 2100" in text
    assert 'kind = "netap",' in ev.scenario_text("C1", "netap", "/x/cal.toml")


def test_eval_two_second_windows_and_table(tmp_path):
    from vadapt_lab.netap_ml import evaluate as ev

    rows = [{"table": "samples", "t_s": float(t), "gbps": float(t)} for t in range(1, 31)]
    rows.append({"table": "workers", "settled_after_s": 6.0, "final_interval_us": 700.0})
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"rows": rows}))
    s = ev.two_second_samples(p)
    assert list(s["t_s"])[:2] == [2.0, 4.0] and list(s["gbps"])[:2] == [1.5, 3.5]
    assert list(ev.window(s, 10, 20)) == [11.5, 13.5, 15.5, 17.5, 19.5]
    assert ev.workers(p)["settled_after_s"].iloc[0] == 6.0
    base = {"best_fixed_us": 700.0, "best_fixed_gbps": 10.0, "settled_after_s_max": 11.0}
    base["final_interval_us_median"] = 700.0
    df = pd.DataFrame(
        [
            {"case": c, "policy": pol, "during_mean": m, "during_std": 1.0, "after_mean": 9.0}
            | {"after_std": 0.5}
            | base
            for c in ev.CASES
            for pol, m in (("netap", 8.0), ("netap-ml", 9.2))
        ]
    )
    table = ev.report(df)
    assert "(+15 %)" in table and "90.0 %" in table
