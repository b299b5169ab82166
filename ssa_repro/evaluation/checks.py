"""The checks evaluators share, each returning the problems it finds as ``eval.<key>=... must ...``
lines (an evaluator's ``check`` concatenates them with its own, before any prompt is drawn)."""

from __future__ import annotations

from ssa_repro.models.positions import position_limit


def prompt_length(length: int, stride: int, model_cfg) -> list[str]:
    """``eval.length`` (examples per prompt, ``stride`` tokens each) against the model's position table
    (``position_limit``: None where the scheme has none, so any length)."""
    limit = position_limit(model_cfg)
    if length < 1:
        return [f"eval.length={length} must be >= 1"]
    if limit is not None and stride * length > limit:
        return [f"eval.length={length} needs {stride * length} tokens, more than model.max_positions={limit}"]
    return []


def positive_values(key: str, values, shown=None) -> list[str]:
    """``eval.<key>`` a non-empty list of values > 0 (``shown``: how the list is printed; default
    ``list(values)``)."""
    if not values or min(values) <= 0:
        return [
            f"eval.{key}={list(values or []) if shown is None else shown} must be a non-empty list of values > 0"
        ]
    return []
