"""Small pure functions of the run's setup: the seeds of the prompt streams and the index of a
micro-batch."""

from __future__ import annotations


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
