"""The one decision rule of every contrast of every study (issue 58; docs/statistics.md).

Every contrast a report decides (a primary endpoint, a replication's, a claim row, a 2 × 2 design's
effect, an exploratory table's row) goes through :func:`decide`, with the outcome's declared kind
(:class:`Outcome`), its margin m, its claimed sign and its one Holm p (the family's, computed by the
caller from :func:`test_p` of each member). The same kind of outcome gets the same rule everywhere:

- ``continuous`` (an error rate, a share, a score): :func:`~ssa_repro.stats.paired.verdict`, the
  sign-flip test with the bootstrap interval, and "within ±m" where the bootstrap and Student's t
  interval both lie inside [−m, m];
- ``ratio``: the same on the log scale (d_s = log b_s − log a_s; an MSE ratio), the contrast's scale;
- ``bimodal`` (a seed generalises or collapses: its ``threshold`` and ``max_jump``): the same test, but
  "within ±m" only where :func:`~ssa_repro.stats.equivalence.robust_interval` of the d_s lies inside
  [−m, m] too (a jump no seed showed is bounded, not assumed away). With ``decide_by: mcnemar`` the
  exact McNemar test on the seeds' "generalises" indicators (value < threshold), paired by seed, is the
  test: its p enters the Holm family and its direction (more seeds generalise under b than a, n01 >
  n10, means b's error is lower: sign −1) decides yes or contradicted.

"Not detected" is "underpowered" only where the power at the seeds run, for the declared effect d_z at
α/k with the ties seen (:func:`power_with_ties`), is below 0.8; otherwise "not detected (powered for
d_z …)" (:func:`powered`): the design could have seen the planned effect and did not. Without a
declared effect (exploratory rows) the label stays "underpowered": nothing says what it could detect.

A declared d_z and a declared discordance (p10, p01) of the same endpoint must agree: a binary outcome
with jump J and no spread inside its modes has d = J·(x01 − x10) per seed, so

    d_z ≤ (p01 − p10) / √(p01 + p10 − (p01 − p10)²)          (:func:`implied_dz`, spread lowers it)

and the plan uses the smaller of the two (:func:`planned_dz`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ssa_repro.stats.binary import McNemarTest
from ssa_repro.stats.equivalence import robust_interval
from ssa_repro.stats.paired import (
    CONTRADICTED,
    NONZERO_WITHIN,
    UNDERPOWERED,
    WITHIN,
    YES,
    Contrast,
    _check_choice,
    verdict,
)
from ssa_repro.stats.power import power_paired

CONTINUOUS, BIMODAL, RATIO = "continuous", "bimodal", "ratio"
KINDS = (CONTINUOUS, BIMODAL, RATIO)
TESTS = ("sign_flip", "mcnemar")
TARGET_POWER = 0.8
POWERED_PREFIX = "not detected (powered for"


def powered(effect: float) -> str:
    """The verdict "not detected" where the design had ≥ 80% power for the declared d_z ``effect``."""
    return f"{POWERED_PREFIX} d_z {abs(effect):.2g})"


def is_not_detected(v: str) -> bool:
    """Every "not detected" verdict: within ±m, underpowered, or powered for the declared effect."""
    return v in (WITHIN, UNDERPOWERED) or v.startswith(POWERED_PREFIX)


@dataclass(frozen=True)
class Outcome:
    """An outcome's declared kind: ``continuous``, ``ratio`` (log scale) or ``bimodal`` (a seed
    generalises where its value is below ``threshold``; ``max_jump``: the largest jump a seed's value can
    make, 1 for an error rate), and the test that decides it (``decide_by``: ``sign_flip``, or
    ``mcnemar`` for a bimodal outcome)."""

    kind: str = CONTINUOUS
    threshold: float | None = None
    max_jump: float = 1.0
    decide_by: str = "sign_flip"

    def __post_init__(self):
        _check_choice("outcome kind", self.kind, KINDS)
        _check_choice("decide_by", self.decide_by, TESTS)
        if self.kind == BIMODAL and (self.threshold is None or not self.threshold >= 0):
            raise ValueError(f"a bimodal outcome needs threshold >= 0 (got {self.threshold!r})")
        if not self.max_jump > 0:
            raise ValueError(f"max_jump={self.max_jump!r} must be > 0")
        if self.decide_by == "mcnemar" and self.kind != BIMODAL:
            raise ValueError(f"decide_by='mcnemar' needs a bimodal outcome (got kind={self.kind!r})")


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` returns: the estimate and interval (on the contrast's scale), the test that
    decided (``sign_flip`` or ``mcnemar``), its raw p and Holm p, the power at the seeds run for the
    declared effect (NaN without one) and the verdict."""

    estimate: float
    low: float
    high: float
    test: str
    p_value: float
    p_holm: float
    power: float
    verdict: str


def test_p(contrast: Contrast, outcome: Outcome, binary: McNemarTest | None = None) -> float:
    """The raw p the contrast brings to its Holm family: McNemar's where the outcome is decided by it
    (and the indicators are given), else the sign-flip p."""
    if outcome.decide_by == "mcnemar":
        if binary is None:
            raise ValueError("decide_by='mcnemar' needs the seeds' McNemar test (binary=...)")
        return float(binary.p_value)
    return float(contrast.p_value)


