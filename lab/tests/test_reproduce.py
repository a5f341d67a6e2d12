"""PAPERS.md's verdict rule and its rendering (no simulator run)."""

import pytest

from vadapt_lab.reproduce.goals import judge
from vadapt_lab.reproduce.papers_md import SpliceError, render, splice
from vadapt_lab.reproduce.rows import Row, counts, summary


def row(paper_value, sim_value, neutral=None, tie=0.0, **kw):
    return Row("NetAP", "Table 9, X", "%", paper_value, "netap.txt", sim_value, neutral=neutral,
               tie=tie, **kw)  # fmt: skip


def test_verdicts():
    # Levels without a neutral value: within 25 % of the value, else "differs" (no direction).
    assert row(100.0, 110.0).verdict() == "agrees"
    assert row(100.0, 125.0).verdict() == "agrees"
    assert row(100.0, 126.0).verdict() == "differs"
    assert row(110.0, 300.0).verdict() == "differs"
    # Effects: (sim − neutral) ÷ (paper − neutral) within [0.75, 1.25].
    assert row(114.9, 115.8, neutral=100).verdict() == "agrees"
    assert row(35.0, 23.5, neutral=100).verdict() == "agrees"  # e = 1.18
    assert row(35.0, 11.0, neutral=100).verdict() == "same direction, different size"
    assert row(-19.6, 3.0, neutral=0).verdict() == "disagrees"
    assert row(1.03, 1.0, neutral=1, tie=0.02).verdict() == "disagrees"  # no effect in the sim
    assert row(1.0, 1.01, neutral=1, tie=0.02).verdict() == "agrees"  # both no effect
    assert row(0.0, -0.6, neutral=0, tie=0.5).verdict() == "disagrees"  # an effect, none in paper
    assert row(0.0, -1e-6, neutral=0, tie=0.1).verdict() == "agrees"
    assert row(5.5, None).verdict() == "not run"
    assert row(None, None, judged="agrees").verdict() == "agrees"


def test_effect_rule_rejects_what_the_value_rule_let_through():
    """Cases that agreed when a value within 25 % of the paper's value agreed."""
    # NetAP Table 1, 1VM-6T: 108.5 % against 128 % is 0.30 of the paper's gain.
    r = row(128.0, 108.5, neutral=100, tie=2)
    assert abs(r.effect_ratio() - 0.304) < 1e-3
    assert r.verdict() == "same direction, different size"
    # Guest CPU, 4VM-2T: +31.6 points against +2.65 is 12× the paper's effect.
    assert row(102.65, 131.6, neutral=100, tie=1).verdict() == "same direction, different size"
    # NetAP Table 2, 6VM-1T after adapting: 100 % of the best against the paper's 80.6 %.
    assert row(80.58, 100.0, neutral=100, tie=1).verdict() == "disagrees"
    # vSPACE max QPS ratio: 3.00× against 4.18× is 0.63 of the gain.
    assert row(4.18, 3.0, neutral=1).verdict() == "same direction, different size"
    # A 25 % band on the effect, not the value: 1.19× against 1.13× (e = 0.68).
    assert row(1.19, 1.13, neutral=1, tie=0.02).verdict() == "same direction, different size"
    assert row(1.23, 1.28, neutral=1, tie=0.02).verdict() == "agrees"  # e = 1.22


def test_inputs_are_shown_but_not_counted():
    rows = [
        row(5.5, 5.5, neutral=0, input=True),
        row(170.0, 170.0, input=True),
        row(100.0, 101.0),
        row(128.0, 108.5, neutral=100),
    ]
    assert rows[0].verdict() == "input"
    assert rows[0].effect_ratio() == 1.0  # shown, but the verdict ignores it
    assert counts(rows)["agrees"] == 1
    assert summary(rows) == "1 agrees, 1 same direction, different size (2 inputs, not counted)"
    meta = {"command": "c", "rev": "abc", "date": "d", "seconds": 1, "machine": "m", "log": []}
    text = render(rows + [row(31.16, None, headline=True)], meta)
    assert "| NetAP | 5 | 1 agrees, 1 same direction, different size, 1 not run (2 inputs" in text
    assert "| ★ Table 9, X |" in text
    assert "| input |" in text
    assert "same direction, different size (e = 0.30)" in text


