"""Paired statistics across seeds: the decision rule the study reports use (docs/statistics.md).

Two arms (say softmax, the ``base``, and SSA) are compared *paired by seed*: seed s gives both arms the
same initial weights and training prompts, and both are evaluated on the same prompts. Per seed s the
difference is

    d_s = m(b_s) − m(a_s)                (scale="identity": error rates, shares)
    d_s = log m(b_s) − log m(a_s)        (scale="log": MSE-type metrics; a ratio of MSEs)

where m(·) is the seed's metric: the value itself for per-seed input ``[seeds]``, or the mean over the
shared prompts for per-prompt input ``[seeds, prompts]`` (the metric as defined, e.g. MSE = the mean of
squared errors; on the log scale the log is taken of that mean, floored at ``FLOOR``). The estimate is
d̄ = mean_s d_s, and a contrast reports

- an interval: :func:`paired_bootstrap`, a hierarchical percentile bootstrap (seeds, and prompts jointly
  for both arms), expanded for few seeds;
- a p-value: :func:`sign_flip_p`, the exact sign-flip (paired permutation) test of d̄ over seeds;
- a verdict: :func:`verdict` with an equivalence margin per metric (:data:`MARGINS`), after Holm's
  correction (:func:`holm`) across the contrasts of a table (:func:`contrast_table`).

Where seed outcomes are bimodal (a seed generalises or it collapses), :func:`fraction_test` compares the
fractions of seeds that generalise with Fisher's exact test. :func:`simulate_rule` gives the rule's
error rates on simulated seeds (and the old "intervals do not overlap" rule's), :func:`power_paired`
the power for a given effect.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.power import TTestPower

FLOOR = 1e-12  # the log scale's floor: an MSE of exactly 0 (a perfect fit) stays finite
SCALES = ("identity", "log")
ALTERNATIVES = ("two-sided", "greater", "less")
PROMPT_DESIGNS = ("crossed", "nested")
MAX_EXACT = 30  # sign flips are counted exactly (all 2^n of them) up to this many seeds, sampled above

YES = "yes"
CONTRADICTED = "contradicted"
WITHIN = "not detected (within ±m)"
UNDERPOWERED = "not detected (underpowered)"
VERDICTS = (YES, CONTRADICTED, WITHIN, UNDERPOWERED)

MARGINS: dict[str, float] = {
    "sequence_error": 0.05,
    "token_error": 0.02,
    "error_at_inserted": 0.05,
    "error_after_inserted": 0.02,
    "error_elsewhere": 0.02,
    "follows_largest": 0.05,
    "attention_on_inserted": 0.05,
    "attention_on_inserted_max_head": 0.05,
    "mse": math.log(1.1),
    "mse_last": math.log(1.1),
    "mse_untouched": math.log(1.1),
    "mse_inserted": math.log(1.1),
    "mse_after_inserted": math.log(1.1),
    "zorro_accuracy": 2.0,
    "mlm_loss": 0.02,
    "perplexity": math.log(1.02),
    "task_accuracy": 0.02,
}
"""Equivalence margins m per metric, on the metric's contrast scale (:data:`METRIC_SCALES`): a difference
inside ±m is too small to matter for the paper's claims, so an interval inside [−m, m] says "not
detected (within ±m)" rather than "underpowered".

- ``sequence_error`` ±0.05 (absolute): below the error of the trivial constant-label predictor on the
  unbalanced quantifier tasks (1/16 = 0.0625), and the margin the review proposed for a "no"; the
  paper's effects are failures (0.3–0.9), an order of magnitude larger.
- ``token_error`` ±0.02: token error averages over the 18–77 scored positions of a prompt, so the same
  failure moves it less than sequence error; 0.02 is about one wrong token per prompt at L = 40–80.
