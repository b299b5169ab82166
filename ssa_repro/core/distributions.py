"""1-D distributions as small configs, shared by training and evaluation.

``{kind: normal, mean: 0, std: 1}`` or ``{kind: uniform, low: -1, high: 1}``. Sampling always goes
through an explicit ``torch.Generator`` on the target device, so a seed fixes the draws exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from ssa_repro.core.enums import value_of


class DistKind(str, Enum):
    normal = "normal"
    uniform = "uniform"


@dataclass
class DistConfig:
    """A 1-D distribution: ``normal`` uses mean/std, ``uniform`` uses low/high."""

    kind: DistKind = DistKind.normal
    mean: float = 0.0
    std: float = 1.0
    low: float = -1.0
    high: float = 1.0


def sample(dist, shape: tuple[int, ...], generator: torch.Generator, device) -> torch.Tensor:
    """Draw a float32 tensor of ``shape`` from ``dist``."""
    kind = value_of(dist.kind)
    if kind == "normal":
        z = torch.randn(shape, generator=generator, device=device)
        return z * float(dist.std) + float(dist.mean)
    if kind == "uniform":
        u = torch.rand(shape, generator=generator, device=device)
        return u * (float(dist.high) - float(dist.low)) + float(dist.low)
    raise ValueError(f"unknown distribution kind {kind!r}; allowed: normal, uniform")


def normal(std: float, mean: float = 0.0) -> DistConfig:
    """N(mean, std), the shifted test distributions of the paper's evaluations."""
    return DistConfig(kind=DistKind.normal, mean=mean, std=std)


def is_symmetric(dist) -> bool:
    """Whether the distribution is symmetric about 0 (sign flips leave it unchanged)."""
    kind = value_of(dist.kind)
    if kind == "normal":
        return float(dist.mean) == 0.0
    return float(dist.low) == -float(dist.high)


def check(dist, key: str) -> list[str]:
    """Problems with a distribution config, each naming ``key`` and the bad value."""
    kind = value_of(dist.kind)
    if kind == "normal" and not float(dist.std) > 0:
        return [f"{key}.std={dist.std} must be > 0"]
    if kind == "uniform" and not float(dist.low) < float(dist.high):
        return [f"{key}: uniform needs low < high, got low={dist.low}, high={dist.high}"]
    return []
