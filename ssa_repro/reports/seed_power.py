"""What the seeds run can detect, for a report: the decision rule's simulated error rates at a study's
seed counts, the power from the observed per-seed differences (ties included) and the seeds a contrast's
effect, as seen, would need for 80% power (``stats.power``; docs/statistics.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.reports.paired import NOT_LEARNED

POWER_SIMULATIONS = 1000  # resamples per contrast for the sign-flip power: Monte Carlo SE ≤ 0.016


# ------------------------------------------------------------------ the rule and its power
def rule_error_rates(n_seeds: Sequence[int], n_sim: int = 400, rho: float = 0.5) -> pd.DataFrame:
    """The decision rule's simulated error rates (:func:`stats.simulate_rule`) at the study's seed
    counts: the false-positive rate (Δ = 0) and the detection rate at Δ = 1 and 2 seed SDs, with ρ the
    correlation of an arm pair within a seed, beside the old overlap rule's."""
    rows = []
    for n in sorted(set(int(k) for k in n_seeds if k >= 2)):
        for effect in (0.0, 1.0, 2.0):
            r = stats.simulate_rule(n, effect, rho, n_sim=n_sim, n_boot=1000)
            rows.append(
                {
                    "seeds": n,
                    "Δ (seed SDs)": effect,
                    "called (rule)": r["separated"] if effect == 0 else r["yes"],
                    "called (old overlap rule)": r["overlap"],
                    "paired t": r["paired_t"],
                }
            )
    return pd.DataFrame(rows)


def seeds_for(dz: float, power: float = 0.8, most: int = 500, alpha: float = 0.05) -> str:
    """The fewest paired seeds with :func:`stats.power_paired` ≥ ``power`` at ``alpha`` (what
    :func:`stats.seeds_needed` computes, by counting up: its solver fails for very large d_z), or ``> most``."""
    for n in range(2, most + 1):
        if stats.power_paired(dz, n, alpha) >= power:
            return str(n)
    return f"> {most}"


def observed_power(per_seed, alpha: float) -> float:
    """The power of the exact sign-flip test at ``alpha`` for differences like the observed ``per_seed``
    d_s, ties (zero d_s) held as they are (:func:`stats.power_sign_flip`, ``ties="conditional"``): 0
    where the non-zero d_s are too few for the test ever to reach ``alpha`` (3 ties among 8 seeds:
    smallest p 2^−4 = 0.0625), which the normal-theory power of d_z does not see."""
    d = np.asarray(per_seed, dtype=float)
    if len(d) < 2 or not np.any(d):
        return 0.0
    return float(stats.power_sign_flip(d, alpha, n_sim=POWER_SIMULATIONS, seed=0))


def power_table(table: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Per judged contrast with an effect size: the seeds it used (and how many of them tie, d_s = 0),
    its d_z, its Holm family and that family's size k, the power at those seeds from the observed d_s
    (:func:`observed_power`: the exact sign-flip test, ties included) and the seeds needed for 80% power
    at the effect d_z (:func:`seeds_for`, normal theory), both at α/k: Holm's first step, so the power is
    a lower bound and the seeds an upper one. A family of k needs k · 2^(1−n') < α (n' the non-zero d_s)
    before the exact sign-flip test can call anything."""
    judged = table[table.verdict != NOT_LEARNED] if "verdict" in table else table
    rows = []
    for r in judged.itertuples():
        dz = r.effect_size
        if not np.isfinite(dz) or dz == 0:
            continue
        k = int(r.family_k)
        d = np.asarray(r.per_seed, dtype=float)
        rows.append(
            {
                "claim": r.claim,
                "contrast": r.contrast,
                "family": r.family,
                "family k": k,
                "seeds": int(r.n_seeds),
                "ties": int(np.sum(d == 0)),
                "d_z": round(float(dz), 2),
                "power now (sign flip, ties)": round(observed_power(d, alpha / k), 2),
                "seeds for 80%": seeds_for(dz, alpha=alpha / k),
            }
        )
    return pd.DataFrame(rows)
