"""Tests of the vSPACE simulator figure: parsing vspace_eval's markdown and drawing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vadapt_lab import vspace_sim

HEADER = (
    "| allocator | kQPS | served kQPS | P95 µs | power W | cores v/nq/be/parked "
    "| preempt/req | slice waits/req | migrations/s |"
)
OUTPUT = (
    "# points (P95 in µs; cores = mean per control period: vCPU|shared, NQ, BE, parked)\n"
    + HEADER
    + """
|------:|---:|---:|---:|---|---:|---:|---:|
| 20vCPU-20NQ | 50 | 50.0 | 158 | 39.1 | 20.0/0.0/0.0/0.0 | 0.081 | 0.0100 | 0.0 |
| 20vCPU-20NQ | 150 | 126.6 | 920000 | 45.0 | 20.0/0.0/0.0/0.0 | 0.162 | 0.0440 | 0.0 |
| vSPACE-E | 50 | 50.0 | 127 | 35.8 | 2.0/4.1/0.0/13.9 | 0.000 | 0.0000 | 1.5 |

# summary (SLO: P95 <= 1000 µs and >= 98 % of the offered load served)
| allocator | max kQPS under SLO |
"""
)


def test_points_are_parsed_with_their_cores():
    p = vspace_sim.parse_points(OUTPUT)
    assert list(p["allocator"]) == ["20vCPU-20NQ", "20vCPU-20NQ", "vSPACE-E"]
    e = p[p["allocator"] == "vSPACE-E"].iloc[0]
    assert (e["kqps"], e["p95_us"], e["power_w"]) == (50.0, 127.0, 35.8)
    assert (e["vcpu"], e["nq"], e["be"], e["parked"]) == (2.0, 4.1, 0.0, 13.9)


def test_other_text_is_refused():
    with pytest.raises(vspace_sim.EvalOutputError):
        vspace_sim.parse_points("| allocator | max kQPS under SLO |\n")
    head = OUTPUT.split("| 20vCPU")[0]
    with pytest.raises(vspace_sim.EvalOutputError):
        vspace_sim.parse_points(head)


def test_figure_is_written(tmp_path: Path):
    path = vspace_sim.plot(vspace_sim.parse_points(OUTPUT), tmp_path)
    assert path.name == "vspace-allocators.png" and path.stat().st_size > 1000


def test_command_line_says_what_is_wrong(tmp_path: Path, capsys):
    bad = tmp_path / "x.md"
    bad.write_text("nothing here")
    assert vspace_sim.main([str(bad), "--out", str(tmp_path)]) == 1
    assert "no points table" in capsys.readouterr().err


EXPLORER = """# explorer (Algorithm 3 over each run; Th as fractions of a core: min/max/final)
| allocator | kQPS | rounds | state | violation-branch rounds | rewarded rounds | kept rounds \
| lowering rounds | SLO-violating periods | Th vCPU min/max/final | Th NQ min/max/final |
|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|
| vSPACE-E | 150 | 9 | halted | 3 | 4 | 2 | 3 | 212 | 0.700/0.812/0.771 | 0.700/0.788/0.788 |
| vSPACE-P | 150 | 15 | exploring | 0 | 15 | 0 | 0 | 0 | 0.700/0.950/0.950 | 0.700/0.950/0.950 |
"""


def test_explorer_runs_are_parsed():
    runs = vspace_sim.parse_explorer(OUTPUT + "\n" + EXPLORER)
    assert [r["allocator"] for r in runs] == ["vSPACE-E", "vSPACE-P"]
    e = runs[0]
    assert (e["rounds"], e["halted"], e["adjusted"], e["rewarded"], e["kept"]) == (9, True, 3, 4, 2)
    assert (e["lowering"], e["violating"]) == (3, 212)
    assert e["th_vcpu"] == (0.7, 0.812, 0.771) and e["th_nq"] == (0.7, 0.788, 0.788)
    assert runs[1]["halted"] is False


def test_a_bad_explorer_table_is_refused():
    with pytest.raises(vspace_sim.EvalOutputError, match="no explorer table"):
        vspace_sim.parse_explorer(OUTPUT)
    with pytest.raises(vspace_sim.EvalOutputError, match="bad row"):
        vspace_sim.parse_explorer(EXPLORER.replace("0.700/0.812/0.771", "0.700/0.812"))
