"""Load result files written by vadapt runs into a pandas DataFrame.

A results file is JSON: either a list of flat records, or an object with a
``"rows"`` list. The object is the one result schema of the Rust crate
``vadapt-results`` (``results/``), which both ``vadapt bench``
(``<out>/<bench>.json``) and ``vadapt sim`` (``<out>/result.json``) write. Its
``"kind"`` says which: ``"bench"`` or ``"sim"``; files written before the
field existed are benchmarks. Each row carries the labels ``table, sender,
backend, policy, variant, frame, run`` and metrics named with their unit;
a simulation's rows are in the tables ``samples``, ``periods`` and
``workers``. The other top-level keys (``kind``, ``bench``, ``params``,
``notes``, ...) are kept in ``DataFrame.attrs``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

KINDS = ("bench", "sim")
"""The values of a result file's ``"kind"``."""


class ResultsError(ValueError):
    """A results file is not in the expected shape."""


def load_results(path: str | Path) -> pd.DataFrame:
    """Read a JSON results file and return one row per record.

    For an object, ``df.attrs`` holds its other keys, with ``"kind"`` set to
    ``"bench"`` when the file has none.

    Raises ``ResultsError`` naming the file when the JSON is not a list of
    objects or an object with a ``"rows"`` list of objects, or when its
    ``"kind"`` is not one of ``KINDS``.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: invalid JSON: {e}") from e
    meta: dict = {}
    if isinstance(data, dict):
        if "rows" not in data:
            raise ResultsError(f"{path}: object has no 'rows' key")
        meta = {k: v for k, v in data.items() if k != "rows"}
        meta.setdefault("kind", "bench")
        if meta["kind"] not in KINDS:
            raise ResultsError(f"{path}: unknown kind {meta['kind']!r}, expected one of {KINDS}")
        data = data["rows"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ResultsError(f"{path}: expected a list of objects")
    df = pd.DataFrame.from_records(data)
    df.attrs.update(meta)
    return df
