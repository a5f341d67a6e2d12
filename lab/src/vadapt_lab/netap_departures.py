"""Where NetAP departs from the paper on notifications, measured on the real daemon.

The NetAP paper's Algorithm 1 turns guest notifications off while a pass
runs (line 8) and on again before the worker sleeps (lines 23-25): a kick
can end every sleep. vadapt keeps them off during the sleep as well and lets
a kick through only when a ring is ``kick_threshold_permille`` full (750 by
default, the ring-full safety net). This command measures what that choice
does on the papers' workload, against the paper's choice, against no kick at
all while asleep, and against interrupt mode (docs/netap.md, issue 15 item 6).

Set-up: ``daemon.Testbed`` (``vadapt serve`` pinned to CPU 1, one synthetic
guest per VM pinned to CPU 0), 2 VMs x 3 threads, ``--mode tcp-stream``
(TSO segments, as benchmark B9), one testbed per message size (64 and
1024 B). Within each round every policy of ``VARIANTS`` takes its turn on
every port (``set-policy``): a warm-up, then a window read from the
daemon's counters. NetAP's warm-up is ``NETAP_WARMUP_ROUNDS`` rounds of
``round_ms``: the search's 11 probes, the re-measure of the settled interval
and the kick-driven check, plus slack. Policies take turns within a round so
that drift of the machine (other tenants on the 2 cores) shows up as spread
across rounds instead of as a difference between policies; the ratios to
interrupt mode are taken within the same round.

Per window: application payload Gbit/s at the sink (``daemon.sink_payload_bytes``),
guest kicks per GB of payload (the VM ports' queues), worker CPU-seconds per
GB (the VM ports' workers), and whether every VM port's polling interval
stayed put (``settled``). The CSV keeps every window with its provenance;
the report gives medians (min-max) over the rounds.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vadapt_lab.netap_ml import daemon as dm
from vadapt_lab.netap_ml.grid import git_revision, write_rows

VMS, THREADS = 2, 3
"""The papers' 2 VMs x 3 threads (B9's first shape)."""

SIZES = (64, 1024)
"""Application message sizes, bytes (B9's)."""

MODE = "tcp-stream"
"""The papers' workload: TSO segments of coalesced writes."""

NETAP_WARMUP_ROUNDS = 14
"""Rounds of warm-up for a NetAP variant: 11 search probes, the settled
interval measured afresh, the kick-driven round, and one round of slack."""

INTERRUPT_WARMUP_S = 1.0
"""Interrupt mode has nothing to settle."""

CONNECT_SLACK_S = 10.0
"""Guest run time beyond the schedule: start-up, connection, the last snapshot."""

BASELINE = "interrupt"
"""The variant every other is divided by, within a round."""

METRICS = ("gbps", "kicks_per_gb", "cpu_s_per_gb")
"""Per-window figures, each also as a ratio to ``BASELINE``."""

COLUMNS = (
    "round",
    "msg_size",
    "variant",
    "policy",
    "warmup_s",
    "window_s",
    *METRICS,
    *(f"{m}_vs_interrupt" for m in METRICS),
    "settled",
    "intervals_us",
    "git_rev",
    "machine",
    "command",
    "testbed",
)
"""CSV columns, one row per (round, message size, variant)."""


def variants(round_ms: int) -> dict[str, dict]:
    """The policies compared, by name, in the order each round runs them."""
    netap = {"kind": "netap", "round_ms": round_ms}
    return {
        "netap (vadapt: off while asleep, 750 permille net)": netap,
        "netap, notify_during_sleep (paper)": netap | {"notify_during_sleep": True},
        "netap, no kick while asleep (0 permille)": netap | {"kick_threshold_permille": 0},
        BASELINE: {"kind": "interrupt"},
    }


def warmup_s(policy: dict) -> float:
    """Seconds a policy runs before its window: long enough for NetAP to settle."""
    if policy["kind"] == "netap":
        return NETAP_WARMUP_ROUNDS * policy.get("round_ms", 1000) / 1000
    return INTERRUPT_WARMUP_S


def schedule_s(policies: dict[str, dict], window_s: float) -> float:
    """Seconds one round takes: every policy's warm-up and window."""
    return sum(warmup_s(p) + window_s for p in policies.values())


# --- reading two snapshots (pure) ----------------------------------------------


def vm_kicks(stats: dict) -> int:
    """Guest kicks on every VM port's queues so far."""
    return sum(q["kicks"] for p in stats["ports"] if p["kind"] == "vm" for q in p["queues"])


def vm_worker_cpu_s(stats: dict) -> float:
    """CPU seconds of the VM ports' workers (named ``PORT`` or ``PORT/...``), not the sink's."""
    vms = {p["name"] for p in stats["ports"] if p["kind"] == "vm"}
    return sum(w["cpu_seconds"] for w in stats["workers"] if w["name"].split("/")[0] in vms)


def window_metrics(before: dict, after: dict, secs: float, mode: str = MODE) -> dict:
    """Throughput, kicks and CPU between two snapshots ``secs`` apart.

    Per-GB figures are NaN when no payload moved (nothing to divide by).
    """
    payload = dm.sink_payload_bytes(after, mode) - dm.sink_payload_bytes(before, mode)
    kicks = vm_kicks(after) - vm_kicks(before)
    cpu = vm_worker_cpu_s(after) - vm_worker_cpu_s(before)
    gb = payload / 1e9
    nan = float("nan")
    return {
        "gbps": payload * 8 / secs / 1e9,
        "kicks_per_gb": kicks / gb if gb > 0 else nan,
        "cpu_s_per_gb": cpu / gb if gb > 0 else nan,
        "settled": dm.port_intervals(before) == dm.port_intervals(after),
        "intervals_us": " ".join(f"{k}={v}" for k, v in sorted(dm.port_intervals(after).items())),
    }


def add_ratios(rows: list[dict]) -> list[dict]:
    """Each row with ``METRIC_vs_interrupt``: its value over the ``BASELINE`` row
    of the same round and message size (NaN without one or when it is 0)."""
    base = {(r["round"], r["msg_size"]): r for r in rows if r["variant"] == BASELINE}
    out = []
    for r in rows:
        b = base.get((r["round"], r["msg_size"]))
        ratios = {}
        for m in METRICS:
            den = b[m] if b is not None else float("nan")
            ratios[f"{m}_vs_interrupt"] = r[m] / den if den and den == den else float("nan")
        out.append(r | ratios)
    return out


def kick_driven_ports(intervals_us: str) -> int:
    """VM ports at interval 0 in a row's ``intervals_us`` (``vm1=700 vm2=0``): NetAP's
    kick-driven check kept kick-driven service there (policy/src/netap.rs)."""
    return sum(1 for kv in intervals_us.split() if kv.split("=", 1)[1] == "0")


def spread(values: list[float]) -> str:
    """``median (min–max)`` of the finite values, 3 significant digits; ``–`` if none."""
    v = [x for x in values if x == x]
    if not v:
        return "–"
    if len(v) == 1:
        return f"{v[0]:.3g}"
    return f"{statistics.median(v):.3g} ({min(v):.3g}–{max(v):.3g})"


def report(rows: list[dict]) -> str:
    """Markdown table: per message size and variant, medians (min–max) over the rounds."""
    head = (
        "| msg B | policy | rounds | Gbit/s | × interrupt | kicks/GB | × interrupt "
        "| worker CPU s/GB | × interrupt | settled windows | kick-driven ports |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    keys = list(dict.fromkeys((r["msg_size"], r["variant"]) for r in rows))
    for size, name in keys:
        rs = [r for r in rows if (r["msg_size"], r["variant"]) == (size, name)]
        cells = []
        for m in METRICS:
            cells.append(spread([r[m] for r in rs]))
            cells.append("1" if name == BASELINE else spread([r[f"{m}_vs_interrupt"] for r in rs]))
        if name == BASELINE:
            settled = kicked = "–"
        else:
            settled = f"{sum(bool(r['settled']) for r in rs)}/{len(rs)}"
            kicked = f"{sum(kick_driven_ports(r['intervals_us']) for r in rs)}/{VMS * len(rs)}"
        lines.append(
            f"| {size} | {name} | {len(rs)} | " + " | ".join(cells) + f" | {settled} | {kicked} |"
        )
    return "\n".join(lines)


def read_rows(path: Path) -> list[dict]:
    """A CSV this command wrote, its numbers and flags parsed back."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    floats = (*METRICS, *(f"{m}_vs_interrupt" for m in METRICS), "warmup_s", "window_s")
    for r in rows:
        r.update({k: float(r[k]) for k in floats})
        r.update(round=int(r["round"]), msg_size=int(r["msg_size"]), settled=r["settled"] == "True")
    return rows


# --- the run ---------------------------------------------------------------------


def run(
    vadapt: Path,
    repo: Path,
    rounds: int,
    round_ms: int,
    window_s: float,
    sizes: tuple[int, ...] = SIZES,
    command: str = "",
    work: Path | None = None,
) -> list[dict]:
    """Measure every variant ``rounds`` times per message size; rows with ratios."""
    policies = variants(round_ms)
    guest_s = rounds * schedule_s(policies, window_s) + CONNECT_SLACK_S
    prov = {"git_rev": git_revision(repo), "machine": dm.machine(), "command": command}
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dep-netap-", dir=work) as tmp:
        for size in sizes:
            first = next(iter(policies.values()))
            bed = dm.Testbed(
                vadapt, Path(tmp) / f"{size}", VMS, THREADS, size, first, guest_s, MODE
            )
            with bed:
                for k in range(1, rounds + 1):
                    for name, policy in policies.items():
                        bed.set_policy_all(policy)
                        time.sleep(warmup_s(policy))
                        a, ta = bed.stats(), time.monotonic()
                        time.sleep(window_s)
                        b, tb = bed.stats(), time.monotonic()
                        m = window_metrics(a, b, tb - ta)
                        rows.append(
                            {"round": k, "msg_size": size, "variant": name}
                            | {"policy": json.dumps(policy)}
                            | {"warmup_s": warmup_s(policy), "window_s": tb - ta}
                            | m
                            | prov
                            | {"testbed": bed.commands()}
                        )
                        print(
                            f"[{time.monotonic() - t0:6.1f} s] {size} B round {k} {name}: "
                            f"{m['gbps']:.3f} Gbit/s, {m['kicks_per_gb']:.0f} kicks/GB, "
                            f"{m['cpu_s_per_gb']:.2f} CPU s/GB, {m['intervals_us']}",
                            file=sys.stderr,
                            flush=True,
                        )
    return add_ratios(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vadapt_lab.netap_departures",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Generates load on both cores: run it under "
        "`flock /tmp/vadapt-bench.lock ...` so that no benchmark overlaps it.",
    )
    ap.add_argument("--vadapt", type=Path, default=Path("target/release/vadapt"))
    ap.add_argument("--repo", type=Path, default=Path("."), help="git tree for the revision")
    ap.add_argument("--rounds", type=int, default=3, help="times each policy is measured")
    ap.add_argument("--round-ms", type=int, default=1000, help="NetAP's round_ms")
    ap.add_argument("--window", type=float, default=5.0, help="measured seconds per policy")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 round, 200 ms NetAP rounds, 1 s windows, 64 B only",
    )
    ap.add_argument("--csv", type=Path, required=True, help="CSV of every window to write")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: print (and --out) the table of the existing --csv",
    )
    ap.add_argument("--out", type=Path, help="also write the markdown table here")
    ap.add_argument("--work", type=Path, help="parent of the temporary work folder")
    args = ap.parse_args(argv)
    if args.report_only:
        return write_report(read_rows(args.csv), args.out)
    rounds, round_ms, window, sizes = args.rounds, args.round_ms, args.window, SIZES
    if args.quick:
        rounds, round_ms, window, sizes = 1, 200, 1.0, SIZES[:1]
    if rounds < 1 or round_ms < 1 or window <= 0:
        ap.error("--rounds and --round-ms must be at least 1 and --window positive")
    if not args.vadapt.is_file():
        ap.error(f"no vadapt binary at {args.vadapt} (cargo build --release)")
    command = shlex.join(["python", "-m", "vadapt_lab.netap_departures", *(argv or sys.argv[1:])])
    rows = run(args.vadapt, args.repo, rounds, round_ms, window, sizes, command, args.work)
    write_rows(args.csv, rows, COLUMNS)
    return write_report(rows, args.out)


def write_report(rows: list[dict], out: Path | None) -> int:
    """Print ``report(rows)``, and write it to ``out`` if given; the exit status."""
    table = report(rows)
    print(table)
    if out:
        out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
