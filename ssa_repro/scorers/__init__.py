"""Attention scoring functions, chosen by name (``scorer=softmax|ssa|temperature|sparsemax|...``; see README)."""

from ssa_repro.scorers import (  # noqa: F401  (fill the registry)
    cosformer,
    hybrid,
    sa_softmax,
    softmax,
    softplus,
    sparse,
    ssa,
    ssmax,
    temperature,
)
from ssa_repro.scorers.base import Scorer
from ssa_repro.scorers.registry import SCORERS


def build_scorer(cfg, n_head: int) -> Scorer:
    return SCORERS.get(cfg.name)(cfg, n_head)


__all__ = ["SCORERS", "Scorer", "build_scorer"]
