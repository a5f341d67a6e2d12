"""The vSPACE core manager against a real QEMU: a TCG guest with 2 vCPUs and
a QMP socket on a vadapt port. The manager must find both vCPU thread ids
through QMP (`query-cpus-fast`), and each thread's `Cpus_allowed_list`
must follow the manager's placement as the mode changes; killing QEMU
mid-run is counted, and the daemon goes on answering.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness import Guest, Vadapt

MAC = "52:54:00:5a:00:21"


def cores(d: Vadapt) -> dict:
    return d.ask("cores")


def set_mode(d: Vadapt, mode: str) -> None:
    subprocess.run(
        [str(d.binary), "set-cores", "--mode", mode, "--control", str(d.control)],
        check=True,
        capture_output=True,
        timeout=10,
    )


def wait_cores(d: Vadapt, predicate, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        c = cores(d)
        if predicate(c) or time.monotonic() > deadline:
            return c
        time.sleep(0.1)


def allowed(tid: int) -> list[int]:
    """A thread's Cpus_allowed_list, expanded."""
    text = Path(f"/proc/{tid}/status").read_text()
    spec = next(
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Cpus_allowed_list")
    )
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def test_vcpu_threads_follow_the_core_manager(vadapt_bin, qemu, procs):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("vSPACE needs 2 CPUs")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    sock, qmp = procs.workdir / "vm1.sock", procs.workdir / "vm1.qmp"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [
            "--vm", f"name=vm1,socket={sock},qmp={qmp}",
            "--cores-cpus", ",".join(map(str, cpus)),
            "--cores-mode", "p",
            "--policy", "interrupt",
        ],
        cpus=None,
    ).start([sock])  # fmt: skip
    g = Guest(
        procs, "guest", sock, MAC, "10.0.2.1/24", "shell",
        smp=2, extra=["-qmp", f"unix:{qmp},server=on,wait=off"],
    )  # fmt: skip
    g.booted()

    c = wait_cores(d, lambda c: len(c["vms"][0]["vcpu_tids"]) == 2)
    tids = c["vms"][0]["vcpu_tids"]
    assert len(tids) == 2, c
    qemu_pid = g.proc.popen.pid
    for t in tids:
        assert Path(f"/proc/{qemu_pid}/task/{t}").exists(), f"{t} is not a thread of QEMU"
    assert c["apply"] == "affinity", c
    assert c["mode"] == "p"

    # vSPACE-P on 2 CPUs: one for the vCPUs, one for the queue worker; the
    # vCPU threads are allowed exactly the vCPU group.
    c = wait_cores(d, lambda c: all(allowed(t) == c["sets"]["vcpu"] for t in tids))
    assert len(c["sets"]["vcpu"]) == 1 and len(c["sets"]["nq"]) == 1, c
    for t in tids:
        assert allowed(t) == c["sets"]["vcpu"], (t, c)
    assert c["threads_moved"] >= 2, c

    # Off: back on every managed CPU.
    set_mode(d, "off")
    c = wait_cores(d, lambda c: c["mode"] == "off" and all(allowed(t) == cpus for t in tids))
    for t in tids:
        assert allowed(t) == cpus, (t, c)

    # E again, then QEMU dies mid-run: counted, and the daemon answers.
    set_mode(d, "e")
    c = wait_cores(d, lambda c: c["mode"] == "e")
    errors = c["qmp_errors"]
    g.proc.stop(signal.SIGKILL)
    c = wait_cores(d, lambda c: c["qmp_errors"] > errors and not c["vms"][0]["vcpu_tids"], 30)
    assert c["qmp_errors"] > errors, c
    assert c["vms"][0]["vcpu_tids"] == [], c
    assert c["vms"][0]["error"], c
    assert d.proc.alive(), d.proc.tail()
    st = d.stats()
    assert st["ports"][0]["name"] == "vm1"
