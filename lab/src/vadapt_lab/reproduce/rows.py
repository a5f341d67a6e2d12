"""One row of PAPERS.md and the rule that verdicts it.

A row is one figure of a paper's headline table, with three columns: the
paper's value, the simulator's (from the scenario and command the row
names), and the real daemon's where this machine can run it (a recorded
figure with its source, or why not). The verdict compares the simulator with
the paper:

- **agrees**: same direction and within 25 % of the paper's value;
- **same direction, different size**: same direction, more than 25 % apart;
- **disagrees**: the other direction (the row's note says why);
- **not run**: no simulator figure (the note says what is missing).

"Direction" is the side of `neutral` a value lies on (1 for a ratio to a
baseline, 0 for a change in percent); a value within `tie` of `neutral`
counts as neither side. Rows without a neutral value (an absolute level such
as a knee in kQPS) are judged on size alone.
"""

from __future__ import annotations

from dataclasses import dataclass

SIZE_TOLERANCE = 0.25
"""Largest relative difference from the paper's value that still agrees."""


@dataclass
class Row:
    """A figure: the paper's value beside the simulator's and the daemon's."""

    paper: str
    """Which paper (`NetAP`, `NetAP-ML`, `vSPACE`, `EE-KBP`)."""
    figure: str
    """The figure or table and what is measured, e.g. "Table 2, 6VM-1T, after adapting"."""
    unit: str
    """Unit of the values (``%``, ``×``, ``kQPS``, ``W``...)."""
    paper_value: float | None
    """The paper's figure, as printed (``None`` when it has none)."""
    source: str
    """Where in the paper, e.g. "netap.txt Table 2"."""
    sim_value: float | None = None
    """The simulator's figure; ``None`` when not run."""
    daemon: str = "–"
    """The real daemon's figure with its source, or why this machine cannot give one."""
    neutral: float | None = None
    """The value that means "no effect" (1 for ratios, 0 for changes); ``None``: size only."""
    tie: float = 0.0
    """Values within this of ``neutral`` have no direction."""
    scenario: str = ""
    """Scenario file(s) the simulator figure came from."""
    command: str = ""
    """The command that made the simulator figure."""
    note: str = ""
    """Why it differs, or what is missing (required for "disagrees" and "not run")."""
    judged: str | None = None
    """A qualitative row's verdict (e.g. "agrees" for "converges: yes"), given by its maker."""
    sim_text: str | None = None
    """The simulator column as text, for qualitative rows (``sim_value`` stays ``None``)."""

    def verdict(self) -> str:
        """The row's verdict by the module's rule."""
        if self.judged is not None:
            return self.judged
        if self.sim_value is None or self.paper_value is None:
            return "not run"
        if self.neutral is not None:
            paper_side = side(self.paper_value, self.neutral, self.tie)
            if paper_side != side(self.sim_value, self.neutral, self.tie):
                return "disagrees"
            if paper_side == 0:
                return "agrees"  # both "no effect"
        if within(self.sim_value, self.paper_value):
            return "agrees"
        return "same direction, different size"


def side(value: float, neutral: float, tie: float) -> int:
    """-1, 0 or 1: which side of ``neutral`` ``value`` lies on (0 within ``tie``)."""
    if abs(value - neutral) <= tie:
        return 0
    return 1 if value > neutral else -1


def within(value: float, reference: float, tolerance: float = SIZE_TOLERANCE) -> bool:
    """True when ``value`` is within ``tolerance`` (relative) of ``reference``."""
    if reference == 0:
        return value == 0
    return abs(value - reference) <= tolerance * abs(reference)
