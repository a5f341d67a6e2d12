#!/usr/bin/env python3
"""A/B two (or more) vadapt binaries on B1's transmit load, taking turns.

Each binary in turn runs ``vadapt serve`` with one VM port (``--policy``) and
a sink, pinned to CPU 1, and DPDK's ``dpdk-testpmd`` virtio-user ``txonly``
sends ``--frame``-byte frames from CPU 0 (as B1's DPDK sender). After a 2-s
warm-up, the daemon's counters are read twice, 3 s apart: packets per
second, busy cycles per packet (``vadapt_worker_busy_cycles_total`` over the
packets the port took), packets per pass, and the port's polling interval.
Binaries take turns within each round, so a noisy machine hits all of them
alike; compare medians, and only within one run.

    scripts/ab_tx.py OLD/vadapt NEW/vadapt --rounds 4 --policy netap

Needs ``dpdk-testpmd`` (``scripts/install-deps.sh``). Uses ``/tmp/vadapt-ab``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

WORK = Path("/tmp/vadapt-ab")
SINK_MAC = "02:00:00:00:5e:01"


def counters(vadapt: str, control: Path) -> dict[str, float]:
    """Busy cycles, passes and transmitted packets of port ``fe``, and its interval."""
    text = subprocess.run(
        [vadapt, "stats", "--control", str(control), "--prometheus"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    v = {"cycles": 0.0, "passes": 0.0, "tx": 0.0}
    for line in text.splitlines():
        if line.startswith("#") or ('port="fe"' not in line and 'worker="fe"' not in line):
            continue
        key, value = line.rsplit(" ", 1)
        name = key.split("{")[0]
        if name == "vadapt_worker_busy_cycles_total":
            v["cycles"] += float(value)
        elif name == "vadapt_worker_passes_total":
            v["passes"] += float(value)
        elif name == "vadapt_queue_packets_total" and 'dir="tx"' in key:
            v["tx"] += float(value)
    snapshot = json.loads(
        subprocess.run(
            [vadapt, "stats", "--control", str(control), "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    v["interval_us"] = next(
        (p.get("poll_interval_us", 0) for p in snapshot["ports"] if p["name"] == "fe"), 0
    )
    return v


def one_run(vadapt: str, policy: str, frame: int, in_order: int, packed: bool) -> dict[str, float]:
    """One binary under load: Mpps, busy cycles/packet, packets/pass, interval."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    sock, control = WORK / "fe.sock", WORK / "control.sock"
    port = f"name=fe,socket={sock},queues=1,policy={policy},unsealed_memory=accept"
    daemon = subprocess.Popen(
        ["taskset", "-c", "1", vadapt, "serve", "--control", str(control), "--cpus", "1",
         "--sink", f"sink0,mac={SINK_MAC}", "--vm", port],
        stdout=subprocess.DEVNULL, stderr=open(WORK / "daemon.log", "w"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError(f"{vadapt}: no socket; see {WORK / 'daemon.log'}")
            time.sleep(0.1)
        sender = subprocess.Popen(
            ["dpdk-testpmd", "--lcores", "0@1,1@0", "--no-huge", "-m", "1024", "--no-pci",
             "--file-prefix=vadapt-ab", "--single-file-segments",
             "--vdev", f"net_virtio_user0,path={sock},queues=1,in_order={in_order}"
             + (",packed_vq=1" if packed else ""),
             "--", "-i", "--total-num-mbufs=8192", "--forward-mode=txonly",
             f"--eth-peer=0,{SINK_MAC}"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        try:
            time.sleep(2)
            sender.stdin.write(f"set txpkts {frame}\nstart\n")
            sender.stdin.flush()
            time.sleep(2)
            a, t0 = counters(vadapt, control), time.monotonic()
            time.sleep(3)
            b, t1 = counters(vadapt, control), time.monotonic()
        finally:
            sender.stdin.write("stop\nquit\n")
            sender.stdin.flush()
            sender.wait(timeout=30)
    finally:
        daemon.send_signal(2)
        daemon.wait(timeout=30)
    packets = b["tx"] - a["tx"]
    if packets <= 0:
        raise RuntimeError(f"{vadapt}: no packets moved; see {WORK}")
    return {
        "mpps": packets / (t1 - t0) / 1e6,
        "cycles_per_pkt": (b["cycles"] - a["cycles"]) / packets,
        "pkts_per_pass": packets / max(1.0, b["passes"] - a["passes"]),
        "interval_us": b["interval_us"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("binaries", nargs="+", help="vadapt binaries to compare")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policy", default="busy-poll")
    ap.add_argument("--frame", type=int, default=64, help="frame bytes (testpmd txpkts)")
    ap.add_argument("--in-order", type=int, choices=(0, 1), default=1)
    ap.add_argument("--packed", action="store_true", help="a packed ring (packed_vq=1)")
    a = ap.parse_args()
    if shutil.which("dpdk-testpmd") is None:
        ap.error("dpdk-testpmd not found: run scripts/install-deps.sh")
    results: dict[str, list[dict[str, float]]] = {b: [] for b in a.binaries}
    for r in range(a.rounds):
        for b in a.binaries:
            x = one_run(os.path.abspath(b), a.policy, a.frame, a.in_order, a.packed)
            results[b].append(x)
            print(
                f"round {r + 1} {b}: {x['mpps']:.2f} Mpps, {x['cycles_per_pkt']:.1f} cycles/pkt, "
                f"{x['pkts_per_pass']:.1f} pkts/pass, interval {x['interval_us']} us",
                flush=True,
            )
    for b, xs in results.items():
        m = [x["mpps"] for x in xs]
        c = [x["cycles_per_pkt"] for x in xs]
        print(
            f"{b}: {statistics.median(m):.2f} ({min(m):.2f}-{max(m):.2f}) Mpps, "
            f"{statistics.median(c):.1f} ({min(c):.1f}-{max(c):.1f}) busy cycles/pkt"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
