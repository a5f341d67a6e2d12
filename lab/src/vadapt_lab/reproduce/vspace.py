"""vSPACE (vspace.txt): §5.2's memcached figures in the simulator.

Every allocator of ``sim/examples/vspace_eval.rs`` on
``sim/scenarios/vspace-memcached-host.toml`` (20 cores, one 20-vCPU VM, a
memcached-like RR load, on the paper's host as the model gives it: the NQ
cores pay the NIC's softIRQ, vhost-net's copies and the vIRQ injection, a
wake-up costs a bare-metal host's, and power has P- and C-states), at
constant loads. The max-QPS sweep goes on, for the allocators still under
the SLO, until each violates it (or the last load, then a lower bound).
Then Algorithm 3's threshold explorer in long runs (it needs 1000 samples,
100 s, a round and halts after 3 stable rounds), which the short points
cannot show.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..vspace_sim import parse_points
from .rows import DaemonRef, Row
from .runner import Sim

SCENARIO = "sim/scenarios/vspace-memcached-host.toml"
SLO_US = 1000.0
TH_CEILING = 0.95
"""vadapt's highest utilization threshold (policy/src/vspace/thresholds.rs)."""
DAEMON = "not on 2 CPUs: each group keeps a core, so vSPACE has one split to give (docs/vspace.md)"
HOST = (
    "the model's NQ core pays, a packet, the NIC's softIRQ (1.906 µs, the paper's Fig. 11), "
    "vhost-net's work (1 µs) and, a pass that hands the guest requests, the vIRQ injection "
    "(1 µs); a wake-up costs 3 µs (bare metal); the last two and vhost-net's are "
    "literature-sized PLACEHOLDERs (sim/calibration/vspace-host.toml)"
)


@dataclass(frozen=True)
class Plan:
    """Loads, allocators and run lengths of one evaluation."""

    qps: str
    """The max-QPS sweep's first loads, kQPS."""
    knee_only: str
    """Allocators of the max-QPS rows."""
    more_qps: tuple[str, ...]
    """Further loads, a batch at a time, for the allocators still under the SLO."""
    at50_only: str
    """Allocators measured at 50 kQPS only (energy, cores, best-effort cores)."""
    duration_s: float
    warmup_s: float
    long_s: float
    long_qps: str


FULL = Plan(
    qps="50,100,125,150,175",
    knee_only="20vCPU-20NQ,20vCPU-1NQ,vSPACE-P",
    more_qps=("200,300", "400,500", "600,700", "800,1000"),
    at50_only="vSPACE-E,vSPACE-R,CoreNap-like,Demeter-like(1NQ),Demeter-like(20NQ)",
    duration_s=6,
    warmup_s=3,
    # At +3 % a rewarded round, 0.7 reaches the 0.95 ceiling in 11 rounds of
    # 100 s, and the explorer halts after 3 stable rounds more.
    long_s=1500,
    long_qps="50",
)
QUICK = Plan(
    qps="50,100,150",
    knee_only="20vCPU-1NQ",
    more_qps=("200",),
    at50_only="vSPACE-P,vSPACE-E,CoreNap-like,vSPACE-R,Demeter-like(1NQ)",
    duration_s=3,
    warmup_s=1,
    long_s=30,
    long_qps="50",
)


def evaluate(sim: Sim, plan: Plan, qps: str, only: str) -> tuple[pd.DataFrame, str]:
    """The points table of one ``vspace_eval`` run, and its command."""
    args: list = [sim.vspace_eval, SCENARIO, "--qps", qps]
    args += ["--duration-s", plan.duration_s, "--warmup-s", plan.warmup_s, "--threads", "2"]
    args += ["--only", only]
    text = sim.run(args)
    return parse_points(text), sim.log[-1]


