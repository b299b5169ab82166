"""Evaluations that read a run folder and store their results in it (``python evaluate.py``).

Each evaluator's module registers one evaluation (``EVALUATORS``); ``runner.evaluate`` runs one on a
loaded run and ``store`` holds the results. Every public module of this package is imported below
(those that register nothing too), so importing the package fills the registry and a new evaluator
needs no line here. An optional dependency (``lm_eval``, the ``lm`` extra) is imported inside the
function that uses it, never at a module's top.
"""

import importlib
import pkgutil

from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig

for _module in pkgutil.iter_modules(__path__):  # fill the registry (sorted by name)
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["EVALUATORS", "EvalConfig"]
