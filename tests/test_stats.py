"""The paired statistics (ssa_repro/stats/) against independent computations: sign flips
enumerated with itertools and scipy's permutation_test, a simulated null, the exact multinomial
bootstrap distribution, bootstrap coverage by simulation, Fisher's test summed from the hypergeometric
pmf, Holm against statsmodels, power against the noncentral t, and the tables against the functions
they combine."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from ssa_repro.stats import (
    CONTRADICTED,
    MARGINS,
    UNDERPOWERED,
    WITHIN,
    YES,
    Contrast,
    contrast_table,
    fraction_test,
    generalises,
    holm,
    overlap_rule,
    paired_bootstrap,
    paired_contrast,
    per_seed_differences,
    per_seed_frame,
    power_paired,
    seed_bootstrap_many,
    seeds_needed,
    sign_flip_p,
    simulate_rule,
    student_interval,
    verdict,
)
from ssa_repro.stats.intervals import seed_interval


def enumerate_p(d, alternative):
    """The sign-flip p-value by listing every sign pattern."""
    d = np.asarray(d, float)
    obs = d.mean()
    means = np.array([np.dot(s, d) / len(d) for s in itertools.product((-1, 1), repeat=len(d))])
    eps = 1e-12
    if alternative == "greater":
        return np.mean(means >= obs - eps)
    if alternative == "less":
        return np.mean(means <= obs + eps)
    return np.mean(np.abs(means) >= abs(obs) - eps)


# ---- sign flips


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_matches_enumeration(alternative):
    rng = np.random.default_rng(0)
    cases = [rng.normal(0.5, 1, n) for n in range(1, 10)]
    cases += [np.array([1.0, 1.0, -1.0, 2.0]), np.array([0.0, 0.0, 0.3]), np.zeros(4), np.array([3, 1, 2.0])]
    cases += [rng.integers(-2, 3, 11).astype(float)]  # many ties
    for d in cases:
        assert sign_flip_p(d, alternative) == pytest.approx(enumerate_p(d, alternative), abs=1e-12), d


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_matches_scipy(alternative):
    rng = np.random.default_rng(1)
    for n in (3, 5, 8, 12):
        d = rng.normal(0.4, 1, n)
        want = stats.permutation_test(
            (d,), np.mean, permutation_type="samples", alternative=alternative, n_resamples=np.inf
        ).pvalue
        assert sign_flip_p(d, alternative) == pytest.approx(want, rel=1e-9)


def test_smallest_p_is_two_to_the_one_minus_n():
    for n in (3, 5, 6, 10):
        assert sign_flip_p(np.ones(n)) == pytest.approx(2.0 ** (1 - n))
        assert sign_flip_p(np.ones(n), "greater") == pytest.approx(2.0**-n)


def test_sign_flip_sampled_agrees_with_exact():
    """Above max_exact the p-value is sampled: within 4 Monte Carlo SEs of the exact one, and never 0."""
    d = np.random.default_rng(2).normal(0.3, 1, 21)
    exact = sign_flip_p(d)
    sampled = sign_flip_p(d, max_exact=0, n_resamples=40_000)
    assert abs(sampled - exact) < 4 * math.sqrt(exact * (1 - exact) / 40_000) + 1e-4
    assert sign_flip_p(np.ones(40)) == pytest.approx(1 / 100_001)  # no sampled pattern beats all-ones


@pytest.mark.parametrize("noise", ["normal", "t2"])
def test_sign_flip_null_rejection_rate(noise):
    """Symmetric null, 8 seeds: the test rejects at most α of the time (+ simulation noise)."""
    rng = np.random.default_rng(3)
    n_sim = 3000
    d = rng.normal(size=(n_sim, 8)) if noise == "normal" else rng.standard_t(2, size=(n_sim, 8))
    rate = np.mean([sign_flip_p(x) < 0.05 for x in d])
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim)
    assert rate >= 0.02  # and it is not trivially conservative (its exact size here is 14/256 = 0.047)


def test_sign_flip_refuses_bad_input():
    with pytest.raises(ValueError, match="alternative"):
        sign_flip_p([1.0, 2.0], "bigger")
    with pytest.raises(ValueError, match="non-finite"):
        sign_flip_p([1.0, np.nan])
    with pytest.raises(ValueError, match="1-D"):
        sign_flip_p(np.ones((2, 2)))


# ---- the bootstrap


def test_estimate_is_the_mean_paired_difference():
    rng = np.random.default_rng(4)
    a, b = rng.random((6, 30)), rng.random((6, 30))
    est, lo, hi = paired_bootstrap(a, b, n_boot=500)
    assert est == pytest.approx(np.mean(b.mean(1) - a.mean(1))) and lo <= est <= hi
    est, *_ = paired_bootstrap(a, b, n_boot=50, scale="log")
    assert est == pytest.approx(np.mean(np.log(b.mean(1) / a.mean(1))))
    est, *_ = paired_bootstrap(a[:, 0], b[:, 0], n_boot=50, scale="log")
    assert est == pytest.approx(np.mean(np.log(b[:, 0] / a[:, 0])))
    # an MSE of exactly 0 is floored, not -inf
    assert np.isfinite(per_seed_differences([0.0, 1.0], [1.0, 1.0], "log")).all()


def test_seed_bootstrap_quantiles_are_the_multinomial_ones():
    """With 3 seeds the bootstrap of d̄ has 27 equally likely index triples; its quantiles match."""
    d = np.array([0.1, 0.5, 2.0])
    means = np.sort([d[list(i)].mean() for i in itertools.product(range(3), repeat=3)])
    _, lo, hi = paired_bootstrap(np.zeros(3), d, n_boot=200_000, expand=False, level=0.5)
    cdf = np.arange(1, 28) / 27
    assert lo == pytest.approx(means[np.searchsorted(cdf, 0.25)], abs=1e-12)
    assert hi == pytest.approx(means[np.searchsorted(cdf, 0.75)], abs=1e-12)


def test_log_scale_is_the_identity_on_logs():
    rng = np.random.default_rng(5)
    a, b = rng.lognormal(size=7), rng.lognormal(size=7)
    assert paired_bootstrap(a, b, n_boot=300, scale="log") == pytest.approx(
        paired_bootstrap(np.log(a), np.log(b), n_boot=300)
    )


def test_seed_bootstrap_coverage():
    """10 normal seeds: the expanded percentile interval covers the true difference ~95% of the time
    (0.92–0.985 allows the simulation's noise); the plain one under-covers (about 0.90)."""
    rng = np.random.default_rng(6)
    n_sim, hits, plain = 400, 0, 0
    for i in range(n_sim):
        a = rng.normal(size=10)
        b = 0.7 * a + rng.normal(0.3, 1, 10)
        _, lo, hi = paired_bootstrap(a, b, n_boot=2000, seed=i)
        hits += lo <= 0.3 <= hi
        _, lo, hi = paired_bootstrap(a, b, n_boot=2000, seed=i, expand=False)
        plain += lo <= 0.3 <= hi
    assert 0.92 <= hits / n_sim <= 0.985
    assert plain < hits


def test_prompt_bootstrap_coverage_on_shared_prompts():
    """Every seed sees the same prompts, and prompts differ in how they favour an arm:
    d_sp = δ + u_s + v_p + e_sp. Resampling prompts once for all seeds (crossed) covers; resampling
    them afresh within each seed (nested) misses the shared v_p and under-covers."""
    rng = np.random.default_rng(7)
    n_sim, seeds, prompts = 200, 10, 20
    hits = {"crossed": 0, "nested": 0}
    for i in range(n_sim):
        a = rng.normal(size=(seeds, prompts))
        b = a + 0.3 + rng.normal(0, 0.2, (seeds, 1)) + rng.normal(0, 1, (1, prompts))
        b = b + rng.normal(0, 0.3, (seeds, prompts))
        for design in hits:
            _, lo, hi = paired_bootstrap(a, b, n_boot=500, seed=i, prompts=design)
            hits[design] += lo <= 0.3 <= hi
    assert hits["crossed"] / n_sim >= 0.92
    assert hits["nested"] / n_sim < 0.85


def test_bootstrap_refuses_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        paired_bootstrap(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="scale"):
        paired_bootstrap(np.ones(3), np.ones(3), scale="logit")
    with pytest.raises(ValueError, match="non-finite"):
        paired_bootstrap(np.ones(3), np.array([1, np.inf, 1]))
    est, lo, hi = paired_bootstrap([1.0], [2.0])  # one seed: an estimate, no interval
    assert est == 1.0 and math.isnan(lo) and math.isnan(hi)


# ---- contrasts and verdicts


def test_paired_contrast_combines_the_two():
    rng = np.random.default_rng(8)
    a, b = rng.random((8, 16)), rng.random((8, 16)) + 0.2
    c = paired_contrast(a, b, n_boot=400, seed=3)
    d = b.mean(1) - a.mean(1)
    assert (c.estimate, c.low, c.high) == paired_bootstrap(a, b, n_boot=400, seed=3)
    assert c.per_seed == pytest.approx(tuple(d)) and c.n_seeds == 8
    assert c.p_value == pytest.approx(enumerate_p(d, "two-sided"))
    assert c.effect_size == pytest.approx(d.mean() / d.std(ddof=1))


def contrast(low, high, p=0.01):
    # 10 per-seed differences tight around the middle: their t interval lies inside [low, high]
    mid = (low + high) / 2
    return Contrast(mid, low, high, p, 10, tuple(mid + 1e-4 * np.linspace(-1, 1, 10)), "identity")


@pytest.mark.parametrize(
    ("low", "high", "p", "sign", "want"),
    [
        (0.1, 0.3, 0.01, 1, YES),
        (-0.3, -0.1, 0.01, -1, YES),
        (-0.3, -0.1, 0.01, 1, CONTRADICTED),
        (0.1, 0.3, 0.01, -1, CONTRADICTED),
        (0.1, 0.3, 0.2, 1, UNDERPOWERED),  # interval clear of 0, p not small enough
        (0.01, 0.04, 0.2, 1, WITHIN),  # clear of 0 but not significant, inside the margin
        (0.01, 0.04, 0.01, 1, YES),  # small but detected: yes comes first
        (-0.04, 0.05, 0.5, 1, WITHIN),  # the margin is inclusive
        (-0.04, 0.06, 0.5, 1, UNDERPOWERED),
        (math.nan, math.nan, math.nan, 1, UNDERPOWERED),
    ],
)
def test_verdict_rule(low, high, p, sign, want):
    assert verdict(contrast(low, high, p), margin=0.05, claimed_sign=sign) == want


def test_equivalence_needs_the_t_interval_inside_the_margin_too():
    """3 seeds: the bootstrap interval is at most the range of the d_s, so it sat inside ±log 1.02
    where Student's t interval (the reference: scipy) reaches 0.030; not an equivalence call."""
    d = np.array([-0.005, 0.005, 0.015])
    margin = math.log(1.02)
    c = paired_contrast(np.zeros(3), d, n_boot=20_000)
    assert -margin <= c.low and c.high <= margin  # the bootstrap alone would say "within"
    want = stats.t.interval(0.95, 2, loc=d.mean(), scale=stats.sem(d))
    assert student_interval(d) == pytest.approx(want)
    assert verdict(c, margin=margin, claimed_sign=-1) == UNDERPOWERED
    # with 10 seeds of the same spread the t interval is inside: within
    d10 = np.tile(d, 4)[:10] * 0.3
    assert (
        verdict(paired_contrast(np.zeros(10), d10, n_boot=20_000), margin=margin, claimed_sign=-1) == WITHIN
    )
    assert all(math.isnan(x) for x in student_interval([1.0]))


def test_verdict_uses_the_adjusted_p():
    c = contrast(0.1, 0.3, p=0.01)
    assert verdict(c, margin=0.05, claimed_sign=1, p_adjusted=0.08) == UNDERPOWERED
    with pytest.raises(ValueError, match="claimed_sign"):
        verdict(c, margin=0.05, claimed_sign=0)


# ---- Fisher, Holm


def fisher_by_hand(k_a, n_a, k_b, n_b):
    """Two-sided Fisher: the hypergeometric probability of every table no more likely than the one seen."""
    dist = stats.hypergeom(n_a + n_b, k_a + k_b, n_a)
    ks = np.arange(max(0, k_a + k_b - n_b), min(n_a, k_a + k_b) + 1)
    pmf = dist.pmf(ks)
    return pmf[pmf <= dist.pmf(k_a) * (1 + 1e-7)].sum()


def test_fraction_test_is_fisher():
    for case in [(0, 8, 5, 8), (3, 8, 8, 8), (1, 10, 6, 10), (2, 5, 2, 5), (10, 10, 0, 3)]:
        res = fraction_test(*case)
        assert res.p_value == pytest.approx(fisher_by_hand(*case), rel=1e-9)
        assert (res.fraction_a, res.fraction_b) == (case[0] / case[1], case[2] / case[3])
    # the review's example: softmax fails in 8/8 seeds, SSA in 3/8
    p, *_ = fraction_test(8, 8, 3, 8)
    assert p == pytest.approx(0.02564, abs=1e-5)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        fraction_test(9, 8, 3, 8)


def test_generalises():
    got = generalises([0.01, 0.5, np.nan, 0.049], 0.05)
    assert got.tolist() == [True, False, False, True]


def test_holm_matches_statsmodels():
    rng = np.random.default_rng(9)
    for m in (1, 2, 5, 12):
        p = rng.random(m) ** 3
        p[: m // 3] = p[0]  # ties
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-12)
    p = np.array([0.01, np.nan, 0.04, 0.03])
    got = holm(p)
    assert math.isnan(got[1])
    assert got[[0, 2, 3]] == pytest.approx(multipletests(p[[0, 2, 3]], method="holm")[1])


# ---- error rates and power


def test_overlap_rule_is_the_old_seed_intervals():
    rng = np.random.default_rng(10)
    a, b = rng.normal(size=(200, 4)), rng.normal(1.5, 1, size=(200, 4))
    got = overlap_rule(a, b)
    for x, y, g in zip(a, b, got):
        ia, ib = seed_interval(x), seed_interval(y)
        assert g == (ia["ci_high"] < ib["ci_low"] or ib["ci_high"] < ia["ci_low"])


def test_many_intervals_are_the_bootstrap_ones():
    d = np.random.default_rng(13).normal(0.2, 1, size=(3, 10))
    low, high = seed_bootstrap_many(d, n_boot=100_000)
    for x, lo, hi in zip(d, low, high):
        _, want_lo, want_hi = paired_bootstrap(np.zeros(10), x, n_boot=100_000, seed=1)
        assert (lo, hi) == pytest.approx((want_lo, want_hi), abs=0.02)


def test_simulated_error_rates():
    """Type-I error: the new rule near α with 10 seeds (its exact tests are at most α), the overlap
    rule ≈ 0.005 with 3 seeds; the paired t rate agrees with the noncentral t."""
    n_sim = 2000
    se = math.sqrt(0.05 * 0.95 / n_sim)
    null10 = simulate_rule(10, 0.0, 0.5, n_sim=n_sim, n_boot=500)
    assert 0.05 - 6 * se <= null10["separated"] <= 0.05 + 3 * se
    assert null10["paired_t"] == pytest.approx(0.05, abs=3 * se)
    null3 = simulate_rule(3, 0.0, 0.0, n_sim=20_000, n_boot=200)
    assert null3["separated"] == 0.0  # 3 seeds cannot reach p < 0.05 (smallest two-sided p 0.25)
    assert null3["overlap"] == pytest.approx(0.005, abs=0.0025)
    alt = simulate_rule(10, 1.0, 0.5, n_sim=n_sim, n_boot=500)  # d_z = 1 / sqrt(2 (1 - 0.5)) = 1
    want = power_paired(1.0, 10)
    assert alt["paired_t"] == pytest.approx(want, abs=4 * math.sqrt(want * (1 - want) / n_sim))
    assert alt["yes"] > alt["overlap"] and alt["contradicted"] == 0.0
    assert sum(alt[k] for k in ("yes", "contradicted", "within", "underpowered")) == pytest.approx(1.0)


def noncentral_power(dz, n, alpha=0.05):
    t = stats.t.ppf(1 - alpha / 2, n - 1)
    nct = stats.nct(n - 1, dz * math.sqrt(n))
    return nct.sf(t) + nct.cdf(-t)


def test_power_paired_is_the_noncentral_t():
    for dz, n in [(0.5, 10), (1.0, 8), (2.0, 6), (0.3, 40)]:
        assert power_paired(dz, n) == pytest.approx(noncentral_power(dz, n), rel=1e-6)
    assert power_paired(5.0, 5) == 0.0  # 5 seeds: the exact test's smallest p is 1/16 > 0.05
    n = seeds_needed(1.0)
    assert power_paired(1.0, n) >= 0.8 > power_paired(1.0, n - 1)


def test_power_paired_equals_one_statsmodels_call_per_seed_count():
    """power_paired computes a d_z's power curve in blocks of seed counts (power._power_block, kept):
    the same float, bit for bit, as TTestPower's power called for that one n (the reports' "seeds for
    80%" counts n up against it), across blocks, levels α/k and effects up to where statsmodels
    returns NaN; a float n takes the single call."""
    from statsmodels.stats.power import TTestPower

    for dz in (0.01, 0.23, -0.7, 1.0, 3.3, 40.0, 400.0):
        for alpha in (0.05, 0.05 / 3, 0.05 / 14):
            for n in [*range(2, 80), 129, 130, 131, 500]:
                want = 0.0 if 2.0 ** (1 - n) >= alpha else TTestPower().power(abs(dz), n, alpha)
                got = power_paired(dz, n, alpha)
                assert got == want or (math.isnan(got) and math.isnan(want)), (dz, alpha, n)
    assert power_paired(0.5, 10.0) == TTestPower().power(0.5, 10.0, 0.05)


# ---- tables


def study_rows(seed=11):
    rng = np.random.default_rng(seed)
    rows = []
    for task, shift in (("every_num", -0.3), ("some_num", 0.0)):
        for s in range(8):
            base = rng.random() * 0.5
            for scorer, delta in (("softmax", 0.0), ("ssa", shift), ("hybrid", 0.01)):
                value = min(max(base + delta + rng.normal(0, 0.05), 0), 1)
                rows.append(
                    {"task": task, "metric": "sequence_error", "scorer": scorer, "seed": s, "value": value}
                )
    return rows


def test_contrast_table_rows_are_the_contrasts():
    df = per_seed_frame(study_rows())
    table = contrast_table(df, by="task", n_boot=500)
    assert len(table) == 4 and set(table.scorer) == {"ssa", "hybrid"}
    assert table.p_holm.to_numpy() == pytest.approx(holm(table.p_value.to_numpy()))
    for row in table.itertuples():
        g = df[df.task == row.task].pivot(index="seed", columns="scorer", values="value")
        c = paired_contrast(g["softmax"].to_numpy(), g[row.scorer].to_numpy(), n_boot=500)
        assert (row.estimate, row.low, row.high, row.p_value) == pytest.approx(
            (c.estimate, c.low, c.high, c.p_value)
        )
        assert row.margin == MARGINS["sequence_error"] and row.n_seeds == 8 and row.dropped_seeds == ()
        want = verdict(c, margin=row.margin, claimed_sign=-1, p_adjusted=row.p_holm)
        assert row.verdict == want
    ssa = table[(table.task == "every_num") & (table.scorer == "ssa")].iloc[0]
    assert ssa.verdict == YES  # 8 seeds, a 0.3 drop with noise 0.05 · √2: detected after Holm
    # Holm per family: each task its own family
    per_task = contrast_table(df, by="task", family=["task"], n_boot=200)
    for _, g in per_task.groupby("task"):
        assert g.p_holm.to_numpy() == pytest.approx(holm(g.p_value.to_numpy()))


def test_contrast_table_log_scale_prompts_and_gaps():
    rng = np.random.default_rng(12)
    rows = []
    for s in range(6):
        for scorer, factor in (("softmax", 1.0), ("ssa", 0.8)):
            if scorer == "ssa" and s == 5:
                continue  # a missing run: seed 5 has no pair
            for p in range(4):
                rows.append(
                    {
                        "metric": "mse",
                        "scorer": scorer,
                        "seed": s,
                        "prompt": p,
                        "value": factor * rng.lognormal(),
                    }
                )
    df = per_seed_frame(rows)
    table = contrast_table(df, prompt_col="prompt", n_boot=300)
    row = table.iloc[0]
    assert row.scale == "log" and row.margin == pytest.approx(math.log(1.1)) and row.dropped_seeds == (5,)
    a = (
        df[(df.scorer == "softmax") & (df.seed < 5)]
        .pivot(index="seed", columns="prompt", values="value")
        .to_numpy()
    )
    b = df[df.scorer == "ssa"].pivot(index="seed", columns="prompt", values="value").to_numpy()
    c = paired_contrast(a, b, scale="log", n_boot=300)
    assert (row.estimate, row.low, row.high, row.p_value) == pytest.approx(
        (c.estimate, c.low, c.high, c.p_value)
    )


def test_contrast_table_refuses_ambiguous_input():
    df = per_seed_frame(study_rows())
    with pytest.raises(ValueError, match="share"):
        contrast_table(df)  # two tasks per seed and scorer: `by` is missing "task"
    with pytest.raises(ValueError, match="has no scorer='stickbreaking'"):
        contrast_table(df, by="task", base="stickbreaking")
    with pytest.raises(ValueError, match="no margin for metric 'accuracy'"):
        contrast_table(df.assign(metric="accuracy"), by="task")
    with pytest.raises(ValueError, match="lack the column"):
        per_seed_frame([{"seed": 0}])
    with pytest.raises(ValueError, match="numeric"):
        per_seed_frame([{"seed": 0, "value": "high"}])
    assert isinstance(per_seed_frame([{"seed": 0, "value": "0.5"}]), pd.DataFrame)


@pytest.mark.parametrize("d", [0.5, 1.0, 3.0, 25.0])
def test_seeds_needed_is_the_first_count_with_the_power(d):
    """Counted against power_paired directly, including effects so large that statsmodels' solver fails."""
    n = seeds_needed(d)
    assert power_paired(d, n) >= 0.8
    assert n == 2 or power_paired(d, n - 1) < 0.8
    assert n >= 6  # the exact sign-flip test cannot reach p < 0.05 with fewer seeds


@pytest.mark.parametrize("n", [12, 31, 60])  # exact, and the resampled patterns above MAX_EXACT (30)
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_p_rows_equals_sign_flip_p_row_by_row(n, alternative):
    """The batched sign-flip p (simulate_rule's) is sign_flip_p of each row, number for number: ties,
    an all-zero row and a rounded row included."""
    from ssa_repro.stats.paired import sign_flip_p_rows

    rng = np.random.default_rng(n)
    d = rng.normal(0.2, 1.0, (12, n))
    d[3] = 0.0
    d[4] = np.round(d[4], 1)
    want = np.array([sign_flip_p(row, alternative) for row in d])
    assert np.array_equal(sign_flip_p_rows(d, alternative), want)
    with pytest.raises(ValueError, match=r"d must be \[samples, seeds\]"):
        sign_flip_p_rows(d[0])
