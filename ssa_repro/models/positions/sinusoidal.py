"""``model.pos=sinusoidal`` (Vaswani et al. 2017, "Attention Is All You Need", section 3.5): the fixed
embedding added to the token embeddings,

    PE(t, 2i) = sin(t / 10000^(2i/C)),    PE(t, 2i + 1) = cos(t / 10000^(2i/C)),    i = 0 .. C/2 − 1

computed for any t (no table, no parameters; C = ``model.n_embd``, which must be even)."""

from __future__ import annotations

import math

import torch

from ssa_repro.models.positions.base import Positions

BASE = 10000.0


def sinusoidal_table(t: int, c: int, device=None) -> torch.Tensor:
    """[T, C] float32: PE(t, 2i) = sin(t·ω_i), PE(t, 2i+1) = cos(t·ω_i), ω_i = 10000^(−2i/C)."""
    pos = torch.arange(t, device=device, dtype=torch.float64)[:, None]  # [T, 1]
    omega = torch.exp(torch.arange(0, c, 2, device=device, dtype=torch.float64) * (-math.log(BASE) / c))
    pe = torch.stack([torch.sin(pos * omega), torch.cos(pos * omega)], dim=-1)  # [T, C/2, 2]
    return pe.reshape(t, c).float()


class SinusoidalPositions(Positions):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.n_embd = cfg.n_embd

    @classmethod
    def check_config(cls, cfg):
        if cfg.n_embd % 2:
            return [f"model.pos=sinusoidal needs an even model.n_embd (sin/cos pairs); it is {cfg.n_embd}"]
        return []

    def embedding(self, t, device):
        return sinusoidal_table(t, self.n_embd, device)
