"""Statistics on the ground floor: paired tests across seeds, intervals, bimodal outcomes, power and
simulation (docs/statistics.md). Imports nothing from the rest of the package; reports/, the study
command and ``ssa-stats-table`` use it, evaluators use :mod:`ssa_repro.stats.intervals`.

- :mod:`~ssa_repro.stats.decision`: the one decision rule of every contrast (:func:`decide`), by the
  outcome's declared kind (continuous, ratio, bimodal; McNemar where declared), with the power label;
- :mod:`~ssa_repro.stats.paired`: the sign-flip test, the paired bootstrap, a contrast and its verdict, Holm;
- :mod:`~ssa_repro.stats.binary`: seeds that generalise or not (Fisher; exact McNemar, its power);
- :mod:`~ssa_repro.stats.power`: the rule's simulated error rates, power (ties included) and the seeds
  needed;
- :mod:`~ssa_repro.stats.plan`: primary endpoints and the seeds for 80% power at Holm's level;
- :mod:`~ssa_repro.stats.factorial`: the 2 × 2 design paired by seed (main effects, interaction);
- :mod:`~ssa_repro.stats.equivalence`: "within ±m" that holds when seeds jump (bimodal outcomes);
- :mod:`~ssa_repro.stats.tables`: one row per contrast from per-seed records;
- :mod:`~ssa_repro.stats.intervals`: intervals over prompts and over seeds.

``from ssa_repro import stats`` gives them all as ``stats.<name>``, each submodule imported on first use
(PEP 562): an evaluator that needs :mod:`~ssa_repro.stats.intervals` alone does not load scipy.stats
and statsmodels' power and tests at every ``train.py`` start.
"""

from __future__ import annotations

import importlib

# name -> the submodule that defines it
_WHERE = {
    "BIMODAL": "decision",
    "CONTINUOUS": "decision",
    "RATIO": "decision",
    "Decision": "decision",
    "Outcome": "decision",
    "POWERED_PREFIX": "decision",
    "decide": "decision",
    "implied_dz": "decision",
    "is_not_detected": "decision",
    "planned_dz": "decision",
    "power_with_ties": "decision",
    "powered": "decision",
    "test_p": "decision",
    "FractionTest": "binary",
    "McNemarTest": "binary",
    "discordance": "binary",
    "fraction_test": "binary",
    "generalises": "binary",
    "mcnemar_exact": "binary",
    "power_mcnemar": "binary",
    "seeds_needed_binary": "binary",
    "jump_bound": "equivalence",
    "robust_interval": "equivalence",
    "robust_verdict": "equivalence",
    "seeds_for_equivalence": "equivalence",
    "simulate_equivalence": "equivalence",
    "factorial_2x2": "factorial",
    "factorial_table": "factorial",
    "log_scale": "intervals",
    "seed_interval": "intervals",
    "summarize": "intervals",
    "wilson": "intervals",
    "ALL_VERDICTS": "paired",
    "ALTERNATIVES": "paired",
    "CONTRADICTED": "paired",
    "FLOOR": "paired",
    "MARGINS": "paired",
    "MAX_EXACT": "paired",
    "METRIC_SCALES": "paired",
    "NONZERO_WITHIN": "paired",
    "PROMPT_DESIGNS": "paired",
    "SCALES": "paired",
    "SIGN_FLIP_P": "paired",
    "SIGN_FLIP_RESAMPLES": "paired",
    "UNDERPOWERED": "paired",
    "VERDICTS": "paired",
    "WITHIN": "paired",
    "YES": "paired",
    "Contrast": "paired",
    "Margin": "paired",
    "expanded_level": "paired",
    "holm": "paired",
    "paired_bootstrap": "paired",
    "paired_contrast": "paired",
    "per_seed_differences": "paired",
    "sign_flip_p": "paired",
    "sign_flip_p_rows": "paired",
    "student_interval": "paired",
    "verdict": "paired",
    "Endpoint": "plan",
    "plan_table": "plan",
    "power_for_endpoint": "plan",
    "seeds_for_endpoint": "plan",
    "overlap_rule": "power",
    "power_paired": "power",
    "power_sign_flip": "power",
    "seed_bootstrap_many": "power",
    "seeds_needed": "power",
    "seeds_to_call": "power",
    "sign_flip_p_many": "power",
    "simulate_rule": "power",
    "contrast_table": "tables",
    "per_seed_frame": "tables",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'ssa_repro.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ssa_repro.stats.{_WHERE[name]}"), name)
    globals()[name] = value  # once: later lookups find it as a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
