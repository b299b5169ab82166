"""Evaluations that read a run folder and write tables and figures into it (``python evaluate.py``)."""

from ssa_repro.evaluation import (  # noqa: F401  (fill the registry)
    attention,
    boundary,
    deviant,
    linear_grid,
    lm,  # eval=lm (task=lm)
    quantifier_grid,
    zorro,
)
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig

__all__ = ["EVALUATORS", "EvalConfig"]
