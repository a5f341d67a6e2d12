"""The README's headline figures are the recorded run's.

README.md quotes rows of the "Headline goals" table that `vadapt bench`
generates in BENCHMARKS.md. This test fails when a quoted row's goal is not
one of that table's goals, when a number quoted in it does not appear in the
cited row (its "measured" and "from" cells), when its verdict differs, or
when the README cites another revision than the generated section's.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_TABLE_INTRO = "Headline goals, from the full run recorded in BENCHMARKS.md"
BENCH_TABLE_TITLE = "### Headline goals"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def table_after(text: str, marker: str) -> list[list[str]]:
    """The cells of the first markdown table after `marker`, header and rule left out."""
    lines = text[text.index(marker) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def verdict(cell: str) -> str:
    word = re.search(r"\b(met|missed)\b", cell)
    assert word, f"no verdict in {cell!r}"
    return word.group(1)


def numbers(cell: str) -> set[str]:
    """Numbers as written, with a trailing ".0" kept: "0.06" and "0.060" differ."""
    return set(NUMBER.findall(cell))


def test_readme_rows_are_the_recorded_headline_rows():
    readme = (ROOT / "README.md").read_text()
    bench = (ROOT / "BENCHMARKS.md").read_text()
    quoted = table_after(readme, README_TABLE_INTRO)
    recorded = {row[0]: row for row in table_after(bench, BENCH_TABLE_TITLE)}
    assert quoted, "README has no headline table"
    for goal, measured, said in quoted:
        assert goal in recorded, f"README goal not in BENCHMARKS.md's headline table: {goal!r}"
        _, rec_measured, rec_verdict, rec_from = recorded[goal]
        missing = numbers(measured) - numbers(rec_measured) - numbers(rec_from)
        assert not missing, (
            f"README figures {sorted(missing)} for {goal!r} are not in BENCHMARKS.md's "
            f"row: {rec_measured!r}"
        )
        assert verdict(said) == verdict(rec_verdict), (
            f"README says {said!r} for {goal!r}, BENCHMARKS.md {rec_verdict!r}"
        )


def test_readme_cites_the_generated_run():
    readme = (ROOT / "README.md").read_text()
    bench = (ROOT / "BENCHMARKS.md").read_text()
    generated = bench[bench.index("<!-- BEGIN GENERATED -->") :]
    rev = re.search(r"rev `([0-9a-f]{7,})`", generated)
    assert rev, "no revision in BENCHMARKS.md's generated section"
    intro = readme[readme.index(README_TABLE_INTRO) :][:400]
    assert f"rev {rev.group(1)}" in intro, (
        f"README's headline table does not cite rev {rev.group(1)}, the generated run's"
    )
