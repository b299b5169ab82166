"""Seeds: one value per run and cell in, one row per group and cell out, with a seed-level interval.

For each group (a setting of a sweep, or one run) and cell: the mean over its seeds, a 95% interval
over seeds (``stats.intervals.seed_interval``: Student t on the seed values; on the log scale for
``positive`` metrics such as MSE, whose group value is then the geometric mean; clipped to [0, 1] for
rates), the seeds' standard deviation and their number. With one seed the interval is NaN (a single
seed says nothing about seed-to-seed spread); the within-run interval over prompts is in the run's
own tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssa_repro.stats.intervals import seed_interval


def over_seeds(per_run: pd.DataFrame, by: list[str], kind: str) -> pd.DataFrame:
    """``per_run`` has columns ``by`` (group label and cell coordinates) and ``value`` (one row per run);
    returns ``by`` + mean, ci_low, ci_high, std, count."""
    rows = []
    for key, g in per_run.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        v = g["value"].to_numpy(dtype=float)
        s = seed_interval(v, kind)
        rows.append(
            {
                **dict(zip(by, key)),
                "mean": s["mean"],
                "ci_low": s["ci_low"],
                "ci_high": s["ci_high"],
                "std": float(np.std(v, ddof=1)) if len(v) > 1 else np.nan,
                "count": s["n_seeds"],
            }
        )
    return pd.DataFrame(rows)


def separated(a: dict, b: dict) -> bool:
    """Whether two seed intervals (``ci_low``/``ci_high``) do not overlap: only then is a difference
    between two settings called (a conservative rule; with one seed there is no interval)."""
    vals = [a.get("ci_low"), a.get("ci_high"), b.get("ci_low"), b.get("ci_high")]
    if any(v is None or v != v for v in vals):
        return False
    return a["ci_high"] < b["ci_low"] or b["ci_high"] < a["ci_low"]
