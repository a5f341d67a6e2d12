"""A fitted scikit-learn random forest as plain JSON, exact to the bit.

Format ``vadapt-netap-ml-forest``, version 1 (read by the Rust evaluator,
``policy/src/forest.rs``)::

    {"format": "vadapt-netap-ml-forest", "version": 1,
     "features": ["vms", "threads", "msg_size", "interval_us"], "target": "gbps",
     "provenance": {...},
     "trees": [{"feature": [0, -1, ...], "left": [1, -1, ...], "right": [2, -1, ...],
                "threshold_or_value": ["4002", "40213a5c8e0d2f11", ...]}]}

Each tree is scikit-learn's ``tree_`` arrays, node 0 the root. An internal
node has ``feature >= 0``, its two children and in ``threshold_or_value``
its threshold; a leaf has ``feature == -1``, ``left == right == -1`` and in
``threshold_or_value`` its value. Floats are the hex of their IEEE-754
binary64 bits (``struct.pack(">d")``), because decimal JSON numbers need not
parse back to the same double; trailing zero digits are left out (pad on the
right to 16 digits to read one), which halves the thresholds, midpoints
between integer feature values.

scikit-learn's ``RandomForestRegressor.predict`` (with ``n_jobs`` 1, as
exported) casts the inputs to float32, walks each tree with
``x[feature] <= threshold`` (the float32 widened to double), adds the trees'
leaf values in tree order into a float64 zero, and divides by the number of
trees. The golden file holds inputs and that ``predict`` output, bits again.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from vadapt_lab.netap_ml import FEATURES, TARGET

FORMAT = "vadapt-netap-ml-forest"
VERSION = 1


def bits(x: float) -> str:
    """Hex of the IEEE-754 binary64 bits of ``x``."""
    return struct.pack(">d", float(x)).hex()


def short_bits(x: float) -> str:
    """``bits(x)`` without its trailing zero digits (at least one digit kept)."""
    return bits(x).rstrip("0") or "0"


def from_bits(h: str) -> float:
    """Inverse of ``bits`` and ``short_bits``."""
    return struct.unpack(">d", bytes.fromhex(h.ljust(16, "0")))[0]


def tree_dict(tree) -> dict[str, list]:
    """One fitted ``DecisionTreeRegressor`` as the format's tree object."""
    t = tree.tree_
    leaf = t.children_left == -1
    return {
        "feature": [-1 if lf else int(f) for f, lf in zip(t.feature, leaf, strict=True)],
        "left": [int(v) for v in t.children_left],
        "right": [int(v) for v in t.children_right],
        "threshold_or_value": [
            short_bits(v if lf else th)
            for th, v, lf in zip(t.threshold, t.value[:, 0, 0], leaf, strict=True)
        ],
    }


def forest_json(forest, provenance: dict) -> str:
    """The format's JSON text of a fitted ``RandomForestRegressor`` on ``FEATURES``."""
    names = list(getattr(forest, "feature_names_in_", FEATURES))
    if names != list(FEATURES):
        raise ValueError(f"forest was fitted on {names}, expected {list(FEATURES)}")
    if forest.n_outputs_ != 1:
        raise ValueError("only single-output forests are exported")
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "features": list(FEATURES),
        "target": TARGET,
        "provenance": provenance,
        "trees": [tree_dict(e) for e in forest.estimators_],
    }
    return json.dumps(doc, separators=(",", ":"))


def golden_rows(thresholds: list[float], rng: np.random.Generator) -> np.ndarray:
    """Inputs for the golden file.

    The paper's three evaluation cases (C1-C3) over every interval of the
    grid, random points inside and around the grid with fractional values, and
    for some thresholds the next double above it: float32 rounds that back
    onto the threshold, so those rows go left only if the evaluator casts to
    float32 as scikit-learn does.
    """
    rows = [
        (v, t, s, i)
        for (v, t, s) in ((3, 2, 128), (2, 5, 96), (4, 1, 192))
        for i in range(50, 4001, 50)
    ]
    rand = np.column_stack(
        [
            rng.uniform(0.5, 7, 200),
            rng.uniform(0.5, 7, 200),
            rng.uniform(32, 1500, 200),
            rng.uniform(0, 4500, 200),
        ]
    )
    rows += [tuple(r) for r in rand]
    base = (3.0, 2.0, 128.0, 1250.0)
    for k, (feature, t) in enumerate(thresholds):
        r = list(base)
        r[feature] = float(np.nextafter(t, np.inf)) if k % 2 == 0 else t
        rows.append(tuple(r))
    return np.array(rows, dtype=np.float64)


def golden_json(forest, x: np.ndarray) -> str:
    """Inputs ``x`` and ``forest.predict(x)``, all as bits."""
    import pandas as pd

    forest = forest.set_params(n_jobs=1)
    y = forest.predict(pd.DataFrame(x, columns=list(FEATURES)))
    return json.dumps(
        {
            "features": list(FEATURES),
            "rows": [[bits(v) for v in row] for row in x],
            "predictions": [bits(v) for v in y],
        },
        separators=(",", ":"),
    )


def forest_thresholds(forest, per_tree: int = 3) -> list[tuple[int, float]]:
    """(feature, threshold) of the first internal nodes of each tree, for ``golden_rows``."""
    out = []
    for e in forest.estimators_:
        t = e.tree_
        internal = np.flatnonzero(t.children_left != -1)[:per_tree]
        out += [(int(t.feature[n]), float(t.threshold[n])) for n in internal]
    return out


def write(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def read(path: Path) -> dict:
    """A forest JSON written by ``forest_json``, checked for format, version and features."""
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"{path}: not a {FORMAT} version {VERSION} file")
    if doc.get("features") != list(FEATURES):
        raise ValueError(f"{path}: features {doc.get('features')}, expected {list(FEATURES)}")
    return doc


def predict(doc: dict, x: np.ndarray) -> np.ndarray:
    """The forest's predictions for the rows of ``x`` (columns ``FEATURES``).

    The format's semantics, as the Rust evaluator implements them (inputs cast
    to float32, ``x <= threshold`` goes left, leaf values added in tree order,
    divided by the tree count), vectorised over rows.
    """
    x = np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)
    rows = np.arange(len(x))
    total = np.zeros(len(x))
    for t in doc["trees"]:
        feature = np.array(t["feature"])
        left, right = np.array(t["left"]), np.array(t["right"])
        tv = np.array([from_bits(h) for h in t["threshold_or_value"]])
        node = np.zeros(len(x), dtype=np.int64)
        inner = feature[node] != -1
        while inner.any():
            n = node[inner]
            go_left = x[rows[inner], feature[n]] <= tv[n]
            node[inner] = np.where(go_left, left[n], right[n])
            inner = feature[node] != -1
        total += tv[node]
    return total / len(doc["trees"])
