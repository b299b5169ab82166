"""CosFormer (Qin et al. 2022; OpenNLPLab/cosFormer): a linear-attention kernel with cos re-weighting.

    a_ij = relu(q_i)·relu(k_j) · cos(π/2 · (i − j)/M),     w_ij = a_ij / Σ_{j visible} a_ij

It needs q and k, not logits (there is no 1/√d scale and no exponential). Since
cos(u − v) = cos u cos v + sin u sin v, a_ij = q̃ᶜ_i·k̃ᶜ_j + q̃ˢ_i·k̃ˢ_j with q̃ᶜ_i = relu(q_i)cos(πi/2M), …,
which gives the causal "right-product" form: running sums Σ_{j≤i} k̃_j v_jᵀ and Σ_{j≤i} k̃_j, linear in
T. Both forms are here and tested equal; ``form: quadratic`` (the masked T×T form, the default) is
much cheaper at these lengths (the running sums are [B, H, T, D, D]); ``form: linear`` is used for the
causal training path only, attention maps always come from the T×T form.

M: the official code uses the sequence length, which makes every weight depend on the total prompt
length (a causal model would see how long its prompt will be). Here M = ``scorer.m``, by default
``model.max_positions``, fixed, so i − j < M and the cosine stays positive. A query with
relu(q_i) = 0 attends to nothing: its row is all zeros (ε in the denominator), the documented
exception to rows summing to 1.

A position scheme's logit bias β (ALiBi, T5) multiplies the kernel by exp(β): a_ij · exp(β_ij), which is
what the bias does to softmax's unnormalised weights exp(x_ij); under ALiBi it is an exponential
decay with distance (as in RetNet). The linear form has no place for it, so biased runs take the
quadratic form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch

from ssa_repro.core.enums import value_of
from ssa_repro.scorers.base import Scorer, ScorerConfig
from ssa_repro.scorers.registry import SCORERS


class CosFormerForm(str, Enum):
    quadratic = "quadratic"
    linear = "linear"


@dataclass
class CosFormerConfig(ScorerConfig):
    name: str = "cosformer"
    m: int = 256  # M; the YAML option sets ${model.max_positions}
    form: CosFormerForm = CosFormerForm.quadratic
    eps: float = 1e-6


def _angles(n: int, m: int, device, dtype) -> torch.Tensor:
    return torch.arange(n, device=device, dtype=dtype) * (math.pi / (2 * m))  # [n]


@SCORERS.register("cosformer", schema=CosFormerConfig)
class CosFormer(Scorer):
    zero_rows_possible = True
    smooth = False  # relu(q), relu(k)

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        out = [] if cfg.m >= 1 else [f"scorer.m={cfg.m} must be >= 1"]
        return out + ([] if cfg.eps > 0 else [f"scorer.eps={cfg.eps} must be > 0"])

    def weights(self, q, k, mask, bias=None):
        """q [B, H, T, D], k [B, H, S, D] -> weights [B, H, T, S] (the masked T×T form)."""
        t, s = q.shape[-2], k.shape[-2]
        if max(t, s) > self.cfg.m:
            raise ValueError(f"CosFormer with scorer.m={self.cfg.m} cannot take {max(t, s)} positions")
        i = torch.arange(t, device=q.device)[:, None]
        j = torch.arange(s, device=q.device)[None, :]
        decay = torch.cos((math.pi / (2 * self.cfg.m)) * (i - j).to(q.dtype))  # [T, S]
        a = (torch.relu(q) @ torch.relu(k).transpose(-2, -1)) * decay
        if bias is not None:
            a = a * bias.to(a.dtype).exp()
        if mask is not None:
            a = a * mask
        return a / a.sum(-1, keepdim=True).clamp_min(self.cfg.eps)

    def forward(self, logits, mask):
        raise TypeError("CosFormer scores q and k, not logits: call weights(q, k, mask) or attend()")

    def attend(self, q, k, v, mask, is_causal=False, need_weights=False, bias=None):
        if need_weights or not is_causal or bias is not None or value_of(self.cfg.form) == "quadratic":
            return super().attend(q, k, v, mask, is_causal, need_weights, bias)
        return self.causal_linear(q, k, v), None

    def causal_linear(self, q, k, v):
        """The right-product form under the causal mask: O(T·D²) instead of O(T²·D)."""
        t = q.shape[-2]
        if t > self.cfg.m:
            raise ValueError(f"CosFormer with scorer.m={self.cfg.m} cannot take {t} positions")
        ang = _angles(t, self.cfg.m, q.device, q.dtype)[:, None]  # [T, 1]
        qr, kr = torch.relu(q), torch.relu(k)
        qc, qs, kc, ks = qr * ang.cos(), qr * ang.sin(), kr * ang.cos(), kr * ang.sin()  # [B, H, T, D]
        kv_c = torch.cumsum(kc.unsqueeze(-1) * v.unsqueeze(-2), dim=2)  # [B, H, T, D, Dv]
        kv_s = torch.cumsum(ks.unsqueeze(-1) * v.unsqueeze(-2), dim=2)
        num = (qc.unsqueeze(-2) @ kv_c).squeeze(-2) + (qs.unsqueeze(-2) @ kv_s).squeeze(-2)  # [B, H, T, Dv]
        den = (qc * kc.cumsum(2)).sum(-1, keepdim=True) + (qs * ks.cumsum(2)).sum(-1, keepdim=True)
        return num / den.clamp_min(self.cfg.eps)
