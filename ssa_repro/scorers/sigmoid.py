"""Sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention", arXiv 2409.04431; apple/ml-sigmoid-attention, file
``attention_simulator/src/attention_simulator/layers/attention.py``):

    w_ij = sigmoid(x_ij + β_hi),    β_hi = b_h − log(n_i)   (default: b_h = 0, so β = −log n_i)

for the keys j visible to query i; x [B, H, T, S], n_i the number of keys query i sees (i + 1 under the
causal mask), b [H]. Rows are NOT normalised: w_ij ∈ (0, 1) and Σ_j w_ij is free (n_i/(n_i + 1) when
all logits are 0; about the mean of e^x over the row when n_i is large, since
sigmoid(x − log n) = e^x / (n + e^x)). Masked keys get exactly 0 (the mask is applied after the sigmoid).

Config: ``log_n`` (default true) keeps the −log n_i term; ``bias`` is b's value (default 0) and
``learn_bias`` makes b a parameter per head initialised at ``bias``. So ``learn_bias=true`` starts from
the −log n_i default and learns a per-head offset on top of it, and ``log_n=false, bias=-9`` is the
public code's fixed scalar bias.

Departures from the original: the public code adds one fixed scalar bias to every row, −log(n) with n
the *training sequence length* (its configs: −ln 8192 ≈ −9, or −10); here the default is the per-row
count n_i, so the first query of a causal prompt (one key) gets sigmoid(x) and the last one
sigmoid(x − log T) — the paper's argument for b = −log n (keep the row sum O(1) at init) applied to
each row's own length. The public code's optional temperature (x·e^t) is not included (the model's
q, k projections already set the logits' scale), nor are its kernels.

Contract flags: ``rows_sum_to_one = False`` (no normalisation, as defined); rows are never all zero in
exact arithmetic (sigmoid > 0); smooth (sigmoid has no kink).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, param_or_buffer, visible_count
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SigmoidConfig(ScorerConfig):
    name: str = "sigmoid"
    log_n: bool = True  # β includes −log(n_i), n_i = keys visible to query i
    bias: float = 0.0  # b: added to β (initial value when learn_bias)
    learn_bias: bool = False  # b learnable per head


@SCORERS.register("sigmoid", schema=SigmoidConfig)
class Sigmoid(Scorer):
    rows_sum_to_one = False

    def __init__(self, cfg, n_head: int, layer: int = 0):
        super().__init__(cfg, n_head, layer)
        param_or_buffer(self, "b", torch.full((n_head,), float(cfg.bias)), cfg.learn_bias)

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        beta = self.b.view(-1, 1, 1).to(x.dtype)  # [H, 1, 1]
        if self.cfg.log_n:
            # [T, 1] or [1, 1, 1]; a row with no visible key would give log 0: it is masked anyway
            beta = beta - visible_count(mask, x.shape, x.device).to(x.dtype).clamp_min(1).log()
        w = torch.sigmoid(x + beta)
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)
        return w.to(logits.dtype)

    def stats(self):
        return {"bias": self.b.detach()} if self.cfg.learn_bias else {}
