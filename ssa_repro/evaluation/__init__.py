"""Evaluations that read a run folder and write tables and figures into it (``python evaluate.py``)."""

from ssa_repro.evaluation import linear_grid, quantifier_grid  # noqa: F401  (fill the registry)
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig

__all__ = ["EVALUATORS", "EvalConfig"]
