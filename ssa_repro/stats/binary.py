"""Bimodal outcomes: a seed generalises or it does not (docs/statistics.md).

Per seed, :func:`generalises` turns an error into a yes/no by a declared threshold; :func:`fraction_test`
compares the fractions of seeds that generalise in two arms (Fisher's exact test, unpaired).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats

from ssa_repro.stats.paired import ALTERNATIVES, _check_choice


class FractionTest(NamedTuple):
    """Fisher's exact test of k_a/n_a vs k_b/n_b (the p-value first, so ``p, *_ = ...`` works)."""

    p_value: float
    fraction_a: float
    fraction_b: float
    odds_ratio: float


def fraction_test(k_a: int, n_a: int, k_b: int, n_b: int, alternative: str = "two-sided") -> FractionTest:
    """Fisher's exact test on the 2 × 2 table [[k_a, n_a − k_a], [k_b, n_b − k_b]] (seeds that
    generalise / do not, per arm): conditional on the margins, k_a is hypergeometric under H0 (equal
    fractions); ``scipy.stats.fisher_exact``. ``alternative`` "greater" tests fraction a > fraction b."""
    _check_choice("alternative", alternative, ALTERNATIVES)
    for name, k, n in (("a", k_a, n_a), ("b", k_b, n_b)):
        if not (0 <= k <= n and n >= 1) or int(k) != k or int(n) != n:
            raise ValueError(f"arm {name}: need whole numbers 0 <= k <= n, n >= 1; got k={k!r}, n={n!r}")
    res = stats.fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]], alternative=alternative)
    return FractionTest(float(res.pvalue), k_a / n_a, k_b / n_b, float(res.statistic))


def generalises(values, threshold: float) -> np.ndarray:
    """Per seed, True where the error ``values`` lie below ``threshold`` (the seed generalises): the
    input of :func:`fraction_test` (k = the count of True). NaN counts as not generalising."""
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        return v < threshold
