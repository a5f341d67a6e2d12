"""NetAP (netap.txt): Tables 1–4 in the simulator.

Table 1 (gain of the best fixed interval over VirtIO) and Table 2 (NetAP
against the best fixed interval, after and while adapting, 1 s rounds) come
from each Table 2 scenario run once and swept over the interval
(``sim/scenarios/netap-{1vm-6t,2vm-3t,3vm-2t,6vm-1t}.toml``); Tables 3–4
(VirtIO → Adapted: bandwidth, host and guest CPU) from the 60-s scenarios
``netap-{2vm-4t,3vm-3t,4vm-2t,5vm-1t}.toml``; the abstract's figures
(Table 7, 5VM-1T on the paper's second, 8-core host) from ``netap-5vm-1t``
on 8 cores.

The scenarios run NetAP without vadapt's additions that the paper lacks: no
ring-full safety net (``kick_threshold_permille = 0``), no ring guard and no
kick-driven check (``kick_probe = false``). They are not the paper's NetAP
in one respect: guest notifications stay off while a worker sleeps
(``notify_during_sleep = false``, vadapt's default), where the paper's
Algorithm 1 lets a kick end the sleep (README, `policy/src/netap.rs`).
"""

from __future__ import annotations

import json
from pathlib import Path

from .rows import DaemonRef, Row
from .runner import Sim

TABLE2 = {
    # scenario: (after adapting %, while adapting %), netap.txt Table 2, 1 s rounds
    "1vm-6t": (100.27, 94.32),
    "2vm-3t": (100.15, 98.76),
    "3vm-2t": (100.89, 97.13),
    "6vm-1t": (80.58, 81.30),
}
TABLE1 = {"1vm-6t": 128.0, "3vm-2t": 142.0, "6vm-1t": 163.0}
"""Best interval's bandwidth against VirtIO, %, netap.txt Table 1 (V VMs × T threads)."""
TABLES34 = {
    # scenario: (bandwidth, guest CPU, host CPU), Adapted ÷ VirtIO in %, netap.txt Tables 3–4
    "2vm-4t": (114.91, 103.77, 35.15),
    "3vm-3t": (110.31, 102.35, 54.60),
    "4vm-2t": (114.16, 102.65, 66.54),
    "5vm-1t": (130.37, 101.22, 54.70),
}

TABLE7 = (131.16, 32.92)
"""5VM-1T on the second host (8-core Xeon E5-2650 v2, ~20 % slower cores), Adapted ÷
VirtIO in %: bandwidth and host CPU, netap.txt Table 7; the abstract's +31.16 % and
32.92 %."""

DAEMON_TABLES34 = (
    "B9 recorded (rev a67b906, TCP stream, 2×3 and 6×1 shapes): NetAP ÷ interrupt "
    "bandwidth 1.35–1.57×, CPU/GB 0.19–0.52× (BENCHMARKS.md, B9)"
)
NO_DAEMON = "not on 2 cores: the paper's 6-core, 10 GbE host"
NO_GUEST_CPU = (
    "not measured: `vadapt demo`'s synthetic guests report their CPU for the whole run, "
    "not per policy phase"
)
DAEMON_TABLE1 = {"1vm-6t": (102.0, 1, 6), "3vm-2t": (121.0, 3, 2), "6vm-1t": (147.0, 6, 1)}
"""Issue 39's recorded daemon run, NetAP ÷ interrupt-mode bandwidth in %, per shape (VMs,
threads): a 16-core Xeon with the daemon and synthetic guests limited to 6 cores (the
paper's host), a release build of a4bfa1b."""


def daemon_table1(name: str) -> str:
    """Where Table 1's daemon figure came from."""
    _, vms, threads = DAEMON_TABLE1[name]
    return (
        "NetAP ÷ interrupt mode (not the best fixed interval ÷ VirtIO); issue 39's recorded "
        "run: 16-core Xeon, daemon and synthetic guests limited to 6 cores, release build of "
        f"a4bfa1b, `vadapt demo --mode tcp-stream --vms {vms} --threads {threads} --baseline "
        "interrupt --policy netap,busy-poll --duration 45`"
    )


def table2_ref(name: str, window: str) -> DaemonRef:
    """Table 2 on the daemon: NetAP's ``window`` (``while`` or ``after``) ÷ the best of
    the daemon's fixed-interval sweep, %, from one demo on the paper's 6 cores."""
    return DaemonRef(
        f"netap-table2-{name}",
        window,
        100.0,
        "NetAP (vadapt's defaults: ring guard, kick-driven check) ÷ the best of fixed "
        "intervals 100–4000 µs, payload",
    )


