"""Softplus attention with length scaling and re-weighting — APPROXIMATE.

After Gao & Spratling 2025 (arXiv 2501.13428), whose code and exact constants could not be retrieved
here; this implements the structure only:

    s_ij = softplus(c · log(n_i) · x_ij)   on the n_i visible keys (0 elsewhere)
    w_ij = s_ij / Σ_j s_ij                 (ℓ1 normalisation)
    w_ij ← w_ij^p / Σ_j w_ij^p             (re-weighting, p >= 1 sharpens; p = 1 is off)

Both steps together are softmax_j(p · log s_ij), which is how it is computed: a row whose softplus
values all underflow (logits of −1e4) still normalises, since log softplus(z) ≈ z for z < −20.

``c`` (``scale``) and ``p`` (``power``) are fixed config values. Treat results with this scorer as
indicative, not as a reproduction of that paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, masked_softmax, visible_count
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SoftplusConfig(ScorerConfig):
    name: str = "softplus"
    scale: float = 1.0  # c
    power: float = 1.0  # p; 1 = no re-weighting


@SCORERS.register("softplus", schema=SoftplusConfig)
class SoftplusAttention(Scorer):
    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        out = [] if cfg.scale > 0 else [f"scorer.scale={cfg.scale} must be > 0"]
        return out + ([] if cfg.power >= 1 else [f"scorer.power={cfg.power} must be >= 1"])

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        z = self.cfg.scale * visible_count(mask, x.shape, x.device).log().to(x.dtype) * x
        # log softplus(z) without underflow; the clamp keeps the unused branch (and its gradient) finite
        log_s = torch.where(z < -20, z, torch.log(F.softplus(z.clamp(min=-20))))
        return masked_softmax(self.cfg.power * log_s, mask).to(logits.dtype)

    def score_mod(self):
        """p · log softplus(c · log(n_i) · x) with n_i = q_idx + 1 (the causal visible count, hence
        ``causal_only``): the value ``forward`` feeds its softmax, so the kernel's softmax is exact."""
        c, p = float(self.cfg.scale), float(self.cfg.power)

        def softplus_mod(x, b, h, q_idx, kv_idx):
            z = c * torch.log((q_idx + 1).to(x.dtype)) * x
            return p * torch.where(z < -20, z, torch.log(F.softplus(z.clamp(min=-20))))

        softplus_mod.causal_only = True
        return softplus_mod
