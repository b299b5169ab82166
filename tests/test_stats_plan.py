"""Power with ties and the seed planner (ssa_repro/stats/power.py, plan.py) against independent references:
the batched sign-flip p against :func:`sign_flip_p` (itself checked against enumeration in
test_stats.py), the power from observed differences against statsmodels' ``TTestPower`` on a normal
sample and against cases whose power is known exactly (0 or 1), the planner against the noncentral t and
the exact McNemar power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower

from ssa_repro.stats import (
    Endpoint,
    plan_table,
    power_for_endpoint,
    power_mcnemar,
    power_paired,
    power_sign_flip,
    seeds_for_endpoint,
    seeds_needed_binary,
    sign_flip_p,
    sign_flip_p_many,
)


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_p_many_is_sign_flip_p(alternative):
    rng = np.random.default_rng(1)
    for n in (1, 4, 9, 12):
        d = rng.normal(0.3, 1, (60, n))
        d[:10, : n // 2] = 0.0  # ties with zero
        d[10:15] = np.round(d[10:15], 1)  # ties between |d_s|
        want = [sign_flip_p(x, alternative) for x in d]
        assert sign_flip_p_many(d, alternative) == pytest.approx(want, abs=1e-15)


def test_sign_flip_p_many_sampled_above_the_exact_size():
    d = np.random.default_rng(2).normal(0.4, 1, (30, 16))
    want = np.array([sign_flip_p(x) for x in d])  # exact: 16 <= MAX_EXACT
    got = sign_flip_p_many(d, n_resamples=20_000)
    assert np.abs(got - want).max() < 4 * math.sqrt(0.25 / 20_000) + 1e-4


def test_ties_can_make_the_power_zero():
    """The issue's case: 3 zero differences among 8 seeds. The five non-zero ones reach p = 2^(1-5) =
    0.0625 at best, so the exact test's power at α = 0.05 is 0, where the noncentral t said 0.65."""
    d = np.array([0.0, 0.0, 0.0, -0.02, -0.011, -0.03, -0.015, -0.008])
    assert sign_flip_p(d) == pytest.approx(0.0625)  # all five non-zero of one sign: the smallest p
    assert power_sign_flip(d) == 0.0
    assert power_paired(d.mean() / d.std(ddof=1), 8) > 0.6  # what the report printed
    # two ties: six non-zero differences, all of one sign, so every resample has p = 2^(1-6) < 0.05
    d2 = np.array([0.0, 0.0, -0.02, -0.011, -0.03, -0.015, -0.008, -0.01])
    assert power_sign_flip(d2) == 1.0
    assert power_sign_flip(d2, alpha=0.05 / 2) == 0.0  # α/k with k = 2: 2^-5 = 0.031 ≥ 0.025
    assert power_sign_flip(d2, alternative="less", alpha=0.025) == 1.0  # one-sided: 2^-6 = 0.016
    # resampling the ties too: a resample has a varying number of zeros; its power lies in between
    assert 0 < power_sign_flip(d, ties="resample") < 1


@pytest.mark.parametrize(("dz", "n"), [(1.0, 10), (0.8, 12), (0.7, 16)])
def test_power_without_ties_is_the_t_test_power(dz, n):
    """Differences that follow a normal distribution (400 normal quantiles, mean d_z, SD 1): the
    bootstrap power of the sign-flip test agrees with the paired t test's (statsmodels) within 0.03
    (the two tests' power differ by ~0.01 at these sizes) plus Monte-Carlo error."""
    q = stats.norm.ppf((np.arange(400) + 0.5) / 400)
    d = (q - q.mean()) / q.std(ddof=1) + dz
    got = power_sign_flip(d, n_seeds=n, ties="resample", n_sim=4000)
    want = TTestPower().power(effect_size=dz, nobs=n, alpha=0.05)
    assert got == pytest.approx(want, abs=0.02 + 4 * math.sqrt(want * (1 - want) / 4000))


def test_power_sign_flip_refuses_bad_input():
    with pytest.raises(ValueError, match="ties"):
        power_sign_flip([1.0, 2.0], ties="drop")
    with pytest.raises(ValueError, match="non-finite"):
        power_sign_flip([1.0, math.nan])
    with pytest.raises(ValueError, match="n_seeds"):
        power_sign_flip([1.0, 2.0], n_seeds=0)


def noncentral_power(dz, n, alpha):
    """The paired t test's power from scipy's noncentral t, 0 where the sign-flip test cannot reach α."""
    if 2.0 ** (1 - n) >= alpha:
        return 0.0
    t = stats.t.ppf(1 - alpha / 2, n - 1)
    nct = stats.nct(n - 1, dz * math.sqrt(n))
    return nct.sf(t) + nct.cdf(-t)


@pytest.mark.parametrize(("dz", "k"), [(1.0, 1), (1.0, 3), (0.6, 2), (2.5, 4)])
def test_seeds_for_a_continuous_endpoint(dz, k):
    n = seeds_for_endpoint(dz, k=k)
    assert noncentral_power(dz, n, 0.05 / k) >= 0.8
    assert noncentral_power(dz, n - 1, 0.05 / k) < 0.8
    assert power_for_endpoint(dz, n, k=k) == pytest.approx(noncentral_power(dz, n, 0.05 / k), abs=1e-6)


def test_seeds_for_a_binary_endpoint():
    n = seeds_for_endpoint((0.05, 0.45), kind="binary", k=3)
    assert n == seeds_needed_binary(0.05, 0.45, k=3)
    assert power_mcnemar(0.05, 0.45, n, 0.05 / 3) >= 0.8 > power_mcnemar(0.05, 0.45, n - 1, 0.05 / 3)
    with pytest.raises(ValueError, match="binary endpoint needs"):
        seeds_for_endpoint(0.5, kind="binary")
    with pytest.raises(ValueError, match="kind"):
        seeds_for_endpoint(0.5, kind="ordinal")


def test_plan_table():
    endpoints = [
        Endpoint("every_num sequence error", "continuous", 1.0, margin=0.05, metric="sequence_error"),
        {"name": "every_num generalises", "kind": "binary", "effect": [0.05, 0.45], "threshold": 0.1},
    ]
    t = plan_table(endpoints, n_seeds=10)
    assert list(t.endpoint) == ["every_num sequence error", "every_num generalises"]
    assert list(t.level) == [0.025, 0.025]  # k = 2 endpoints: Holm's first step
    assert list(t["seeds for 80% power"]) == [
        seeds_for_endpoint(1.0, k=2),
        seeds_for_endpoint((0.05, 0.45), kind="binary", k=2),
    ]
    assert t["power at 10 seeds"].iloc[1] == pytest.approx(power_mcnemar(0.05, 0.45, 10, 0.025))
    assert t.effect.iloc[1] == "p10 = 0.05, p01 = 0.45"
    with pytest.raises(ValueError, match="unknown key"):
        plan_table([{"name": "x", "kind": "continuous", "effect": 1.0, "alpha": 0.1}])
    with pytest.raises(ValueError, match="declared threshold"):
        Endpoint("g", "binary", (0.1, 0.4))
    with pytest.raises(ValueError, match="non-zero d_z"):
        Endpoint("c", "continuous", 0.0)
