"""Planning the seeds of a study: primary endpoints declared before the runs, each with its planned
effect, and the seeds that give each 80% power at the primary family's Holm level (docs/statistics.md).

An endpoint is continuous (a paired difference per seed: planned d_z = E[d]/sd(d), tested by the
exact sign-flip test, :func:`~ssa_repro.stats.power.power_paired`) or binary (per seed "generalises"
by a declared threshold: planned discordance probabilities (p10, p01), tested by exact McNemar,
:func:`~ssa_repro.stats.binary.power_mcnemar`). With k primary endpoints Holm's first step tests the
smallest p at α/k, so an endpoint planned at α/k has at least its power inside the family.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

import pandas as pd

from ssa_repro.stats.binary import power_mcnemar, seeds_needed_binary
from ssa_repro.stats.paired import _check_choice
from ssa_repro.stats.power import power_paired, seeds_needed

ENDPOINT_KINDS = ("continuous", "binary")


@dataclass(frozen=True)
class Endpoint:
    """A primary endpoint, declared before the runs. ``effect``: the planned d_z (``kind``
    "continuous") or the planned (p10, p01) (``kind`` "binary": P(a generalises, b not), P(b
    generalises, a not)); ``margin``: its equivalence margin on the contrast scale; ``threshold``: for
    a binary endpoint, the error below which a seed generalises."""

    name: str
    kind: str
    effect: float | tuple[float, float]
    margin: float | None = None
    threshold: float | None = None
    metric: str | None = None

    def __post_init__(self):
        _check_choice(f"endpoint {self.name!r}: kind", self.kind, ENDPOINT_KINDS)
        _check_effect(self.effect, self.kind, f"endpoint {self.name!r}: effect")
        if self.kind == "binary" and self.threshold is None:
            raise ValueError(f"endpoint {self.name!r}: a binary endpoint needs its declared threshold")


def _check_effect(effect, kind: str, what: str = "effect") -> None:
    if kind == "continuous":
        if isinstance(effect, (tuple, list)) or not math.isfinite(effect) or effect == 0:
            raise ValueError(f"{what}={effect!r}: a continuous endpoint needs a finite, non-zero d_z")
    elif not (isinstance(effect, (tuple, list)) and len(effect) == 2):
        raise ValueError(f"{what}={effect!r}: a binary endpoint needs (p10, p01)")


def power_for_endpoint(
    effect, n_seeds: int, *, kind: str = "continuous", k: int = 1, alpha: float = 0.05
) -> float:
    """The power at α/k with ``n_seeds`` paired seeds: :func:`power_paired` (d_z; 0 until the exact
    sign-flip test can reach α/k) or :func:`power_mcnemar` ((p10, p01))."""
    _check_choice("kind", kind, ENDPOINT_KINDS)
    _check_effect(effect, kind)
    if k < 1:
        raise ValueError(f"k={k!r} must be at least 1 (the primary endpoints in the Holm family)")
    if kind == "continuous":
        return power_paired(effect, n_seeds, alpha / k)
    return power_mcnemar(*effect, n_seeds, alpha / k)


def seeds_for_endpoint(
    effect, *, kind: str = "continuous", k: int = 1, alpha: float = 0.05, power: float = 0.8
) -> int:
    """The fewest paired seeds with power ≥ ``power`` at Holm's first level α/k, for a planned d_z
    (:func:`seeds_needed`) or a planned (p10, p01) (:func:`seeds_needed_binary`)."""
    _check_choice("kind", kind, ENDPOINT_KINDS)
    _check_effect(effect, kind)
    if k < 1:
        raise ValueError(f"k={k!r} must be at least 1 (the primary endpoints in the Holm family)")
    if kind == "continuous":
        return seeds_needed(effect, power, alpha / k)
    return seeds_needed_binary(*effect, power, alpha, k=k)


def _endpoint(e) -> Endpoint:
    if isinstance(e, Endpoint):
        return e
    if not isinstance(e, Mapping):
        raise ValueError(f"an endpoint must be an Endpoint or a mapping, got {e!r}")
    allowed = {f.name for f in fields(Endpoint)}
    unknown = sorted(set(e) - allowed)
    if unknown:
        raise ValueError(f"endpoint {e.get('name')!r}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    e = dict(e)
    if isinstance(e.get("effect"), list):
        e["effect"] = tuple(e["effect"])
    return Endpoint(**e)


def plan_table(
    endpoints: Iterable[Endpoint | Mapping],
    *,
    k: int | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    n_seeds: int | None = None,
) -> pd.DataFrame:
    """One row per primary endpoint (an :class:`Endpoint` or a mapping of its fields, e.g. from a
    config): ``endpoint``, ``kind``, ``effect`` (as text), ``margin``, ``level`` (α/k, k = the number
    of endpoints unless given), ``seeds for {power}`` and, when ``n_seeds`` is given, ``power at n``.
    The study needs the largest of the seed counts."""
    eps = [_endpoint(e) for e in endpoints]
    if not eps:
        raise ValueError("plan_table: no endpoints")
    k = len(eps) if k is None else k
    rows = []
    for e in eps:
        effect = (
            f"d_z = {e.effect:.3g}"
            if e.kind == "continuous"
            else "p10 = {:.3g}, p01 = {:.3g}".format(*e.effect)
        )
        row = {
            "endpoint": e.name,
            "kind": e.kind,
            "effect": effect,
            "margin": e.margin,
            "level": alpha / k,
            f"seeds for {power:.0%} power": seeds_for_endpoint(
                e.effect, kind=e.kind, k=k, alpha=alpha, power=power
            ),
        }
        if n_seeds is not None:
            row[f"power at {n_seeds} seeds"] = power_for_endpoint(
                e.effect, n_seeds, kind=e.kind, k=k, alpha=alpha
            )
        rows.append(row)
    return pd.DataFrame(rows)
