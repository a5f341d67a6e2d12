import json

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
