"""Multi-head causal self-attention whose scoring function is a pluggable :class:`Scorer`."""

from __future__ import annotations

import torch
from torch import nn

from ssa_repro.scorers import build_scorer
from ssa_repro.scorers.base import Scorer
from ssa_repro.scorers.flex import flex_attend, fused_inference, with_bias


class SelfAttention(nn.Module):
    def __init__(
        self, n_embd: int, n_head: int, scorer_cfg, causal: bool = True, impl: str = "auto", layer: int = 0
    ):
        super().__init__()
        self.n_head = n_head
        self.causal = causal
        self.impl = impl  # "auto": the scorer's fast path; "eager": the plain path; "flex": FlexAttention
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        # layer: 0-based (diff's λ_init); n_embd for scorers that read the layer input (the output gate)
        self.scorer = build_scorer(scorer_cfg, n_head, layer=layer, n_embd=n_embd)

    def forward(self, x: torch.Tensor, need_weights: bool = False, pos=None):
        """x [B, T, C] -> (output [B, T, C], weights [B, H, T, T] or None). ``pos``: the position
        scheme's :class:`~ssa_repro.models.positions.base.PositionContext` (rotation of q and k, an
        additive logit bias), or None."""
        bsz, t, c = x.shape  # [B, T, C]
        q, k, v = self.qkv(x).split(c, dim=2)
        # [B, T, C] -> [B, H, T, C/H]
        q, k, v = (z.view(bsz, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        bias = term = None
        if pos is not None:
            q, k = pos.rotate(q, k)  # RoPE: before any scoring, fused or not
            bias, term = pos.bias, pos.term  # [H, T, T] and its score_mod term
        # The path (ssa_repro/scorers/flex.py): "flex" trains through FlexAttention (CUDA); "auto" with
        # gradients disabled (evaluation) runs the scorer's score_mod in compiled FlexAttention, None
        # where it has none, or prefers its own kernel (softmax: SDPA), or the compile failed.
        y = w = None
        if self.impl == "flex" and not need_weights:
            y = flex_attend(q, k, v, with_bias(self.scorer.score_mod(), term, bias), causal=self.causal)
        elif self.impl == "auto" and not need_weights:
            y = fused_inference(self.scorer, q, k, v, causal=self.causal, bias=bias, term=term)
        if y is None:
            mask = None
            if self.causal:
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()  # [T, S], True = visible
            # eager: Scorer.attend itself (logits -> weights -> weights @ v), skipping fused overrides
            attend = Scorer.attend.__get__(self.scorer) if self.impl == "eager" else self.scorer.attend
            y, w = attend(q, k, v, mask, is_causal=self.causal, need_weights=need_weights, bias=bias)
        y = self.scorer.output(y, x)  # [B, H, T, D]; identity unless the scorer gates its output
        y = y.transpose(1, 2).reshape(bsz, t, c)  # [B, H, T, C/H] -> [B, T, C]
        return self.proj(y), w