def sweep(sim: Sim, plan: Plan) -> tuple[pd.DataFrame, list[str]]:
    """The max-QPS sweep: ``plan.qps`` for every knee allocator, then each batch of
    ``plan.more_qps`` for those still under the SLO at the highest load so far."""
    points, cmd = evaluate(sim, plan, plan.qps, plan.knee_only)
    cmds = [cmd]
    for batch in plan.more_qps:
        holding = [a for a in plan.knee_only.split(",") if max_under_slo(points, a)[1]]
        if not holding:
            break
        more, cmd = evaluate(sim, plan, batch, ",".join(holding))
        points = pd.concat([points, more], ignore_index=True)
        cmds.append(cmd)
    return points, cmds


def explorer(sim: Sim, plan: Plan) -> tuple[list[dict], str]:
    """Algorithm 3 at the end of a ``plan.long_s`` run per vSPACE mode."""
    args: list = [sim.vspace_eval, SCENARIO, "--qps", plan.long_qps]
    args += ["--duration-s", plan.long_s, "--warmup-s", plan.long_s - 1, "--threads", "2"]
    args += ["--only", "vSPACE-P,vSPACE-E"]
    text = sim.run(args)
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[0].startswith("vSPACE-"):
            rounds, state, th = (c.strip() for c in cells[9].split(","))
            vcpu, nq = (float(x) for x in th.split("/"))
            out.append(
                {
                    "allocator": cells[0],
                    "rounds": int(rounds.split()[0]),
                    "halted": state == "halted",
                    "th_vcpu": vcpu,
                    "th_nq": nq,
                }
            )
    return out, sim.log[-1]


def max_under_slo(points: pd.DataFrame, allocator: str) -> tuple[float | None, bool]:
    """Highest load before the first that violates the SLO, and whether it is the
    top of the sweep (then a lower bound)."""
    mine = points[points["allocator"] == allocator].sort_values("kqps")
    if mine.empty:
        return None, False
    best = None
    for _, p in mine.iterrows():
        if p["p95_us"] <= SLO_US and p["served"] >= 0.98 * p["kqps"]:
            best = p["kqps"]
        else:
            return best, False
    return best, True


def at(points: pd.DataFrame, allocator: str, kqps: float) -> pd.Series | None:
    """The point of ``allocator`` at ``kqps``."""
    m = points[(points["allocator"] == allocator) & (points["kqps"] == kqps)]
    return None if m.empty else m.iloc[0]