def bandwidth_ref(case: str) -> DaemonRef:
    """The daemon's Adapted ÷ VirtIO bandwidth: NetAP ÷ interrupt mode's payload, %."""
    return DaemonRef(case, "payload_gbps", 100.0, "NetAP ÷ interrupt mode, guests' payload")


def host_cpu_ref(case: str) -> DaemonRef:
    """The daemon's Adapted ÷ VirtIO host CPU: NetAP ÷ interrupt mode's queue-worker CPU, %
    (the paper's host CPU also counts the vCPU threads' host side, which the synthetic
    guests' is not)."""
    return DaemonRef(case, "worker_cpu_pct", 100.0, "NetAP ÷ interrupt mode, queue workers' CPU")


TABLE2_TIE = 1.0
"""Table 2's rows are judged on the loss against the best interval (100 %); the
paper's own "after" figures reach 100.15–100.89 %, so within a point is no loss."""


def periods(result: Path) -> dict[str, dict]:
    """The run's `periods` rows by name."""
    rows = json.loads(result.read_text())["rows"]
    return {r["variant"]: r for r in rows if r["table"] == "periods"}


def paper_scenario(sim: Sim, src: Path, out: Path, cores: int | None = None) -> Path:
    """``src`` with NetAP's kick-driven check off (the paper has none), written to ``out``;
    on ``cores`` host cores when given."""
    text = src.read_text()
    if cores is not None:
        if "cores = 6 " not in text:
            raise ValueError(f"{src}: no `cores = 6` line in [host]")
        text = text.replace("cores = 6 ", f"cores = {cores} ", 1)
    text = text.replace('include = "../', f'include = "{src.parent.parent.resolve()}/')
    text = text.replace(
        "kick_threshold_permille = 0, ring_guard = false }",
        "kick_threshold_permille = 0, ring_guard = false, kick_probe = false }",
    )
    if "kick_probe = false" not in text:
        raise ValueError(f"{src}: no NetAP policy line with kick_threshold_permille = 0")
    out.write_text(text)
    return out


