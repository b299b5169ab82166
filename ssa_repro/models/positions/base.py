"""What a position scheme gives the model (``model.pos``), and what one forward pass takes from it.

A scheme can act in three places, and each scheme uses one of them:

- the input: an embedding [T, C] added to the token embeddings (``learned``, ``sinusoidal``);
- q and k before scoring: a rotation (``rope``), so every scorer sees position only through q·k;
- the logits: an additive bias β_h(i, j) [H, T, S] (``alibi``, ``t5``). The scorers get it as
  ``weights = scorer(x + β)`` with x = q·kᵀ/√d (ssa_repro/scorers/base.py), and the fused path as a
  term of the FlexAttention ``score_mod``: score_mod(x + β_h(q_idx, kv_idx)).

``none`` (NoPE) does none of them: a causal model still tells positions apart through its mask.
Only a scheme with a table (``learned``) limits the prompt to ``model.max_positions`` tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class PositionContext:
    """One forward pass's position information for the attention layers (shared by the layers).

    rotary: (cos, sin), each [T, D/2], or None: q and k are rotated before scoring (RoPE).
    bias:   [H, T, S] additive logit bias, or None.
    term:   ``(b, h, q_idx, kv_idx) -> β`` the same bias as a FlexAttention score_mod term, or None where
            the bias cannot be fused (the plain path then runs, after one warning).
    """

    rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    bias: torch.Tensor | None = None
    term: Callable | None = None

    def rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [B, H, T, D], k [B, H, S, D] rotated by their positions (unchanged without rotary)."""
        if self.rotary is None:
            return q, k
        cos, sin = self.rotary
        return rotate_half_pairs(q, cos, sin), rotate_half_pairs(k, cos, sin)


def rotate_half_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x_i, x_{i+D/2}) of x [.., T, D] by the angles whose cos and sin are [T, D/2]
    (GPT-NeoX's half split). Computed in at least float32, returned in x's dtype."""
    half = x.shape[-1] // 2
    xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    cos, sin = cos.to(xf.dtype), sin.to(xf.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class Positions(nn.Module):
    """A position scheme, built from the model config (n_embd, n_head, max_positions, causal, rope_base)."""

    table = False  # True: positions past model.max_positions have no entry (learned absolute positions)

    def __init__(self, cfg=None):
        super().__init__()

    @classmethod
    def check_config(cls, cfg) -> list[str]:
        """Problems with the model config for this scheme (each naming key, value and what is allowed)."""
        return []

    def embedding(self, t: int, device) -> torch.Tensor | None:
        """[T, C] added to the token embeddings, or None."""
        return None

    def context(self, t: int, device) -> PositionContext | None:
        """What the attention layers need for a prompt of t tokens, or None (nothing)."""
        return None
