"""Attention scoring functions, chosen by name (``scorer=softmax|ssa|temperature|sparsemax|...``; see README).

Every public module of this package is imported below, and a scorer's module registers it in
``SCORERS`` when imported (modules that register nothing, such as base.py and flex.py, are imported
too): a new scorer needs no line here. An optional dependency is imported inside the function that
uses it, never at a module's top.
"""

import importlib
import inspect
import pkgutil

from ssa_repro.scorers.base import Scorer
from ssa_repro.scorers.registry import SCORERS


def build_scorer(cfg, n_head: int, layer: int = 0, n_embd: int | None = None) -> Scorer:
    """The scorer ``cfg.name`` for a layer of ``n_head`` heads; ``layer`` is the 0-based layer index.

    Scorers whose ``__init__`` takes ``layer`` (differential attention's λ_init depends on it) get it
    there; those written as ``__init__(cfg, n_head)`` get ``scorer.layer`` set after construction.
    Scorers whose ``__init__`` takes ``n_embd`` (the output gate reads the layer input) get the width.
    """
    cls = SCORERS.get(cfg.name)
    params = inspect.signature(cls.__init__).parameters
    if "n_embd" in params:
        if n_embd is None:
            raise ValueError(f"scorer {cfg.name!r} needs the model width: build_scorer(..., n_embd=C)")
        return cls(cfg, n_head, layer=layer, n_embd=n_embd)
    if "layer" in params:
        return cls(cfg, n_head, layer=layer)
    scorer = cls(cfg, n_head)
    scorer.layer = layer
    return scorer


for _module in pkgutil.iter_modules(__path__):  # fill the registry (sorted by name)
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["SCORERS", "Scorer", "build_scorer"]
