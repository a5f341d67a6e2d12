#!/usr/bin/env python3
"""Lost wake-up hunt: many short request/response runs through the daemon,
across every policy, 1-4 threads and every kind of rate, while the policy is
switched and retuned at random under the traffic. A wake-up the worker
misses leaves a guest's request on a ring while the worker waits; the
executor's idle recheck ends such a wait after 100 ms, so any round trip of
100 ms or more is a lost wake-up (or worse), and so is a request that never
got its reply.

    scripts/stall_hunt.py                 # 1000 runs (about 20 minutes)
    scripts/stall_hunt.py --runs 20       # the short version the test command runs

One `vadapt serve` with one VM port (4 queue pairs) and an echo port. Each
run starts `vadapt guest --mode rr` (a random policy, 1-4 threads, a rate
from 1k/s to closed loop, 0.3-0.8 s), and a chaos thread sends `set-policy`
and `retune` requests at random moments. Exits 1 on the first run with a
round trip >= 100 ms, a missing reply or a guest error, keeping its logs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ECHO_MAC = "02:00:00:00:00:02"
POLICIES = ["interrupt", "busy-poll", "growshrink", "netap", "eekbp"]
RETUNES = {
    "netap": ["search-range=100-900", "search-range=1500-2500", "kick-threshold=0"],
    "growshrink": ["poll-max=0", "poll-max=8000", "poll-max=64000"],
    "eekbp": ["quota=1", "quota=16", "quota=64"],
}
RATES = ["1k", "10k", "50k", "closed"]
STALL_NS = 100_000_000


def ctl(binary: str, control: Path, *args: str) -> None:
    subprocess.run(
        [binary, "--log-level", "error", *args, "--control", str(control)],
        capture_output=True,
        timeout=15,
    )


def chaos(binary: str, control: Path, rng: random.Random, stop: threading.Event) -> None:
    """Switch and retune vm1's policy at random moments until `stop`."""
    policy = None
    while not stop.wait(rng.uniform(0.02, 0.2)):
        if policy is None or rng.random() < 0.5:
            policy = rng.choice(POLICIES)
            ctl(binary, control, "set-policy", "--port", "vm1", policy)
        elif policy in RETUNES:
            ctl(binary, control, "retune", "--port", "vm1", rng.choice(RETUNES[policy]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-threads", type=int, default=4, help="guest threads per run: 1..N")
    ap.add_argument(
        "--bin", default=os.environ.get("VADAPT_BIN", str(ROOT / "target/release/vadapt"))
    )
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="vadapt-hunt-", dir="/tmp"))
    control, sock = work / "control.sock", work / "vm1.sock"
    log = open(work / "daemon.log", "w")
    # Daemon on CPU 1, guests on CPU 0, as the benchmarks run them: on two
    # cores a busy-polling worker beside 4 guest threads otherwise starves
    # them for tens of ms, which would read as a stall.
    pin = (lambda cpu: ["taskset", "-c", cpu]) if shutil.which("taskset") else (lambda cpu: [])
    daemon = subprocess.Popen(
        [*pin("1"), a.bin, "--log-level", "warn", "serve", "--control", str(control),
         "--vm", f"name=vm1,socket={sock},queues=4", "--echo", f"echo0,mac={ECHO_MAC}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    failure = None
    worst = (0, None)
    t0 = time.monotonic()
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("daemon did not start")
            time.sleep(0.05)
        for run in range(a.runs):
            policy, threads = rng.choice(POLICIES), rng.randint(1, a.max_threads)
            rate, secs = rng.choice(RATES), rng.uniform(0.3, 0.8)
            ctl(a.bin, control, "set-policy", "--port", "vm1", policy)
            stop = threading.Event()
            t = threading.Thread(
                target=chaos, args=(a.bin, control, random.Random(rng.random()), stop)
            )
            t.start()
            desc = f"run {run}: {policy}, {threads} threads, rate {rate}, {secs:.2f} s"
            g = subprocess.run(
                [*pin("0"), a.bin, "--log-level", "warn", "guest", "--socket", str(sock),
                 "--mode", "rr", "--threads", str(threads), "--rate", rate,
                 "--duration", f"{secs:.2f}s", "--dst-mac", ECHO_MAC, "--json"],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            stop.set()
            t.join()
            if g.returncode != 0:
                failure = f"{desc}: guest failed: {g.stderr.strip()[-400:]}"
                break
            rep = json.loads(g.stdout)
            lat = rep.get("latency") or {}
            mx = lat.get("max", 0)
            if mx > worst[0]:
                worst = (mx, desc)
            if mx >= STALL_NS:
                failure = f"{desc}: a round trip took {mx / 1e6:.1f} ms (lost wake-up?)"
                break
            if rep["recv_packets"] < rep["sent_packets"] - threads * 256:
                # Requests still in flight at the end are at most a ring each.
                failure = f"{desc}: {rep['sent_packets']} requests, {rep['recv_packets']} replies"
                break
            if daemon.poll() is not None:
                failure = f"{desc}: daemon exited with {daemon.returncode}"
                break
            if (run + 1) % 50 == 0:
                print(f"{run + 1} runs, worst round trip {worst[0] / 1e6:.2f} ms", flush=True)
    except Exception as e:  # noqa: BLE001 - reported as a hunt failure
        failure = f"{type(e).__name__}: {e}"
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(10)
        log.close()
    took = time.monotonic() - t0
    if failure:
        print(f"stall hunt FAILED after {took:.0f} s: {failure}; logs kept in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(
        f"stall hunt passed: {a.runs} runs in {took:.0f} s, worst round trip "
        f"{worst[0] / 1e6:.2f} ms ({worst[1]})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
