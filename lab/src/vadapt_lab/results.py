"""Load result files written by vadapt runs into a pandas DataFrame.

A results file is JSON: either a list of flat records, or an object with a
``"rows"`` list (other top-level keys, such as ``"git_rev"``, are kept in
``DataFrame.attrs`` so a plot can cite the revision it came from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


class ResultsError(ValueError):
    """A results file is not in the expected shape."""


def load_results(path: str | Path) -> pd.DataFrame:
    """Read a JSON results file and return one row per record.

    Raises ``ResultsError`` naming the file when the JSON is not a list of
    objects or an object with a ``"rows"`` list of objects.
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
        data = data["rows"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ResultsError(f"{path}: expected a list of objects")
    df = pd.DataFrame.from_records(data)
    df.attrs.update(meta)
    return df
