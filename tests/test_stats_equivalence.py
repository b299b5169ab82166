"""Equivalence calls (ssa_repro/stats/paired.py's ``inside_margin``, ssa_repro/stats/equivalence.py):
the "non-zero, within ±m" verdict against the rule's cases, the jump bound against statsmodels'
Clopper–Pearson interval, the robust interval against a hand computation, and the rules' error rates
on simulated seeds against closed forms: the reviewer's bimodal figures, (1 − q)^n for the committed
rule, ≤ 5% at the margin for the robust rule."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from ssa_repro.stats import (
    CONTRADICTED,
    NONZERO_WITHIN,
    UNDERPOWERED,
    WITHIN,
    YES,
    Contrast,
    contrast_table,
    jump_bound,
    robust_interval,
    robust_verdict,
    seeds_for_equivalence,
    simulate_equivalence,
    simulate_rule,
    verdict,
)


def contrast(low, high, p=0.01, spread=1e-4):
    mid = (low + high) / 2
    return Contrast(mid, low, high, p, 10, tuple(mid + spread * np.linspace(-1, 1, 10)), "identity")


@pytest.mark.parametrize(
    ("low", "high", "p", "sign", "default", "asked"),
    [
        (0.01, 0.04, 0.01, 1, YES, NONZERO_WITHIN),  # detected, and inside ±m
        (-0.016, -0.006, 0.01, 1, CONTRADICTED, NONZERO_WITHIN),  # the issue's −0.011 against m = 0.05
        (-0.016, -0.006, 0.01, -1, YES, NONZERO_WITHIN),
        (0.01, 0.06, 0.01, 1, YES, YES),  # reaches past the margin: a real, possibly large effect
        (-0.06, -0.01, 0.01, 1, CONTRADICTED, CONTRADICTED),
        (0.01, 0.04, 0.2, 1, WITHIN, WITHIN),  # not significant: the equivalence call as before
        (-0.04, 0.06, 0.5, 1, UNDERPOWERED, UNDERPOWERED),
    ],
)
def test_inside_margin_separates_small_real_effects(low, high, p, sign, default, asked):
    c = contrast(low, high, p)
    assert verdict(c, margin=0.05, claimed_sign=sign) == default
    assert verdict(c, margin=0.05, claimed_sign=sign, inside_margin=True) == asked


def test_inside_margin_needs_the_t_interval_inside_too():
    c = contrast(0.01, 0.04, 0.01, spread=0.1)  # d_s spread wide: t interval past ±0.05
    assert verdict(c, margin=0.05, claimed_sign=1, inside_margin=True) == YES


def test_contrast_table_default_is_unchanged():
    rng = np.random.default_rng(3)
    rows = []
    for s in range(10):
        base = rng.normal(0.5, 0.1)
        rows += [
            {"seed": s, "scorer": "softmax", "task": "t", "value": base},
            {"seed": s, "scorer": "ssa", "task": "t", "value": base - 0.011 + rng.normal(0, 0.003)},
            {"seed": s, "scorer": "ssa2", "task": "t", "value": base - 0.3 + rng.normal(0, 0.02)},
        ]
    df = pd.DataFrame(rows)
    kw = dict(by="task", margin=0.05, claimed_sign=1, n_boot=500)
    old = contrast_table(df, **kw)
    new = contrast_table(df, **kw, inside_margin=True)
    assert list(old.verdict) == [CONTRADICTED, CONTRADICTED]
    assert list(new.verdict) == [NONZERO_WITHIN, CONTRADICTED]
    pd.testing.assert_frame_equal(old.drop(columns="verdict"), new.drop(columns="verdict"))


@pytest.mark.parametrize(("k", "n"), [(0, 10), (1, 10), (3, 36), (0, 5), (5, 5)])
def test_jump_bound_is_clopper_pearson(k, n):
    d = np.r_[np.full(k, 0.5), np.zeros(n - k)]
    want = proportion_confint(k, n, alpha=0.05, method="beta")[1]  # two-sided 95%: one-sided 97.5%
    assert jump_bound(d, threshold=0.05) == pytest.approx(want if k < n else 1.0, rel=1e-9)
    if k == 0:
        assert jump_bound(d, threshold=0.05) == pytest.approx(1 - 0.025 ** (1 / n))


def test_robust_interval_by_hand():
    d = np.array([0.01, -0.02, 0.0, 0.03, 0.5, 0.015, -0.01, 0.02, 0.0, 0.005])
    c = np.where(np.abs(d) > 0.05, 0.0, d)  # the jump (0.5) leaves the continuous part
    half = stats.t.ppf(0.975, 9) * c.std(ddof=1) / math.sqrt(10)
    widen = 0.6 * stats.beta.ppf(0.975, 2, 9)  # M = max(0.6, 0.5), one jump of ten
    low, high = robust_interval(d, threshold=0.05, max_jump=0.6)
    assert (low, high) == pytest.approx((c.mean() - half - widen, c.mean() + half + widen))
    with pytest.raises(ValueError, match="max_jump"):
        robust_interval(d, threshold=0.05, max_jump=0.0)


def test_seeds_for_equivalence_is_the_closed_form():
    for m, big in [(0.05, 0.5), (0.05, 1.0), (0.02, 0.3)]:
        want = math.floor(math.log(0.025) / math.log(1 - m / big)) + 1
        assert seeds_for_equivalence(m, big) == want
    assert seeds_for_equivalence(0.05, 0.5) == 36


def test_robust_verdict_downgrades_only_equivalence_calls():
    c = contrast(0.01, 0.04, 0.2)  # "within" by the committed rule, 10 seeds
    assert robust_verdict(c, margin=0.05, claimed_sign=1, threshold=0.05, max_jump=0.5) == UNDERPOWERED
    assert (
        robust_verdict(c, margin=0.05, claimed_sign=1, threshold=0.05, max_jump=0.5, inside_margin=True)
        == UNDERPOWERED
    )
    c = contrast(0.01, 0.04, 0.01)
    assert (
        robust_verdict(c, margin=0.05, claimed_sign=1, threshold=0.05, max_jump=0.5, inside_margin=True)
        == YES
    )
    d = tuple(np.full(60, 0.001))  # 60 seeds, none jumps: M·u = 0.5 (1 − 0.025^(1/60)) = 0.030
    c60 = Contrast(0.001, 0.0005, 0.0015, 0.5, 60, d)
    assert robust_verdict(c60, margin=0.05, claimed_sign=1, threshold=0.05, max_jump=0.5) == WITHIN


def test_simulate_rule_counts_within_again():
    """simulate_rule built its contrasts without the d_s, so the t-interval guard never passed and
    "within" was 0; with them it is at most the rate of the t interval alone inside ±m (scipy)."""
    r = simulate_rule(10, 0.0, 0.7, n_sim=1000, margin=0.5, n_boot=300)
    rng = np.random.default_rng(1)
    d = rng.normal(0, math.sqrt(2 * 0.3), (20_000, 10))
    half = stats.t.ppf(0.975, 9) * d.std(1, ddof=1) / math.sqrt(10)
    t_inside = np.mean((d.mean(1) - half >= -0.5) & (d.mean(1) + half <= 0.5))
    assert 0.05 < r["within"] <= t_inside + 4 * math.sqrt(t_inside / 1000)


def test_reviewer_bimodal_figures_and_the_robust_rule():
    """10% of seeds off by 0.5, the rest N(0, 0.01²): the true effect 0.1 · 0.5 = 0.05 is at the
    margin. The committed rule calls "within" whenever no seed jumps and the sign-flip test does not
    fire: (0.9)^10 · (1 − 51/1024) = 0.332 at 10 seeds (the reviewer's 33%), (0.9)^5 = 0.590 at 5
    (60%). The robust rule never calls it below 36 seeds, and at 40 at most (0.9)^40 = 1.5% (≤ 5%)."""
    n_sim = 1500
    for n, want in [(10, 0.9**10 * (1 - 51 / 1024)), (5, 0.9**5)]:
        r = simulate_equivalence(n, 0.05, 0.05, sd=0.01, n_sim=n_sim, n_boot=400, seed=n)
        assert r["within"] == pytest.approx(want, abs=4 * math.sqrt(want * (1 - want) / n_sim))
        assert r["within_robust"] == 0.0
    for effect, jump in [(0.05, 0.5), (-0.05, -0.5)]:  # both margins
        r = simulate_equivalence(40, effect, 0.05, sd=0.01, jump=jump, n_sim=1000, n_boot=300, seed=40)
        assert r["within_robust"] <= 0.05 and r["within"] > 0.05  # the committed rule is fooled
    # under the normal model at the margin both rules stay below 5% ...
    r = simulate_equivalence(10, 0.05, 0.05, model="normal", sd=0.03, n_sim=1000, n_boot=300, seed=1)
    assert r["within"] <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000) and r["within_robust"] == 0.0
    # ... and the robust rule does call equivalence when there is none to find and seeds enough
    r = simulate_equivalence(40, 0.0, 0.05, model="normal", sd=0.01, n_sim=300, n_boot=300, seed=2)
    assert r["within_robust"] > 0.8


def _loop_verdicts(d, low, high, p, *, margin, alpha, threshold, max_jump):
    """The per-contrast tallies simulate_equivalence kept before its column-wise version: each row's
    Contrast through verdict (both variants) and robust_verdict."""
    counts = dict.fromkeys((YES, CONTRADICTED, WITHIN, UNDERPOWERED), 0)
    nonzero_within = within_robust = 0
    for i in range(len(d)):
        c = Contrast(float(d[i].mean()), low[i], high[i], float(p[i]), d.shape[1], tuple(d[i]))
        counts[verdict(c, margin=margin, claimed_sign=1, alpha=alpha)] += 1
        nonzero_within += (
            verdict(c, margin=margin, claimed_sign=1, alpha=alpha, inside_margin=True) == NONZERO_WITHIN
        )
        within_robust += (
            robust_verdict(
                c, margin=margin, claimed_sign=1, threshold=threshold, max_jump=max_jump, alpha=alpha
            )
            == WITHIN
        )
    return counts, nonzero_within, within_robust


def test_the_simulated_verdicts_are_the_per_contrast_rule():
    """simulate_equivalence tallies its verdicts column-wise (equivalence._simulated_verdicts): the
    same counts, exactly, as verdict, its inside_margin variant and robust_verdict called on each
    simulated contrast (the committed reports' simulated table depends on it), over cases that between
    them reach every tally."""
    from ssa_repro.stats import equivalence
    from ssa_repro.stats.power import seed_bootstrap_many, sign_flip_p_many

    cases = [  # n, effect, sd, jump, margin
        (6, 0.05, 0.025, 0.5, 0.05),  # the reports' table: plain "within" often, robust never
        (40, 0.0, 0.01, 0.5, 0.05),  # contradicted, within, underpowered
        (40, 0.03, 0.01, 0.1, 0.05),  # yes, and "non-zero, within ±m"
        (40, 0.0, 0.005, 0.02, 0.05),  # the robust rule calls "within"
        (3, 0.1, 0.2, 0.5, 0.5),  # few seeds, robust "within" with a wide margin
    ]
    seen = dict.fromkeys((YES, CONTRADICTED, WITHIN, UNDERPOWERED, NONZERO_WITHIN, "within_robust"), 0)
    for n, effect, sd, jump, margin in cases:
        rng = np.random.default_rng(n)
        x = rng.normal(effect - 0.1 * jump, sd, (400, n)) + jump * (rng.random((400, n)) < 0.1)
        low, high = seed_bootstrap_many(x, n_boot=300, rng=rng)
        p = sign_flip_p_many(x, rng=rng)
        kw = dict(margin=margin, alpha=0.05, threshold=abs(jump) / 2, max_jump=abs(jump))
        fast = equivalence._simulated_verdicts(x, low, high, p, **kw)
        assert fast == _loop_verdicts(x, low, high, p, **kw), (n, effect, sd, jump, margin)
        counts, nonzero_within, within_robust = fast
        assert sum(counts.values()) == 400
        for k, v in [*counts.items(), (NONZERO_WITHIN, nonzero_within), ("within_robust", within_robust)]:
            seen[k] += v
    assert all(seen.values()), seen