def test_render_has_every_row_and_goal():
    rows = [
        row(100.0, 101.0, scenario="sim/scenarios/a.toml", command="simrun sim a.toml"),
        Row(
            "NetAP-ML",
            "Table 1, C1, during adaptation: NetAP-ML ÷ NetAP mean throughput",
            "×",
            1.18,
            "p",
            1.1,
            neutral=1.0,
        ),  # fmt: skip
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


def test_a_recorded_daemon_figure_is_judged_by_the_same_rule():
    r = row(163.0, 178.2, neutral=100, tie=2, daemon="16-core Xeon, a4bfa1b", daemon_value=147.0)
    assert r.verdict() == "agrees"  # e = 1.24
    assert r.daemon_verdict() == "same direction, different size"  # e = 0.746
    assert row(128.0, 108.5, neutral=100, tie=2, daemon_value=102.0).daemon_verdict() == (
        "disagrees"  # within the tie: no effect where the paper has one
    )
    assert row(128.0, 108.5).daemon_verdict() is None
    meta = {"command": "c", "rev": "abc", "date": "d", "seconds": 1, "machine": "m", "log": []}
    text = render([r], meta)
    assert "| 147.0 %: same direction, different size (e = 0.75); 16-core Xeon, a4bfa1b |" in text
    assert "daemon has a figure in 1 rows" in text


def meta(command, rev, date, machine, log):
    return {"command": command, "rev": rev, "date": date, "seconds": 3, "machine": machine,
            "log": log}  # fmt: skip


def test_one_paper_rerun_rewrites_only_its_parts():
    netap = row(100.0, 101.0, note="netap note")
    knee_figure = "Fig. 2/8: static 20vCPU-1NQ's knee, max kQPS under the SLO"
    knee = Row("vSPACE", knee_figure, "kQPS", 110.0, "p", 150.0, note="before")
    ratio = Row("vSPACE", "Fig. 8, memcached: max QPS", "×", 4.18, "p", 4.8, neutral=1.0)
    old = render([netap, ratio, knee], meta("full", "old", "d0", "m0", ["cmd-all"]))
    assert "differs" in old and "before" in old
    knee2 = Row("vSPACE", knee_figure, "kQPS", 110.0, "p", 120.0, note="after")
    command = "python -m vadapt_lab reproduce --paper vspace"
    text = splice(old, [ratio, knee2], "vSPACE", meta(command, "new", "d1", "m1", ["cmd-v"]))
    vspace_part = text[text.index("## vSPACE (") : text.index("## Commands run")]
    assert "after" in vspace_part and "before" not in text
    assert f"`{command}`: revision `new`, d1, 3 s on m1" in vspace_part

    # The other paper, the header's stamp and the commands' list are the full run's.
    def others(t):
        head = t[: t.index("## vSPACE (")].splitlines()
        return [line for line in head if not line.startswith(("| vSPACE |", "| all |"))]

    assert others(text) == others(old)
    # The "all" counts are the papers' lines summed again.
    assert "| all | 3 | 2 agrees, 1 differs |" in old
    assert "| all | 3 | 3 agrees |" in text
    assert text[text.index("## Commands run") :] == old[old.index("## Commands run") :]
    assert "| vSPACE | 2 | 2 agrees |" in text and "| vSPACE | 2 | 1 agrees, 1 differs |" in old
    # The goals table's vSPACE line follows the new rows: the knee is within 25 %.
    goal = [line for line in text.splitlines() if line.startswith("| vSPACE | (issue 39) max")]
    assert len(goal) == 1 and "knee at 120 kQPS" in goal[0] and goal[0].endswith("| met |")
    assert text.count("## vSPACE (") == 1 and text.count("## NetAP (") == 1


def test_one_paper_rerun_needs_its_section():
    m = meta("c", "r", "d", "m", [])
    old = render([row(100.0, 101.0)], m)
    with pytest.raises(SpliceError, match="no section"):
        splice(old, [Row("vSPACE", "Fig. 13: BE cores", "%", 20.9, "p", 1.0)], "vSPACE", m)
    with pytest.raises(SpliceError, match="no rows"):
        splice(old, [row(100.0, 101.0)], "vSPACE", m)
