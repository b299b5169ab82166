"""Self-Adjust Softmax (Zheng et al. 2025, arXiv 2502.18277; code in HKUDS/SepLLM), as in scorers.md:

    w_ij = softmax_j(x_ij) · (x_ij − min(m_i, 0)) / (max(M_i, 0) − min(m_i, 0))

with m_i, M_i the smallest and largest logit among the keys query i can see. There is NO
renormalisation: rows do not sum to 1 (about 0.7 on average at N(0, 1) logits). The first query sees
one key: its weight is 1 if that logit is positive and exactly 0 if it is negative (the query then
reads nothing). A row of all-zero logits has 0/0: a tiny ε in the denominator makes it 0. Computed in
float32 or float64 (one public version casts to fp16, which this does not).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, masked_softmax
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SASoftmaxConfig(ScorerConfig):
    name: str = "sa_softmax"


@SCORERS.register("sa_softmax", schema=SASoftmaxConfig)
class SASoftmax(Scorer):
    rows_sum_to_one = False
    smooth = False  # min(·, 0) and max(·, 0) have kinks at 0

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        big = torch.finfo(x.dtype).max
        lo = (x if mask is None else x.masked_fill(~mask, big)).amin(-1, keepdim=True).clamp(max=0)
        hi = (x if mask is None else x.masked_fill(~mask, -big)).amax(-1, keepdim=True).clamp(min=0)
        scale = (x - lo) / (hi - lo).clamp_min(1e-12)  # an all-zero row: 0, with a finite gradient
        w = masked_softmax(x, mask) * scale
        return w.to(logits.dtype)
