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


def position_limit(cfg) -> int | None:
    """The longest prompt (tokens) the model config's scheme takes: ``model.max_positions`` where the
    scheme declares a table (``Positions.table``: learned), None (any length) otherwise."""
    return int(cfg.max_positions) if POSITIONS.get(pos_name(cfg)).table else None


def without_table() -> list[str]:
    """The schemes that take prompts of any length (no ``Positions.table``), sorted by name."""
    return [n for n in POSITIONS.names() if not POSITIONS.get(n).table]


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
    "position_limit",
    "without_table",
]
