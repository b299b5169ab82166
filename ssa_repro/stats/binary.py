"""Bimodal outcomes: a seed generalises or it does not (docs/statistics.md).

Per seed, :func:`generalises` turns an error into a yes/no by a declared threshold; :func:`fraction_test`
compares the fractions of seeds that generalise in two arms (Fisher's exact test, unpaired);
:func:`mcnemar_exact` compares them paired by seed (exact McNemar on the discordant seeds), and
:func:`power_mcnemar` / :func:`seeds_needed_binary` give its exact power and the seeds it needs.
"""

from __future__ import annotations

import math
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


# ------------------------------------------------------------------------------------------------
# paired by seed: exact McNemar


class McNemarTest(NamedTuple):
    """Exact McNemar test of paired yes/no outcomes (the p-value first). ``n10``: seeds where a
    succeeds and b does not; ``n01``: b succeeds and a does not; ``n_discordant`` = n10 + n01."""

    p_value: float
    n10: int
    n01: int
    n_discordant: int
    n_seeds: int


def _mcnemar_p(n01, n_disc, alternative: str):
    """The exact McNemar p-value for n01 of n_disc discordant seeds favouring b (arrays broadcast):
    under H0 (p10 = p01) n01 | n_disc ~ Binomial(n_disc, 1/2)."""
    n01, n_disc = np.asarray(n01), np.asarray(n_disc)
    if alternative == "greater":  # b succeeds more often: many n01
        p = stats.binom.sf(n01 - 1, n_disc, 0.5)
    elif alternative == "less":
        p = stats.binom.cdf(n01, n_disc, 0.5)
    else:  # twice the smaller tail (the null is symmetric), capped at 1
        p = np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(n01, n_disc - n01), n_disc, 0.5))
    return np.where(n_disc == 0, 1.0, p)


def mcnemar_exact(a_success, b_success, alternative: str = "two-sided") -> McNemarTest:
    """Exact McNemar test of the paired yes/no outcomes ``a_success[s]``, ``b_success[s]`` (seed s of
    both arms; e.g. :func:`generalises` of each arm). Only the discordant seeds carry information:
    with n10 = #{a yes, b no} and n01 = #{a no, b yes}, under H0 (P(a yes) = P(b yes), i.e.
    p10 = p01) n01 | n10 + n01 = N ~ Binomial(N, 1/2), so

        p = P(X ≥ n01)                        ("greater": b succeeds more often)
        p = P(X ≤ n01)                        ("less")
        p = min(1, 2 · P(X ≤ min(n01, n10)))  ("two-sided"),   X ~ Binomial(N, 1/2);

    p = 1 with no discordant seed. The smallest two-sided p is 2^(1−N): 6 discordant seeds, all one
    way, give 0.031."""
    _check_choice("alternative", alternative, ALTERNATIVES)
    a, b = np.asarray(a_success), np.asarray(b_success)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(
            f"a_success and b_success must be 1-D of the same length (one per seed, paired), got "
            f"shapes {a.shape} and {b.shape}"
        )
    for name, x in (("a_success", a), ("b_success", b)):
        if x.dtype != bool and not np.isin(x, (0, 1)).all():
            raise ValueError(f"{name} must hold booleans (or 0/1), got {np.unique(x)[:5].tolist()}")
    a, b = a.astype(bool), b.astype(bool)
    n10, n01 = int((a & ~b).sum()), int((~a & b).sum())
    p = float(_mcnemar_p(n01, n10 + n01, alternative))
    return McNemarTest(p, n10, n01, n10 + n01, len(a))


def _check_discordance(p10: float, p01: float) -> None:
    if not (0 <= p10 <= 1 and 0 <= p01 <= 1 and p10 + p01 <= 1):
        raise ValueError(
            f"discordance probabilities p10={p10!r}, p01={p01!r} must lie in [0, 1] with p10 + p01 <= 1"
        )


def power_mcnemar(
    p10: float, p01: float, n_seeds: int, alpha: float = 0.05, alternative: str = "two-sided"
) -> float:
    """The exact power of :func:`mcnemar_exact` at level α with n seeds, when a seed is (a yes, b no)
    with probability p10 and (a no, b yes) with p01. The number of discordant seeds is
    N ~ Binomial(n, p10 + p01) and, given N, n01 ~ Binomial(N, π) with π = p01 / (p10 + p01):

        power = Σ_N P(N) Σ_k P(n01 = k | N) · 1{p(k, N) < α}.

    For a Holm family of k primary endpoints pass α/k (Holm's first step). The exact test is discrete,
    so the power is a saw-tooth in n, not monotone."""
    _check_discordance(p10, p01)
    _check_choice("alternative", alternative, ALTERNATIVES)
    if n_seeds < 1 or int(n_seeds) != n_seeds:
        raise ValueError(f"n_seeds={n_seeds!r} must be a whole number >= 1")
    q = p10 + p01
    if q == 0:
        return 0.0
    n_disc = np.arange(n_seeds + 1)[:, None]  # [N, 1]
    k = np.arange(n_seeds + 1)[None, :]  # [1, k]: n01; k > N has probability 0
    reject = _mcnemar_p(np.minimum(k, n_disc), n_disc, alternative) < alpha  # [N, k]
    cond = stats.binom.pmf(k, n_disc, p01 / q)  # [N, k]: P(n01 = k | N)
    return float((stats.binom.pmf(n_disc[:, 0], n_seeds, q) * (cond * reject).sum(1)).sum())


def seeds_needed_binary(
    p10: float,
    p01: float,
    power: float = 0.8,
    alpha: float = 0.05,
    *,
    k: int = 1,
    alternative: str = "two-sided",
    most: int = 2000,
) -> int:
    """The fewest seeds n with :func:`power_mcnemar` (p10, p01, n, α/k) ≥ ``power`` (k: the primary
    endpoints in the Holm family; its first step tests at α/k). The first such n: the power's saw-tooth
    may dip below the target at a slightly larger n."""
    _check_discordance(p10, p01)
    if p10 == p01:
        raise ValueError(f"p10 = p01 = {p10!r}: no number of seeds detects a zero effect")
    if k < 1:
        raise ValueError(f"k={k!r} must be at least 1 (the primary endpoints in the Holm family)")
    for n in range(1, most + 1):
        if power_mcnemar(p10, p01, n, alpha / k, alternative) >= power:
            return n
    raise ValueError(f"power {power} is not reached with up to {most} seeds for p10={p10}, p01={p01}")


def discordance(p_a: float, p_b: float) -> tuple[float, float]:
    """(p10, p01) when seed s succeeds in arm a with probability p_a and in b with p_b, independently
    within a seed: p10 = p_a (1 − p_b), p01 = (1 − p_a) p_b. Pairing that correlates the arms lowers
    both, so this is the planning case with the most discordance for given fractions."""
    for name, x in (("p_a", p_a), ("p_b", p_b)):
        if not 0 <= x <= 1 or math.isnan(x):
            raise ValueError(f"{name}={x!r} must lie in [0, 1] (a fraction of seeds that succeed)")
    return p_a * (1 - p_b), (1 - p_a) * p_b
