"""Intervals that respect the metric's range: never below 0 for an error, never above 1 for a rate.

Within one run (over prompts), by the metric's kind (``tasks.base.Metric``):

- ``rate`` (values in [0, 1]: sequence error, token error, accuracies, attention shares): the Wilson
  score interval for the mean p̂ of n prompts, (p̂ + z²/2n ± z·√(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n),
  written out in statsmodels' order of operations (its ``proportion_confint(method="wilson")`` costs
  every training process ~1 s of imports for one formula; tests/test_intervals.py checks the two agree
  to 1e-14, z from ``statistics.NormalDist`` being within an ulp of scipy's). For 0/1 values it is the
  binomial Wilson interval; for values in [0, 1] that are not 0/1 (a prompt's share of wrong tokens),
  it is conservative: a variable in [0, 1] with mean p has
  variance at most p(1 − p), the binomial one, so the interval is at least as wide as a normal interval
  with the true variance would be, and it stays inside [0, 1].
- ``positive`` (squared errors: MSE): a normal interval for log(mean) by the delta method,
  mean · exp(±z · se / mean) with se = s / √n, so the interval is positive, asymmetric like the
  errors themselves, and contains the mean.
- ``real`` (anything else): the normal (Wald) interval mean ± z · s / √n.

Across seeds (one value per seed: a run's cell mean): :func:`seed_interval`: Student-t on the seed
means (mean ± t_{k−1} · s / √k), computed on the log scale for ``positive`` metrics (a geometric mean
with its interval) and clipped to [0, 1] for rates; with one seed there is no interval (NaN).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

KINDS = ("rate", "positive", "real")


def wilson(successes: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion successes / n (successes may be fractional)."""
    if n <= 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    z2, denom = z * z, 1.0 + z * z / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4.0 * n**2)) / denom
    lo, hi = centre - half, centre + half
    # the closed form is exactly 0 (1) at no (only) successes; keep float rounding from saying otherwise
    lo = 0.0 if successes <= 0 else max(float(lo), 0.0)
    hi = 1.0 if successes >= n else min(float(hi), 1.0)
    return lo, hi


def log_scale(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """mean · exp(±z · se / mean): a delta-method interval for log(mean) of positive values."""
    v = np.asarray(values, dtype=float)
    n, mean = len(v), float(v.mean()) if len(v) else math.nan
    if n < 2 or not mean > 0:
        return (mean, mean) if n >= 1 and mean == 0 else (math.nan, math.nan)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    half = z * float(v.std(ddof=1)) / math.sqrt(n) / mean
    return mean * math.exp(-half), mean * math.exp(half)


def summarize(values, kind: str = "real", level: float = 0.95) -> dict:
    """Mean of per-prompt values with its interval: ``{"value", "n_samples", "ci_low", "ci_high"}``.
    NaN values (prompts where the metric is undefined) are left out first."""
    if kind not in KINDS:
        raise ValueError(f"unknown metric kind {kind!r}; allowed: {', '.join(KINDS)}")
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    n = len(v)
    mean = float(v.mean()) if n else math.nan
    if kind == "rate":
        lo, hi = wilson(mean * n, n, level)
    elif kind == "positive":
        lo, hi = log_scale(v, level)
    elif n > 1:
        half = NormalDist().inv_cdf(0.5 + level / 2) * float(v.std(ddof=1)) / math.sqrt(n)
        lo, hi = mean - half, mean + half
    else:
        lo = hi = math.nan
    return {"value": mean, "n_samples": n, "ci_low": lo, "ci_high": hi}


def seed_interval(values, kind: str = "real", level: float = 0.95) -> dict:
    """Across seeds: ``{"mean", "ci_low", "ci_high", "n_seeds"}`` from one value per seed (Student t;
    geometric mean and a log-scale interval for ``positive``; clipped to [0, 1] for ``rate``)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    k = len(v)
    if k <= 1:  # one seed: its value, and no interval (nothing is known about seed-to-seed spread)
        mean = float(v[0]) if k else math.nan
        return {"mean": mean, "ci_low": math.nan, "ci_high": math.nan, "n_seeds": k}
    log = kind == "positive" and bool((v > 0).all())
    w = np.log(v) if log else v
    mean = float(w.mean())
    if k > 1:
        from scipy import stats  # here: the seed intervals are the reports', not a training process's

        half = float(stats.t.ppf(0.5 + level / 2, k - 1)) * float(w.std(ddof=1)) / math.sqrt(k)
        lo, hi = mean - half, mean + half
    else:
        lo = hi = math.nan
    if log:
        mean, lo, hi = math.exp(mean), math.exp(lo), math.exp(hi)
    if kind == "rate":
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return {"mean": mean, "ci_low": lo, "ci_high": hi, "n_seeds": k}
