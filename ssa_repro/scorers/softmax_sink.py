"""Softmax with a sink logit, "softmax-1" / off-by-one attention when s = 0:

    w_ij = e^{x_ij} / (e^{s_h} + Σ_{k visible} e^{x_ik})

over the keys j visible to query i; x [B, H, T, S], s [H]. It is a softmax over the visible keys plus
one extra key whose logit is s_h and whose value is 0, so rows sum to 1 − e^{s}/(e^{s} + Σ e^x) < 1
and a query can attend to (almost) nothing. Computed exactly that way: s is appended as an extra
column, a softmax is taken over S + 1 entries (max-shifted, so e^x never overflows) and the column is
dropped.

Sources: "softmax-1" / off-by-one attention (E. Miller, "Attention Is Off By One", 2023, a blog post
with no code); the learnable per-head sink logit of the attention-sink line of work (e.g. Xiao et al.
2023, "Efficient Streaming Language Models with Attention Sinks", arXiv 2309.17453,
mit-han-lab/streaming-llm; gpt-oss's per-head learned sinks). No reference file was compared; the
formula above is the whole definition. ``learn_s`` (default true): s is a parameter per head, init
``s`` (0); ``learn_s=false`` fixes it (the ``softmax_one`` preset: s = 0, Miller's softmax-1).

Not expressible as a FlexAttention score_mod (the e^{s} term sits in the denominator only), so it has
none.

Contract flags: ``rows_sum_to_one = False`` (the sink takes part of every row); never an all-zero
row; smooth.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, param_or_buffer
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SoftmaxSinkConfig(ScorerConfig):
    name: str = "softmax_sink"
    s: float = 0.0  # initial (or fixed) sink logit, per head
    learn_s: bool = True


@SCORERS.register("softmax_sink", schema=SoftmaxSinkConfig)
class SoftmaxSink(Scorer):
    rows_sum_to_one = False

    def __init__(self, cfg, n_head: int, layer: int = 0):
        super().__init__(cfg, n_head, layer)
        param_or_buffer(self, "s", torch.full((n_head,), float(cfg.s)), cfg.learn_s)

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        if mask is not None:
            x = x.masked_fill(~mask, float("-inf"))
        sink = self.s.to(x.dtype).view(1, -1, 1, 1).expand(*x.shape[:-1], 1)  # [B, H, T, 1]
        w = torch.softmax(torch.cat([x, sink], dim=-1), dim=-1)[..., :-1]  # [B, H, T, S]
        return w.to(logits.dtype)

    def stats(self):
        # a fixed sink (softmax_one) is a constant, not a parameter to follow over training
        return {"s": self.s.detach()} if isinstance(self.s, torch.nn.Parameter) else {}
