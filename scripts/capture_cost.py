"""Worker busy cycles a packet with and without a running `vadapt capture`,
in one daemon run (docs/capture.md, "Cost").

A synthetic guest (on CPU 0) streams 64-byte frames to a sink at RATE
(default `closed`; PACING default `exact`), vm1's worker busy-polls on
CPU 1, and its busy cycles per packet are read from `vadapt stats` over
windows of SECONDS: without a capture, with one of vm1 (both ways, to
/dev/null), without, with.

    RATE=200k PACING=burst flock /work/bench.lock python3 scripts/capture_cost.py BINARY [SECONDS]
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

B = sys.argv[1]
W = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
tmp = Path(tempfile.mkdtemp(prefix="capcost"))
ctl, sock = tmp / "c.sock", tmp / "vm1.sock"
d = subprocess.Popen(
    [
        B,
        "serve",
        "--control",
        str(ctl),
        "--state-dir",
        str(tmp / "st"),
        "--vm",
        f"name=vm1,socket={sock},mac=02:00:00:00:00:01",
        "--sink",
        "s0,mac=02:00:00:00:00:02",
        "--policy",
        "busy-poll",
        "--cpus",
        "1",
        "--log-level",
        "warn",
    ]
)
for _ in range(100):
    if sock.exists() and ctl.exists():
        break
    time.sleep(0.1)
g = subprocess.Popen(
    [
        "taskset",
        "-c",
        "0",
        B,
        "guest",
        "--socket",
        str(sock),
        "--rate",
        os.environ.get("RATE", "closed"),
        "--pacing",
        os.environ.get("PACING", "exact"),
        "--duration",
        f"{int(6 * W + 10)}s",
        "--dst-mac",
        "02:00:00:00:00:02",
        "--log-level",
        "warn",
    ],
    stdout=subprocess.DEVNULL,
)


def sample():
    s = json.loads(
        subprocess.run(
            [B, "stats", "--json", "--control", str(ctl)], capture_output=True, text=True
        ).stdout
    )
    w = [w for w in s["workers"] if w["name"].startswith("vm1")]
    p = [p for p in s["ports"] if p["name"] == "vm1"][0]
    return (
        sum(x["busy_cycles"] for x in w),
        sum(x["busy_packets"] for x in w),
        p.get("capture_dropped", 0),
    )


def window(label):
    a = sample()
    time.sleep(W)
    b = sample()
    c, n = b[0] - a[0], b[1] - a[1]
    print(
        f"{label:>8}: {n / W / 1e6:.3f} Mpps, {c / max(n, 1):.1f} busy cycles/pkt, "
        f"capture_dropped +{b[2] - a[2]}",
        flush=True,
    )


time.sleep(3)
window("without")
cap = subprocess.Popen(
    [B, "capture", "vm1", "--control", str(ctl), "-w", "/dev/null"], stderr=subprocess.PIPE
)
print("  ", cap.stderr.readline().decode().strip())
time.sleep(1)
window("with")
cap.send_signal(signal.SIGINT)
print("  ", cap.communicate(timeout=20)[1].decode().strip())
time.sleep(1)
window("without")
cap = subprocess.Popen(
    [B, "capture", "vm1", "--control", str(ctl), "-w", "/dev/null"], stderr=subprocess.PIPE
)
cap.stderr.readline()
time.sleep(1)
window("with")
cap.send_signal(signal.SIGINT)
print("  ", cap.communicate(timeout=20)[1].decode().strip())
g.send_signal(signal.SIGTERM)
g.wait(20)
d.send_signal(signal.SIGTERM)
d.wait(20)
