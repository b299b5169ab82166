"""Adaptive-scalable α-entmax (ASEntmax; Vasylenko, Pitorro, Martins, Treviso, "Long-Context
Generalization with Sparse Attention", ICLR 2026, arXiv 2506.16640; deep-spin/asentmax): α-entmax of
logits whose query carries a learned, length-dependent temperature,

    w_i = α-entmax(s_i · x_i + β_i)      x_ij = q_i·k_j/√d,  β the position scheme's bias (ALiBi, T5)
    s_i = δ + softplus(a_i) · ℓ_i^{γ_i},  γ_i = γ_r · tanh(g_i),  ℓ_i = log(n_i + 1)

per head, with n_i the keys query i sees (i + 1 under the causal mask, so ℓ_i = log(i + 2) as in the
public code's ``log_position``, which starts at log 2 to avoid log 1 = 0), δ = ``delta`` (1) and
γ_r = ``gamma_range`` (2), the public defaults (``attn_scale_type: adapt-softplus-tanh``). α = 1.5 is
the exact sort-based ``entmax.entmax15``, other α the bisection ``entmax_bisect``; α is fixed.

a_i and g_i are affine in the head's query: a_i = w_a,h·q_i + b_a,h, g_i = w_g,h·q_i + b_g,h (w [H, D],
b [H]). **Departure:** the public model computes them from the layer's hidden state h_i (a linear map
[C → H]); q_i = W_q,h h_i is itself linear in h_i, so this is the same family restricted to the query's
row space (D parameters a head instead of C), and it keeps the scorer a function of (q, k) as every
other scorer here is — the contract tests, the fused fallback and Hugging Face models need nothing else.
The public model also scales only the NoPE half of its NAPE heads; here every head is scaled (the
position scheme is ``model.pos``). The scale multiplies q, so a position bias is added unscaled, as
there. Init: w ~ N(0, 0.02²) (the model's linear maps), b = 0, so s ≈ 1 + log 2 · ℓ^0 ≈ 1.69 at first.
Entmax is piecewise smooth (kinks where the support changes): ``smooth = False``; no FlexAttention
``score_mod`` (not a softmax of anything), so evaluation takes the plain path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import entmax
import torch
from torch import nn

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, visible_count
from ssa_repro.scorers.registry import SCORERS


@dataclass
class ASEntmaxConfig(ScorerConfig):
    name: str = "asentmax"
    alpha: float = 1.5  # fixed α in (1, 2]; 1.5 uses the exact entmax15
    delta: float = 1.0  # δ, the scale's floor
    gamma_range: float = 2.0  # γ_r: γ = γ_r · tanh(·) ∈ (−γ_r, γ_r)
    n_iter: int = 50  # bisection iterations when α ≠ 1.5 (float64 uses at least 60)


@SCORERS.register("asentmax", schema=ASEntmaxConfig)
class ASEntmax(Scorer):
    smooth = False

    def __init__(self, cfg, n_head: int, layer: int = 0, n_embd: int | None = None):
        super().__init__(cfg, n_head, layer)
        d = n_embd // n_head  # head width D
        self.w_a = nn.Parameter(torch.randn(n_head, d) * 0.02)  # [H, D]
        self.b_a = nn.Parameter(torch.zeros(n_head))  # [H]
        self.w_g = nn.Parameter(torch.randn(n_head, d) * 0.02)
        self.b_g = nn.Parameter(torch.zeros(n_head))

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        out = []
        if not 1 < cfg.alpha <= 2:
            out.append(f"scorer.alpha={cfg.alpha} must be in (1, 2] (1.5: entmax15; 2: sparsemax)")
        if cfg.delta < 0:
            out.append(f"scorer.delta={cfg.delta} must be >= 0 (the scale s = δ + β·ℓ^γ stays positive)")
        if not 0 <= cfg.gamma_range <= 20:
            # ℓ^γ with ℓ = log(n + 1): 13.8^20 = 6e22 for a million keys; γ_r = 100 overflowed at 200 keys
            out.append(f"scorer.gamma_range={cfg.gamma_range} must be in [0, 20] (ℓ^γ stays finite)")
        if cfg.n_iter < 1:
            out.append(f"scorer.n_iter={cfg.n_iter} must be >= 1")
        return out

    def scale(self, q: torch.Tensor, mask: torch.Tensor | None, s_len: int) -> torch.Tensor:
        """s [B, H, T, 1] for queries q [B, H, T, D] (see the module docstring)."""
        a = torch.einsum("bhtd,hd->bht", q, self.w_a.to(q.dtype)) + self.b_a.to(q.dtype).view(-1, 1)
        g = torch.einsum("bhtd,hd->bht", q, self.w_g.to(q.dtype)) + self.b_g.to(q.dtype).view(-1, 1)
        n = visible_count(mask, (*q.shape[:-1], s_len), q.device).to(q.dtype)  # [.., T, 1] or [1, 1, 1]
        ell = torch.log1p(n)  # log(n + 1) ≥ log 2
        gamma = self.cfg.gamma_range * torch.tanh(g)
        return self.cfg.delta + nn.functional.softplus(a).unsqueeze(-1) * ell ** gamma.unsqueeze(-1)

    def weights(self, q, k, mask, bias=None):
        """q [B, H, T, D], k [B, H, S, D] -> weights [B, H, T, S]; the scale multiplies q·kᵀ/√d, the
        position bias is added after it."""
        x = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        z = at_least_float32(x) * at_least_float32(self.scale(q, mask, k.shape[-2]))
        if bias is not None:
            z = z + bias
        if mask is not None:
            z = z.masked_fill(~mask, float("-inf"))
        if self.cfg.alpha == 1.5:
            w = entmax.entmax15(z, dim=-1)
        else:
            n_iter = self.cfg.n_iter if z.dtype != torch.float64 else max(self.cfg.n_iter, 60)
            w = entmax.entmax_bisect(z, self.cfg.alpha, dim=-1, n_iter=n_iter)
        return w.to(q.dtype)

    def forward(self, logits, mask):
        raise TypeError(
            "scorer=asentmax scales the logits by a function of the query: call weights(q, k, mask), "
            "not the scorer on logits alone"
        )