- ``error_at_inserted``, ``follows_largest`` ±0.05: rates on the deviant prompts, as sequence error
  (the sign error at the 1–2 inserted positions is one decision per insertion, like a sequence's).
- ``error_after_inserted``, ``error_elsewhere`` ±0.02: shares of wrong tokens over many positions, as
  token error.
- ``attention_on_inserted`` (and ``_max_head``) ±0.05: about one uniform token's share (0.036–0.071 on
  the study's prompts), against a collapse threshold of 0.5.
- ``mse``, ``mse_last`` and the deviant ``mse_untouched``, ``mse_inserted``, ``mse_after_inserted``
  ±log(1.1) on the log scale: an MSE ratio within ±10%. The paper claims SSA
  improves out-of-distribution MSE "substantially"; a ratio inside 1/1.1–1.1 rules that out.
- ``zorro_accuracy`` ±2 (percentage points, Zorro accuracy in %): the paper's table 3 names gains of
  3.4–8.3 points (SSA-2 on agreement across a relative clause +6.05, SSA-1.5 on irregular verbs +8.25,
  on pronoun gender +3.35); ±2 rules those out, and is about one binomial standard error of a paradigm
  scored on 500 pairs.
- ``mlm_loss`` ±0.02 nats (held-out masked-LM cross entropy): a perplexity ratio within ±2%; the
  paper claims no loss difference for the encoder, and 0.02 is below the spread between the CPU runs'
  scorers seen so far (docs/corpus_tasks.md, 0.01–0.03).
- ``perplexity`` ±log(1.02) on the log scale: a ratio within ±2%, a sixth of the paper's 12.6% (31.7 →
  27.7).
- ``task_accuracy`` ±0.02 (a share, LM-eval accuracy): the paper's table-2 gains run from +0.3 to +11
  points, most 1–3; ±2 points rules out the larger ones and is about one standard error at 500 items.
