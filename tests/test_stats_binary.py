"""Paired yes/no outcomes per seed (ssa_repro/stats/binary.py) against independent references: the exact
McNemar test against statsmodels' ``mcnemar(exact=True)`` and scipy's ``binomtest``, its exact power
against a sum over the multinomial of the 2 × 2 table and against a Monte-Carlo simulation, the seeds
needed against a count-up of that power."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar

from ssa_repro.stats import discordance, mcnemar_exact, power_mcnemar, seeds_needed_binary


def outcomes(n11, n10, n01, n00, seed=0):
    """Per-seed booleans (a, b) with the given 2 × 2 table, in a shuffled seed order."""
    a = np.array([1] * n11 + [1] * n10 + [0] * n01 + [0] * n00, bool)
    b = np.array([1] * n11 + [0] * n10 + [1] * n01 + [0] * n00, bool)
    order = np.random.default_rng(seed).permutation(len(a))
    return a[order], b[order]


@pytest.mark.parametrize(
    "table", [(3, 5, 1, 1), (0, 0, 6, 2), (4, 2, 2, 2), (1, 9, 3, 0), (5, 0, 0, 5), (2, 1, 0, 7)]
)
def test_mcnemar_matches_statsmodels_and_scipy(table):
    n11, n10, n01, n00 = table
    a, b = outcomes(*table)
    res = mcnemar_exact(a, b)
    assert (res.n10, res.n01, res.n_discordant, res.n_seeds) == (n10, n01, n10 + n01, sum(table))
    want = mcnemar(np.array([[n11, n10], [n01, n00]]), exact=True).pvalue
    assert res.p_value == pytest.approx(want, rel=1e-12)
    if n10 + n01:
        assert res.p_value == pytest.approx(min(1.0, stats.binomtest(n01, n10 + n01, 0.5).pvalue), rel=1e-12)
        for alt in ("greater", "less"):  # greater: b succeeds more often, n01 large
            want = stats.binomtest(n01, n10 + n01, 0.5, alternative=alt).pvalue
            assert mcnemar_exact(a, b, alt).p_value == pytest.approx(want, rel=1e-12)
    else:
        assert res.p_value == 1.0


def test_mcnemar_smallest_p_and_bad_input():
    a, b = outcomes(2, 0, 6, 2)  # six discordant seeds, all one way: 2^(1-6)
    assert mcnemar_exact(a, b).p_value == pytest.approx(2**-5)
    with pytest.raises(ValueError, match="same length"):
        mcnemar_exact([True, False], [True])
    with pytest.raises(ValueError, match="booleans"):
        mcnemar_exact([0.2, 1.0], [1, 0])
    with pytest.raises(ValueError, match="alternative"):
        mcnemar_exact([True], [False], "both")


def power_by_enumeration(p10, p01, n, alpha):
    """Σ over every 2 × 2 table (n11, n10, n01, n00) of its multinomial probability × [statsmodels p < α]."""
    total = 0.0  # the concordant seeds (n11 + n00) enter only through their count
    for n10, n01 in itertools.product(range(n + 1), repeat=2):
        if n10 + n01 > n:
            continue
        rest = n - n10 - n01
        pr = stats.multinomial.pmf([n10, n01, rest], n, [p10, p01, 1 - p10 - p01])
        if pr and mcnemar(np.array([[rest, n10], [n01, 0]]), exact=True).pvalue < alpha:
            total += pr
    return total


@pytest.mark.parametrize(
    ("p10", "p01", "n", "alpha"), [(0.05, 0.4, 12, 0.05), (0.1, 0.3, 20, 0.025), (0.3, 0.0, 9, 0.05)]
)
def test_power_mcnemar_is_the_sum_over_tables(p10, p01, n, alpha):
    assert power_mcnemar(p10, p01, n, alpha) == pytest.approx(
        power_by_enumeration(p10, p01, n, alpha), abs=1e-12
    )


def test_power_mcnemar_against_simulation():
    """Draw the 2 × 2 table per replication, test it with statsmodels: the rejection rate agrees."""
    rng = np.random.default_rng(5)
    p10, p01, n, alpha, n_sim = 0.08, 0.35, 16, 0.05 / 3, 20_000
    counts = rng.multinomial(n, [p10, p01, 1 - p10 - p01], size=n_sim)  # [n_sim, (n10, n01, same)]
    p_of = {}
    for n10, n01 in {(int(x), int(y)) for x, y, _ in counts}:
        p_of[n10, n01] = mcnemar(np.array([[0, n10], [n01, n - n10 - n01]]), exact=True).pvalue
    rate = np.mean([p_of[int(x), int(y)] < alpha for x, y, _ in counts])
    want = power_mcnemar(p10, p01, n, alpha)
    assert rate == pytest.approx(want, abs=4 * math.sqrt(want * (1 - want) / n_sim))
    assert power_mcnemar(0.2, 0.2, 30) < 0.05  # no effect: at most α (the exact test is conservative)
    assert power_mcnemar(0.0, 0.0, 30) == 0.0


def test_seeds_needed_binary_is_the_first_count_with_the_power():
    for p10, p01, k in [(0.05, 0.4, 1), (0.05, 0.4, 3), (0.1, 0.5, 2), (0.0, 0.3, 1)]:
        n = seeds_needed_binary(p10, p01, k=k)
        assert power_by_enumeration(p10, p01, n, 0.05 / k) >= 0.8
        assert all(power_mcnemar(p10, p01, m, 0.05 / k) < 0.8 for m in range(1, n))
    assert seeds_needed_binary(0.05, 0.4, k=3) > seeds_needed_binary(0.05, 0.4)
    with pytest.raises(ValueError, match="zero effect"):
        seeds_needed_binary(0.2, 0.2)
    with pytest.raises(ValueError, match="p10 \\+ p01"):
        power_mcnemar(0.7, 0.6, 10)


def test_discordance_under_independence():
    p10, p01 = discordance(0.9, 0.3)
    assert (p10, p01) == pytest.approx((0.9 * 0.7, 0.1 * 0.3))
    # simulated independent arms give the same cell frequencies
    rng = np.random.default_rng(0)
    a, b = rng.random(200_000) < 0.9, rng.random(200_000) < 0.3
    assert np.mean(a & ~b) == pytest.approx(p10, abs=0.005) and np.mean(~a & b) == pytest.approx(
        p01, abs=0.005
    )
    with pytest.raises(ValueError, match="p_a"):
        discordance(1.2, 0.3)
