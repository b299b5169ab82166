"""Reproducible prompts per cell: every model, on any device, in any grid holding the cell, is scored
on exactly the same prompts."""

from __future__ import annotations

import zlib

import torch


def cell_generator(seed: int, *cell) -> torch.Generator:
    """A CPU generator seeded from the evaluation seed and the cell's values (not its position in a
    list), so a cell gets the same prompts on any device, for any model and in any grid holding it."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(repr((int(seed), *map(float, cell))).encode()))
    return g
