"""``model.pos=alibi`` (Press, Smith & Lewis 2022, "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation", arXiv 2108.12409): no embedding; the logits of head h get

    β_h(i, j) = −m_h · |i − j|      (causal: m_h · (j − i) for the visible keys j ≤ i)

with the fixed slopes of the paper's section 3: for n heads, n a power of two, the geometric sequence
m_h = 2^(−8h/n), h = 1 .. n (8 heads: 1/2, 1/4, ..., 1/256). Otherwise (the paper's footnote and its
code) the n' = 2^⌊log₂ n⌋ slopes of n' heads, then every other slope of 2n' heads (the odd-indexed
2^(−4h/n'), h = 1, 3, 5, ...) for the remaining n − n' heads. A bidirectional model gets the symmetric
−m_h|i − j|. The fused path adds the same term inside the score_mod. No table, no parameters."""

from __future__ import annotations

import math

import torch

from ssa_repro.models.positions.base import PositionContext, Positions


def alibi_slopes(n_head: int) -> list[float]:
    """m_h for h = 1 .. n_head (see the module docstring)."""

    def geometric(n: int) -> list[float]:  # 2^(−8h/n), h = 1 .. n
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** int(math.floor(math.log2(n_head)))
    return geometric(p) + geometric(2 * p)[0::2][: n_head - p]


def alibi_bias(slopes: torch.Tensor, t: int, s: int, device=None) -> torch.Tensor:
    """[H, T, S] −m_h·|i − j|, query i aligned with key i + S − T."""
    i = torch.arange(t, device=device)[:, None] + (s - t)
    j = torch.arange(s, device=device)[None, :]
    return -slopes.to(device).view(-1, 1, 1) * (i - j).abs().to(slopes.dtype)


class ALiBiPositions(Positions):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(cfg.n_head)), persistent=False)  # [H]

    def context(self, t, device):
        slopes = self.slopes

        def alibi_term(b, h, q_idx, kv_idx):  # −m_h·|i − j|
            return -slopes[h] * torch.abs(q_idx - kv_idx)

        return PositionContext(bias=alibi_bias(slopes, t, t, device), term=alibi_term)
