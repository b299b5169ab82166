"""Position schemes, chosen by name (``model.pos=learned|none|sinusoidal|rope|alibi|t5``; see base.py)."""

from __future__ import annotations

from ssa_repro.core.enums import value_of
from ssa_repro.core.registry import Registry
from ssa_repro.core.schema import Pos
from ssa_repro.models.positions.alibi import ALiBiPositions
from ssa_repro.models.positions.base import PositionContext, Positions
from ssa_repro.models.positions.learned import LearnedPositions
from ssa_repro.models.positions.nope import NoPositions
from ssa_repro.models.positions.rope import RotaryPositions
from ssa_repro.models.positions.sinusoidal import SinusoidalPositions
from ssa_repro.models.positions.t5 import T5Positions

POSITIONS: Registry = Registry("position scheme")
for _name, _cls in (
    ("learned", LearnedPositions),
    ("none", NoPositions),
    ("sinusoidal", SinusoidalPositions),
    ("rope", RotaryPositions),
    ("alibi", ALiBiPositions),
    ("t5", T5Positions),
):
    POSITIONS.register(_name)(_cls)


def pos_name(cfg) -> str:
    """The model config's scheme name."""
    return value_of(cfg.pos)


def build_positions(cfg) -> Positions:
    return POSITIONS.get(pos_name(cfg))(cfg)


__all__ = [
    "POSITIONS",
    "LearnedPositions",
    "Pos",
    "PositionContext",
    "Positions",
    "build_positions",
    "pos_name",
]
