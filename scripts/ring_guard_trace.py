#!/usr/bin/env python3
"""Per-second rate of a VM port fed by DPDK virtio-user `txonly`, policy by
policy (issue 41: NetAP never carries less than interrupt mode).

B1's DPDK sender, long enough to hold NetAP's whole search: one daemon
(worker on CPU 1), one testpmd virtio-user sender (lcore on CPU 0) sending
FRAME-byte frames to the daemon's sink, and for each policy in turn (A/B,
repeated --repeats times) the port is switched to it (a fresh policy: NetAP
starts its search), the sender started, and the port's guest-to-host packets
read every second for --seconds. The sender's own drops (frames its full
ring refused) come from testpmd's `stop`.

    flock /work/bench.lock scripts/ring_guard_trace.py --vadapt target/release/vadapt \\
        --out /tmp/trace.json [--seconds 30] [--frame 64] [--packed] [--in-order 0|1]

With `--sender guest` the sender is B1's other one instead: the synthetic
guest (`vadapt guest`, one thread, closed loop, exit cost 0, pinned to CPU 0),
a fresh connection per policy run. It blocks at a full ring and kicks at the
safety net's threshold, where testpmd drops and does not kick.

With `--probe`, each second also runs scripts/core_latency_probe.c (built
here with `cc`, run under SCHED_FIFO for about a millisecond): the round trip
of a cache line between CPU 0 and CPU 1. On these 2-vCPU VMs it moves
between about 50-65 ns and 300-360 ns as the hypervisor places the vCPUs,
and the senders' rates move with it, so each second is labelled "near" (under
--near-ns) or "far", and the summary compares the policies within a label.

Prints one line per policy run: the per-second Mpps, then a summary per
second of netap ÷ interrupt of the same repeat. Nothing here is timed
against a goal; it measures.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SINK_MAC = "02:00:00:00:5e:01"


def build_probe(work):
    """The core-to-core probe, compiled into `work`."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core_latency_probe.c")
    exe = os.path.join(work, "core_latency_probe")
    subprocess.run(["cc", "-O2", "-pthread", "-o", exe, src], check=True)
    return exe


