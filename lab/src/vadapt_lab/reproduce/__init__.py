"""``python -m vadapt_lab reproduce``: the four papers' headline figures, regenerated.

One command runs the simulator's scenarios for NetAP, NetAP-ML, vSPACE and
EE-KBP and writes PAPERS.md: each figure as the paper's value, the
simulator's and the real daemon's (a recorded run, or one of ``--daemon``
where this machine has the paper's cores), verdicted by the rule in ``rows.py``.

    PYTHONPATH=lab/src python -m vadapt_lab reproduce            # ~55 min on 2 cores: PAPERS.md
    PYTHONPATH=lab/src python -m vadapt_lab reproduce --quick    # < 3 min: a smoke run
    PYTHONPATH=lab/src python -m vadapt_lab reproduce --daemon   # and the daemon column
    PYTHONPATH=lab/src python -m vadapt_lab reproduce --paper vspace  # one paper's section

``--paper`` reruns one paper and rewrites only its parts of the existing
PAPERS.md (its counts, goals and section, stamped with this run's revision,
date and machine; ``papers_md.splice``): vSPACE's rows take about a tenth of
the full run.

``--daemon`` also runs the papers' shapes on the real daemon with synthetic
guests, each limited to as many cores as the paper's host had, and judges the
daemon column by the same rule (``daemon.py``; it builds the release ``vadapt``
when a shape fits this machine).
A shape needing more cores than this machine gives is "not run: needs N cores".

Why in the lab and not a ``vadapt`` sub-command: what it does is analysis
(read result files with pandas, compare them with the papers' figures, write
markdown), which is the lab's job, and the NetAP-ML rows reuse the lab's own
driver. It needs only the simulator's drivers, built by ``cargo build
--release -p vadapt-sim --examples`` (much less than the daemon), and the lab
venv that the test command installs. ``--quick`` runs fewer, shorter points
(its figures are not the record and it writes ``OUT/PAPERS.md``, not the
repository's) and is a step of ``scripts/test.sh``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

from . import daemon, eekbp, netap, netap_ml, vspace
from .papers_md import PAPERS, render, splice
from .runner import Sim

REPO = Path(__file__).resolve().parents[4]
PAPER_KEYS = {"netap": "NetAP", "netap-ml": "NetAP-ML", "vspace": "vSPACE", "eekbp": "EE-KBP"}
"""``--paper``'s names for the papers of PAPERS.md."""


def machine() -> str:
    """The CPU model and count, as `lscpu` names them."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} CPUs"
    except OSError:
        pass
    return platform.processor() or "unknown"


def revision(repo: Path) -> str:
    """The short git revision, with ``+dirty`` when the tree has changes."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=repo).returncode != 0
    return rev + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vadapt_lab reproduce", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer, shorter points (< 3 min)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/vadapt-reproduce"))
    ap.add_argument(
        "--papers", type=Path, help="file to write (default: PAPERS.md, OUT/PAPERS.md with --quick)"
    )
    ap.add_argument("--repo", type=Path, default=REPO)
    ap.add_argument(
        "--daemon",
        action="store_true",
        help="also run the papers' shapes on the real daemon (needs the papers' core counts)",
    )
    ap.add_argument(
        "--paper",
        choices=sorted(PAPER_KEYS),
        help="rerun this paper only and rewrite its parts of the existing file",
    )
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    sim = Sim.build(a.repo.resolve(), out)
    plan = vspace.QUICK if a.quick else vspace.FULL
    chosen = [PAPER_KEYS[a.paper]] if a.paper else list(PAPERS)
    rows = []
    if "NetAP" in chosen:
        rows += netap.rows(sim, out / "netap")
    if "NetAP-ML" in chosen:
        rows += netap_ml.rows(sim, out / "netap-ml", runs=2 if a.quick else 10)
    if "vSPACE" in chosen:
        rows += vspace.rows(sim, plan)
    if "EE-KBP" in chosen:
        rows += eekbp.rows(sim, out / "eekbp", quick=a.quick)
    rev = revision(sim.repo)
    if a.daemon:
        vadapt = sim.target / "release" / "vadapt"
        runner = daemon.Runner(vadapt, out / "daemon", machine(), rev, sim.repo, log=sim.log)
        daemon.fill(rows, runner)
    command = (
        "python -m vadapt_lab reproduce"
        + (" --quick" if a.quick else "")
        + (" --daemon" if a.daemon else "")
        + (f" --paper {a.paper}" if a.paper else "")
    )
    meta = {
        "command": command,
        "rev": rev,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": time.monotonic() - t0,
        "machine": machine(),
        "log": sim.log,
    }
    papers = a.papers or (out / "PAPERS.md" if a.quick else sim.repo / "PAPERS.md")
    if a.paper:
        papers.write_text(splice(papers.read_text(), rows, PAPER_KEYS[a.paper], meta))
    else:
        papers.write_text(render(rows, meta))
    print(f"wrote {papers}: {len(rows)} rows in {meta['seconds']:.0f} s")
    return 0
