"""vSPACE's rows explain their misses from the run's points (no simulator run)."""

import pandas as pd

from vadapt_lab.reproduce import vspace


def point(allocator, kqps, served, p95, power, cores, preempt=0.0, slices=0.0):
    v, nq, be, parked = cores
    return {"allocator": allocator, "kqps": kqps, "served": served, "p95_us": p95,
            "power_w": power, "vcpu": v, "nq": nq, "be": be, "parked": parked,
            "preempt": preempt, "slice_waits": slices}  # fmt: skip


POINTS = pd.DataFrame(
    [
        point("20vCPU-1NQ", 150, 150.0, 214, 65.2, (20, 0, 0, 0)),
        point("20vCPU-1NQ", 175, 160.0, 4e5, 59.5, (20, 0, 0, 0)),
        point("vSPACE-P", 50, 50.0, 98, 60.0, (12, 8, 0, 0)),
        point("vSPACE-E", 50, 50.0, 111, 36.0, (2, 2, 0, 16)),
        point("20vCPU-20NQ", 50, 50.0, 107, 60.0, (20, 0, 0, 0)),
        point("CoreNap-like", 50, 50.0, 3157, 40.0, (7.4, 0, 0, 12.6), 0.27, 0.046),
        point("20vCPU-20NQ-on-5", 50, 50.0, 3157, 38.0, (5, 0, 0, 15)),
        point("20vCPU-20NQ-on-6", 50, 50.0, 180, 40.0, (6, 0, 0, 14)),
        point("20vCPU-20NQ-on-7", 50, 50.0, 127, 42.0, (7, 0, 0, 13)),
    ]
)


def at(name):
    return vspace.at(POINTS, name, 50.0)


def test_the_knee_reason_is_the_saturated_cores_cost_a_request():
    text = vspace.knee_reason(POINTS)
    # 1000 / 160 kQPS = 6.25 µs a request against 1000 / 120 = 8.33.
    assert "160 kQPS served, 6.2 µs" in text and "8.3 µs" in text and "lacks 2.1 µs" in text
    assert "did not saturate" in vspace.knee_reason(POINTS[POINTS["kqps"] < 160])


def test_the_energy_reason_is_watts_a_parked_core_against_ps_power():
    text = vspace.energy_reason(at("vSPACE-E"), at("vSPACE-P"), at("20vCPU-20NQ"))
    # (60 − 36) W over 16 cores = 1.50 W, 2.50 % of 60 W; 19.6 % over 15 cores = 1.31 %.
    assert "1.50 W, 2.50 % of P's power" in text and "1.31 % a core" in text
    assert "needs P to draw 115 W" in text


def test_corenap_reason_and_row_use_the_fewest_time_shared_cores_that_hold_the_slo():
    k, p = vspace.fewest_time_shared(POINTS, 50.0)
    assert k == 6 and p["p95_us"] == 180
    text = vspace.corenap_reason(at("vSPACE-E"), at("CoreNap-like"), at("vSPACE-P"), POINTS)
    assert "violates the SLO (P95 3157 µs" in text
    assert "holds it with 6 cores (P95 180 µs, 40.0 W; 5: P95 3157 µs)" in text
    assert "vSPACE-E saves 10.0 %" in text and "3.0×" in text
    row = vspace.corenap_cores_row(at("CoreNap-like"), POINTS, {})
    assert row.verdict() == "disagrees" and row.sim_value == 20 - 12.6
    held = POINTS.assign(p95_us=100.0)
    assert vspace.corenap_cores_row(vspace.at(held, "CoreNap-like", 50.0), held, {}).verdict() == (
        "agrees"
    )
