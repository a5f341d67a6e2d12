#!/usr/bin/env python3
"""vSPACE on the real daemon, scaled to this machine (issue 13, evaluation 2).

One VM port served by `vadapt serve` (interrupt-mode worker, an echo port
answering) and a synthetic guest in request/response mode whose sending
threads play the VM's vCPUs: it serves a QMP socket, so the core manager
finds them exactly as it finds a QEMU VM's, and posts its P95 each period.
The offered rate ramps up in steps; each step is a fresh guest run. Four
ways of sharing the 2 CPUs are compared:

* `static`: the queue worker pinned to CPU 1 (`--cpus 1`), the guest to
  CPU 0 (`taskset`): one dedicated core per group;
* `shared`: nothing pinned, the kernel shares both CPUs between all threads;
* `vspace-p`, `vspace-e`: the core manager on CPUs 0-1 in mode P or E.

Every variant runs `--rounds` times (interleaved); the summary is the
median with min-max over rounds. Per step: achieved rate, P50/P95/P99
round trip, CPU seconds of the daemon and of the guest. For the vSPACE
variants, the allocation over time (`vadapt cores --json` every 250 ms).
Writes `steps.csv`, `alloc.csv`, `summary.json` and, when matplotlib is
importable, `vspace-eval.png` to `--out`.

    cargo build --release -p vadapt
    .venv/bin/python scripts/vspace_eval.py --out /tmp/vspace-eval
    .venv/bin/python scripts/vspace_eval.py --rates 2k,10k --step-s 2 --variants static,vspace-e
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ECHO_MAC = "02:00:00:00:00:e0"
VARIANTS = ("static", "shared", "vspace-p", "vspace-e")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_path(p: Path, proc: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not p.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"daemon did not create {p} (exit {proc.poll()})")
        time.sleep(0.05)


class Poller(threading.Thread):
    """`vadapt cores --json` every 250 ms while running."""

    def __init__(self, binary: str, control: Path, variant: str, t0: float):
        super().__init__(daemon=True)
        self.binary, self.control, self.variant, self.t0 = binary, control, variant, t0
        self.rows: list[dict] = []
        self.rate = ""
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            r = subprocess.run(
                [self.binary, "cores", "--json", "--control", str(self.control)],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if r.returncode != 0:
                continue
            c = json.loads(r.stdout)
            self.rows.append(
                {
                    "variant": self.variant,
                    "t_s": round(time.monotonic() - self.t0, 3),
                    "rate": self.rate,
                    "vcpu_cpus": len(c["sets"]["vcpu"]),
                    "nq_cpus": len(c["sets"]["nq"]),
                    "idle_cpus": len(c["sets"]["idle"]),
                    "util_vcpu": c["util_vcpu"],
                    "util_nq": c["util_nq"],
                    "threshold_vcpu": c["threshold_vcpu"],
                    "threshold_nq": c["threshold_nq"],
                    "p95_reports": c["p95_reports"],
                    "vcpu_threads": sum(len(vm["vcpu_tids"]) for vm in c["vms"]),
                }
            )


def run_variant(a, variant: str, work: Path) -> tuple[list[dict], list[dict]]:
    sock, qmp, control = work / "vm1.sock", work / "vm1.qmp", work / "control.sock"
    for p in (sock, qmp, control):
        p.unlink(missing_ok=True)
    argv = [
        a.bin, "--log-level", "warn", "serve",
        "--vm", f"name=vm1,socket={sock},qmp={qmp}",
        "--echo", f"echo0,mac={ECHO_MAC}",
        "--policy", "interrupt",
        "--control", str(control),
    ]  # fmt: skip
    guest_pin: list[str] = []
    if variant == "static":
        argv += ["--cpus", "1"]
        guest_pin = ["taskset", "-c", "0"]
    elif variant.startswith("vspace-"):
        argv += ["--cores-cpus", "0,1", "--cores-mode", variant[-1]]
    daemon = subprocess.Popen(argv, stderr=open(work / f"{variant}.log", "w"))
    steps: list[dict] = []
    t0 = time.monotonic()
    poller = Poller(a.bin, control, variant, t0) if variant.startswith("vspace-") else None
    try:
        wait_path(sock, daemon)
        if poller:
            poller.start()
        for rate in a.rates.split(","):
            if poller:
                poller.rate = rate
            d0 = cpu_seconds(daemon.pid)
            g = subprocess.run(
                [
                    *guest_pin,
                    a.bin,
                    "--log-level",
                    "warn",
                    "guest",
                    "--socket",
                    str(sock),
                    "--mode",
                    "rr",
                    "--threads",
                    str(a.threads),
                    "--rate",
                    rate,
                    "--duration",
                    f"{a.step_s}s",
                    "--dst-mac",
                    ECHO_MAC,
                    "--json",
                    "--qmp",
                    str(qmp),
                    "--cores-control",
                    str(control),
                ],  # fmt: skip
                capture_output=True,
                text=True,
                timeout=a.step_s + 60,
            )
            d1 = cpu_seconds(daemon.pid)
            if g.returncode != 0:
                raise SystemExit(f"{variant} {rate}: guest failed: {g.stderr[-2000:]}")
            r = json.loads(g.stdout)
            lat = r["latency"] or {}
            steps.append(
                {
                    "variant": variant,
                    "rate": rate,
                    "achieved_per_s": round(r["recv_packets"] / r["elapsed"]),
                    "p50_us": lat.get("p50", 0) / 1000,
                    "p95_us": lat.get("p95", 0) / 1000,
                    "p99_us": lat.get("p99", 0) / 1000,
                    "lost": r["lost_requests"],
                    "daemon_cpu_s": round(d1 - d0, 3),
                    "guest_cpu_s": round(r["cpu_seconds"], 3),
                    "elapsed_s": r["elapsed"],
                }
            )
            print(json.dumps(steps[-1]), flush=True)
    finally:
        if poller:
            poller.stop.set()
            poller.join(5)
        daemon.terminate()
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
    if poller:
        # The loop must have run end to end: vCPUs found over QMP, P95 fed back.
        rows = poller.rows
        if not any(r["vcpu_threads"] > 0 for r in rows):
            raise SystemExit(f"{variant}: the core manager never found the guest's vCPU threads")
        if not any(r["p95_reports"] > 0 for r in rows):
            raise SystemExit(f"{variant}: no P95 report from the guest reached the core manager")
    return steps, (poller.rows if poller else [])


def summarize(steps: list[dict]) -> list[dict]:
    """Median (min-max) over rounds of each variant and rate."""
    out = []
    keys = dict.fromkeys((s["variant"], s["rate"]) for s in steps)
    for v, r in keys:
        ss = [s for s in steps if s["variant"] == v and s["rate"] == r]
        row = {"variant": v, "rate": r, "rounds": len(ss)}
        for k in ("achieved_per_s", "p95_us", "p99_us", "daemon_cpu_s", "guest_cpu_s"):
            vals = sorted(s[k] for s in ss)
            row[k] = [vals[len(vals) // 2], vals[0], vals[-1]]
        out.append(row)
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def plot(out: Path, steps: list[dict], alloc: list[dict]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no plot (run with .venv/bin/python)")
        return
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    table = summarize(steps)
    step_s = steps[0]["elapsed_s"] if steps else 1.0
    for v in dict.fromkeys(s["variant"] for s in table):
        ss = [s for s in table if s["variant"] == v]
        x = [s["achieved_per_s"][0] / 1000 for s in ss]
        ax[0].plot(x, [s["p95_us"][0] for s in ss], marker="o", label=v)
        cpu = [(s["daemon_cpu_s"][0] + s["guest_cpu_s"][0]) / step_s for s in ss]
        ax[1].plot(x, cpu, marker="o", label=v)
    ax[0].set(
        xlabel="achieved round trips (k/s), median of rounds",
        ylabel="P95 round trip (µs)",
        yscale="log",
    )
    ax[1].set(
        xlabel="achieved round trips (k/s), median of rounds",
        ylabel="host CPU, daemon + guest (cores)",
    )
    for v in dict.fromkeys(r["variant"] for r in alloc):
        rr = [r for r in alloc if r["variant"] == v and int(r["round"]) == 0]
        t = [float(r["t_s"]) for r in rr]
        ax[2].plot(t, [float(r["util_vcpu"]) for r in rr], ":", label=f"{v} vCPU util")
        ax[2].plot(t, [float(r["util_nq"]) for r in rr], ":", label=f"{v} NQ util")
        ax[2].step(
            [r["t_s"] for r in rr], [r["nq_cpus"] for r in rr], where="post", label=f"{v} NQ CPUs"
        )
        ax[2].step(
            [r["t_s"] for r in rr],
            [r["vcpu_cpus"] for r in rr],
            where="post",
            ls="--",
            label=f"{v} vCPU CPUs",
        )
    ax[2].set(
        xlabel="time in the variant's run (s)",
        ylabel="CPUs / cores busy",
        title="allocations over the ramp (round 0)",
    )
    for x in ax:
        x.legend(fontsize=7)
        x.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "vspace-eval.png", dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "target/release/vadapt"))
    ap.add_argument("--out", default="vspace-eval-out")
    ap.add_argument(
        "--rates",
        default="2k,5k,10k,20k,40k,closed",
        help="offered round trips per second, one step each",
    )
    ap.add_argument("--step-s", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every variant, interleaved")
    ap.add_argument("--plot-only", action="store_true", help="redraw the plot from --out's files")
    a = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2 or not shutil.which("taskset"):
        print("needs 2 CPUs and taskset", file=sys.stderr)
        return 1
    out = Path(a.out)
    if a.plot_only:
        with open(out / "alloc.csv") as f:
            alloc = [
                {k: (float(v) if k.endswith(("_cpus", "t_s")) else v) for k, v in r.items()}
                for r in csv.DictReader(f)
            ]
        plot(out, json.loads((out / "summary.json").read_text())["steps"], alloc)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vadapt-vspace-", dir="/tmp"))
    steps, alloc = [], []
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            print(f"unknown variant {v} (known: {', '.join(VARIANTS)})", file=sys.stderr)
            return 2
    for rnd in range(a.rounds):
        for v in variants:
            s, al = run_variant(a, v, work)
            steps += [{"round": rnd, **x} for x in s]
            alloc += [{"round": rnd, **x} for x in al]
    write_csv(out / "steps.csv", steps)
    write_csv(out / "alloc.csv", alloc)
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    table = summarize(steps)
    (out / "summary.json").write_text(
        json.dumps({"rev": rev, "args": vars(a), "summary": table, "steps": steps}, indent=1)
    )
    for row in table:
        print(json.dumps(row))
    plot(out, steps, alloc)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}/steps.csv, alloc.csv, summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
