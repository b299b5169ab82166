"""One helper for the str-valued enums of the config schemas."""

from __future__ import annotations

from enum import Enum


def value_of(x) -> str:
    """An enum member's value, or ``str(x)`` for anything else (OmegaConf may hand over either)."""
    return x.value if isinstance(x, Enum) else str(x)
