"""EE-KBP (ee-kbp.txt): power, latency and throughput against KBP and NAPI.

The paper's figures (§5, Table 1's Xeon, 14 cores, VM configuration with a
polling thread in the host and one in the guest): 170 W idle under NAPI and
under EE-KBP with C-states on, 181 W under KBP (5.5 W per busy-polling
thread), about 25 W more with C-states off; frequency control (userspace
governor, 1.2–2.8 GHz) saves 2.5–3.5 W per thread against KBP under
traffic; throughput 1.4–3.1× NAPI's.
"""

from __future__ import annotations

from pathlib import Path

from .rows import Row
from .runner import Sim

NO_POWER = "no RAPL nor cpufreq on these machines: power cannot be measured"
MISSING = (
    "no EE-KBP scenario with the paper's power model, nor a NAPI-like path with softIRQ "
    "contention, in the simulator yet"
)


def rows(sim: Sim, out: Path, quick: bool) -> list[Row]:
    """Every EE-KBP row."""
    return [
        Row(
            "EE-KBP",
            "Fig. 8, no traffic: power of one busy-polling thread (KBP − NAPI, per thread)",
            "W",
            5.5,
            "ee-kbp.txt §5.1 (181 − 170 W over 2 threads)",
            None,
            daemon=(
                f"{NO_POWER}; recorded idle worker CPU: busy-poll 99.88 %, EE-KBP 0.06 % of a "
                "core (BENCHMARKS.md B4, rev a67b906)"
            ),
            neutral=0.0,
            note=MISSING,
        ),
        Row(
            "EE-KBP",
            "Fig. 8, no traffic, C-states on: EE-KBP − NAPI power",
            "W",
            0.0,
            "ee-kbp.txt §5.1 (170 W both)",
            None,
            daemon=NO_POWER,
            note=MISSING,
        ),
        Row(
            "EE-KBP",
            "§6: power saved per polling thread against KBP with frequency control",
            "W",
            3.0,
            "ee-kbp.txt §6 (2.5–3.5 W)",
            None,
            daemon=NO_POWER,
            neutral=0.0,
            note=MISSING,
        ),
        Row(
            "EE-KBP",
            "Fig. 14: throughput, EE-KBP ÷ NAPI",
            "×",
            1.4,
            "ee-kbp.txt §5.3 (1.4–3.1×)",
            None,
            daemon=(
                "no NAPI path on a vhost-user ring; EE-KBP ÷ interrupt mode 0.99–1.02× "
                "(BENCHMARKS.md B1, B9, rev a67b906): `policy/src/eekbp.rs` says why"
            ),
            neutral=1.0,
            note=MISSING,
        ),
        Row(
            "EE-KBP",
            "Fig. 10–13: max round-trip latency, EE-KBP ÷ KBP (busy-poll) at low rate",
            "×",
            None,
            "ee-kbp.txt §5.2 (+87 µs against KBP; up to 1.3 ms with frequency control)",
            None,
            daemon="p99 2.43 (2.18–3.10)× busy-poll's at 1k req/s (BENCHMARKS.md B3, rev a67b906)",
            note=MISSING,
        ),
    ]
