"""vSPACE's Fig. 8 on the real daemon: the highest request rate each core arrangement
carries under the P95 SLO, vSPACE-P's core manager against static time-sharing.

One latency-critical VM, as the paper's memcached VM: a synthetic guest (``vadapt guest
--mode rr``) with one sending thread per vCPU, each a request/response flow on its own
queue pair (up to the port's 16), sending to the daemon's echo port, which answers every
request (the memcached server's part is the echo's swap of addresses). The guest serves
QMP and a guest agent, so the core manager finds its vCPU threads and sets its queue
pairs as it does a QEMU VM's, and reports its P95 every 100 ms (``--cores-control``), the
sample Algorithm 3 explores with.

Two arrangements of the same cores, each its own daemon:

- ``vspace-p``: ``--cores-cpus`` all of them, ``--cores-mode p``: separate vCPU and
  NQ groups, sized by the manager;
- ``static``: no core manager; the 20 vCPU threads and the port's queue workers
  time-share every core (the paper's 20vCPU-20NQ).

Each steps the offered rate up :data:`QPS` until the P95 round trip passes the SLO
(or a run fails); its figure is the last rate that held. The rows take vSPACE-P's ÷
static's (the paper's 4.18×) and static's own (the paper's ~150 kQPS).

The P95 is the guest's own, over the whole run (the core manager finds the vCPU
threads within its first second); every process is limited to the case's cores. The
guest and the daemon share them, as the VM and the host did in the paper, so the
figures are this host's, not the paper's testbed's.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

SLO_NS = 1_000_000
"""The P95 SLO: 1 ms (``sim/scenarios/vspace-memcached-host.toml``, the paper's memcached)."""

QPS = (25_000, 50_000, 100_000, 150_000, 200_000, 300_000, 400_000, 500_000, 600_000, 700_000)
"""Offered rates, requests a second, stepped up until the SLO breaks."""

SECONDS = 10
"""Each rate's run."""

VCPUS = 20
"""The paper's LC VM: 20 vCPUs, one sending thread each."""

ECHO_MAC = "02:00:00:00:40:ec"
MAX_QUEUE_PAIRS = 16
"""A VM port's most queue pairs (``dataplane/src/config/vm_port.rs``)."""

ARRANGEMENTS = ("vspace-p", "static")


def serve_args(work: Path, cpus: list[int], arrangement: str) -> list[str]:
    """``vadapt serve``'s arguments for one arrangement."""
    vm = (
        f"name=vm1,socket={work}/vm1.sock,queues={min(VCPUS, MAX_QUEUE_PAIRS)},"
        f"qmp={work}/vm1.qmp,qga={work}/vm1.qga"
    )
    args = ["serve", "--vm", vm, "--echo", f"e0,mac={ECHO_MAC}"]
    args += ["--policy", "interrupt", "--control", f"{work}/control.sock"]
    if arrangement == "vspace-p":
        args += ["--cores-cpus", ",".join(map(str, cpus)), "--cores-mode", "p"]
    elif arrangement != "static":
        raise ValueError(f"unknown arrangement {arrangement!r}")
    return args


def guest_args(work: Path, arrangement: str, qps: int, seconds: float) -> list[str]:
    """``vadapt guest``'s arguments: the LC VM at ``qps`` requests a second (its P95
    reports go to the core manager where there is one)."""
    args = [
        "guest", "--socket", f"{work}/vm1.sock", "--mode", "rr", "--threads", str(VCPUS),
        "--rate", str(qps), "--duration", f"{seconds}s", "--dst-mac", ECHO_MAC,
        "--qmp", f"{work}/vm1.qmp", "--qga", f"{work}/vm1.qga", "--json",
    ]  # fmt: skip
    if arrangement == "vspace-p":
        args += ["--cores-control", f"{work}/control.sock"]
    return args


def wait_socket(path: Path, daemon: subprocess.Popen, timeout: float = 20.0) -> None:
    """Until the daemon answers on its control socket (or has exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"vadapt serve exited ({daemon.returncode})")
        if path.exists():
            r = subprocess.run(
                [str(daemon.args[0]), "stats", "--control", str(path)],
                capture_output=True,
                timeout=10,
            )
            if r.returncode == 0:
                return
        time.sleep(0.1)
    raise RuntimeError("vadapt serve did not answer on its control socket")


def p95_ns(vadapt: Path, cpus: list[int], work: Path, arrangement: str, qps: int,
           seconds: float, log: list[str]) -> float:  # fmt: skip
    """One run: a fresh daemon in ``arrangement``, the guest at ``qps``; its P95, ns."""
    work.mkdir(parents=True, exist_ok=True)
    pin = {"preexec_fn": lambda: os.sched_setaffinity(0, cpus)}
    serve = [str(vadapt), *serve_args(work, cpus, arrangement)]
    guest = [str(vadapt), *guest_args(work, arrangement, qps, seconds)]
    taskset = ["taskset", "-c", ",".join(map(str, cpus))]
    log.append(shlex.join(taskset + ["vadapt", *serve[1:]]))
    log.append(shlex.join(taskset + ["vadapt", *guest[1:]]))
    with (work / "serve.log").open("w") as err:
        d = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=err, **pin)
    try:
        wait_socket(work / "control.sock", d)
        g = subprocess.run(guest, capture_output=True, text=True, timeout=seconds + 60, **pin)
        (work / "guest.json").write_text(g.stdout)
        (work / "guest.log").write_text(g.stderr)
        if g.returncode != 0:
            tail = g.stderr.strip().splitlines()[-1:] or ["no message"]
            raise RuntimeError(f"vadapt guest failed (exit {g.returncode}): {tail[0]}")
        latency = json.loads(g.stdout)["latency"]
        if not latency.get("count"):
            raise RuntimeError("no round trip completed")
        return float(latency["p95"])
    finally:
        d.terminate()
        try:
            d.wait(timeout=30)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()


def max_qps(vadapt: Path, cpus: list[int], out: Path, log: list[str],
            qps: tuple[int, ...] = QPS, seconds: float = SECONDS) -> dict[str, float]:  # fmt: skip
    """Each arrangement's highest rate under the SLO, kQPS, and vSPACE-P's ÷ static's.

    Figures: ``vspace_p_kqps``, ``static_kqps`` and ``max_qps_ratio`` (absent when static
    held no rate at all); a rate's P95 is in ``OUT/ARRANGEMENT/QPS/guest.json``."""
    held: dict[str, float] = {}
    for arrangement in ARRANGEMENTS:
        held[arrangement] = 0.0
        for rate in qps:
            work = out / arrangement / str(rate)
            work.mkdir(parents=True, exist_ok=True)
            try:
                p95 = p95_ns(vadapt, cpus, work, arrangement, rate, seconds, log)
            except (RuntimeError, OSError, ValueError, KeyError) as e:
                (work / "failed.txt").write_text(f"{e}\n")
                break
            if p95 > SLO_NS:
                break
            held[arrangement] = rate / 1000
    figures = {"vspace_p_kqps": held["vspace-p"], "static_kqps": held["static"]}
    if held["static"] > 0:
        figures["max_qps_ratio"] = held["vspace-p"] / held["static"]
    return figures
