"""The simulator binaries, and running them with the command written down.

`reproduce` drives the simulator only through its command-line drivers, so
each figure's command can be pasted and rerun: ``simrun`` (the same
arguments as ``vadapt sim``) and ``vspace_eval`` (sim/examples/). Both are
built by ``cargo build --release -p vadapt-sim --examples``, which is much
less than the whole daemon, and are looked up in ``$CARGO_TARGET_DIR``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

BUILD = ["cargo", "build", "--release", "-p", "vadapt-sim", "--examples"]


class RunError(RuntimeError):
    """A simulator command failed; the message has the command and its stderr."""


@dataclass
class Sim:
    """Where the repository and the simulator's drivers are, and what was run."""

    repo: Path
    target: Path
    out: Path
    """Folder of the runs' outputs, shown as ``OUT`` in the log."""
    log: list[str] = field(default_factory=list)
    """Every command run, in order, as a shell line relative to the repository."""

    @classmethod
    def build(cls, repo: Path, out: Path) -> Sim:
        """Build the drivers (a no-op when they are up to date) and locate them."""
        target = Path(os.environ.get("CARGO_TARGET_DIR", repo / "target"))
        subprocess.run(BUILD, cwd=repo, check=True)
        return cls(repo=repo, target=target, out=out)

    @property
    def simrun(self) -> Path:
        """``vadapt sim``'s arguments without the daemon (sim/examples/simrun.rs)."""
        return self.target / "release" / "examples" / "simrun"

    @property
    def vspace_eval(self) -> Path:
        """vSPACE's allocator evaluation (sim/examples/vspace_eval.rs)."""
        return self.target / "release" / "examples" / "vspace_eval"

    def run(self, args: list[str | Path]) -> str:
        """Run ``args`` in the repository; its stdout. Raises RunError on failure."""
        argv = [str(a) for a in args]
        self.log.append(self.shown(argv))
        p = subprocess.run(argv, cwd=self.repo, capture_output=True, text=True)
        if p.returncode != 0:
            raise RunError(f"{self.shown(argv)} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout

    def shown(self, argv: list[str]) -> str:
        """``argv`` as a shell line, binaries by their short names, paths relative."""
        names = {str(self.simrun): "simrun", str(self.vspace_eval): "vspace_eval"}
        out = []
        for a in argv:
            a = names.get(a, a)
            if a.startswith(str(self.out)):
                a = "OUT" + a[len(str(self.out)) :]
            try:
                a = str(Path(a).relative_to(self.repo))
            except ValueError:
                pass
            out.append(a)
        return shlex.join(out)