def power_with_ties(effect: float, n_seeds: int, alpha: float, tie_rate: float = 0.0) -> float:
    """The sign-flip test's power for d_z ``effect`` at ``alpha`` when each of ``n_seeds`` seeds ties
    (d_s = 0, no information) with probability ``tie_rate``: Σ_m Binom(m; n, 1 − t) · power(d_z, m)
    over the m seeds that do not tie (:func:`~ssa_repro.stats.power.power_paired`, 0 below the seeds
    the exact test needs)."""
    if not 0 <= tie_rate <= 1:
        raise ValueError(f"tie_rate={tie_rate!r} must lie in [0, 1]")
    if n_seeds < 1:
        raise ValueError(f"n_seeds={n_seeds!r} must be at least 1")
    if tie_rate == 0:
        return power_paired(effect, int(n_seeds), alpha)
    m = np.arange(1, n_seeds + 1)
    weights = sps.binom.pmf(m, n_seeds, 1 - tie_rate)
    return float(sum(w * power_paired(effect, int(k), alpha) for w, k in zip(weights, m) if w > 1e-12))


def implied_dz(p10: float, p01: float) -> float:
    """The largest d_z a discordance (p10, p01) allows (module docstring): (p01 − p10) /
    √(p01 + p10 − (p01 − p10)²), the d_z of d = x01 − x10 with no spread inside the modes."""
    if not (0 <= p10 <= 1 and 0 <= p01 <= 1 and p10 + p01 <= 1):
        raise ValueError(f"discordance ({p10!r}, {p01!r}) must be probabilities summing to at most 1")
    delta = p01 - p10
    var = p01 + p10 - delta**2
    return math.inf if var <= 0 else abs(delta) / math.sqrt(var)


def planned_dz(effect: float, discordance=None) -> float:
    """The one planned d_z of an endpoint: its declared ``effect``, or, where its declared
    ``discordance`` (p10, p01) allows less (:func:`implied_dz`), that."""
    if discordance is None:
        return float(effect)
    return min(float(effect), implied_dz(*(float(x) for x in discordance)))


def _mcnemar_verdict(binary: McNemarTest, p: float, claimed_sign: int, alpha: float) -> str | None:
    """yes / contradicted from McNemar's direction (n01 > n10: b generalises more, its error lower,
    sign −1), or None where it does not reject."""
    if not p < alpha or binary.n01 == binary.n10:
        return None
    sign = -1 if binary.n01 > binary.n10 else 1
    return YES if sign == claimed_sign else CONTRADICTED


def decide(
    contrast: Contrast,
    *,
    outcome: Outcome = Outcome(),
    margin: float,
    claimed_sign: int,
    p_holm: float | None = None,
    alpha: float = 0.05,
    effect: float | None = None,
    k: int = 1,
    binary: McNemarTest | None = None,
    inside_margin: bool = True,
) -> Decision:
    """The verdict of one contrast (module docstring): ``p_holm`` its one Holm p (None: its raw p,
    a family of one); ``effect`` the declared d_z, ``k`` the family's size (power at α/k); ``binary``
    the seeds' McNemar test (needed where ``outcome.decide_by`` is ``mcnemar``)."""
    raw = test_p(contrast, outcome, binary)
    p = raw if p_holm is None else float(p_holm)
    v = verdict(
        contrast,
        margin=margin,
        claimed_sign=claimed_sign,
        alpha=alpha,
        p_adjusted=p,
        inside_margin=inside_margin,
    )
    if outcome.decide_by == "mcnemar":
        called = _mcnemar_verdict(binary, p, claimed_sign, alpha)
        if called is not None:
            v = called
        elif v in (YES, CONTRADICTED, NONZERO_WITHIN):  # the sign-flip test does not decide here
            v = verdict(contrast, margin=margin, claimed_sign=claimed_sign, alpha=alpha, p_adjusted=1.0)
    if outcome.kind == BIMODAL and v in (WITHIN, NONZERO_WITHIN):
        low, high = robust_interval(
            contrast.per_seed, threshold=outcome.threshold, max_jump=outcome.max_jump, level=contrast.level
        )
        if not (-margin <= low and high <= margin):
            v = (
                UNDERPOWERED
                if v == WITHIN
                else verdict(contrast, margin=margin, claimed_sign=claimed_sign, alpha=alpha, p_adjusted=p)
            )
    pw = math.nan
    if effect is not None and contrast.n_seeds >= 1:
        ties = float(np.mean(np.asarray(contrast.per_seed) == 0)) if contrast.per_seed else 0.0
        pw = power_with_ties(float(effect), contrast.n_seeds, alpha / k, ties)
        if v == UNDERPOWERED and pw >= TARGET_POWER:
            v = powered(effect)
    return Decision(contrast.estimate, contrast.low, contrast.high, outcome.decide_by, raw, p, pw, v)
