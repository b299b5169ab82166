"""Softmax: w_ij = exp(x_ij) / Σ_{k visible} exp(x_ik), x = q·kᵀ/√d_head."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from ssa_repro.scorers.base import Scorer, ScorerConfig, masked_softmax
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SoftmaxConfig(ScorerConfig):
    name: str = "softmax"


@SCORERS.register("softmax", schema=SoftmaxConfig)
class Softmax(Scorer):
    # SDPA keeps no T×T tensor; its eager path is already one fused kernel, and compiling it changed
    # the step by +3% and -3% in two runs (noise; docs/performance.md)
    attention_tensors = 0
    compile_gains = False

    def forward(self, logits, mask):
        return masked_softmax(logits, mask)

    def score_mod(self):
        return lambda x, b, h, q_idx, kv_idx: x

    def attend(self, q, k, v, mask, is_causal=False, need_weights=False):
        if need_weights:
            return super().attend(q, k, v, mask, is_causal, need_weights)
        # Fused kernel, same math (tested equal to the plain path in tests/test_scorers.py).
        if is_causal:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None
