"""Attention scoring functions, chosen by name (``scorer=softmax|ssa|temperature|sparsemax|...``; see README)."""

import inspect

from ssa_repro.scorers import (  # noqa: F401  (fill the registry)
    cog,
    cosformer,
    diff,
    hybrid,
    relu_len,
    sa_softmax,
    sigmoid,
    softmax,
    softmax_sink,
    softpick,
    softplus,
    sparse,
    ssa,
    ssmax,
    stickbreaking,
    temperature,
)
from ssa_repro.scorers.base import Scorer
from ssa_repro.scorers.registry import SCORERS


def build_scorer(cfg, n_head: int, layer: int = 0) -> Scorer:
    """The scorer ``cfg.name`` for a layer of ``n_head`` heads; ``layer`` is the 0-based layer index.

    Scorers whose ``__init__`` takes ``layer`` (differential attention's λ_init depends on it) get it
    there; those written as ``__init__(cfg, n_head)`` get ``scorer.layer`` set after construction.
    """
    cls = SCORERS.get(cfg.name)
    if "layer" in inspect.signature(cls.__init__).parameters:
        return cls(cfg, n_head, layer=layer)
    scorer = cls(cfg, n_head)
    scorer.layer = layer
    return scorer


__all__ = ["SCORERS", "Scorer", "build_scorer"]
