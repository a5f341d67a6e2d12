"""One queue worker per NQ core (`--queue-workers per-nq-core`) under a real
QEMU TCG guest: the pool follows the NQ group as the core manager's mode
changes (vSPACE-P on 2 CPUs: 1 worker; off: 2 workers), each worker is
pinned to its own NQ core, `vadapt cores` lists which worker serves the
port, and the guest's traffic goes on after every change.

The guest pings an address nobody has: its frames (ARP requests, or the
pings themselves where busybox can set a static neighbour) are flooded to
an echo port, which sends them back, so the port's TX and RX both go
through the pool.
"""

from __future__ import annotations

import os
import time

import pytest

from test_cores import allowed, cores, set_mode, wait_cores

from harness import Guest, Vadapt

MAC = "52:54:00:5a:00:31"


def port_counts(d: Vadapt) -> tuple[int, int]:
    port = next(p for p in d.stats()["ports"] if p["name"] == "vm1")
    return (
        sum(q["tx_packets"] for q in port["queues"]),
        sum(q["rx_packets"] for q in port["queues"]),
    )


def wait_traffic(d: Vadapt, what: str, timeout: float = 30.0) -> None:
    """Both directions of vm1 move on (a bound on how long failure takes to show)."""
    tx0, rx0 = port_counts(d)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tx, rx = port_counts(d)
        if tx > tx0 + 5 and rx > rx0 + 5:
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: vm1 not served ({tx0},{rx0} -> {port_counts(d)})")


def pinned_workers(c: dict) -> bool:
    ws = c["nq_workers"]
    return (
        len(ws) == max(1, len(c["sets"]["nq"]))
        and all(w["tid"] and allowed(w["tid"]) == [c["sets"]["nq"][w["index"]]] for w in ws)
        and sum(len(w["ports"]) for w in ws) == 1
    )


def test_the_worker_pool_follows_the_nq_group_under_a_qemu_guest(vadapt_bin, qemu, procs):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("vSPACE needs 2 CPUs")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [
            "--vm", f"name=vm1,socket={sock}",
            "--echo", "echo0",
            "--cores-cpus", ",".join(map(str, cpus)),
            "--cores-mode", "p",
            "--queue-workers", "per-nq-core",
            "--policy", "interrupt",
        ],
        cpus=None,
    ).start([sock])  # fmt: skip
    g = Guest(procs, "guest", sock, MAC, "10.0.2.1/24", "shell")
    g.booted()
    # A static neighbour where busybox has `arp`; else the ARP requests
    # themselves are the traffic (flooded to the echo port and back).
    g.shell("arp -s 10.0.2.9 02:00:00:00:00:99 2>/dev/null; true")
    g.shell("ping -i 0.05 10.0.2.9 >/dev/null 2>&1 &")

    # vSPACE-P on 2 CPUs: one NQ core, one worker pinned to it, serving vm1.
    c = wait_cores(d, lambda c: c["mode"] == "p" and pinned_workers(c))
    assert pinned_workers(c), c
    assert len(c["nq_workers"]) == 1 and c["nq_workers"][0]["ports"] == ["vm1"], c
    wait_traffic(d, "1 worker")

    for mode, workers in [("off", 2), ("p", 1), ("off", 2), ("p", 1)]:
        set_mode(d, mode)
        c = wait_cores(
            d,
            lambda c, m=mode, n=workers: (
                c["mode"] == m and len(c["nq_workers"]) == n and pinned_workers(c)
            ),
        )
        assert len(c["nq_workers"]) == workers and pinned_workers(c), c
        wait_traffic(d, f"mode {mode}, {workers} workers")

    table = d.ask("cores")
    assert table["nq_workers"], table
    assert d.proc.alive(), d.proc.tail()
    assert g.proc.alive(), g.proc.tail()
    drops = [
        (p["name"], q["dropped"])
        for p in d.stats()["ports"]
        for q in p["queues"]
        if any(q["dropped"].values())
    ]
    assert not drops, drops
    assert cores(d)["mode"] == "p"
