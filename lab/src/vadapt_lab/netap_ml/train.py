"""The paper's model comparison (§3.2) and the forest that is shipped.

1. The data are split once into a training set (80 %) and a held-out
   validation set (20 %), seeded.
2. Each of the paper's four regressors -- linear regression (LR), AdaBoost
   (ABR), kernel ridge (KRR, RBF kernel on standardised inputs) and random
   forest (RFR) -- is tuned with ``RandomizedSearchCV`` (5-fold CV on the
   training set, ``--iter`` candidates) and scored by its RMSE on the held-out
   set, printed next to the paper's.
3. The shipped forest: among a fixed list of size limits (trees, depth, leaf
   size) the one with the best 5-fold CV RMSE on the training set whose JSON
   is at most ``--max-bytes``; its held-out RMSE is printed beside that of an
   unlimited forest (scikit-learn's defaults: 100 trees, no depth limit), and
   both go into the model's provenance. The held-out set chooses nothing.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import sklearn
from scipy.stats import loguniform, randint, uniform
from sklearn.ensemble import AdaBoostRegressor, RandomForestRegressor
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import RandomizedSearchCV, cross_val_score, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeRegressor

from vadapt_lab.netap_ml import FEATURES, TARGET
from vadapt_lab.netap_ml import export as ex

PAPER_RMSE = {"LR": 1.49, "ABR": 1.08, "KRR": 1.21, "RFR": 0.21}
"""Held-out RMSE the paper reports (§3.2), Gb/s."""

SIZE_LIMITS = list(itertools.product((10, 15, 20, 25, 50), (None, 16, 12), (1, 2)))
"""(n_estimators, max_depth, min_samples_leaf) candidates for the shipped forest."""


class TrainError(ValueError):
    """The training data cannot be used."""


def load(data: Path) -> pd.DataFrame:
    """The grid CSV, checked to have the features and the target."""
    df = pd.read_csv(data)
    missing = [c for c in (*FEATURES, TARGET) if c not in df.columns]
    if missing:
        raise TrainError(f"{data}: missing columns {missing}")
    if len(df) < 50:
        raise TrainError(f"{data}: {len(df)} rows, too few to train on")
    return df


def searches(seed: int, n_iter: int) -> dict[str, RandomizedSearchCV]:
    """The four models with their randomized hyper-parameter searches."""

    def rs(est, dist, n=n_iter):
        return RandomizedSearchCV(
            est,
            dist,
            n_iter=n,
            cv=5,
            scoring="neg_root_mean_squared_error",
            random_state=seed,
            n_jobs=1,
        )

    return {
        # Only two settings exist; the search tries both.
        "LR": rs(LinearRegression(), {"fit_intercept": [True, False]}, n=2),
        "ABR": rs(
            AdaBoostRegressor(DecisionTreeRegressor(), random_state=seed),
            {
                "n_estimators": randint(25, 200),
                "learning_rate": loguniform(0.01, 1.0),
                "loss": ["linear", "square", "exponential"],
                "estimator__max_depth": randint(2, 8),
            },
        ),
        "KRR": rs(
            make_pipeline(StandardScaler(), KernelRidge(kernel="rbf")),
            {
                "kernelridge__alpha": loguniform(1e-4, 1.0),
                "kernelridge__gamma": loguniform(1e-3, 10.0),
            },
        ),
        "RFR": rs(
            RandomForestRegressor(random_state=seed, n_jobs=1),
            {
                "n_estimators": randint(25, 150),
                "max_depth": [None, 8, 12, 16, 20],
                "min_samples_leaf": randint(1, 6),
                "max_features": uniform(0.5, 0.5),
            },
        ),
    }


def rmse(model, x: pd.DataFrame, y: pd.Series) -> float:
    """Root-mean-square error of ``model`` on (x, y)."""
    return float(np.sqrt(np.mean((model.predict(x) - y.to_numpy()) ** 2)))


def bounded_forest(x, y, seed: int, max_bytes: int):
    """Best-CV forest among ``SIZE_LIMITS`` whose JSON fits ``max_bytes``.

    Returns (forest, (trees, depth, leaf), cv_rmse, json_bytes).
    """
    best = None
    for trees, depth, leaf in SIZE_LIMITS:
        f = RandomForestRegressor(
            n_estimators=trees,
            max_depth=depth,
            min_samples_leaf=leaf,
            random_state=seed,
            n_jobs=1,
        )
        size = len(ex.forest_json(f.fit(x, y), {}))
        if size > max_bytes:
            continue
        cv = -cross_val_score(f, x, y, cv=5, scoring="neg_root_mean_squared_error").mean()
        if best is None or cv < best[2]:
            best = (f, (trees, depth, leaf), cv, size)
    if best is None:
        raise TrainError(f"no forest in SIZE_LIMITS fits {max_bytes} bytes")
    return best


def train_command(
    data: Path, out: Path, golden: Path | None, max_bytes: int, n_iter: int, seed: int
) -> dict:
    """``python -m vadapt_lab.netap_ml train``: prints the tables, writes the model."""
    df = load(data)
    x, y = df[list(FEATURES)].astype(np.float64), df[TARGET].astype(np.float64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed)
    print(f"{data}: {len(df)} rows, {len(x_tr)} for training, {len(x_te)} held out")
    print(f"{'model':<6}{'held-out RMSE Gb/s':>20}{'paper':>8}  best parameters")
    table = {}
    for name, search in searches(seed, n_iter).items():
        search.fit(x_tr, y_tr)
        table[name] = rmse(search.best_estimator_, x_te, y_te)
        print(f"{name:<6}{table[name]:>20.3f}{PAPER_RMSE[name]:>8.2f}  {search.best_params_}")

    unlimited = RandomForestRegressor(random_state=seed, n_jobs=1).fit(x_tr, y_tr)
    unlimited_rmse = rmse(unlimited, x_te, y_te)
    unlimited_bytes = len(ex.forest_json(unlimited, {}))
    forest, limits, cv, size = bounded_forest(x_tr, y_tr, seed, max_bytes)
    shipped_rmse = rmse(forest, x_te, y_te)
    print(
        f"unlimited forest (100 trees, no limits): held-out RMSE {unlimited_rmse:.3f} Gb/s, "
        f"{unlimited_bytes} bytes of JSON"
    )
    print(
        f"shipped forest (trees, max_depth, min_samples_leaf) = {limits}: held-out RMSE "
        f"{shipped_rmse:.3f} Gb/s ({100 * (shipped_rmse / unlimited_rmse - 1):+.1f} %), "
        f"CV RMSE {cv:.3f}, {size} bytes"
    )
    provenance = {
        "data": str(data),
        "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
        "data_git_rev": str(df["git_rev"].iloc[0]) if "git_rev" in df else "",
        "scikit_learn": sklearn.__version__,
        "seed": seed,
        "n_estimators": limits[0],
        "max_depth": limits[1],
        "min_samples_leaf": limits[2],
        "train_rows": len(x_tr),
        "heldout_rows": len(x_te),
        "heldout_rmse_gbps": shipped_rmse,
        "unlimited_heldout_rmse_gbps": unlimited_rmse,
        "model_rmse_gbps": table,
        "command": f"python -m vadapt_lab.netap_ml train {data} --out {out}"
        + (f" --golden {golden}" if golden else ""),
    }
    ex.write(out, ex.forest_json(forest, provenance))
    print(f"wrote {out}")
    if golden is not None:
        rows = ex.golden_rows(ex.forest_thresholds(forest), np.random.default_rng(seed))
        ex.write(golden, ex.golden_json(forest, rows))
        print(f"wrote {golden} ({len(rows)} rows)")
    return provenance
