"""The 2 × 2 factorial paired by seed (ssa_repro/stats/factorial.py): the per-seed effects against a
hand computation, the estimates against statsmodels OLS with seed fixed effects (balanced design,
±1/2 coding), the p-values and intervals against the paired functions they reuse."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from ssa_repro.stats import factorial_2x2, factorial_table, paired_bootstrap, sign_flip_p


def cells(n=8, seed=0):
    """Four cells [seeds]: a seed effect shared by all, main effects 0.3 (A) and −0.2 (B), interaction 0.4."""
    rng = np.random.default_rng(seed)
    u = rng.normal(0, 1, n)  # the seed's own level, common to the four cells
    return {
        (i, j): u + 0.3 * i - 0.2 * j + 0.4 * i * j + rng.normal(0, 0.1, n) for i in (0, 1) for j in (0, 1)
    }


def test_effects_are_the_hand_computed_ones():
    y = {(0, 0): [1.0, 2.0], (0, 1): [2.0, 2.5], (1, 0): [4.0, 3.0], (1, 1): [7.0, 6.0]}
    res = factorial_2x2(y, n_boot=200)
    # seed 0: A = (7 + 4)/2 − (2 + 1)/2 = 4; B = (7 + 2)/2 − (4 + 1)/2 = 2; AxB = (7 − 4) − (2 − 1) = 2
    # seed 1: A = (6 + 3)/2 − (2.5 + 2)/2 = 2.25; B = (6 + 2.5)/2 − (3 + 2)/2 = 1.75; AxB = 3 − 0.5 = 2.5
    assert res["A"].per_seed == pytest.approx((4.0, 2.25))
    assert res["B"].per_seed == pytest.approx((2.0, 1.75))
    assert res["AxB"].per_seed == pytest.approx((2.0, 2.5))
    assert res["AxB"].estimate == pytest.approx(2.25)


def test_estimates_are_the_ols_coefficients_with_seed_fixed_effects():
    y = cells()
    res = factorial_2x2(y, n_boot=500)
    rows = [
        {"seed": s, "xa": i - 0.5, "xb": j - 0.5, "y": y[i, j][s]}
        for (i, j) in y
        for s in range(len(y[0, 0]))
    ]
    fit = smf.ols("y ~ C(seed) + xa + xb + xa:xb", data=pd.DataFrame(rows)).fit()
    assert res["A"].estimate == pytest.approx(fit.params["xa"], abs=1e-10)
    assert res["B"].estimate == pytest.approx(fit.params["xb"], abs=1e-10)
    assert res["AxB"].estimate == pytest.approx(fit.params["xa:xb"], abs=1e-10)
    assert res["AxB"].estimate == pytest.approx(0.4, abs=0.15)  # and near the planted interaction


def test_p_values_and_intervals_are_the_paired_ones():
    y = cells(n=9, seed=3)
    res = factorial_2x2(y, n_boot=800, seed=4)
    d_ab = (y[1, 1] - y[1, 0]) - (y[0, 1] - y[0, 0])
    assert res["AxB"].p_value == pytest.approx(sign_flip_p(d_ab))
    est, low, high = paired_bootstrap(np.zeros(9), d_ab, n_boot=800, seed=4)
    assert (res["AxB"].estimate, res["AxB"].low, res["AxB"].high) == pytest.approx((est, low, high))
    d_a = (y[1, 1] + y[1, 0]) / 2 - (y[0, 1] + y[0, 0]) / 2
    assert res["A"].p_value == pytest.approx(sign_flip_p(d_a))
    # log scale: the same on the logs
    pos = {c: np.exp(v) for c, v in y.items()}
    lg = factorial_2x2(pos, scale="log", n_boot=800, seed=4)
    assert lg["AxB"].per_seed == pytest.approx(res["AxB"].per_seed) and lg["AxB"].scale == "log"


def test_factorial_table_from_records():
    y = cells(n=7, seed=5)
    levels_a, levels_b = ("postln", "preln"), ("softmax", "ssa")
    rows = [
        {"seed": s, "norm": levels_a[i], "scorer": levels_b[j], "value": float(y[i, j][s])}
        for (i, j) in y
        for s in range(7)
    ]
    rows.append({"seed": 99, "norm": "preln", "scorer": "ssa", "value": 1.0})  # a seed with one cell only
    t = factorial_table(pd.DataFrame(rows), "norm", levels_a, "scorer", levels_b, n_boot=300)
    ref = factorial_2x2(y, n_boot=300)
    assert list(t.effect) == ["A", "B", "AxB"]
    for r in t.itertuples():
        assert r.estimate == pytest.approx(ref[r.effect].estimate)
        assert r.p_value == pytest.approx(ref[r.effect].p_value)
        assert r.dropped_seeds == (99,) and r.n_seeds == 7
    p = t.p_value.to_numpy()
    order = np.argsort(p)
    assert t.p_holm.to_numpy()[order][0] == pytest.approx(min(1.0, 3 * p[order][0]))


def test_factorial_refuses_bad_input():
    y = cells()
    with pytest.raises(ValueError, match="keys"):
        factorial_2x2({k: v for k, v in y.items() if k != (1, 1)})
    with pytest.raises(ValueError, match="same seeds"):
        factorial_2x2({**y, (1, 1): y[1, 1][:-1]})
    df = pd.DataFrame({"seed": [0], "a": ["x"], "b": ["y"], "value": [1.0]})
    with pytest.raises(ValueError, match="no rows at"):
        factorial_table(df, "a", ("x", "z"), "b", ("y", "w"))
    with pytest.raises(ValueError, match="not in the frame"):
        factorial_table(df, "norm", ("x", "z"), "b", ("y", "w"))
