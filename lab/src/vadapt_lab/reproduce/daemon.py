"""``reproduce --daemon``: the papers' shapes on the real daemon, for the daemon column.

Each :class:`Case` is one run of ``vadapt`` (the release build) on as many cores as
the paper's host had: the process, its daemon and its synthetic guests are limited
to the first ``cores`` CPUs this process may use (``taskset -c`` in the command
shown). On a machine with fewer, the case is not run and every row it feeds says
"not run: needs N cores"; nothing fails.

The runners are ``vadapt``'s own, not a second one here: the NetAP and NetAP-ML
shapes are ``vadapt demo`` (a daemon with synthetic guests sending a TCP stream
to a sink, the baseline phase then the policy's, ``summary.json`` with each phase
against the first); EE-KBP on the uplink is ``vadapt bench --only b10`` (the
AF_XDP uplink on a veth wire against the kernel's bridge→TAP path, NAPI).

A row names its figure with a :class:`~.rows.DaemonRef` (case, metric, scale);
:func:`fill` runs every case a row names, once, and writes the figure and the
machine it came from into the row, whose verdict is then judged by the same rule
as the simulator's (``rows.py``). A row with a recorded figure (issue 39's
16-core run) keeps it when its case cannot run here, and says so.

What the daemon column measures is not always the paper's measure, and each
cell says so: the demo's NetAP and NetAP-ML run with vadapt's defaults (ring
guard, kick-driven check), against interrupt mode (vhost-net's behaviour), not
the paper's NetAP against VirtIO or the best fixed interval; host CPU is the
queue workers' CPU. NetAP Table 2 is one demo per shape: NetAP first, for the
paper's 120 s, then each interval of a sweep with the daemon's ``fixed-interval``
policy (the paper's probe, no search); the rows take NetAP's 30–60 s and 90–120 s
against the best interval's mean. vSPACE is a driver of its own (``vspace_daemon.py``):
daemons with and without the core manager under a request/response guest that serves
QMP and a guest agent, each stepped up to its highest rate under the SLO.

Run it alone on the machine: the figures are ratios within one run, but other
load on the same cores moves them.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..results import load_results
from . import vspace_daemon
from .rows import Row

BUILD = ["cargo", "build", "--release", "-p", "vadapt"]
"""The release ``vadapt`` the cases run (a no-op when it is up to date)."""

NETAP_HOST = "the NetAP paper's 6-core host"
NETAP_HOST7 = "the NetAP paper's second, 8-core host (Table 7)"
NETAP_ML_HOST = "the NetAP-ML paper's 24-core host"
EEKBP_HOST = "the EE-KBP paper's 14-core Xeon E5-2660 v4"
VSPACE_HOST = "the vSPACE paper's 20-core Xeon Gold 6138"

DEMO_SECONDS = 90
"""A NetAP shape's run: half the baseline (interrupt mode), half the policy; NetAP's
search takes 11 rounds of 1 s, so the policy's phase is mostly after adapting."""


@dataclass(frozen=True)
class Case:
    """One run of ``vadapt`` for the daemon column."""

    name: str
    """Short name, also its output folder, e.g. ``netap-3vm-2t``."""
    cores: int
    """CPUs the run is limited to: the paper's host's cores."""
    host: str
    """The paper's host, as the "not run" cell names it."""
    args: tuple[str, ...] = ()
    """``vadapt``'s arguments; ``{out}`` stands for the case's output folder. Empty: no
    runner exists yet, and ``missing`` says what is needed."""
    read: Callable[[Path], dict[str, float]] | None = None
    """The figures of a finished run, by metric name, from its output folder."""
    missing: str = ""
    """Why the case cannot run even on a large machine (when ``args`` is empty)."""
    drive: Callable[[Path, list[int], Path, list[str]], dict[str, float]] | None = None
    """A case of several processes runs itself: given ``vadapt``, the cores, its output
    folder and the runner's log of commands, it returns the figures (``args`` empty)."""


def demo_ratios(out: Path) -> dict[str, float]:
    """``vadapt demo``'s last phase against its first (``summary.json``'s ``ratios``):
    ``payload_gbps``, ``worker_cpu_pct``, ``cpu_s_per_gb``..., the ratios that exist."""
    ratios = json.loads((out / "summary.json").read_text())["ratios"]
    if not ratios:
        raise ValueError(f"{out}/summary.json: no phase after the baseline")
    return {k: v for k, v in ratios[-1].items() if isinstance(v, (int, float))}