def rows(sim: Sim, out: Path) -> list[Row]:
    """Every NetAP row."""
    out.mkdir(parents=True, exist_ok=True)
    result: list[Row] = []
    for name, (after_p, during_p) in TABLE2.items():
        src = sim.repo / f"sim/scenarios/netap-{name}.toml"
        sc = paper_scenario(sim, src, out / f"netap-{name}.toml")
        run_dir, sweep_dir = out / f"run-{name}", out / f"sweep-{name}"
        sim.run([sim.simrun, "sim", sc, "--out", run_dir])
        sim.run(
            [sim.simrun, "sim", "sweep", sc, "--param", "interval=50..4000:50", "--out", sweep_dir]
        )
        sweep = json.loads((sweep_dir / "sweep.json").read_text())
        best = sweep["best_gbps"]
        p = periods(run_dir / "result.json")
        cmd = "; ".join(sim.log[-2:])
        common = {"scenario": f"sim/scenarios/netap-{name}.toml (kick_probe off)", "command": cmd}
        shape = name.upper()
        note_6vm = (
            "the paper's NetAP fell about 19 % short of the best and the model's does not: "
            "its six identical VMs see one flat plateau, and their searches do not disturb "
            "each other as the paper's did (no noise between rounds)"
        )
        result.append(
            Row(
                "NetAP",
                f"Table 2, {shape}, after adapting (90–120 s), % of the best fixed interval",
                "%",
                after_p,
                "netap.txt Table 2 (a), 1 s",
                100 * p["adapted"]["gbps"] / best,
                daemon=NO_DAEMON,
                daemon_ref=table2_ref(name, "after"),
                neutral=100.0,
                tie=TABLE2_TIE,
                note=note_6vm if name == "6vm-1t" else "",
                **common,
            )
        )
        result.append(
            Row(
                "NetAP",
                f"Table 2, {shape}, while adapting (30–60 s), % of the best fixed interval",
                "%",
                during_p,
                "netap.txt Table 2 (b), 1 s",
                100 * p["adapting"]["gbps"] / best,
                daemon=NO_DAEMON,
                daemon_ref=table2_ref(name, "while"),
                neutral=100.0,
                tie=TABLE2_TIE,
                note=note_6vm if name == "6vm-1t" else "",
                **common,
            )
        )
        if name in TABLE1:
            base = sweep.get("baseline", {}).get("gbps")
            result.append(
                Row(
                    "NetAP",
                    f"Table 1, {shape}: best fixed interval's bandwidth, % of VirtIO",
                    "%",
                    TABLE1[name],
                    "netap.txt Table 1",
                    100 * best / base if base else None,
                    daemon=daemon_table1(name),
                    daemon_value=DAEMON_TABLE1[name][0],
                    daemon_ref=DaemonRef(
                        f"netap-{name}",
                        "payload_gbps",
                        100.0,
                        "NetAP ÷ interrupt mode (the paper: best fixed interval ÷ VirtIO)",
                    ),
                    neutral=100.0,
                    tie=2.0,
                    note=(
                        "the model's interrupt mode loses little with idle cores; the paper's "
                        "paid costs the model lacks (kick latency on the ACK clock, RX)"
                    ),
                    **common,
                )
            )
    for name, (bw_p, guest_p, host_p) in TABLES34.items():
        src = sim.repo / f"sim/scenarios/netap-{name}.toml"
        sc = paper_scenario(sim, src, out / f"netap-{name}.toml")
        run_dir = out / f"run-{name}"
        sim.run([sim.simrun, "sim", sc, "--out", run_dir])
        p = periods(run_dir / "result.json")
        v, a = p["VirtIO"], p["adapted"]
        common = {
            "scenario": f"sim/scenarios/netap-{name}.toml (kick_probe off)",
            "command": sim.log[-1],
            "neutral": 100.0,
            "tie": 1.0,
        }
        shape = name.upper()
        for label, key, paper_value, daemon, ref in (
            ("bandwidth", "gbps", bw_p, DAEMON_TABLES34, bandwidth_ref(f"netap-{name}")),
            ("guest CPU", "guest_cpu_pct", guest_p, NO_GUEST_CPU, None),
            ("host CPU", "host_cpu_pct", host_p, NO_DAEMON, host_cpu_ref(f"netap-{name}")),
        ):
            result.append(
                Row(
                    "NetAP",
                    f"Tables 3–4, {shape}: {label}, Adapted ÷ VirtIO, %",
                    "%",
                    paper_value,
                    "netap.txt Tables 3–4",
                    100 * a[key] / v[key],
                    daemon=daemon,
                    daemon_ref=ref,
                    note=(
                        "the calibration's wake-up CPU (27 µs, measured in nested VMs) is "
                        "several times a bare-metal host's, so the model's interrupt mode "
                        "burns more host CPU"
                        if key == "host_cpu_pct"
                        else ""
                    ),
                    **common,
                )
            )
    result += table7_rows(sim, out)
    return result


def table7_rows(sim: Sim, out: Path) -> list[Row]:
    """The abstract's figures: Table 7's 5VM-1T, Adapted ÷ VirtIO, on an 8-core host."""
    src = sim.repo / "sim/scenarios/netap-5vm-1t.toml"
    sc = paper_scenario(sim, src, out / "netap-5vm-1t-8cores.toml", cores=8)
    run_dir = out / "run-5vm-1t-8cores"
    sim.run([sim.simrun, "sim", sc, "--out", run_dir])
    p = periods(run_dir / "result.json")
    v, a = p["VirtIO"], p["adapted"]
    slower = (
        "the second host's 8 cores are modelled, its ~20 % slower cores (BogoMips 5200 "
        "against 6192) are not: the calibration's costs are those of Tables 3–4"
    )
    result = []
    case = "netap-5vm-1t-8cores"
    for label, key, paper_value, extra, ref in (
        ("bandwidth", "gbps", TABLE7[0], "", bandwidth_ref(case)),
        (
            "host CPU",
            "host_cpu_pct",
            TABLE7[1],
            "; the calibration's wake-up CPU (27 µs, measured in nested VMs) is several times "
            "a bare-metal host's, so the model's interrupt mode burns more host CPU",
            host_cpu_ref(case),
        ),
    ):
        result.append(
            Row(
                "NetAP",
                f"Table 7 (abstract), 5VM-1T on the 8-core host: {label}, Adapted ÷ VirtIO, %",
                "%",
                paper_value,
                "netap.txt Table 7, abstract",
                100 * a[key] / v[key],
                daemon=NO_DAEMON.replace("6-core", "8-core"),
                daemon_ref=ref,
                neutral=100.0,
                tie=1.0,
                scenario="sim/scenarios/netap-5vm-1t.toml on 8 cores (kick_probe off)",
                command=sim.log[-1],
                note=slower + extra,
                headline=True,
            )
        )
    return result
