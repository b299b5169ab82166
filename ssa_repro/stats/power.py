"""Error rates and power of the paired decision rule (docs/statistics.md): simulated seeds
(:func:`simulate_rule`), the power of the paired test (:func:`power_paired`; from observed differences
with ties, :func:`power_sign_flip`) and the seeds it needs (:func:`seeds_needed`, :func:`seeds_to_call`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats
from statsmodels.stats.power import TTestPower

from ssa_repro.stats.paired import (
    ALTERNATIVES,
    CONTRADICTED,
    UNDERPOWERED,
    VERDICTS,
    WITHIN,
    YES,
    Contrast,
    _check_choice,
    _finite_1d,
    expanded_level,
    sign_flip_p_rows,
    verdict,
)


def overlap_rule(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> np.ndarray:
    """The old rule (``reports/aggregate.separated``): call a difference when the arms' Student-t seed
    intervals, mean ± t_{n−1} · s / √n each, do not overlap. a, b: ``[..., seeds]``; bool ``[...]``."""
    n = a.shape[-1]
    t = stats.t.ppf((1 + level) / 2, n - 1)
    half_a = t * a.std(-1, ddof=1) / math.sqrt(n)
    half_b = t * b.std(-1, ddof=1) / math.sqrt(n)
    ma, mb = a.mean(-1), b.mean(-1)
    return (mb - half_b > ma + half_a) | (ma - half_a > mb + half_b)


def seed_bootstrap_many(
    d: np.ndarray, *, n_boot: int = 2000, level: float = 0.95, expand: bool = True, rng=None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`paired_bootstrap`'s interval for per-seed differences, for many samples at once:
    d ``[samples, seeds]`` → (low, high), each ``[samples]`` (the seeds resampled, the expanded
    percentile interval); for simulations, where one call per sample would be slow."""
    rng = np.random.default_rng(0) if rng is None else rng
    k, n = d.shape
    lvl = expanded_level(level, n) if expand else level
    low, high = np.empty(k), np.empty(k)
    chunk = max(1, 4_000_000 // (n_boot * n))
    for start in range(0, k, chunk):
        x = d[start : start + chunk]  # [c, seeds]
        idx = rng.integers(0, n, size=(len(x), n_boot, n))  # [c, n_boot, seeds]
        boot = x[np.arange(len(x))[:, None, None], idx].mean(-1)  # [c, n_boot]
        low[start : start + chunk], high[start : start + chunk] = np.quantile(
            boot, [(1 - lvl) / 2, (1 + lvl) / 2], axis=1
        )
    return low, high


def simulate_rule(
    n_seeds: int,
    effect_sd: float,
    rho: float = 0.0,
    n_sim: int = 2000,
    alpha: float = 0.05,
    *,
    margin: float = 0.0,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict:
    """The decision rule's error rates on simulated seeds.

    Per replication, n seed outcomes of two arms, (a_s, b_s) ~ N((0, Δ), [[1, ρ], [ρ, 1]]), Δ =
    ``effect_sd`` in units of one arm's seed SD, ρ the within-seed correlation that pairing exploits
    (the paired differences have SD √(2(1 − ρ))). The claim is b > a (``claimed_sign`` +1); ``margin``
    is in seed-SD units. Returns the rates, over ``n_sim`` replications, of each verdict of
    :func:`verdict` on the paired contrast (:func:`sign_flip_p`, and the interval of
    :func:`seed_bootstrap_many`, the same as :func:`paired_bootstrap`'s) (``yes``, ``contradicted``, ``within``, ``underpowered``;
    ``separated`` = yes + contradicted: with Δ = 0 the rule's two-sided type-I error), of the old
    overlap rule (:func:`overlap_rule`: ``overlap``) and of the paired t test at α (``paired_t``).
    """
    if n_seeds < 2:
        raise ValueError(f"n_seeds={n_seeds!r} must be at least 2")
    if not -1 < rho < 1:
        raise ValueError(f"rho={rho!r} must lie in (-1, 1)")
    rng = np.random.default_rng(seed)
    cov = np.array([[1.0, rho], [rho, 1.0]])
    x = rng.multivariate_normal([0.0, effect_sd], cov, size=(n_sim, n_seeds))  # [n_sim, seeds, 2]
    a, b = x[..., 0], x[..., 1]
    d = b - a  # [n_sim, seeds]
    low, high = seed_bootstrap_many(d, n_boot=n_boot, rng=rng)
    counts = dict.fromkeys(VERDICTS, 0)
    p = sign_flip_p_rows(d)  # sign_flip_p of each replication, computed together
    for i in range(n_sim):  # the rule itself, on each replication's contrast
        # per_seed: verdict's t interval needs the d_s (without them "within" was never called)
        c = Contrast(float(d[i].mean()), low[i], high[i], float(p[i]), n_seeds, tuple(d[i]))
        counts[verdict(c, margin=margin, claimed_sign=1, alpha=alpha)] += 1
    t_p = stats.ttest_rel(b, a, axis=1).pvalue
    rate = {k: v / n_sim for k, v in counts.items()}
    return {
        "n_seeds": n_seeds,
        "effect_sd": effect_sd,
        "rho": rho,
        "n_sim": n_sim,
        "alpha": alpha,
        "margin": margin,
        "yes": rate[YES],
        "contradicted": rate[CONTRADICTED],
        "separated": rate[YES] + rate[CONTRADICTED],
        "within": rate[WITHIN],
        "underpowered": rate[UNDERPOWERED],
        "overlap": float(overlap_rule(a, b).mean()),
        "paired_t": float((t_p < alpha).mean()),
    }


def power_paired(effect_sd: float, n_seeds: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired test at α for a standardised paired effect d_z = E[d]/sd(d)
    (:attr:`Contrast.effect_size`; for two arms of seed SD σ, effect Δ and correlation ρ,
    d_z = Δ / (σ √(2(1 − ρ)))): the paired t test's power, from the noncentral t
    (``statsmodels`` ``TTestPower``), which the sign-flip test approaches; 0 where the exact sign-flip
    test cannot reach α at all (its smallest two-sided p, 2^(1−n), is ≥ α: n ≤ 5 at α = 0.05; one seed's
    only p is 1, so a report reading its first confirmatory seed gets 0, not an error)."""
    if n_seeds < 1:
        raise ValueError(f"n_seeds={n_seeds!r} must be at least 1")
    if 2.0 ** (1 - n_seeds) >= alpha:
        return 0.0
    if isinstance(n_seeds, (int, np.integer)) and isinstance(effect_sd, (int, float)):
        block, at = divmod(int(n_seeds) - 2, POWER_BLOCK)
        return _power_block(abs(float(effect_sd)), float(alpha), block)[at]
    return float(TTestPower().power(effect_size=abs(effect_sd), nobs=n_seeds, alpha=alpha))


POWER_BLOCK = 64  # power_paired computes the power at this many seed counts in one call


@functools.lru_cache(maxsize=4096)
def _power_block(effect_sd: float, alpha: float, block: int) -> tuple[float, ...]:
    """TTestPower's power for ``effect_sd`` at n = 2 + 64·block … 2 + 64·block + 63 seeds in one
    (elementwise) call, kept: the reports' seed counts (``seeds_for`` counts n up from 2, one call per n;
    ``seeds_needed`` doubles and halves) ask for the curve of one d_z at many n. The same numbers as one
    call per n (tests/test_stats_plan.py compares them)."""
    n = np.arange(2 + POWER_BLOCK * block, 2 + POWER_BLOCK * (block + 1))
    return tuple(float(x) for x in TTestPower().power(effect_size=effect_sd, nobs=n, alpha=alpha))


def seeds_to_call(k: int = 1, alpha: float = 0.05) -> int:
    """The fewest seeds whose exact sign-flip test can call a contrast in a Holm family of ``k``:
    k · 2^(1−n) < α (its smallest two-sided p is 2^(1−n)); 6 for one contrast, 7 for 3, 10 for 14."""
    n = 2
    while k * 2.0 ** (1 - n) >= alpha:
        n += 1
    return n


def seeds_needed(effect_sd: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """The fewest paired seeds with :func:`power_paired` ≥ ``power`` for d_z = ``effect_sd``."""
    if not effect_sd:
        raise ValueError("effect_sd=0: no number of seeds detects a zero effect")

    # searched over n, not solved: statsmodels' solver does not converge for very large d_z (returns NaN
    # or fails). The power rises with n (the t test's, and the exact test's floor 2^(1-n) < alpha), so
    # doubling then halving finds the first n that reaches it (a count from 2 took one call per seed)
    def reaches(n: int) -> bool:  # "not below": statsmodels' NaN for very large d_z counts as reached
        return not power_paired(effect_sd, n, alpha) < power

    lo, hi = 1, 2  # reaches(lo) is False (n = 1 has no test), reaches(hi) is searched for
    while not reaches(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return hi


# ------------------------------------------------------------------------------------------------
# power from the observed paired differences, ties included

EXACT_MANY = 12  # sign_flip_p_many enumerates all 2^n patterns at once up to this many seeds


def sign_flip_p_many(d, alternative: str = "two-sided", *, n_resamples: int = 4000, rng=None) -> np.ndarray:
    """:func:`sign_flip_p` for many samples at once: d ``[samples, seeds]`` → p ``[samples]``, for
    simulations. Exact (all 2^n sign patterns, as :func:`sign_flip_p`) for n ≤ ``EXACT_MANY``; above,
    ``n_resamples`` random sign patterns shared by all samples, p = (1 + #extreme)/(1 + n_resamples)
    (a valid p-value for each sample)."""
    _check_choice("alternative", alternative, ALTERNATIVES)
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.shape[1] == 0:
        raise ValueError(f"d must be [samples, seeds], got shape {d.shape}")
    k, n = d.shape
    if n <= EXACT_MANY:
        signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # [2^n, seeds], ε=1 first
        add, denom = 0, 2**n
    else:
        rng = np.random.default_rng(0) if rng is None else rng
        signs = rng.choice(np.array([-1.0, 1.0]), size=(n_resamples, n))
        add, denom = 1, 1 + n_resamples
    out = np.empty(k)
    chunk = max(1, 4_000_000 // len(signs))
    for start in range(0, k, chunk):
        x = d[start : start + chunk]  # [c, seeds]
        t = x @ signs.T  # [c, patterns]
        obs = x.sum(1, keepdims=True)  # [c, 1]
        tol = 1e-9 * np.maximum(np.abs(x).sum(1, keepdims=True), 1e-300)  # sign_flip_p's tolerance
        if alternative == "greater":
            hits = (t >= obs - tol).sum(1)
        elif alternative == "less":
            hits = (t <= obs + tol).sum(1)
        else:
            hits = (np.abs(t) >= np.abs(obs) - tol).sum(1)
        out[start : start + chunk] = (add + hits) / denom
    return out


TIES = ("conditional", "resample")


def power_sign_flip(
    d,
    alpha: float = 0.05,
    *,
    n_seeds: int | None = None,
    ties: str = "conditional",
    alternative: str = "two-sided",
    n_sim: int = 4000,
    seed: int = 0,
) -> float:
    """The power of the exact sign-flip test (:func:`sign_flip_p`, as the rule uses it) at level α when
    the paired differences are drawn from the observed ones, zero differences (ties) included.

    A zero d_s adds nothing to T(ε) = Σ ε_s d_s, so the test on n seeds with n₀ ties is the test on the
    n − n₀ non-zero ones: its smallest p is 2^(1−(n−n₀)) (two-sided; 2^−(n−n₀) one-sided). With 3 ties
    among 8 seeds that is 2^−4 = 0.0625 ≥ 0.05: the power is 0 whatever the effect, which the
    noncentral-t power of d_z (:func:`power_paired`) does not see.

    - ``ties="conditional"`` (default): the power of the test as run on these seeds, the ties held
      fixed: n' = n − n₀ non-zero differences (scaled to ``n_seeds`` when given: round(n_seeds · n'/n));
      0 if 2^(1−n') ≥ α (one-sided: 2^−n'), else the fraction of ``n_sim`` samples of n' differences
      drawn with replacement from the non-zero d_s whose sign-flip p is < α.
    - ``ties="resample"``: ``n_seeds`` (default n) differences drawn with replacement from all d_s, so
      the number of ties varies as it would in a new run (the bootstrap power curve).

    Like any power at the observed effect, it estimates the power for an effect the size of the one
    seen; use it for planning the next run, not to reinterpret this one's p-value. For α/k (Holm's
    first step in a family of k) pass ``alpha=α/k``.
    """
    _check_choice("ties", ties, TIES)
    _check_choice("alternative", alternative, ALTERNATIVES)
    d = _finite_1d(d)
    if n_seeds is not None and (n_seeds < 1 or int(n_seeds) != n_seeds):
        raise ValueError(f"n_seeds={n_seeds!r} must be a whole number >= 1")
    rng = np.random.default_rng(seed)
    floor = 1 if alternative == "two-sided" else 0  # smallest p = 2^(floor − n')
    if ties == "conditional":
        pool = d[d != 0]
        n_nz = len(pool) if n_seeds is None else round(n_seeds * len(pool) / len(d))
        if n_nz == 0 or 2.0 ** (floor - n_nz) >= alpha:
            return 0.0
    else:
        pool, n_nz = d, len(d) if n_seeds is None else int(n_seeds)
    draws = pool[rng.integers(0, len(pool), size=(n_sim, n_nz))]  # [n_sim, seeds]
    return float((sign_flip_p_many(draws, alternative, rng=rng) < alpha).mean())
