#!/usr/bin/env python3
"""Soak: many VM ports, synthetic guests connecting, sending and leaving in a
loop. Nothing a ring accepted may be lost, and the daemon's memory and file
descriptors must stay flat.

    scripts/soak.py                      # 64 ports, 10 minutes (the issue's soak)
    scripts/soak.py --ports 8 --seconds 20   # the short version the test command runs

One `vadapt serve` with N VM ports and a sink. Each round starts `--batch`
synthetic guests (`vadapt guest`, rate-limited, 1 s each) on ports
picked at random, waits for them, then checks for every port that the
daemon counted exactly the packets its guests said they sent, and that the
sink received every one of them (no drop of any kind). RSS and the open fd
count are sampled every round; after a warm-up (the first quarter of the
run, while every port has guests for the first time and grows its buffers)
they may not grow beyond 10 % + 5 MiB of RSS and 4 fds. Prints a summary and writes it as JSON
(`--out`). Exits 1 on any loss, leak or daemon failure.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SINK_MAC = "02:00:00:00:00:02"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def stats(binary: str, control: Path) -> dict:
    r = subprocess.run(
        [binary, "stats", "--control", str(control), "--json"],
        capture_output=True,
        text=True,
        timeout=15,
    )
    if r.returncode != 0:
        raise RuntimeError(f"vadapt stats failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def port(s: dict, name: str) -> dict:
    return next(p for p in s["ports"] if p["name"] == name)


def total(p: dict, key: str) -> int:
    return sum(q[key] for q in p["queues"])


def drops(p: dict) -> int:
    return sum(sum(q.get("dropped", {}).values()) for q in p["queues"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--batch", type=int, default=8, help="guests per round")
    ap.add_argument("--rate", default="5k", help="each guest's packet rate")
    ap.add_argument(
        "--warmup",
        type=float,
        default=0.25,
        help="fraction of the run before the RSS/fd baseline (every port's buffers allocated)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--bin", default=os.environ.get("VADAPT_BIN", str(ROOT / "target/release/vadapt"))
    )
    ap.add_argument("--out", type=Path, default=None, help="write the summary JSON here")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="vadapt-soak-", dir="/tmp"))
    control = work / "control.sock"
    names = [f"vm{i}" for i in range(a.ports)]
    argv = [a.bin, "--log-level", "warn", "serve", "--control", str(control)]
    argv += ["--sink", f"sink0,mac={SINK_MAC}", "--policy", "netap"]
    for n in names:
        argv += ["--vm", f"name={n},socket={work / (n + '.sock')}"]
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    failures: list[str] = []
    sent = dict.fromkeys(names, 0)
    samples: list[tuple[float, int, int]] = []
    rounds = guests = 0
    t0 = time.monotonic()
    try:
        deadline = time.monotonic() + 20
        while not control.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start: {(work / 'daemon.log').read_text()}")
            time.sleep(0.05)
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            batch = rng.sample(names, min(a.batch, len(names)))
            procs = {
                n: subprocess.Popen(
                    [
                        a.bin,
                        "--log-level",
                        "warn",
                        "guest",
                        "--socket",
                        str(work / (n + ".sock")),
                        "--rate",
                        a.rate,
                        "--duration",
                        "1s",
                        "--dst-mac",
                        SINK_MAC,
                        "--json",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )  # fmt: skip
                for n in batch
            }
            for n, p in procs.items():
                out, err = p.communicate(timeout=60)
                if p.returncode != 0:
                    failures.append(f"round {rounds}: guest on {n} failed: {err.strip()[-300:]}")
                    continue
                rep = json.loads(out)
                sent[n] += rep["sent_packets"]
                guests += 1
            if daemon.poll() is not None:
                failures.append(f"round {rounds}: daemon exited with {daemon.returncode}")
                break
            # Every packet a guest put on a ring is counted, then reaches the sink.
            want = sum(sent.values())
            deadline = time.monotonic() + 10
            while True:
                s = stats(a.bin, control)
                lost = [n for n in batch if total(port(s, n), "tx_packets") != sent[n]]
                sink = port(s, "sink0")
                if not lost and total(sink, "rx_packets") == want:
                    break
                if time.monotonic() > deadline:
                    failures.append(
                        f"round {rounds}: counted != sent on {lost}; sink rx "
                        f"{total(sink, 'rx_packets')} of {want}, drops "
                        f"{sum(drops(port(s, n)) for n in names) + drops(sink)}"
                    )
                    break
                time.sleep(0.1)
            samples.append((time.monotonic() - t0, rss_kib(daemon.pid), fd_count(daemon.pid)))
            rounds += 1
            if failures:
                break
    except Exception as e:  # noqa: BLE001 - reported as a soak failure
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                failures.append("daemon did not stop within 10 s of SIGTERM")
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        log.close()
    cut = a.warmup * (samples[-1][0] if samples else 0)
    base = next((x for x in samples if x[0] >= cut), samples[-1]) if samples else (0, 0, 0)
    last = samples[-1] if samples else (0, 0, 0)
    rss_growth, fd_growth = last[1] - base[1], last[2] - base[2]
    if samples and rss_growth > base[1] // 10 + 5 * 1024:
        failures.append(f"RSS grew from {base[1]} to {last[1]} KiB after warm-up")
    if samples and fd_growth > 4:
        failures.append(f"open fds grew from {base[2]} to {last[2]} after warm-up")

    def trend(i: int) -> dict:
        return {
            "after_warmup": base[i],
            "end": last[i],
            "max": max((x[i] for x in samples), default=0),
        }

    summary = {
        "ports": a.ports,
        "seconds": round(time.monotonic() - t0, 1),
        "rounds": rounds,
        "guest_runs": guests,
        "packets": sum(sent.values()),
        "rss_kib": trend(1),
        # Every 10th round: (seconds, RSS KiB, fds), to tell a leak from a plateau.
        "trend": [list(x) for x in samples[::10]],
        "fds": trend(2),
        "failures": failures,
    }
    print(json.dumps(summary, indent=2))
    if a.out:
        a.out.write_text(json.dumps(summary, indent=2) + "\n")
    if failures:
        print(f"soak FAILED; logs kept in {work}", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(
        f"soak passed: {rounds} rounds, {guests} guest runs, {summary['packets']} packets, 0 lost"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
