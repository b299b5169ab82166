"""Checkpoints: written atomically (temp file + rename), read with ``weights_only=True``.

A checkpoint is a plain dict of tensors and Python primitives: model and optimizer state, the step,
the RNG states (torch CPU, CUDA if used, and the data generator's), and the resolved config.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

FORMAT = "ssa_repro.checkpoint/1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: truncated, foreign, or from an incompatible run."""


def save(path: Path, state: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save({"format": FORMAT, **state}, tmp)
        with open(tmp, "rb") as f:  # data on disk before the rename makes it visible
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load(path: Path, map_location="cpu") -> dict:
    path = Path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises many kinds (RuntimeError, EOFError, UnpicklingError, KeyError...)
        raise CheckpointError(
            f"cannot read checkpoint {path}: it is truncated or not a torch checkpoint "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). Remove it to start over, "
            "or point hydra.run.dir at another folder."
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not an ssa_repro checkpoint (expected format {FORMAT!r}, "
            f"found {state.get('format') if isinstance(state, dict) else type(state).__name__!r})"
        )
    return state