def demo(
    name: str,
    cores: int,
    host: str,
    vms: int,
    threads: int,
    size: int = 64,
    baseline: str = "interrupt",
    policy: str = "netap",
    seconds: int = DEMO_SECONDS,
) -> Case:
    """A ``vadapt demo`` case: ``vms`` × ``threads`` TCP senders, ``baseline`` then ``policy``."""
    args = (
        "demo", "--mode", "tcp-stream", "--vms", str(vms), "--threads", str(threads),
        "--size", str(size), "--baseline", baseline, "--policy", policy,
        "--duration", str(seconds), "--quiet", "--out", "{out}",
    )  # fmt: skip
    return Case(name, cores, host, args, demo_ratios)


TABLE2_INTERVALS_US = (100, 250, 500, 1000, 2000, 4000)
"""The daemon's sweep for Table 2: the span of the paper's Figure 2 (50–4000 µs) at the
intervals where its curves bend, each a phase as long as NetAP's."""

TABLE2_PHASE_S = 120
"""NetAP's phase: the paper's Table 2 reads 30–60 s (while adapting) and 90–120 s
(after) of a run whose search starts at 0 s."""


def table2_over_best(out: Path) -> dict[str, float]:
    """A Table 2 demo (``timeseries.csv``): NetAP's payload over seconds 30–60 and 90–120
    of its phase, each ÷ the best fixed interval's mean over its phase (its first second
    skipped, as the demo's summary does), as ``while`` and ``after``."""
    per_second: dict[str, dict[float, float]] = {}
    with (out / "timeseries.csv").open() as f:
        for r in csv.DictReader(f):
            by_t = per_second.setdefault(r["policy"], {})
            t = float(r["t"])
            by_t[t] = by_t.get(t, 0.0) + float(r["payload_mbps"])
    netap = per_second.get("netap")
    fixed = {k: v for k, v in per_second.items() if k.startswith("fixed-interval:")}
    if not netap or not fixed:
        raise ValueError(f"{out}/timeseries.csv: no netap phase or no fixed-interval phase")

    def mean(v: list[float]) -> float:
        if not v:
            raise ValueError(f"{out}/timeseries.csv: a phase too short for Table 2's windows")
        return sum(v) / len(v)

    def phase_mean(by_t: dict[float, float]) -> float:
        seconds = sorted(by_t)
        return mean([by_t[t] for t in seconds[1:]] or [by_t[seconds[0]]])

    best = max(phase_mean(by_t) for by_t in fixed.values())
    start = min(netap)

    def window(lo: float, hi: float) -> float:
        return mean([m for t, m in netap.items() if lo < t - start + 1 <= hi])

    if best <= 0:
        raise ValueError(f"{out}/timeseries.csv: every fixed interval carried nothing")
    return {"while": window(30, 60) / best, "after": window(90, 120) / best}


def table2(name: str, vms: int, threads: int) -> Case:
    """Table 2 on the daemon for one shape: NetAP, then the sweep, one demo."""
    sweep = ",".join(f"fixed-interval:{us}" for us in TABLE2_INTERVALS_US)
    seconds = TABLE2_PHASE_S * (1 + len(TABLE2_INTERVALS_US))
    case = demo(name, 6, NETAP_HOST, vms, threads, 64, "netap", sweep, seconds)
    return Case(case.name, case.cores, case.host, case.args, table2_over_best)


def b10_eekbp_over_napi(out: Path) -> dict[str, float]:
    """B10's saturation, NIC to VM (``b10.json``): the uplink under EE-KBP ÷ the kernel's
    bridge→TAP (NAPI), each the median over rounds, as ``mpps``."""
    df = load_results(out / "b10.json")
    sat = df[(df["table"] == "saturation") & (df["variant"] == "nic-to-vm")]

    def median(backend: str, policy: str) -> float:
        v = sat[(sat["backend"] == backend) & (sat["policy"] == policy)]["mpps"].dropna()
        if v.empty:
            raise ValueError(f"{out}/b10.json: no saturation row for {backend} {policy}")
        return float(v.median())

    return {"mpps": median("vadapt-uplink", "eekbp") / median("kernel-bridge-tap", "tap")}


CASES = {
    c.name: c
    for c in (
        # NetAP Tables 1–4 on its 6-core host, Table 7 on its 8-core one.
        *(
            demo(f"netap-{v}vm-{t}t", 6, NETAP_HOST, v, t)
            for v, t in ((1, 6), (2, 3), (3, 2), (6, 1), (2, 4), (3, 3), (4, 2), (5, 1))
        ),
        demo("netap-5vm-1t-8cores", 8, NETAP_HOST7, 5, 1),
        # NetAP Table 2's shapes, each against a sweep of fixed intervals.
        *(table2(f"netap-table2-{v}vm-{t}t", v, t) for v, t in ((1, 6), (2, 3), (3, 2), (6, 1))),
        # NetAP-ML Table 1's cases (VMs, threads, message size) on its 24-core host.
        *(
            demo(f"netap-ml-{c.lower()}", 24, NETAP_ML_HOST, v, t, s, "netap", "netap-ml")
            for c, (v, t, s) in {"C1": (3, 2, 128), "C2": (2, 5, 96), "C3": (4, 1, 192)}.items()
        ),
        Case(
            "eekbp-uplink",
            14,
            EEKBP_HOST,
            ("bench", "--only", "b10", "--runs", "3", "--no-write", "--out", "{out}"),
            b10_eekbp_over_napi,
        ),
        Case("vspace", 20, VSPACE_HOST, drive=vspace_daemon.max_qps),
    )
}
"""Every daemon case, by name."""


