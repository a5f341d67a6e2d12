"""PAPERS.md's verdict rule and its rendering (no simulator run)."""

from vadapt_lab.reproduce.goals import judge
from vadapt_lab.reproduce.papers_md import render
from vadapt_lab.reproduce.rows import Row


def row(paper_value, sim_value, neutral=None, tie=0.0, **kw):
    return Row("NetAP", "Table 9, X", "%", paper_value, "netap.txt", sim_value, neutral=neutral,
               tie=tie, **kw)  # fmt: skip


def test_verdicts():
    assert row(100.0, 110.0).verdict() == "agrees"
    assert row(100.0, 125.0).verdict() == "agrees"
    assert row(100.0, 126.0).verdict() == "same direction, different size"
    assert row(114.9, 143.1, neutral=100).verdict() == "agrees"
    assert row(35.0, 11.0, neutral=100).verdict() == "same direction, different size"
    assert row(-19.6, 3.0, neutral=0).verdict() == "disagrees"
    assert row(1.03, 1.0, neutral=1, tie=0.02).verdict() == "disagrees"
    assert row(1.0, 1.01, neutral=1, tie=0.02).verdict() == "agrees"
    assert row(0.0, -1e-6, neutral=0, tie=0.1).verdict() == "agrees"
    assert row(5.5, None).verdict() == "not run"
    assert row(None, None, judged="agrees").verdict() == "agrees"


def test_render_has_every_row_and_goal():
    rows = [
        row(100.0, 101.0, scenario="sim/scenarios/a.toml", command="simrun sim a.toml"),
        Row("NetAP-ML", "Table 1, C1, during adaptation: r", "×", 1.18, "p", 1.1, neutral=1.0),
        Row("vSPACE", "Fig. 13: BE cores", "%", 20.9, "p", None, note="no baseline"),
    ]
    meta = {"command": "c", "rev": "abc", "date": "d", "seconds": 1, "machine": "m", "log": ["x"]}
    text = render(rows, meta)
    assert "| Table 9, X | 100.0 % (netap.txt) | 101.0 % |" in text
    assert "`sim/scenarios/a.toml`; `simrun sim a.toml`" in text
    assert "**not run**" in text and "no baseline" in text
    goals = {g.goal: g.met for g in judge(rows)}
    assert (
        goals["Table 1 C1–C3: ≥ 1.15× NetAP during adaptation in all three, kick_probe off"]
        is False
    )
    assert any(m is None for m in goals.values())


def test_fig14_goal_needs_every_frame_size_in_the_papers_range():
    def fig14(which, v):
        return Row("EE-KBP", f"Fig. 14: throughput, EE-KBP ÷ NAPI, {which}", "×", 1.4, "p", v,
                   neutral=1.0, tie=0.02)  # fmt: skip

    goal = "throughput against the NAPI-like path: 1.4–3.1× (every frame size)"
    met = {g.goal: g.met for g in judge([fig14("smallest", 1.5), fig14("largest", 2.9)])}
    assert met[goal] is True
    met = {g.goal: g.met for g in judge([fig14("smallest", 1.0), fig14("largest", 1.27)])}
    assert met[goal] is False
    assert fig14("smallest", 1.01).verdict() == "disagrees"
    met = {g.goal: g.met for g in judge([fig14("smallest", None)])}
    assert met[goal] is None
