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
