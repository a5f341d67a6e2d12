"""The paper's training grid, run in the simulator through ``vadapt sim sweep``.

Each (VMs, threads, message size) combination is one ``vadapt sim sweep`` over
the polling intervals (``--set vms=V --set threads=T --set msg_size=S --param
interval=50..4000:50 --no-baseline``); the sweep itself spreads its points over
``--threads`` cores, so combinations run one after the other. Each CSV row
carries its provenance: the git revision of the tree that built ``vadapt``
(``-dirty`` when it had uncommitted changes), the scenario file, the
calibration file it includes with its SHA-256, the seed and the simulated
duration and warm-up of each point.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import subprocess
import tempfile
import time
from pathlib import Path

import tomllib

from vadapt_lab.netap_ml import PAPER_GRID

COLUMNS = (
    "vms",
    "threads",
    "msg_size",
    "interval_us",
    "gbps",
    "host_cpu_pct",
    "guest_cpu_pct",
    "wakeups_per_s",
    "seed",
    "point_s",
    "warmup_s",
    "scenario",
    "calibration",
    "calibration_sha256",
    "git_rev",
)
"""CSV columns, in order."""


class GridError(RuntimeError):
    """A grid could not be run."""


def git_revision(repo: Path) -> str:
    """``git rev-parse HEAD`` of ``repo``, with ``-dirty`` if it has uncommitted changes."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise GridError(f"cannot read the git revision of {repo}: {e}") from e
    return rev + ("-dirty" if dirty else "")


def scenario_provenance(scenario: Path, repo: Path) -> dict[str, object]:
    """Scenario and calibration file (paths relative to ``repo``), calibration hash, sweep setup."""
    doc = tomllib.loads(scenario.read_text())
    include = doc.get("include")
    if include is None:
        calibration, digest = "embedded", ""
    else:
        cal = (scenario.parent / include).resolve()
        calibration = str(cal.relative_to(repo.resolve()))
        digest = hashlib.sha256(cal.read_bytes()).hexdigest()
    sweep = doc.get("sweep", {})
    return {
        "scenario": str(scenario.resolve().relative_to(repo.resolve())),
        "calibration": calibration,
        "calibration_sha256": digest,
        "seed": doc.get("seed", 0),
        "point_s": sweep.get("duration_s"),
        "warmup_s": sweep.get("warmup_s"),
    }


def sweep_command(
    vadapt: Path, scenario: Path, vms: int, threads: int, msg_size: int, cores: int, out: Path
) -> list[str]:
    """The ``vadapt sim sweep`` command line of one (VMs, threads, message size) combination."""
    first, last = PAPER_GRID["interval_us"][0], PAPER_GRID["interval_us"][-1]
    step = PAPER_GRID["interval_us"][1] - first
    return [
        str(vadapt),
        "sim",
        "sweep",
        str(scenario),
        "--set",
        f"vms={vms}",
        "--set",
        f"threads={threads}",
        "--set",
        f"msg_size={msg_size}",
        "--param",
        f"interval={first}..{last}:{step}",
        "--no-baseline",
        "--threads",
        str(cores),
        "--out",
        str(out),
        "--log-level",
        "warn",
    ]


def write_rows(out_csv: Path, rows: list[dict], columns) -> int:
    """Write ``rows`` to ``out_csv`` (folders made) with ``columns``; the row count."""
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with out_csv.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def run_sim_grid(
    vadapt: Path,
    scenario: Path,
    out_csv: Path,
    repo: Path,
    cores: int = 2,
    grid: dict[str, tuple[int, ...]] = PAPER_GRID,
) -> int:
    """Run ``grid`` (without its intervals, which every sweep covers) and write ``out_csv``.

    Returns the number of rows written. Raises ``GridError`` naming the
    combination whose sweep failed.
    """
    prov = scenario_provenance(scenario, repo) | {"git_rev": git_revision(repo)}
    combos = list(itertools.product(grid["vms"], grid["threads"], grid["msg_size"]))
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ml-grid-") as tmp:
        for i, (vms, threads, size) in enumerate(combos):
            out = Path(tmp) / f"{vms}-{threads}-{size}"
            cmd = sweep_command(vadapt, scenario, vms, threads, size, cores, out)
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise GridError(
                    f"vms={vms} threads={threads} msg_size={size}: "
                    f"`{' '.join(cmd)}` failed: {done.stderr.strip()}"
                )
            report = json.loads((out / "sweep.json").read_text())
            for p in report["points"]:
                rows.append(
                    {
                        "vms": vms,
                        "threads": threads,
                        "msg_size": size,
                        "interval_us": int(p["value"]),
                        "gbps": repr(p["gbps"]),
                        "host_cpu_pct": repr(p["host_cpu_pct"]),
                        "guest_cpu_pct": repr(p["guest_cpu_pct"]),
                        "wakeups_per_s": repr(p["wakeups_per_s"]),
                    }
                    | prov
                )
            print(
                f"[{i + 1}/{len(combos)}] vms={vms} threads={threads} msg_size={size}: "
                f"best {report['best_value']:.0f} us at {report['best_gbps']:.3f} Gb/s "
                f"({time.monotonic() - t0:.1f} s so far)",
                flush=True,
            )
    return write_rows(out_csv, rows, COLUMNS)
