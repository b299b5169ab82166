"""Small pure functions of the run's setup: the device, the seeds of the prompt streams, the index of a
micro-batch, and the resolved config as plain Python."""

from __future__ import annotations

import torch
from omegaconf import DictConfig, OmegaConf

from ssa_repro.core.enums import value_of


def resolve_device(name) -> torch.device:
    """``auto`` is CUDA when present, else the CPU."""
    name = value_of(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def data_seed(seed: int) -> int:
    """The prompt generator's seed: a different stream from the one that initialises the weights."""
    return (seed * 0x9E3779B1 + 0x7F4A7C15) % (2**63)


def rank_data_seed(seed: int, rank: int) -> int:
    """Rank ``rank``'s prompt stream in a data-parallel run (rank 0's is the single-process one)."""
    return (data_seed(seed) + rank) % (2**63)


def micro_batch_index(step: int, micro: int, grad_accum: int, world: int, rank: int) -> int:
    """The data index of a micro-batch: corpus tasks read by index, so rank r of ``world`` processes
    takes every world-th one (a single process: 0, 1, 2, ...). Each optimizer step covers the indices
    step·A·W ... (step+1)·A·W − 1 exactly once across ranks (A = grad_accum, W = world)."""
    return (step * grad_accum + micro) * world + rank


def plain(cfg: DictConfig) -> dict:
    """The resolved config as plain Python (for files, checkpoints and W&B), without Hydra's node."""
    cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
