"""Scalable-Softmax (SSMax; Nakanishi 2025, arXiv 2501.19399): w_i = softmax(s · log(n_i) · x_i).

n_i is the number of keys query i can see — i + 1 under the causal mask, not the prompt length — and s
is learnable per head (init ``s``). The first query (n = 1) gets log 1 = 0: uniform over its one key.
By design the weights get *more* peaked as the context grows, the opposite direction from SSA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, masked_softmax, param_or_buffer, visible_count
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SSMaxConfig(ScorerConfig):
    name: str = "ssmax"
    s: float = 0.43  # initial scale (Nakanishi's reported value)
    learn_s: bool = True


@SCORERS.register("ssmax", schema=SSMaxConfig)
class SSMax(Scorer):
    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        param_or_buffer(self, "s", torch.full((n_head,), float(cfg.s)), cfg.learn_s)

    def forward(self, logits, mask):
        log_n = visible_count(mask, logits.shape, logits.device).log()  # [T, 1] or [1, 1, 1]
        return masked_softmax(self.s.view(-1, 1, 1) * log_n * logits, mask).to(logits.dtype)

    def score_mod(self):
        """s_h · log(n_i) · x with n_i = q_idx + 1: the visible count under the causal mask only (without
        it n_i is the key count, which a score_mod does not see), hence ``causal_only``."""
        s = self.s  # [H]

        def ssmax_mod(x, b, h, q_idx, kv_idx):
            return s[h] * torch.log((q_idx + 1).to(x.dtype)) * x

        ssmax_mod.causal_only = True
        return ssmax_mod

    def stats(self):
        return {"s": self.s.detach()}
