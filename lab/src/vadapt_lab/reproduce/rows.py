"""One row of PAPERS.md and the rule that verdicts it.

A row is one figure of a paper, with three columns: the paper's value, the
simulator's (from the scenario and command the row names), and the real
daemon's where this machine can run it (a recorded figure with its source,
or why not). The verdict compares the simulator with the paper.

A row with a ``neutral`` value (1 for a ratio to a baseline, 100 for a
percentage of one, 0 for a change) is judged on its *effect*, the distance
from neutral: with ``e = (simulator − neutral) ÷ (paper − neutral)``,

- **agrees**: ``e`` within [0.75, 1.25], or both within ``tie`` of neutral
  (both "no effect");
- **same direction, different size**: ``e`` positive but outside that band;
- **disagrees**: opposite directions, or an effect on one side and none (a
  value within ``tie``) on the other.

Judging the value instead would make a row near 100 % agree within ±25
points: 128 % against 108 % is 0.30 of the paper's gain, not a match.

A row without a neutral value (an absolute level such as a knee in kQPS, or
watts) has no direction: it **agrees** within 25 % of the paper's value and
otherwise **differs**.

A daemon figure (``daemon_value``: recorded, or measured by ``reproduce
--daemon`` from the run its ``daemon_ref`` names, see ``daemon.py``) is judged
by the same rule.

A row whose simulator figure is an input (calibrated from the paper's own
figure, or equal to it by construction) is marked **input** and left out of
the counts; its note says why. **not run**: no simulator figure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

SIZE_TOLERANCE = 0.25
"""Largest relative difference (of effects, or of values) that still agrees."""

VERDICTS = (
    "agrees",
    "same direction, different size",
    "differs",
    "disagrees",
    "not run",
    "input",
)
"""Every verdict, in the order PAPERS.md counts them."""


@dataclass(frozen=True)
class DaemonRef:
    """Where ``reproduce --daemon`` takes a row's daemon figure: ``metric`` of the run
    ``case`` (a name in ``daemon.CASES``) times ``scale``."""

    case: str
    metric: str
    scale: float = 1.0
    """E.g. 100 for a ratio shown in %."""
    what: str = ""
    """What the figure measures where it is not the paper's measure, e.g. "NetAP ÷
    interrupt mode (the paper: best fixed interval ÷ VirtIO)"."""


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
    """The value that means "no effect" (1 for ratios, 0 for changes); ``None``: values only."""
    tie: float = 0.0
    """Values within this of ``neutral`` have no direction ("no effect")."""
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
    input: bool = False
    """The simulator figure is an input (calibrated or true by construction), not a result."""
    headline: bool = False
    """The figure is one of the paper's abstract's."""
    lower_bound: bool = False
    """The simulator's figure is a lower bound (it held at the top of its sweep)."""
    daemon_value: float | None = None
    """The real daemon's figure in the row's unit, where one was recorded (``daemon`` says
    where, on what machine, with what command); judged by the same rule."""
    daemon_ref: DaemonRef | None = None
    """The daemon run that gives this row's figure under ``reproduce --daemon``."""

    def verdict(self) -> str:
        """The row's verdict by the module's rule."""
        if self.input:
            return "input"
        if self.judged is not None:
            return self.judged
        if self.sim_value is None or self.paper_value is None:
            return "not run"
        if self.neutral is None:
            return "agrees" if within(self.sim_value, self.paper_value) else "differs"
        return judge_effect(self.sim_value, self.paper_value, self.neutral, self.tie)

    def daemon_verdict(self) -> str | None:
        """The daemon's figure judged against the paper's by the same rule; ``None``
        without one."""
        if self.daemon_value is None or self.paper_value is None:
            return None
        if self.neutral is None:
            return "agrees" if within(self.daemon_value, self.paper_value) else "differs"
        return judge_effect(self.daemon_value, self.paper_value, self.neutral, self.tie)

    def effect_ratio(self, value: float | None = None) -> float | None:
        """(``value`` − neutral) ÷ (paper − neutral), ``value`` the simulator's by default,
        where both exist and the paper has an effect."""
        value = self.sim_value if value is None else value
        if self.neutral is None or value is None or self.paper_value is None:
            return None
        if side(self.paper_value, self.neutral, self.tie) == 0:
            return None
        return (value - self.neutral) / (self.paper_value - self.neutral)


def judge_effect(sim: float, paper: float, neutral: float, tie: float = 0.0) -> str:
    """The verdict of an effect: ``sim`` against ``paper``, both measured from ``neutral``."""
    paper_side, sim_side = side(paper, neutral, tie), side(sim, neutral, tie)
    if paper_side == 0:
        return "agrees" if sim_side == 0 else "disagrees"
    if sim_side != paper_side:
        return "disagrees"
    ratio = (sim - neutral) / (paper - neutral)
    if 1 - SIZE_TOLERANCE <= ratio <= 1 + SIZE_TOLERANCE:
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


def counts(rows: list[Row]) -> Counter:
    """How many rows have each verdict."""
    return Counter(r.verdict() for r in rows)


def summary(rows: list[Row]) -> str:
    """ "N agrees, ... (M inputs not counted)": the verdicts of ``rows``, inputs apart."""
    return summary_of(counts(rows))


def summary_of(c: Counter) -> str:
    """:func:`summary`'s text for the verdict counts ``c``."""
    judged = ", ".join(f"{c[v]} {v}" for v in VERDICTS if v != "input" and c[v])
    judged = judged or "none judged"
    return judged + (f" ({c['input']} inputs, not counted)" if c["input"] else "")
