"""Evaluations that read a run folder and store their results in it (``python evaluate.py``).

Each module registers one evaluation (``EVALUATORS``); ``runner.evaluate`` runs one on a loaded run and
``store`` holds the results. Importing this package fills the registry.
"""

from ssa_repro.evaluation import (  # noqa: F401  (fill the registry)
    attention,
    boundary,
    deviant,
    grid,
    lm,  # eval=lm (task=lm)
    runner,  # the presets eval=default and eval=quick
    shift,  # eval=shift (Garg et al.'s function classes)
    zorro,  # eval=zorro (task=mlm)
)
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig

__all__ = ["EVALUATORS", "EvalConfig"]