def rows(sim: Sim, plan: Plan) -> list[Row]:
    """Every vSPACE row."""
    knees, cmds = sweep(sim, plan)
    at50, cmd50 = evaluate(sim, plan, "50", plan.at50_only)
    points = pd.concat([knees, at50], ignore_index=True)
    knee_common = {"scenario": SCENARIO, "command": "; ".join(cmds), "daemon": DAEMON}
    common = {"scenario": SCENARIO, "command": f"{cmds[0]}; {cmd50}", "daemon": DAEMON}
    knee_common["daemon_ref"] = common["daemon_ref"] = DaemonRef("vspace", "")
    p_max, p_top = max_under_slo(points, "vSPACE-P")
    s_max, s_top = max_under_slo(points, "20vCPU-20NQ")
    one_max, one_top = max_under_slo(points, "20vCPU-1NQ")
    top = f" (held at {max(knees['kqps']):.0f} kQPS, the top of the sweep: a lower bound)"
    result = [
        Row(
            "vSPACE",
            "Fig. 8, memcached: max QPS under the P95 SLO, vSPACE-P ÷ static 20vCPU-20NQ",
            "×",
            4.18,
            "vspace.txt §5.2 (+318 %), abstract (up to 4.2×)",
            p_max / s_max if p_max and s_max and not s_top else None,
            neutral=1.0,
            headline=True,
            lower_bound=p_top,
            note=(
                (
                    f"vSPACE-P {p_max:.0f} against 20vCPU-20NQ {s_max:.0f} kQPS; "
                    if p_max and s_max
                    else ""
                )
                + "vSPACE-P stops when its vCPU group saturates, 20vCPU-20NQ when preemption "
                "by 20 time-sharing workers pushes the P95 past the SLO; "
                + HOST
                + (top if p_top else "")
            ),
            **knee_common,
        ),
        Row(
            "vSPACE",
            "Fig. 2/8: static 20vCPU-1NQ's knee, max kQPS under the SLO",
            "kQPS",
            110.0,
            "vspace.txt Fig. 2 (1pNQ-1vNQ violates from ~110 kQPS)",
            one_max,
            lower_bound=one_top,
            note=(
                "the one NQ core saturates at ~163 kQPS served (~6 µs a request with batching); "
                + HOST
                + (top if one_top else "")
                + (" (the lowest load swept already violates)" if one_max is None else "")
            ),
            **knee_common,
        ),
        Row(
            "vSPACE",
            "Fig. 4/14: time-shared 20vCPU-20NQ, max kQPS under the SLO",
            "kQPS",
            150.0,
            "vspace.txt §3 (violates beyond 150 kQPS; 160 in Fig. 14)",
            s_max,
            lower_bound=s_top,
            note=HOST + (top if s_top else ""),
            **knee_common,
        ),
    ]
    e50, p50, s50 = (at(points, a, 50.0) for a in ("vSPACE-E", "vSPACE-P", "20vCPU-20NQ"))
    power_note = (
        "PLACEHOLDER power model of the Xeon Gold 6138 (5.5 W a busy core, 1.8 W an idle one "
        "of an active group in C1, 0.1 W a parked one in C6, 20 W uncore; the paper gives no "
        "P-/C-state figures): each core mode E parks saves 1.7 W"
    )
    for other, ref, paper_value in ((p50, "vSPACE-P", -19.6), (s50, "20vCPU-20NQ", -24.4)):
        sim_value = None
        if e50 is not None and other is not None:
            sim_value = 100 * (e50["power_w"] / other["power_w"] - 1)
        result.append(
            Row(
                "vSPACE",
                f"Fig. 12, memcached 50 kQPS: vSPACE-E energy against {ref}, %",
                "%",
                paper_value,
                "vspace.txt §5.2 Energy",
                sim_value,
                neutral=0.0,
                tie=1.0,
                note=power_note,
                **common,
            )
        )
    c50 = at(points, "CoreNap-like", 50.0)
    corenap_note = power_note + (
        "; CoreNap's paper is not available here: the CoreNap-like allocator is "
        "sim/src/cores.rs's reading of §5.1 (the LC VM's vCPUs and queue workers time-share "
        "max(ceil(CPU time ÷ 0.7), an SLO-driven floor) cores, the rest parked)"
    )
    if c50 is not None and e50 is not None:
        corenap_note += (
            f"; cores vSPACE-E {e50['vcpu'] + e50['nq']:.1f} active, CoreNap-like "
            f"{20 - c50['parked']:.1f} unparked (paper: 5 and 9)"
        )
    result.append(
        Row(
            "vSPACE",
            "§5.2 (abstract), memcached 50 kQPS: vSPACE-E energy against CoreNap-like, %",
            "%",
            -16.5,
            "vspace.txt §5.2 Energy, abstract (up to 16.5 %)",
            None if e50 is None or c50 is None else 100 * (e50["power_w"] / c50["power_w"] - 1),
            neutral=0.0,
            tie=1.0,
            note=corenap_note,
            headline=True,
            **common,
        )
    )
    result.append(
        Row(
            "vSPACE",
            "§5.2, memcached 50 kQPS: vSPACE-E's active cores (vCPU + NQ groups)",
            "cores",
            5.0,
            "vspace.txt §5.2 (an average of 5 pCPUs)",
            None if e50 is None else e50["vcpu"] + e50["nq"],
            **common,
        )
    )
    r50, d50, d20 = (
        at(points, a, 50.0) for a in ("vSPACE-R", "Demeter-like(1NQ)", "Demeter-like(20NQ)")
    )
    be_gain, be_note = None, "no Demeter-like point at 50 kQPS"
    if r50 is not None and d50 is not None and d50["be"] > 0:
        be_gain = 100 * (r50["be"] / d50["be"] - 1)
        ok = d50["p95_us"] <= SLO_US and d50["served"] >= 0.98 * d50["kqps"]
        be_note = (
            f"BE cores vSPACE-R {r50['be']:.1f}, Demeter-like(1NQ) {d50['be']:.1f} at P95 "
            f"{d50['p95_us']:.0f} µs ({'meets' if ok else 'violates'} the SLO)"
        )
        if d20 is not None:
            be_note += f"; Demeter-like(20NQ) {d20['be']:.1f} at P95 {d20['p95_us']:.0f} µs"
        if not ok:
            be_note += (
                ". Sized by its vCPUs' load alone (our definition, sim/src/cores.rs), the "
                "Demeter-like group is too small for the packet work it time-shares and "
                "violates the SLO where the paper's Demeter held it: the comparison is not "
                "like for like"
            )
    result.append(
        Row(
            "vSPACE",
            "Fig. 13, memcached 50 kQPS: vSPACE-R's cores for the best-effort VM against "
            "Demeter-like(1NQ), %",
            "%",
            20.9,
            "vspace.txt §5.2 (+20.9 % memcached, up to +30.5 % ferret)",
            be_gain,
            neutral=0.0,
            tie=1.0,
            note=be_note,
            **common,
        )
    )
    result.append(
        Row(
            "vSPACE",
            "§5.2 (abstract): vSPACE-R's cores for the best-effort VM against Demeter(1NQ), "
            "nginx with ferret, %",
            "%",
            30.5,
            "vspace.txt §5.2, abstract (up to 30.5 %)",
            None,
            neutral=0.0,
            headline=True,
            note=(
                "the simulator has no nginx workload (1 KB files, 10 ms SLO) and no PARSEC "
                "best-effort VM (its best-effort VM is CPU-bound and uses every lent core); the "
                "memcached row above is the comparison it can make"
            ),
            **common,
        )
    )
    runs, cmd = explorer(sim, plan)
    for r in runs:
        moved = abs(r["th_vcpu"] - 0.7) > 1e-9 or abs(r["th_nq"] - 0.7) > 1e-9
        ok = r["halted"] and moved
        # Thresholds at vadapt's ceiling climbed on reward alone: no round violated
        # the SLO, so the violation branch never ran and the run shows only the cap.
        capped = min(r["th_vcpu"], r["th_nq"]) >= TH_CEILING - 1e-9
        result.append(
            Row(
                "vSPACE",
                f"Algorithm 3, {r['allocator']} at {plan.long_qps} kQPS for {plan.long_s:.0f} s: "
                "converges, thresholds move from 0.7",
                "",
                None,
                "vspace.txt Algorithm 3 (explores until stable)",
                sim_text=(
                    f"{r['rounds']} rounds, {'halted (stable)' if r['halted'] else 'exploring'}, "
                    f"Th vCPU {r['th_vcpu']:.3f}, NQ {r['th_nq']:.3f}"
                ),
                judged="agrees" if ok else "disagrees",
                input=capped,
                note=(
                    "an input, not a result: at this load no round violates the SLO, so "
                    "every round is rewarded and both thresholds climb (+3 % a round) to "
                    f"vadapt's own {TH_CEILING} ceiling and halt there; Algorithm 3's violation "
                    "branch never runs, and every other vSPACE row uses thresholds fixed at 0.7"
                    if capped
                    else ""
                    if ok
                    else "did not halt within the run: with no SLO violation every round is "
                    "rewarded (+3 %), and a rewarded round below the 0.95 ceiling is not "
                    "stable, so it needs 11 rounds to the ceiling and 3 stable ones"
                ),
                scenario=SCENARIO,
                command=cmd,
                daemon=DAEMON,
            )
        )
    return result