"""

Margin = MARGINS  # the name the brief gave the table

METRIC_SCALES: dict[str, str] = {m: "log" for m in MARGINS if m.startswith("mse") or m == "perplexity"}
"""The contrast scale per metric (the rest: ``identity``): squared errors and perplexities vary
multiplicatively."""


def _check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; allowed: {', '.join(map(repr, allowed))}")


def _finite_1d(d, name: str = "d") -> np.ndarray:
    d = np.asarray(d, dtype=float)
    if d.ndim != 1 or len(d) == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of per-seed values, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError(
            f"{name} holds non-finite values at seeds {np.flatnonzero(~np.isfinite(d)).tolist()}"
        )
    return d


# ------------------------------------------------------------------------------------------------
# the sign-flip test


def _signed_sums(d: np.ndarray) -> np.ndarray:
    """All 2^len(d) values of Σ_s ε_s d_s, ε ∈ {−1, +1}^n, by doubling (each seed adds ±d_s to every
    partial sum)."""
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate([sums + x, sums - x])
    return sums


def sign_flip_p(
    d,
    alternative: str = "two-sided",
    *,
    n_resamples: int = 100_000,
    seed: int = 0,
    max_exact: int = MAX_EXACT,
) -> float:
    """The sign-flip (paired permutation) p-value of the mean paired difference d̄ = mean_s d_s.

    H0: each d_s is symmetric about 0 (the arms' labels are exchangeable within a seed), so every sign
    pattern ε ∈ {−1, +1}^n is equally likely and T(ε) = Σ_s ε_s d_s (n·d̄ at ε = 1) has a known null
    distribution:

        p = #{ε : T(ε) ≥ T_obs} / 2^n          ("greater")
        p = #{ε : T(ε) ≤ T_obs} / 2^n          ("less")
        p = #{ε : |T(ε)| ≥ |T_obs|} / 2^n      ("two-sided"; = 2·min of the one-sided, the null being
                                                symmetric)

    exactly for n ≤ ``max_exact`` (the identity ε is counted, so p ≥ 2^−n: with n seeds the smallest
    two-sided p is 2^(1−n), 0.25 for 3 seeds, 0.031 for 6), else by ``n_resamples`` random sign
    patterns with a fixed ``seed``: p = (1 + #extreme) / (1 + n_resamples), which is still a valid
    p-value. Ties count as extreme (with a relative tolerance of 1e-9 for float rounding).

    The exact count splits the seeds in two halves, T = T₁ + T₂, enumerates the 2^(n/2) values of each
    and counts the pairs with T₁ + T₂ beyond a bound by a binary search in the sorted T₂: all 2^n sign
    patterns are counted in O(2^(n/2) · n) time and memory.
    """
    _check_choice("alternative", alternative, ALTERNATIVES)
    d = _finite_1d(d)
    n = len(d)
    obs = float(d.sum())
    tol = 1e-9 * max(float(np.abs(d).sum()), 1e-300)
    if n <= max_exact:
        t1, t2 = _signed_sums(d[: n // 2]), np.sort(_signed_sums(d[n // 2 :]))

        def at_least(bound: float) -> int:  # #{(i, j): t1_i + t2_j >= bound}
            return int((len(t2) - np.searchsorted(t2, bound - t1, side="left")).sum())

        def at_most(bound: float) -> int:  # #{(i, j): t1_i + t2_j <= bound}
            return int(np.searchsorted(t2, bound - t1, side="right").sum())

        if alternative == "greater":
            count = at_least(obs - tol)
        elif alternative == "less":
            count = at_most(obs + tol)
        elif abs(obs) <= tol:
            count = 2**n  # T_obs = 0: every pattern is as extreme
        else:
            count = at_least(abs(obs) - tol) + at_most(tol - abs(obs))
        return count / 2**n
    rng = np.random.default_rng(seed)
    hits, left = 0, n_resamples
    while left:  # in chunks: n_resamples × n signs at once would be large
        m = min(left, 10_000)
        t = rng.choice(np.array([-1.0, 1.0]), size=(m, n)) @ d
        if alternative == "greater":
            hits += int((t >= obs - tol).sum())
        elif alternative == "less":
            hits += int((t <= obs + tol).sum())
        else:
            hits += int((np.abs(t) >= abs(obs) - tol).sum())
        left -= m
    return (1 + hits) / (1 + n_resamples)


# ------------------------------------------------------------------------------------------------
# the bootstrap interval


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim not in (1, 2) or a.size == 0:
        raise ValueError(
            f"a and b must have the same shape [seeds] or [seeds, prompts] (paired by seed, the same "
            f"prompts for both arms), got {a.shape} and {b.shape}"
        )
    for name, x in (("a", a), ("b", b)):
        if not np.isfinite(x).all():
            raise ValueError(
                f"{name} holds non-finite values (at seeds {sorted(set(np.argwhere(~np.isfinite(x))[:, 0].tolist()))})"
            )
    return a, b


def _difference(ma: np.ndarray, mb: np.ndarray, scale: str, floor: float) -> np.ndarray:
    """Per-seed difference of per-seed metrics (any leading shape)."""
    if scale == "log":
        return np.log(np.maximum(mb, floor)) - np.log(np.maximum(ma, floor))
    return mb - ma


def per_seed_differences(a, b, scale: str = "identity", floor: float = FLOOR) -> np.ndarray:
    """d_s for arrays ``[seeds]`` or ``[seeds, prompts]`` (prompts averaged first): see the module."""
    _check_choice("scale", scale, SCALES)
    a, b = _pair(a, b)
    if a.ndim == 2:
        a, b = a.mean(1), b.mean(1)
    return _difference(a, b, scale, floor)


def expanded_level(level: float, n: int) -> float:
    """The percentile level that corrects the bootstrap's narrowness for n seeds (Hesterberg 2015's
    "expanded percentile interval"): the plain percentile interval is about d̄ ± z·s·√((n−1)/n)/√n,
    where Student's interval is d̄ ± t_{n−1}·s/√n; so use the level whose normal quantile is
    z' = t_{n−1, (1+level)/2} · √(n/(n−1)), i.e. level' = 2Φ(z') − 1. For 10 seeds 0.95 → 0.983;
    for 3 seeds it is ≈ 1 (the interval is the range of the resamples)."""
    if n < 2:
        return level
    z = stats.t.ppf((1 + level) / 2, n - 1) * math.sqrt(n / (n - 1))
    return float(2 * stats.norm.cdf(z) - 1)


def paired_bootstrap(
    a,
    b,
    *,
    n_boot: int = 10_000,
    seed: int = 0,
    scale: str = "identity",
    level: float = 0.95,
    expand: bool = True,
    prompts: str = "crossed",
    floor: float = FLOOR,
) -> tuple[float, float, float]:
    """(estimate, low, high): d̄ = mean_s d_s (see the module) with a hierarchical percentile interval.

    a, b: ``[seeds]`` or ``[seeds, prompts]``, row s of both from seed s, column p of both the same
    prompt. Each of ``n_boot`` resamples draws n seeds with replacement (pairs: both arms of a seed move
    together) and, for ``[seeds, prompts]``, P prompts with replacement, the same prompts for both arms;
    it recomputes each drawn seed's metric m (the prompt mean), d_s and d̄*. ``prompts``:

    - ``"crossed"`` (default): one prompt draw per resample, shared by all drawn seeds. The studies
      evaluate every seed on the *same* prompts, so a prompt's effect on the difference is common to
      all seeds and does not average out over seeds; this design keeps that variance.
    - ``"nested"``: a fresh prompt draw within each drawn seed (prompts independent across seeds). On
      shared prompts it shrinks the common prompt variance by the number of seeds: too narrow when
      prompts differ in how they favour an arm (tests/test_stats.py shows it).

    Either way the within-seed prompt noise is counted at both stages, so the interval errs on the wide
    side when that noise dominates (Davison & Hinkley 1997, §3.8; measured in docs/statistics.md).
    The interval is the (1 ∓ level')/2 quantiles of d̄*, with level' = :func:`expanded_level` if
    ``expand`` (the plain percentile interval covers about 0.90 with 10 seeds, 0.85 with 5) else
    ``level``. With one seed there is no interval (NaN, NaN).
    """
    _check_choice("scale", scale, SCALES)
    _check_choice("prompts", prompts, PROMPT_DESIGNS)
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must lie in (0, 1)")
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} must be at least 1")
    a, b = _pair(a, b)
    est = float(per_seed_differences(a, b, scale, floor).mean())
    n = a.shape[0]
    if n < 2:
        return est, math.nan, math.nan
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    # chunks of resamples: the prompt indices [chunk, seeds, prompts] stay around 4M entries
    size = a.shape[1] if a.ndim == 2 else 1
    chunk = max(1, 4_000_000 // (n * size))
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        s_idx = rng.integers(0, n, size=(m, n))  # [m, seeds]: the drawn seeds
        if a.ndim == 1:
            ma, mb = a[s_idx], b[s_idx]
        else:
            if prompts == "nested":  # [m, seeds, prompts]: a fresh draw per drawn seed
                p_idx = rng.integers(0, size, size=(m, n, size))
            else:  # [m, 1, prompts]: one draw shared by all seeds, as the prompts are
                p_idx = rng.integers(0, size, size=(m, 1, size))
            ma = a[s_idx[..., None], p_idx].mean(-1)
            mb = b[s_idx[..., None], p_idx].mean(-1)
        boot[start : start + m] = _difference(ma, mb, scale, floor).mean(-1)
    lvl = expanded_level(level, n) if expand else level
    low, high = np.quantile(boot, [(1 - lvl) / 2, (1 + lvl) / 2])
    return est, float(low), float(high)


# ------------------------------------------------------------------------------------------------
# a contrast and its verdict


@dataclass(frozen=True)
class Contrast:
    """One paired contrast b − a: the estimate d̄ with its bootstrap interval [low, high], the
    sign-flip p-value, the seeds used and their differences d_s, on ``scale``."""

    estimate: float
    low: float
    high: float
    p_value: float
    n_seeds: int
    per_seed: tuple[float, ...]
    scale: str = "identity"
    level: float = 0.95

    @property
    def effect_size(self) -> float:
        """d_z = d̄ / sd(d_s) (ddof 1): the standardised paired effect (:func:`power_paired`'s input);
        NaN with fewer than 2 seeds or no spread."""
        d = np.asarray(self.per_seed)
        if len(d) < 2 or not d.std(ddof=1) > 0:
            return math.nan
        return float(d.mean() / d.std(ddof=1))


def paired_contrast(
    a, b, *, alternative: str = "two-sided", scale: str = "identity", level: float = 0.95, **kw
) -> Contrast:
    """:func:`paired_bootstrap` (keywords ``n_boot``, ``seed``, ``expand``, ``floor``) and
    :func:`sign_flip_p` of the per-seed differences, as a :class:`Contrast` of b − a."""
    est, low, high = paired_bootstrap(a, b, scale=scale, level=level, **kw)
    d = per_seed_differences(a, b, scale, kw.get("floor", FLOOR))
    p = sign_flip_p(d, alternative, seed=kw.get("seed", 0))
    return Contrast(est, low, high, p, len(d), tuple(float(x) for x in d), scale, level)


def verdict(
    contrast: Contrast, *, margin: float, claimed_sign: int, alpha: float = 0.05, p_adjusted=None
) -> str:
    """The decision rule. With p = ``p_adjusted`` (Holm) if given, else the contrast's p-value:

    - ``"yes"``: the interval lies on the claimed side of 0 (low > 0 for ``claimed_sign`` +1, high < 0
      for −1) and p < α;
    - ``"contradicted"``: the same on the other side;
    - ``"not detected (within ±m)"``: otherwise, if the whole interval lies inside [−m, +m]
      (m = ``margin``), and so does Student's t interval of the per-seed differences at the same level,
      d̄ ± t_{n−1} · sd(d_s)/√n (:func:`student_interval`): any effect is too small to matter (an
      equivalence call, TOST-like). The t interval guards the few-seed case: the bootstrap interval
      cannot be wider than the range of the d_s (3 seeds: it covers the mean ~75% of the time), so
      alone it would call equivalence too readily;
    - ``"not detected (underpowered)"``: otherwise (also without an interval, e.g. one seed).
    """
    if claimed_sign not in (-1, 1):
        raise ValueError(f"claimed_sign={claimed_sign!r} must be +1 or -1 (the sign of the claimed b − a)")
    if not margin >= 0:
        raise ValueError(f"margin={margin!r} must be >= 0")
    p = contrast.p_value if p_adjusted is None else p_adjusted
    low, high = contrast.low, contrast.high
    if math.isnan(low) or math.isnan(high):
        return UNDERPOWERED
    significant = p < alpha
    if significant and (low > 0 if claimed_sign > 0 else high < 0):
        return YES
    if significant and (high < 0 if claimed_sign > 0 else low > 0):
        return CONTRADICTED
    if -margin <= low and high <= margin:
        t_low, t_high = student_interval(contrast.per_seed, contrast.level)
        if -margin <= t_low and t_high <= margin:
            return WITHIN
    return UNDERPOWERED


def student_interval(d, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the mean of ``d`` (the per-seed differences): d̄ ± t_{n−1,(1+level)/2} ·
    sd(d, ddof 1)/√n; (NaN, NaN) with fewer than 2 values."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return math.nan, math.nan
    half = stats.t.ppf((1 + level) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean() - half), float(d.mean() + half)


# ------------------------------------------------------------------------------------------------
# bimodal outcomes, multiplicity


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


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment: with the m p-values sorted, p_(1) ≤ … ≤ p_(m),

        p̃_(i) = min(1, max_{j ≤ i} (m − j + 1) · p_(j)),

    and p̃ < α rejects with family-wise error ≤ α. NaN entries (no test) stay NaN and are not counted
    in m."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    q = p[ok]
    if (q < 0).any() or (q > 1).any():
        raise ValueError(f"p-values must lie in [0, 1], got {q[(q < 0) | (q > 1)].tolist()}")
    m = len(q)
    order = np.argsort(q, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * q[order]))
    res = np.empty(m)
    res[order] = adjusted
    out[ok] = res
    return out


# ------------------------------------------------------------------------------------------------
# error rates and power


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
    for i in range(n_sim):  # the rule itself, on each replication's contrast
        c = Contrast(float(d[i].mean()), low[i], high[i], sign_flip_p(d[i]), n_seeds, ())
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
    test cannot reach α at all (its smallest two-sided p, 2^(1−n), is ≥ α: n ≤ 5 at α = 0.05)."""
    if n_seeds < 2:
        raise ValueError(f"n_seeds={n_seeds!r} must be at least 2")
    if 2.0 ** (1 - n_seeds) >= alpha:
        return 0.0
    return float(TTestPower().power(effect_size=abs(effect_sd), nobs=n_seeds, alpha=alpha))


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
    # counted up from 2: statsmodels' solver does not converge for very large d_z (returns NaN or fails)
    n = 2
    while power_paired(effect_sd, n, alpha) < power:  # the exact test's floor, and rounding
        n += 1
    return n


# ------------------------------------------------------------------------------------------------
# tidy tables


def per_seed_frame(rows: Iterable[Mapping], *, value: str = "value", seed_col: str = "seed") -> pd.DataFrame:
    """Records (one per seed × arm × cell …, e.g. ``{"task", "scorer", "seed", "metric", "value"}``)
    as a DataFrame; checks that ``seed_col`` and ``value`` are there and ``value`` is numeric."""
    df = pd.DataFrame(list(rows))
    missing = [c for c in (seed_col, value) if c not in df.columns]
    if missing:
        raise ValueError(f"per-seed rows lack the column(s) {missing}; they have {list(df.columns)}")
    try:
        df[value] = pd.to_numeric(df[value])
    except (TypeError, ValueError) as e:
        raise ValueError(f"column {value!r} must be numeric: {e}") from None
    return df


def _resolve(setting, metric, table: Mapping, what: str):
    """A float/str setting as given, a mapping looked up by metric, None: the module's table."""
    if setting is not None and not isinstance(setting, Mapping):
        return setting
    lookup = table if setting is None else setting
    if metric not in lookup:
        raise ValueError(
            f"no {what} for metric {metric!r}: pass {what}= (a value or a mapping by metric); "
            f"known: {', '.join(sorted(lookup))}"
        )
    return lookup[metric]


def contrast_table(
    df: pd.DataFrame,
    by: str | Sequence[str] = (),
    arm_col: str = "scorer",
    base: str = "softmax",
    value: str = "value",
    seed_col: str = "seed",
    *,
    prompt_col: str | None = None,
    metric_col: str = "metric",
    claimed_sign: int | str = -1,
    margin: float | Mapping[str, float] | None = None,
    scale: str | Mapping[str, str] | None = None,
    family: Sequence[str] | None = None,
    alpha: float = 0.05,
    level: float = 0.95,
    n_boot: int = 10_000,
    boot_seed: int = 0,
) -> pd.DataFrame:
    """One row per contrast: within each group of ``by`` (e.g. task, metric, σ, length), every arm of
    ``arm_col`` other than ``base`` against ``base``, paired by ``seed_col`` (and by ``prompt_col`` when
    given: per-prompt values, a hierarchical bootstrap). Columns: the ``by`` values, ``arm_col``,
    ``base``, ``metric`` (when ``metric_col`` is a column), ``n_seeds``, ``estimate``, ``low``, ``high``,
    ``p_value`` (sign flip), ``p_holm`` (Holm within each ``family`` group, by default the whole table),
    ``verdict``, ``margin``, ``scale``, ``claimed_sign``, ``effect_size``, ``per_seed`` (the d_s, a tuple)
    and ``dropped_seeds`` (seeds without both arms, or with a NaN; left out).

    ``margin`` and ``scale``: a value, a mapping by metric, or None for :data:`MARGINS` /
    :data:`METRIC_SCALES` by the group's ``metric_col`` value. ``claimed_sign``: ±1, or the name of a
    column holding it (constant within a contrast). Each (group, arm, seed[, prompt]) must hold one
    value: a duplicate means a ``by`` column is missing.
    """
    by = [by] if isinstance(by, str) else list(by)
    family = list(family) if family is not None else []
    needed = [*by, arm_col, seed_col, value] + ([prompt_col] if prompt_col else []) + family
    if isinstance(claimed_sign, str):
        needed.append(claimed_sign)
    missing = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing:
        raise ValueError(
            f"contrast_table: column(s) {missing} not in the frame (columns: {list(df.columns)})"
        )
    if [c for c in family if c not in by]:
        raise ValueError(f"family={family} must be a subset of by={by}")
    has_metric = metric_col in df.columns
    if has_metric and metric_col not in by and df[metric_col].nunique() > 1:
        raise ValueError(f"the frame holds several {metric_col!r} values; add {metric_col!r} to by={by}")
    keys = [*by, arm_col, seed_col] + ([prompt_col] if prompt_col else [])
    dup = df.duplicated(keys, keep=False)
    if dup.any():
        raise ValueError(
            f"contrast_table: {int(dup.sum())} rows share {keys} (one value each is needed; is a `by` "
            f"column missing?), e.g. {df.loc[dup, keys].head(3).to_dict('records')}"
        )
    rows = []
    groups = df.groupby(by, sort=False, dropna=False) if by else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        arms = list(dict.fromkeys(g[arm_col]))
        if base not in arms:
            raise ValueError(
                f"contrast_table: group {dict(zip(by, key))} has no {arm_col}={base!r} (has {arms})"
            )
        metric = g[metric_col].iloc[0] if has_metric else None
        m = float(_resolve(margin, metric, MARGINS, "margin"))
        if scale is None or isinstance(scale, Mapping):  # by metric; metrics not named: identity
            sc = (METRIC_SCALES if scale is None else scale).get(metric, "identity")
        else:
            sc = scale
        _check_choice("scale", sc, SCALES)
        for arm in arms:
            if arm == base:
                continue
            pair = g[g[arm_col].isin([base, arm])]
            if prompt_col:
                wide = pair.pivot_table(
                    index=seed_col, columns=[arm_col, prompt_col], values=value, aggfunc="first"
                )
                a_w, b_w = wide[base], wide[arm]
                if set(a_w.columns) != set(b_w.columns):
                    raise ValueError(
                        f"contrast_table: group {dict(zip(by, key))}: {base} and {arm} have different prompts"
                    )
                b_w = b_w[a_w.columns]
                ok = a_w.notna().all(axis=1) & b_w.notna().all(axis=1)
                a, b = a_w[ok].to_numpy(), b_w[ok].to_numpy()
                seeds_all, seeds_ok = list(wide.index), list(wide.index[ok])
            else:
                wide = pair.pivot(index=seed_col, columns=arm_col, values=value)
                ok = wide.notna().all(axis=1)
                a, b = wide.loc[ok, base].to_numpy(), wide.loc[ok, arm].to_numpy()
                seeds_all, seeds_ok = list(wide.index), list(wide.index[ok])
            if isinstance(claimed_sign, str):
                signs = pair[claimed_sign].unique()
                if len(signs) != 1:
                    raise ValueError(f"column {claimed_sign!r} varies within {dict(zip(by, key))}: {signs}")
                sign = int(signs[0])
            else:
                sign = int(claimed_sign)
            if len(seeds_ok):
                c = paired_contrast(a, b, scale=sc, level=level, n_boot=n_boot, seed=boot_seed)
            else:
                c = Contrast(math.nan, math.nan, math.nan, math.nan, 0, (), sc, level)
            rows.append(
                {
                    **dict(zip(by, key)),
                    arm_col: arm,
                    "base": base,
                    **({"metric": metric} if has_metric and metric_col not in by else {}),
                    "n_seeds": c.n_seeds,
                    "estimate": c.estimate,
                    "low": c.low,
                    "high": c.high,
                    "p_value": c.p_value,
                    "margin": m,
                    "scale": sc,
                    "claimed_sign": sign,
                    "effect_size": c.effect_size,
                    "per_seed": c.per_seed,
                    "dropped_seeds": tuple(s for s in seeds_all if s not in seeds_ok),
                    "_contrast": c,
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    if family:
        out["p_holm"] = out.groupby(family, sort=False, dropna=False)["p_value"].transform(
            lambda p: holm(p.to_numpy())
        )
    else:
        out["p_holm"] = holm(out["p_value"].to_numpy())
    out["verdict"] = [
        verdict(c, margin=m, claimed_sign=s, alpha=alpha, p_adjusted=p)
        for c, m, s, p in zip(out["_contrast"], out["margin"], out["claimed_sign"], out["p_holm"])
    ]
    cols = [c for c in out.columns if c not in ("_contrast", "p_holm", "verdict")]
    at = cols.index("p_value") + 1
    return out[cols[:at] + ["p_holm", "verdict"] + cols[at:]]
