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

Where seed outcomes are bimodal (a seed generalises or it collapses), :mod:`ssa_repro.stats.binary`
compares the fractions of seeds that generalise; :mod:`ssa_repro.stats.power` gives the rule's error
rates on simulated seeds and its power; :mod:`ssa_repro.stats.tables` builds a table of contrasts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

FLOOR = 1e-12  # the log scale's floor: an MSE of exactly 0 (a perfect fit) stays finite
SCALES = ("identity", "log")
ALTERNATIVES = ("two-sided", "greater", "less")
PROMPT_DESIGNS = ("crossed", "nested")
MAX_EXACT = 30  # sign flips are counted exactly (all 2^n of them) up to this many seeds, sampled above
SIGN_FLIP_RESAMPLES = 100_000  # random sign patterns (seeded) above MAX_EXACT seeds
# how the reports' decision rules name the p: exact only up to MAX_EXACT seeds
SIGN_FLIP_P = f"(exact up to {MAX_EXACT} seeds; above, from {SIGN_FLIP_RESAMPLES:,} seeded random sign patterns)"

YES = "yes"
CONTRADICTED = "contradicted"
WITHIN = "not detected (within ±m)"
UNDERPOWERED = "not detected (underpowered)"
VERDICTS = (YES, CONTRADICTED, WITHIN, UNDERPOWERED)
NONZERO_WITHIN = "non-zero, within ±m"  # only from verdict(..., inside_margin=True)
ALL_VERDICTS = (*VERDICTS, NONZERO_WITHIN)

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
    n_resamples: int = SIGN_FLIP_RESAMPLES,
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
    hits = 0
    for signs in _sign_chunks(n, n_resamples, seed):
        hits += int(_extreme(signs @ d, obs, tol, alternative).sum())
    return (1 + hits) / (1 + n_resamples)


def _sign_chunks(n: int, n_resamples: int, seed: int):
    """The random sign patterns of :func:`sign_flip_p` above ``max_exact``: [m, n] chunks of ±1 (at most
    10,000 rows each: n_resamples × n at once would be large), from ``seed`` alone, so every sample of
    n seeds is tested against the same patterns."""
    rng = np.random.default_rng(seed)
    left = n_resamples
    while left:
        m = min(left, 10_000)
        yield rng.choice(np.array([-1.0, 1.0]), size=(m, n))
        left -= m


def _extreme(t: np.ndarray, obs, tol, alternative: str) -> np.ndarray:
    """Which resampled sums ``t`` are at least as extreme as ``obs`` (ties within ``tol`` count)."""
    if alternative == "greater":
        return t >= obs - tol
    if alternative == "less":
        return t <= obs + tol
    return np.abs(t) >= np.abs(obs) - tol


def sign_flip_p_rows(
    d,
    alternative: str = "two-sided",
    *,
    n_resamples: int = SIGN_FLIP_RESAMPLES,
    seed: int = 0,
    max_exact: int = MAX_EXACT,
) -> np.ndarray:
    """:func:`sign_flip_p` of each row of ``d`` [samples, seeds] → [samples], the same numbers: exact
    rows one by one; above ``max_exact`` seeds the resampled sign patterns depend on n and ``seed``
    only, so they are drawn once and every row is tested against them together (a simulation of the
    decision rule at 60 seeds: 400 replications in about a second, not 20)."""
    _check_choice("alternative", alternative, ALTERNATIVES)
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.shape[1] == 0:
        raise ValueError(f"d must be [samples, seeds], got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("d holds non-finite values")
    k, n = d.shape
    if n <= max_exact:
        return np.array([sign_flip_p(row, alternative, max_exact=max_exact) for row in d])
    obs = d.sum(1)  # [samples]
    tol = 1e-9 * np.maximum(np.abs(d).sum(1), 1e-300)
    hits = np.zeros(k, dtype=np.int64)
    for signs in _sign_chunks(n, n_resamples, seed):
        hits += _extreme(signs @ d.T, obs, tol, alternative).sum(0)  # [m, samples] -> [samples]
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
    contrast: Contrast,
    *,
    margin: float,
    claimed_sign: int,
    alpha: float = 0.05,
    p_adjusted=None,
    inside_margin: bool = False,
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

    With ``inside_margin=True`` (default False: the committed reports' rule), a contrast that would be
    ``"yes"`` or ``"contradicted"`` but whose bootstrap interval and t interval both lie inside [−m, +m]
    is ``"non-zero, within ±m"`` (:data:`NONZERO_WITHIN`): the sign-flip test rejects d = 0 *and* the
    equivalence test rejects |d| ≥ m, so the effect is real but too small to matter (e.g. −0.011 ±
    0.008 against a claimed decrease, m = 0.05: reported as this, not as "contradicted").
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

    def inside() -> bool:  # both intervals inside [−m, m]: the equivalence (TOST-like) call
        if not (-margin <= low and high <= margin):
            return False
        t_low, t_high = student_interval(contrast.per_seed, contrast.level)
        return -margin <= t_low and t_high <= margin

    if significant and (low > 0 or high < 0):
        if inside_margin and inside():
            return NONZERO_WITHIN
        return YES if (low > 0) == (claimed_sign > 0) else CONTRADICTED
    return WITHIN if inside() else UNDERPOWERED


def student_interval(d, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the mean of ``d`` (the per-seed differences): d̄ ± t_{n−1,(1+level)/2} ·
    sd(d, ddof 1)/√n; (NaN, NaN) with fewer than 2 values."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return math.nan, math.nan
    half = stats.t.ppf((1 + level) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean() - half), float(d.mean() + half)


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
