"""Intervals against independent references: exact binomial sums (scipy), the Wilson formula written
out, Student t by hand; never outside the metric's range; and their coverage by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ssa_repro.stats.intervals import log_scale, seed_interval, summarize, wilson

Z = stats.norm.ppf(0.975)


def wilson_by_hand(k: float, n: int) -> tuple[float, float]:
    p = k / n
    centre = p + Z * Z / (2 * n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return (centre - half) / (1 + Z * Z / n), (centre + half) / (1 + Z * Z / n)


@pytest.mark.parametrize(
    ("k", "n"), [(0, 10), (1, 10), (5, 10), (10, 10), (37, 640), (6399, 6400), (12.5, 40)]
)
def test_wilson_is_the_score_interval(k, n):
    lo, hi = wilson(k, n)
    want = wilson_by_hand(k, n)
    assert lo == pytest.approx(max(want[0], 0.0), abs=1e-12) and hi == pytest.approx(
        min(want[1], 1.0), abs=1e-12
    )
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    # and statsmodels' own (the library the formula is written out from), at two levels
    from statsmodels.stats.proportion import proportion_confint

    for level in (0.95, 0.8):
        ref = proportion_confint(k, n, alpha=1 - level, method="wilson")
        got = wilson(k, n, level)
        assert got[0] == pytest.approx(max(ref[0], 0.0), rel=1e-14, abs=1e-15)
        assert got[1] == pytest.approx(min(ref[1], 1.0), rel=1e-14, abs=1e-15)


def test_rates_never_leave_zero_one():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 50):
        for p in (0.0, 0.01, 0.5, 0.99, 1.0):
            s = summarize(rng.random(n) < p, "rate")
            assert 0.0 <= s["ci_low"] <= s["value"] <= s["ci_high"] <= 1.0
    s = summarize(np.zeros(64), "rate")  # the old normal interval gave [0, 0] here, and < 0 near it
    assert (s["ci_low"], s["ci_high"]) == (0.0, pytest.approx(wilson_by_hand(0, 64)[1]))


def test_fractions_get_a_conservative_interval():
    """A mean of per-prompt fractions (token error): variance <= p(1-p), so Wilson is wider than the
    normal interval with the sample variance, and it covers the true mean at least 95% of the time."""
    rng = np.random.default_rng(1)
    true, hits = 0.2, 0
    for _ in range(400):
        values = rng.binomial(20, true, size=30) / 20  # 30 prompts of 20 tokens
        s = summarize(values, "rate")
        normal_half = Z * values.std(ddof=1) / math.sqrt(len(values))
        assert s["ci_high"] - s["ci_low"] >= 2 * normal_half - 1e-12
        hits += s["ci_low"] <= true <= s["ci_high"]
    assert hits / 400 >= 0.95


def test_log_scale_interval_is_positive_and_covers():
    v = np.array([0.5, 2.0, 8.0, 1.0])
    lo, hi = log_scale(v)
    mean, se = v.mean(), v.std(ddof=1) / 2
    assert (lo, hi) == pytest.approx((mean * math.exp(-Z * se / mean), mean * math.exp(Z * se / mean)))
    assert 0 < lo < mean < hi
    rng = np.random.default_rng(2)
    true = math.exp(0.5)  # the mean of lognormal(0, 1)
    hits = sum(
        (lambda lo_hi: lo_hi[0] <= true <= lo_hi[1])(log_scale(rng.lognormal(0, 1, size=200)))
        for _ in range(400)
    )
    assert hits / 400 >= 0.9  # a skewed law: the delta method is approximate but close
    s = summarize(np.zeros(5), "positive")  # least squares on exact lines: a zero error, no interval width
    assert (s["value"], s["ci_low"], s["ci_high"]) == (0.0, 0.0, 0.0)


def test_seed_interval_is_student_t():
    v = np.array([0.1, 0.3, 0.2])
    s = seed_interval(v, "real")
    half = stats.t.ppf(0.975, 2) * v.std(ddof=1) / math.sqrt(3)
    assert (s["mean"], s["ci_low"], s["ci_high"], s["n_seeds"]) == pytest.approx(
        (0.2, 0.2 - half, 0.2 + half, 3)
    )
    rate = seed_interval(np.array([0.0, 0.0, 0.3]), "rate")
    assert rate["ci_low"] == 0.0 and rate["ci_high"] <= 1.0  # clipped to the range
    mse = seed_interval(np.array([1.0, 10.0, 100.0]), "positive")
    assert mse["mean"] == pytest.approx(10.0)  # the geometric mean
    assert mse["ci_low"] > 0
    one = seed_interval(np.array([0.4]), "rate")
    assert one["mean"] == 0.4 and math.isnan(one["ci_low"]) and one["n_seeds"] == 1


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="allowed: rate, positive, real"):
        summarize([1.0], "percent")
