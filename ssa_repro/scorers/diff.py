"""Differential attention (Ye et al. 2024, "Differential Transformer", arXiv 2410.05258;
microsoft/unilm, file ``Diff-Transformer/multihead_diffattn.py``, class ``MultiheadDiffAttn``).

Each head's q and k [B, H, T, d] are split along the head dimension into halves q₁, q₂, k₁, k₂ of
width d/2, and the weights are the difference of two softmaxes:

    w = softmax(q₁k₁ᵀ/√(d/2)) − λ · softmax(q₂k₂ᵀ/√(d/2))                    [B, H, T, S]
    λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init,   λ_init = 0.8 − 0.6·exp(−0.3·(l − 1))

with l the 1-based layer (``layer`` here is 0-based: λ_init = 0.8 − 0.6·exp(−0.3·layer)), and λ_q1,
λ_k1, λ_q2, λ_k2 learnable vectors initialised N(0, 0.1²), one set per layer shared by its heads, as
in the original. The output of each head is then normalised and scaled (:meth:`combine`):

    out = (1 − λ_init) · RMSNorm(w @ v),   RMSNorm(y) = y / √(mean_d(y²) + 1e-5)     over each head's d

Weights are signed (the second map is subtracted) and rows sum to 1 − λ. Masked keys get exactly 0
(both softmaxes are masked).

Departures from the original:

- Heads and widths: the original module with ``num_heads = h`` has 2h sub-heads of width d/2 for q
  and k, and h value heads of width d, and its authors halve h against a softmax baseline (so the
  baseline has 2h heads of width d/2). Here the model's own heads are used: n_head = H differential
  heads, each with its d-wide q, k split in two and a d-wide v, which is the original module with
  num_heads = H and the same parameter count as the softmax model it is compared with (same heads,
  same width).
- RMSNorm without its learnable per-channel gain (the scorer is built without knowing d): the
  original's gain, one d-vector per layer shared by the heads, multiplies each head's output just
  before the output projection, which can absorb any such gain, so the function class is unchanged.
- The λ vectors' length is ``lambda_dim`` (default 8), not d/2, for the same reason; it only sets the
  initial spread of λ (λ_q·λ_k has standard deviation 0.01·√lambda_dim at init). d/2 is 8 for the
  default model (64 wide, 4 heads) and 16 for the paper's 256-wide, 8-head model.
- No RoPE (the model's positions are learned absolute embeddings), no GQA, no flash kernels; the
  original's ``nan_to_num`` on the logits is not needed (they are finite).

It scores q and k, not logits (like CosFormer), so it has no saturation number and no score_mod.

Contract flags: ``signed = True``; ``rows_sum_to_one = False`` (rows sum to 1 − λ); never an
all-zero row unless λ = 1; smooth (softmaxes only); ``splits_head_dim = True`` (the head width must be
even).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, masked_softmax
from ssa_repro.scorers.registry import SCORERS


@dataclass
class DiffConfig(ScorerConfig):
    name: str = "diff"
    lambda_dim: int = 8  # length of λ_q1, λ_k1, λ_q2, λ_k2 (the original: d/2)
    lambda_std: float = 0.1  # their initial N(0, std²), as in the original
    norm_eps: float = 1e-5  # RMSNorm's ε, as in the original


def lambda_init_at(layer: int) -> float:
    """λ_init = 0.8 − 0.6·exp(−0.3·(l − 1)) for the 1-based layer l = ``layer`` + 1."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


@SCORERS.register("diff", schema=DiffConfig)
class Diff(Scorer):
    signed = True
    rows_sum_to_one = False
    splits_head_dim = True

    def __init__(self, cfg, n_head: int, layer: int = 0):
        super().__init__(cfg, n_head, layer)
        self.lambda_init = lambda_init_at(layer)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, nn.Parameter(torch.randn(cfg.lambda_dim) * cfg.lambda_std))

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        out = [] if cfg.lambda_dim >= 1 else [f"scorer.lambda_dim={cfg.lambda_dim} must be >= 1"]
        if not 0 <= cfg.lambda_std <= 1:
            # λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2): the dot products of N(0, std²) vectors have variance
            # lambda_dim·std⁴, so std = 10 overflowed exp at the first step (the original: 0.1)
            out.append(f"scorer.lambda_std={cfg.lambda_std} must be in [0, 1] (λ's exponentials stay finite)")
        return out + ([] if cfg.norm_eps > 0 else [f"scorer.norm_eps={cfg.norm_eps} must be > 0"])

    @property
    def lam(self) -> torch.Tensor:
        """λ, a 0-d tensor shared by the layer's heads."""
        q1k1 = (self.lambda_q1 * self.lambda_k1).sum()
        q2k2 = (self.lambda_q2 * self.lambda_k2).sum()
        return q1k1.exp() - q2k2.exp() + self.lambda_init

    def forward(self, logits, mask):
        raise TypeError(
            "diff scores the two halves of q and k, not logits: call weights(q, k, mask) or attend()"
        )

    def weights(self, q, k, mask, bias=None):
        """q [B, H, T, d], k [B, H, S, d] -> signed weights [B, H, T, S]; a position bias [H, T, S] is
        added to both maps' logits."""
        d = q.shape[-1]
        if d % 2:
            raise ValueError(f"diff splits each head's q and k in two halves: head width {d} is odd")
        h, dtype = d // 2, q.dtype
        q, k = at_least_float32(q), at_least_float32(k)  # bf16 would lose the difference's precision
        scale = 1.0 / math.sqrt(h)
        beta = 0.0 if bias is None else bias.to(q.dtype)
        a1 = masked_softmax((q[..., :h] @ k[..., :h].transpose(-2, -1)) * scale + beta, mask)
        a2 = masked_softmax((q[..., h:] @ k[..., h:].transpose(-2, -1)) * scale + beta, mask)
        return (a1 - self.lam.to(a1.dtype) * a2).to(dtype)

    def combine(self, w, v):
        """(1 − λ_init)·RMSNorm(w @ v) per head: [B, H, T, S] x [B, H, S, d] -> [B, H, T, d]."""
        y = at_least_float32(w.to(v.dtype) @ v)
        y = y * torch.rsqrt(y.square().mean(-1, keepdim=True) + self.cfg.norm_eps)
        return (y * (1.0 - self.lambda_init)).to(v.dtype)

    def stats(self):
        return {"lambda": self.lam.detach().view(1)}