def probe_ns(exe):
    """One core-to-core round trip reading, ns (2000 round trips, SCHED_FIFO so a
    busy worker or sender cannot preempt it halfway); None if it failed."""
    try:
        r = subprocess.run(
            ["chrt", "-f", "1", exe, "2000"], capture_output=True, text=True, timeout=2
        )
    except subprocess.TimeoutExpired:
        return None
    return float(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def by_state(runs, near_ns):
    """Median Mpps of each policy over its "near" and its "far" seconds."""
    out = {}
    for r in runs:
        for rate, ns in zip(r["mpps_per_second"], r["probe_ns_per_second"], strict=True):
            if ns is None:
                continue
            state = "near" if ns < near_ns else "far"
            out.setdefault((r["policy"], state), []).append(rate)
    return {k: (statistics.median(v), min(v), max(v), len(v)) for k, v in out.items()}


def stats(vadapt, control):
    """The port's guest-to-host packets, its interval gauge, and the counters that
    say how the worker served it (`vadapt stats`): kicks and calls, the worker's
    passes, sleeps and wake-ups by cause, and its CPU time."""
    out = subprocess.run(
        [vadapt, "stats", "--json", "--control", control],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    s = json.loads(out)
    port = next(p for p in s["ports"] if p["name"] == "fe")
    worker = next(w for w in s["workers"] if w["name"] == "fe")
    counters = {
        "kicks": sum(q["kicks"] for q in port["queues"]),
        "calls": sum(q["calls"] for q in port["queues"]),
        "passes": worker["passes"],
        "sleeps": worker["sleeps"],
        "cpu_seconds": worker["cpu_seconds"],
    }
    counters.update({f"wake_{k}": v for k, v in worker["wakeups"].items()})
    return (
        sum(q["tx_packets"] for q in port["queues"]),
        port.get("poll_interval_us", 0),
        counters,
    )


class Testpmd:
    def __init__(self, argv):
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)

    def cmd(self, c, wait=0.5):
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        time.sleep(wait)

    def tx_totals(self):
        """(tx, tx_dropped) of the last `stop`'s accumulated statistics."""
        text = "".join(self.lines)
        m = re.findall(r"TX-packets:\s+(\d+)\s+TX-dropped:\s+(\d+)", text)
        return tuple(int(x) for x in m[-1]) if m else (0, 0)

    def quit(self):
        try:
            self.cmd("quit", 1.0)
        finally:
            self.p.kill()


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--vadapt", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--seconds", type=int, default=30)
    a.add_argument("--frame", type=int, default=64)
    a.add_argument("--packed", action="store_true")
    a.add_argument("--in-order", type=int, default=1)
    a.add_argument("--repeats", type=int, default=1)
    a.add_argument("--policies", default="interrupt,netap")
    a.add_argument("--sender", choices=["dpdk", "guest"], default="dpdk")
    a.add_argument("--probe", action="store_true", help="label each second near/far")
    a.add_argument("--near-ns", type=float, default=200.0)
    args = a.parse_args()
    if args.sender == "dpdk" and not shutil.which("dpdk-testpmd"):
        sys.exit("dpdk-testpmd not installed: scripts/install-deps.sh")
    work = tempfile.mkdtemp(prefix="vadapt-trace-")
    probe = build_probe(work) if args.probe else None
    control = os.path.join(work, "c.sock")
    sock = os.path.join(work, "fe.sock")
    serve = [
        "taskset",
        "-c",
        "1",
        args.vadapt,
        "serve",
        "--control",
        control,
        "--cpus",
        "1",
        "--log-level",
        "warn",
        "--sink",
        f"sink0,mac={SINK_MAC}",
        "--vm",
        f"name=fe,socket={sock},queues=1,policy=interrupt,unsealed_memory=accept",
    ]
    daemon = subprocess.Popen(
        serve, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "d.log"), "w")
    )
    for _ in range(100):
        if os.path.exists(sock) and os.path.exists(control):
            break
        time.sleep(0.1)
    ring = f"in_order={args.in_order}" + (",packed_vq=1" if args.packed else "")
    pmd = [
        "stdbuf",
        "-oL",
        "dpdk-testpmd",
        "--lcores",
        "0@1,1@0",
        "--no-huge",
        "-m",
        "1024",
        "--no-pci",
        f"--file-prefix=rgt{os.getpid()}",
        "--single-file-segments",
        "--vdev",
        f"net_virtio_user0,path={sock},queues=1,{ring}",
        "--",
        "-i",
        "--total-num-mbufs=8192",
        "--forward-mode=txonly",
        f"--txpkts={args.frame}",
        f"--eth-peer=0,{SINK_MAC}",
    ]
    guest = [
        "taskset",
        "-c",
        "0",
        args.vadapt,
        "guest",
        "--socket",
        sock,
        "--threads",
        "1",
        "--size",
        str(args.frame - 14),
        "--rate",
        "closed",
        "--mode",
        "stream",
        "--duration",
        f"{args.seconds + 1}s",
        "--exit-cost-ns",
        "0",
        "--dst-mac",
        SINK_MAC,
        "--json",
    ]
    fe = Testpmd(pmd) if args.sender == "dpdk" else None
    runs = []
    try:
        time.sleep(3)
        for rep in range(args.repeats):
            for pol in args.policies.split(","):
                subprocess.run(
                    [args.vadapt, "set-policy", "--control", control, "--port", "fe", pol],
                    check=True,
                    capture_output=True,
                )
                c0, _, k0 = stats(args.vadapt, control)
                if fe:
                    fe.cmd("clear port stats all", 0.2)
                    fe.cmd("start", 0.0)
                else:
                    g = subprocess.Popen(guest, stdout=subprocess.PIPE, text=True)
                t0 = time.monotonic()
                prev, rates, intervals, probes = c0, [], [], []
                kprev, per_second = k0, {k: [] for k in k0}
                for k in range(1, args.seconds + 1):
                    time.sleep(max(0.0, t0 + k - time.monotonic()))
                    c, iv, kc = stats(args.vadapt, control)
                    rates.append((c - prev) / 1e6)
                    intervals.append(iv)
                    for name, v in kc.items():
                        per_second[name].append(v - kprev[name])
                    kprev = kc
                    probes.append(probe_ns(probe) if probe else None)
                    prev = c
                if fe:
                    fe.cmd("stop", 1.0)
                    tx, dropped = fe.tx_totals()
                else:
                    # A blocking sender drops nothing; what it sent is its
                    # count (the report's totals are at its top level).
                    tx = json.loads(g.communicate()[0])["sent_packets"]
                    dropped = 0
                run = {
                    "repeat": rep,
                    "policy": pol,
                    "mpps_per_second": rates,
                    "interval_us_per_second": intervals,
                    "probe_ns_per_second": probes,
                    "counters_per_second": per_second,
                    "sender_tx": tx,
                    "sender_dropped": dropped,
                    "carried": prev - c0,
                }
                runs.append(run)
                print(
                    pol,
                    rep,
                    " ".join(f"{r:.2f}" for r in rates),
                    f"| sender dropped {dropped} of {tx + dropped}",
                    flush=True,
                )
                if probe:
                    print("  probe ns", " ".join(f"{p:.0f}" if p else "-" for p in probes))
                subprocess.run(
                    [args.vadapt, "set-policy", "--control", control, "--port", "fe", "interrupt"],
                    check=True,
                    capture_output=True,
                )
    finally:
        if fe:
            fe.quit()
        daemon.terminate()
        daemon.wait()
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    sender = pmd if fe else guest
    res = {"rev": rev, "args": vars(args), "serve": serve, "sender": sender, "runs": runs}
    # Second-by-second pairs need one run of each policy a repeat; with a policy
    # named twice (interleaved turns) only the by-state summary compares them.
    paired = len(set(args.policies.split(","))) == len(args.policies.split(","))
    for rep in range(args.repeats):
        by = {r["policy"]: r for r in runs if r["repeat"] == rep}
        if paired and "netap" in by and "interrupt" in by:
            ratio = [
                n / i if i > 0 else float("nan")
                for n, i in zip(
                    by["netap"]["mpps_per_second"],
                    by["interrupt"]["mpps_per_second"],
                    strict=False,  # a run cut short compares the seconds both have
                )
            ]
            res.setdefault("netap_over_interrupt", []).append(ratio)
            tot = by["netap"]["carried"] / max(1, by["interrupt"]["carried"])
            print(
                f"repeat {rep}: netap ÷ interrupt per second min {min(ratio):.2f} "
                f"median {statistics.median(ratio):.2f} max {max(ratio):.2f}; whole run {tot:.2f}"
            )
    if probe:
        states = by_state(runs, args.near_ns)
        res["by_state"] = {f"{p} {s}": v for (p, s), v in states.items()}
        for (pol, state), (med, lo, hi, n) in sorted(states.items()):
            print(f"{pol} {state}: {n} s, median {med:.2f} Mpps ({lo:.2f}-{hi:.2f})")
        for state in ("near", "far"):
            n, i = states.get(("netap", state)), states.get(("interrupt", state))
            if n and i:
                print(f"{state}: netap ÷ interrupt of the medians {n[0] / i[0]:.2f}")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
