"""Equivalence ("within ±m") when seed outcomes are bimodal (docs/statistics.md).

The rule of :func:`~ssa_repro.stats.paired.verdict` calls "not detected (within ±m)" when the seed
bootstrap interval and Student's t interval of the d_s lie inside [−m, m]. Both assume the d_s look
like a sample from their distribution. When a seed occasionally jumps (it generalises under one arm and
collapses under the other: d_s off by δ with probability q), a run of n seeds has no jump at all with
probability (1 − q)^n, and then every interval is narrow around the continuous part: at the margin
(q·δ = m, e.g. q = 0.1, δ = 0.5, m = 0.05) "within" is called (1 − q)^n of the time, 35% at 10 seeds
and 59% at 5 (:func:`simulate_equivalence` reproduces the reviewer's 33% and 60%).

No interval of n values can see a jump that did not happen, so the robust rule bounds it. With a
declared jump threshold τ (a |d_s| > τ is a jump) and a declared largest jump M, split
d = c + j, c = d·1{|d| ≤ τ}, j = d·1{|d| > τ}; then E[d] = E[c] + E[j] and |E[j]| ≤ M · P(|d| > τ), so

    E[d] ∈ [c̄ − t·s_c/√n − M·u,  c̄ + t·s_c/√n + M·u]        (:func:`robust_interval`)

where c̄ ± t_{n−1}·s_c/√n is Student's interval of the c_s at ``level`` and u the one-sided
(1 − (1 − level)/2) Clopper–Pearson upper bound of P(|d| > τ) from the k observed jumps. Each side
fails with probability at most (1 − level)/2 + (1 − level)/2 (Bonferroni), so an equivalence call
"interval inside [−m, m]" at a true effect |E[d]| = m has probability ≤ 1 − level = 5% per side, under
any jump model with jumps ≤ M (and a t interval valid for the bounded c). The price: with no jump seen
u = 1 − (0.025)^(1/n), so "within" needs M·u < m, i.e. n > ln 0.025 / ln(1 − m/M)
(:func:`seeds_for_equivalence`: 35 seeds for m = 0.05, M = 0.5; 72 for M = 1).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ssa_repro.stats.paired import (
    CONTRADICTED,
    NONZERO_WITHIN,
    UNDERPOWERED,
    WITHIN,
    YES,
    Contrast,
    _finite_1d,
    student_interval,
    verdict,
)
from ssa_repro.stats.power import seed_bootstrap_many, sign_flip_p_many

MODELS = ("normal", "bimodal")


def jump_bound(d, threshold: float, level: float = 0.95) -> float:
    """The one-sided (1 − (1 − level)/2) Clopper–Pearson upper bound of P(|d_s| > threshold) from the
    k of n seeds observed beyond it: the (1 − (1 − level)/2) quantile of Beta(k + 1, n − k) (1 if
    k = n); with k = 0 it is 1 − ((1 − level)/2)^(1/n)."""
    d = _finite_1d(d)
    if not threshold >= 0:
        raise ValueError(f"threshold={threshold!r} must be >= 0 (|d_s| above it counts as a jump)")
    n, k = len(d), int((np.abs(d) > threshold).sum())
    if k == n:
        return 1.0
    return float(stats.beta.ppf(1 - (1 - level) / 2, k + 1, n - k))


def robust_interval(d, *, threshold: float, max_jump: float, level: float = 0.95) -> tuple[float, float]:
    """The interval of E[d] that allows for jumps (module docstring): Student's interval of
    c_s = d_s·1{|d_s| ≤ threshold}, widened on both sides by M·u, M = max(``max_jump``, largest |d_s|)
    and u = :func:`jump_bound`. (NaN, NaN) with fewer than 2 seeds."""
    d = _finite_1d(d)
    if not max_jump > 0:
        raise ValueError(f"max_jump={max_jump!r} must be > 0 (the largest jump a seed can make)")
    if len(d) < 2:
        return math.nan, math.nan
    c = np.where(np.abs(d) > threshold, 0.0, d)
    low, high = student_interval(c, level)
    widen = max(max_jump, float(np.abs(d).max())) * jump_bound(d, threshold, level)
    return low - widen, high + widen


def seeds_for_equivalence(margin: float, max_jump: float, level: float = 0.95, most: int = 100_000) -> int:
    """The fewest seeds with which the robust rule can call "within ±m" at all: no jump seen, no
    spread, M·(1 − ((1 − level)/2)^(1/n)) < m."""
    if not 0 < margin < max_jump:
        raise ValueError(f"need 0 < margin < max_jump, got margin={margin!r}, max_jump={max_jump!r}")
    a = (1 - level) / 2
    for n in range(2, most + 1):
        if max_jump * (1 - a ** (1 / n)) < margin:
            return n
    raise ValueError(f"more than {most} seeds")


def robust_verdict(
    contrast: Contrast,
    *,
    margin: float,
    claimed_sign: int,
    threshold: float,
    max_jump: float,
    alpha: float = 0.05,
    p_adjusted=None,
    inside_margin: bool = False,
) -> str:
    """:func:`verdict`, with the equivalence calls ("within ±m", and "non-zero, within ±m" when
    ``inside_margin``) kept only if :func:`robust_interval` of the contrast's d_s lies inside [−m, m]
    too; otherwise "within" falls back to "underpowered", and "non-zero, within" to yes/contradicted."""
    v = verdict(
        contrast,
        margin=margin,
        claimed_sign=claimed_sign,
        alpha=alpha,
        p_adjusted=p_adjusted,
        inside_margin=inside_margin,
    )
    if v not in (WITHIN, NONZERO_WITHIN):
        return v
    low, high = robust_interval(
        contrast.per_seed, threshold=threshold, max_jump=max_jump, level=contrast.level
    )
    if -margin <= low and high <= margin:
        return v
    if v == WITHIN:
        return UNDERPOWERED
    return verdict(contrast, margin=margin, claimed_sign=claimed_sign, alpha=alpha, p_adjusted=p_adjusted)


def simulate_equivalence(
    n_seeds: int,
    effect: float,
    margin: float,
    *,
    model: str = "bimodal",
    sd: float = 0.01,
    jump_fraction: float = 0.1,
    jump: float = 0.5,
    jump_down: float = 0.0,
    threshold: float | None = None,
    max_jump: float | None = None,
    alpha: float = 0.05,
    n_sim: int = 2000,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict:
    """The rates of each verdict on simulated paired differences, under

    - ``model="normal"``: d_s ~ N(effect, sd²);
    - ``model="bimodal"``: d_s = μ_c + e_s + J_s, e_s ~ N(0, sd²), J_s = +jump with probability
      ``jump_fraction`` (q), −jump with ``jump_down`` (q₋), else 0, and μ_c = effect − jump·(q − q₋),
      so E[d] = ``effect``. Per arm (each arm's seed collapses by δ independently, with q_a, q_b) this
      is q = q_b(1 − q_a), q₋ = q_a(1 − q_b).

    The claim is d > 0, α = ``alpha``; the interval the seed bootstrap (:func:`seed_bootstrap_many`),
    the p-value the exact sign-flip test (:func:`sign_flip_p_many`). Returns the rates of the committed
    rule (``yes``, ``contradicted``, ``within``, ``underpowered``), of its ``inside_margin`` variant
    (``nonzero_within``), and of the robust rule (:func:`robust_verdict`; ``threshold`` default |jump|/2,
    midway between the modes, ``max_jump`` default |jump|): ``within_robust``. At effect = ±margin a "within" is a false
    equivalence call; at effect = 0 "yes" + "contradicted" (``separated``) is the type-I error."""
    if model not in MODELS:
        raise ValueError(f"model={model!r} is not allowed; allowed: {', '.join(map(repr, MODELS))}")
    if n_seeds < 2:
        raise ValueError(f"n_seeds={n_seeds!r} must be at least 2")
    if not (0 <= jump_fraction and 0 <= jump_down and jump_fraction + jump_down <= 1):
        raise ValueError(
            f"jump_fraction={jump_fraction!r}, jump_down={jump_down!r}: need q, q₋ >= 0, q + q₋ <= 1"
        )
    threshold = abs(jump) / 2 if threshold is None else threshold
    max_jump = abs(jump) if max_jump is None else max_jump
    rng = np.random.default_rng(seed)
    d = rng.normal(0.0, sd, size=(n_sim, n_seeds))  # [n_sim, seeds]
    if model == "bimodal":
        u = rng.random((n_sim, n_seeds))
        d += jump * ((u < jump_fraction).astype(float) - (u > 1 - jump_down).astype(float))
        d += effect - jump * (jump_fraction - jump_down)
    else:
        d += effect
    low, high = seed_bootstrap_many(d, n_boot=n_boot, rng=rng)
    p = sign_flip_p_many(d, rng=rng)
    counts, nonzero_within, within_robust = _simulated_verdicts(
        d, low, high, p, margin=margin, alpha=alpha, threshold=threshold, max_jump=max_jump
    )
    rate = {k: v / n_sim for k, v in counts.items()}
    return {
        "n_seeds": n_seeds,
        "effect": effect,
        "margin": margin,
        "model": model,
        "sd": sd,
        "jump_fraction": jump_fraction if model == "bimodal" else 0.0,
        "jump": jump if model == "bimodal" else 0.0,
        "n_sim": n_sim,
        "yes": rate[YES],
        "contradicted": rate[CONTRADICTED],
        "separated": rate[YES] + rate[CONTRADICTED],
        "within": rate[WITHIN],
        "underpowered": rate[UNDERPOWERED],
        "nonzero_within": nonzero_within / n_sim,
        "within_robust": within_robust / n_sim,
    }


def _simulated_verdicts(
    d: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    p: np.ndarray,
    *,
    margin: float,
    alpha: float,
    threshold: float,
    max_jump: float,
    level: float = 0.95,
) -> tuple[dict, int, int]:
    """:func:`simulate_equivalence`'s tallies, per row i of d ``[n_sim, seeds]`` the verdicts of the
    contrast ``Contrast(d̄_i, low[i], high[i], p[i], seeds, d_i)`` for the claim d > 0: the counts of
    :func:`verdict`'s four calls, how often its ``inside_margin`` variant says "non-zero, within ±m" and
    how often :func:`robust_verdict` says "within ±m". The same decisions as calling those three per
    row (tests/test_stats_equivalence.py compares them), with the interval tests on whole columns and
    the quantiles they need (Student's t at n − 1, Clopper–Pearson per count of jumps) computed once
    instead of once per row; the per-row t intervals keep :func:`student_interval`'s arithmetic."""
    n_sim, n = d.shape
    t_q = stats.t.ppf((1 + level) / 2, n - 1)

    def t_inside(x: np.ndarray) -> bool:  # student_interval(x, level) inside [−m, m]
        half = t_q * x.std(ddof=1) / math.sqrt(n)
        return -margin <= float(x.mean() - half) and float(x.mean() + half) <= margin

    bounds: dict[int, float] = {}

    def robust_inside(x: np.ndarray) -> bool:  # robust_interval(x, …) inside [−m, m]
        c = np.where(np.abs(x) > threshold, 0.0, x)
        half = t_q * c.std(ddof=1) / math.sqrt(n)
        k = int((np.abs(x) > threshold).sum())
        if k not in bounds:
            bounds[k] = 1.0 if k == n else float(stats.beta.ppf(1 - (1 - level) / 2, k + 1, n - k))
        widen = max(max_jump, float(np.abs(x).max())) * bounds[k]
        return -margin <= float(c.mean() - half) - widen and float(c.mean() + half) + widen <= margin

    undefined = np.isnan(low) | np.isnan(high)
    separated = ~undefined & (p < alpha) & ((low > 0) | (high < 0))
    boot_inside = ~undefined & (-margin <= low) & (high <= margin)
    inside = np.zeros(n_sim, dtype=bool)
    for i in np.flatnonzero(boot_inside):
        inside[i] = t_inside(d[i])
    within = ~separated & ~undefined & inside
    counts = {
        YES: int((separated & (low > 0)).sum()),
        CONTRADICTED: int((separated & ~(low > 0)).sum()),
        WITHIN: int(within.sum()),
    }
    counts[UNDERPOWERED] = n_sim - counts[YES] - counts[CONTRADICTED] - counts[WITHIN]
    nonzero_within = int((separated & inside).sum())
    if within.any():  # robust_verdict's checks, where it would compute its interval
        if not max_jump > 0:
            raise ValueError(f"max_jump={max_jump!r} must be > 0 (the largest jump a seed can make)")
        if not threshold >= 0:
            raise ValueError(f"threshold={threshold!r} must be >= 0 (|d_s| above it counts as a jump)")
    within_robust = sum(robust_inside(d[i]) for i in np.flatnonzero(within))
    return counts, nonzero_within, int(within_robust)