@dataclass
class Figure:
    """What a case gave: its figures, or why there are none."""

    values: dict[str, float] | None
    """The figures by metric; ``None`` when the case was not run."""
    text: str
    """Where the figures came from (command, machine, revision), or why not run."""


@dataclass
class Runner:
    """Runs the cases on this machine, each once, and writes its commands down."""

    vadapt: Path
    """The release ``vadapt``."""
    out: Path
    """Folder of the cases' outputs (one folder per case)."""
    machine: str
    """This machine, as the cells name it (CPU model and count)."""
    rev: str
    """The revision that ran."""
    repo: Path | None = None
    """Where to build ``vadapt`` (:data:`BUILD`) before the first case that runs; ``None``:
    ``vadapt`` is already built. A machine too small for every case builds nothing."""
    cpus: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    """The CPUs this process may use (a test may pass fewer or more)."""
    log: list[str] = field(default_factory=list)
    """Every command run, as a shell line."""
    done: dict[str, Figure] = field(default_factory=dict)

    def figure(self, case: Case) -> Figure:
        """``case``'s figures, running it the first time it is asked for."""
        if case.name not in self.done:
            self.done[case.name] = self.run(case)
        return self.done[case.name]

    def run(self, case: Case) -> Figure:
        """Run ``case`` limited to its cores; "not run" when this machine has too few."""
        no_runner = f"no daemon runner yet ({case.missing})"
        runnable = bool(case.args) or case.drive is not None
        if len(self.cpus) < case.cores:
            why = f"needs {case.cores} cores ({case.host}); this machine gives {len(self.cpus)}"
            return Figure(None, f"not run: {why}" + ("" if runnable else f"; and {no_runner}"))
        if not runnable:
            return Figure(None, f"not run: {no_runner}")
        if self.repo is not None:
            subprocess.run(BUILD, cwd=self.repo, check=True)
            self.repo = None
        cpus = self.cpus[: case.cores]
        out = self.out / case.name
        out.mkdir(parents=True, exist_ok=True)
        if case.drive is not None:
            first = len(self.log)
            values = case.drive(self.vadapt, cpus, out, self.log)
            shown = "; ".join(self.log[first:first + 2]) + (
                f"; … ({len(self.log) - first} commands, OUT/{case.name})"
            )  # fmt: skip
            if not values:
                return Figure(None, f"failed: no figure; `{shown}`")
            return self.measured(case, values, shown)
        argv = [str(self.vadapt), *(a.replace("{out}", str(out)) for a in case.args)]
        shown = shlex.join(
            ["taskset", "-c", ",".join(map(str, cpus)), "vadapt"]
            + [a.replace("{out}", f"OUT/{case.name}") for a in case.args]
        )
        self.log.append(shown)
        p = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )
        (out / "stdout.txt").write_text(p.stdout)
        (out / "stderr.txt").write_text(p.stderr)
        if p.returncode != 0:
            tail = p.stderr.strip().splitlines()[-1:] or ["no message"]
            return Figure(None, f"failed (exit {p.returncode}): {tail[0]}; `{shown}`")
        assert case.read is not None
        try:
            values = case.read(out)
        except (OSError, ValueError, KeyError) as e:
            return Figure(None, f"failed: its output unreadable ({e}); `{shown}`")
        return self.measured(case, values, shown)

    def measured(self, case: Case, values: dict[str, float], shown: str) -> Figure:
        """``case``'s figures, with the command ``shown``, this machine and revision."""
        return Figure(
            values, f"`{shown}` on {self.machine} ({case.cores} cores used), rev {self.rev}"
        )


def fill(rows: list[Row], runner: Runner) -> None:
    """Run every case a row names and write its daemon figure (or "not run") into it."""
    for r in rows:
        ref = r.daemon_ref
        if ref is None:
            continue
        fig = runner.figure(CASES[ref.case])
        what = f"{ref.what}; " if ref.what else ""
        if fig.values is not None and ref.metric in fig.values:
            r.daemon_value = fig.values[ref.metric] * ref.scale
            r.daemon = what + fig.text
        elif fig.values is not None:
            r.daemon_value = None
            r.daemon = f"no `{ref.metric}` in the run's figures; {fig.text}"
        elif r.daemon_value is not None:
            r.daemon += f" (rerun here: {fig.text})"
        else:
            r.daemon = fig.text
