"""Softpick, the rectified softmax (Zuhri et al. 2025, "Softpick: No Attention Sink, No Massive
Activations with Rectified Softmax", arXiv 2504.20966; zaydzuhri/softpick-attention, file
``naive_softpick_attn.py``):

    w_ij = relu(e^{x_ij} − 1) / (Σ_{k visible} |e^{x_ik} − 1| + ε)

over the keys j visible to query i; x [B, H, T, S]. Keys with x_ij <= 0 get exactly 0, and rows sum to
Σ_{x>0}(e^x − 1) / Σ|e^x − 1| <= 1 (exactly 0 when no visible logit is positive, e.g. the first causal
query whenever its one logit is <= 0). Masked keys get 0 and add nothing to the denominator.

Computed stably, as in the reference, by multiplying numerator and denominator by e^{−M}:
e^{−M}(e^x − 1) = e^{x−M} − e^{−M}. The reference takes M = the row max m; here M = max(m, 0), which
gives the same weights wherever the reference's are finite (if m < 0 every numerator is 0 either way)
and avoids e^{−m} = inf for rows of very negative logits (m < −88 in float32: the reference's weights
are still 0 there, but its gradients are NaN). The
difference e^{x−M} − e^{−M} is formed without cancellation: e^{−M}·expm1(x) for x < 0 and
e^{x−M}·(−expm1(−x)) for x >= 0, each bounded by 1.

ε: the reference adds ε = 1e-8 to the *shifted* denominator (its comment: only useful when every
input is exactly 0), i.e. ε·e^M in the unshifted formula above; this does the same (``eps``).

Departures from the original: none in the weights (M as above; the reference's float32 cast is kept as
"at least float32"); its fused Triton kernels are not used.

Contract flags: ``rows_sum_to_one = False``; ``zero_rows_possible = True`` (all visible logits <= 0);
``smooth = False`` (relu and |·| have kinks at x = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SoftpickConfig(ScorerConfig):
    name: str = "softpick"
    eps: float = 1e-8  # added to the max-shifted denominator, as in the reference


def shifted_expm1(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """e^{−M}·(e^x − 1) for M = ``shift`` >= max(x, 0), without overflow or cancellation."""
    pos, neg = x.clamp(min=0), x.clamp(max=0)  # each branch sees only its own half: finite gradients
    return torch.where(x >= 0, (pos - shift).exp() * -torch.expm1(-pos), (-shift).exp() * torch.expm1(neg))


@SCORERS.register("softpick", schema=SoftpickConfig)
class Softpick(Scorer):
    rows_sum_to_one = False
    zero_rows_possible = True
    smooth = False

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        return [] if cfg.eps >= 0 else [f"scorer.eps={cfg.eps} must be >= 0"]

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        if mask is not None:
            # masked logits may be huge: keep them out of the row max; e^0 − 1 = 0 then also keeps
            # them out of numerator and denominator, with zero gradient
            x = x.masked_fill(~mask, 0.0)
        shift = x.amax(-1, keepdim=True).clamp(min=0)  # M = max(m, 0), [B, H, T, 1]
        d = shifted_expm1(x, shift)  # e^{−M}(e^x − 1), [B, H, T, S]
        w = d.clamp(min=0) / (d.abs().sum(-1, keepdim=True) + self.cfg.eps)
        return w.to(logits.dtype)
