"""The one decision rule (ssa_repro/stats/decision.py, issue 58), checked against independent
references: a direct binomial sum and simulation for the power with ties, simulation for the d_z a
discordance implies, scipy's binomial test for McNemar's direction."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from ssa_repro import stats
from ssa_repro.stats.decision import (
    BIMODAL,
    Outcome,
    decide,
    implied_dz,
    is_not_detected,
    planned_dz,
    power_with_ties,
    powered,
)

SCALE_SIGMA = [0.0, -0.00098, 0.0, 0.0, 0.0]  # icl_scale rung C, σ = 16 (review D2): 4 ties of 5


def contrast(d, low=None, high=None, p=None):
    d = np.asarray(d, dtype=float)
    t_low, t_high = stats.student_interval(d)
    return stats.Contrast(
        float(d.mean()),
        t_low if low is None else low,
        t_high if high is None else high,
        stats.sign_flip_p(d) if p is None else p,
        len(d),
        tuple(d),
        "identity",
        0.95,
    )


def test_bimodal_outcome_is_never_within_by_the_plain_rule():
    c = contrast(SCALE_SIGMA)
    plain = stats.verdict(c, margin=0.05, claimed_sign=-1, inside_margin=True)
    assert plain == stats.WITHIN  # the old rule's call on icl_scale's scale_sigma
    bimodal = Outcome(BIMODAL, threshold=0.1, max_jump=1.0)
    assert decide(c, outcome=bimodal, margin=0.05, claimed_sign=-1).verdict == stats.UNDERPOWERED
    assert decide(c, margin=0.05, claimed_sign=-1).verdict == stats.WITHIN  # continuous: unchanged


def test_contrast_table_applies_the_robust_rule_to_every_row_of_a_bimodal_metric():
    rng = np.random.default_rng(0)
    rows = []
    for task in ("every_num", "most"):
        for seed in range(20):
            base = rng.normal(0.01, 0.005)
            for arm, v in (("softmax", base), ("ssa", base + rng.normal(0, 0.003))):
                rows.append(
                    {"task": task, "scorer": arm, "seed": seed, "metric": "sequence_error", "value": v}
                )
    df = pd.DataFrame(rows)
    kw = dict(by=["task", "metric"], arm_col="scorer", base="softmax", n_boot=500)
    plain = stats.contrast_table(df, **kw)
    assert set(plain.verdict) == {stats.WITHIN}
    bimodal = {"sequence_error": Outcome(BIMODAL, threshold=0.1, max_jump=1.0)}
    robust = stats.contrast_table(df, outcome=bimodal, **kw)
    # 20 seeds, no jump seen: the robust interval still allows 1 − 0.025^(1/20) ≈ 0.17 of a jump of 1
    assert set(robust.verdict) == {stats.UNDERPOWERED}
    np.testing.assert_allclose(robust.p_holm, plain.p_holm)


def test_power_with_ties_is_the_binomial_mixture_and_matches_simulation():
    n, t, dz, alpha = 30, 0.8, 0.8, 0.05 / 3
    direct = sum(sps.binom.pmf(m, n, 1 - t) * stats.power_paired(dz, m, alpha) for m in range(1, n + 1))
    assert power_with_ties(dz, n, alpha, t) == pytest.approx(direct, rel=1e-9)
    assert power_with_ties(dz, n, alpha, 0.0) == pytest.approx(stats.power_paired(dz, n, alpha))
    # review §3: with 4 of 5 seeds tied, 30 seeds reach p < α/3 at most with P(≥ 7 non-zero) ≈ 0.39
    assert power_with_ties(100.0, n, alpha, t) == pytest.approx(sps.binom.sf(6, n, 1 - t), abs=0.01)
    assert power_with_ties(100.0, n, alpha, t) < 0.45 < stats.power_paired(dz, n, alpha)
    # simulation: t-test power on the non-tied seeds, ties drawn per seed, none where the exact sign-flip
    # test cannot reach α (2^(1−m) ≥ α)
    rng = np.random.default_rng(1)
    hits = 0
    sims = 2000
    for _ in range(sims):
        m = rng.binomial(n, 1 - t)
        if 2.0 ** (1 - m) >= alpha:
            continue
        d = rng.normal(dz, 1, m)
        hits += sps.ttest_1samp(d, 0).pvalue < alpha
    assert hits / sims == pytest.approx(direct, abs=0.04)


def test_implied_dz_bounds_the_simulated_dz_of_a_discordance():
    rng = np.random.default_rng(2)
    u = rng.random(400_000)
    d = np.where(u < 0.05, -1.0, np.where(u < 0.45, 1.0, 0.0))  # p10 0.05 (d −1), p01 0.40 (d +1)
    assert implied_dz(0.05, 0.4) == pytest.approx(d.mean() / d.std(), abs=0.01)
    assert implied_dz(0.05, 0.4) == pytest.approx(0.35 / math.sqrt(0.45 - 0.35**2))
    assert planned_dz(0.8, [0.05, 0.4]) == pytest.approx(implied_dz(0.05, 0.4))  # icl_cpu's plan
    assert implied_dz(0.05, 0.4) < 0.8
    assert planned_dz(0.8) == 0.8
    with pytest.raises(ValueError, match="discordance"):
        implied_dz(0.7, 0.6)


def test_mcnemar_decides_a_binary_endpoint_where_declared():
    # 8 seeds where only b generalises, none the other way: McNemar p = 2·0.5^8 (scipy's binomial test)
    a = np.array([0.5] * 8 + [0.01] * 4 + [0.6] * 8)
    b = np.array([0.01] * 8 + [0.01] * 4 + [0.6] * 8)
    m = stats.mcnemar_exact(stats.generalises(a, 0.1), stats.generalises(b, 0.1))
    assert m.p_value == pytest.approx(sps.binomtest(8, 8, 0.5).pvalue)
    c = contrast(b - a, p=0.5)  # a sign-flip p that would not call it
    mc = Outcome(BIMODAL, threshold=0.1, decide_by="mcnemar")
    dec = decide(c, outcome=mc, margin=0.05, claimed_sign=-1, binary=m)
    assert (dec.test, dec.p_value, dec.verdict) == ("mcnemar", m.p_value, stats.YES)
    assert decide(c, outcome=mc, margin=0.05, claimed_sign=1, binary=m).verdict == stats.CONTRADICTED
    sf = decide(c, outcome=Outcome(BIMODAL, threshold=0.1), margin=0.05, claimed_sign=-1)
    assert sf.test == "sign_flip" and sf.verdict != stats.YES
    with pytest.raises(ValueError, match="binary"):
        decide(c, outcome=mc, margin=0.05, claimed_sign=-1)


def test_underpowered_only_below_80_percent_power_for_the_declared_effect():
    rng = np.random.default_rng(3)
    d = rng.normal(0.0, 0.1, 30)
    c = contrast(d, p=0.5)
    assert decide(c, margin=0.01, claimed_sign=-1).verdict == stats.UNDERPOWERED  # no declared effect
    high = decide(c, margin=0.01, claimed_sign=-1, effect=0.8, k=3)
    assert high.power == pytest.approx(stats.power_paired(0.8, 30, 0.05 / 3)) and high.power > 0.8
    assert high.verdict == powered(0.8) == "not detected (powered for d_z 0.8)"
    assert is_not_detected(high.verdict)
    low = decide(contrast(d[:8], p=0.5), margin=0.01, claimed_sign=-1, effect=0.8, k=3)
    assert low.power < 0.8 and low.verdict == stats.UNDERPOWERED


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(kind="bimodal"), "threshold"),
        (dict(kind="odd"), "outcome kind"),
        (dict(decide_by="mcnemar"), "bimodal"),
        (dict(kind="bimodal", threshold=0.1, max_jump=0), "max_jump"),
    ],
)
def test_outcome_rejects_bad_declarations(kw, match):
    with pytest.raises(ValueError, match=match):
        Outcome(**kw)
