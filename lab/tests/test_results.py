import json
from pathlib import Path

import pytest

from vadapt_lab import ResultsError, load_results


def test_list_of_records(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps([{"policy": "netap", "pps": 1.5}, {"policy": "eekbp", "pps": 2.0}]))
    df = load_results(p)
    assert list(df["policy"]) == ["netap", "eekbp"]
    assert df["pps"].sum() == pytest.approx(3.5)


def test_rows_object_keeps_metadata(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"git_rev": "abc123", "rows": [{"x": 1}]}))
    df = load_results(p)
    assert df.attrs["git_rev"] == "abc123"
    assert len(df) == 1


@pytest.mark.parametrize("text", ["{", '{"x": 1}', "[1, 2]"])
def test_bad_shapes_raise(tmp_path, text):
    p = tmp_path / "r.json"
    p.write_text(text)
    with pytest.raises(ResultsError, match="r.json"):
        load_results(p)


FIXTURES = Path(__file__).parent / "fixtures"
COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "img" / "bench" / "results"


def test_a_simulation_loads_with_its_tables_and_metadata():
    # Written by `vadapt sim` from fixtures/sim-tiny.toml (see that file).
    df = load_results(FIXTURES / "sim-tiny.result.json")
    assert df.attrs["kind"] == "sim"
    assert df.attrs["bench"] == "sim-tiny"
    assert df.attrs["params"]["seed"] == 3
    assert set(df["table"]) == {"samples", "periods", "workers"}
    assert set(df["backend"]) == {"sim"}
    samples = df[df["table"] == "samples"]
    assert list(samples["t_s"]) == [0.25, 0.5, 0.75, 1.0]
    assert (samples["gbps_vm0"] + samples["gbps_vm1"]).to_numpy() == pytest.approx(
        samples["gbps"].to_numpy()
    )
    periods = df[df["table"] == "periods"].set_index("variant")
    assert list(periods["policy"]) == ["netap", "netap"]
    assert periods.loc["netap", "kicks_per_s"] < periods.loc["interrupt", "kicks_per_s"]
    workers = df[df["table"] == "workers"]
    assert list(zip(workers["variant"], workers["sender"], strict=True)) == [
        ("bulk", "stream"),
        ("kv", "rr"),
    ]


def test_a_file_without_kind_is_a_benchmark(tmp_path):
    p = tmp_path / "b4.json"
    p.write_text(json.dumps({"bench": "b4", "status": "ok", "rows": [{"cpu_pct": 0.1}]}))
    assert load_results(p).attrs["kind"] == "bench"


def test_an_unknown_kind_is_refused(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"kind": "dream", "rows": []}))
    with pytest.raises(ResultsError, match="dream"):
        load_results(p)


@pytest.mark.parametrize(
    "path",
    sorted(p for p in COMMITTED.glob("*.json") if p.name != "suite.json"),
    ids=lambda p: p.name,
)
def test_the_committed_benchmark_results_still_load(path):
    df = load_results(path)
    assert df.attrs["kind"] == "bench"
    assert {"table", "backend", "policy", "run"} <= set(df.columns)
