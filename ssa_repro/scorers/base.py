"""The scorer interface: what turns attention logits (or q and k) into attention weights.

A scorer is an ``nn.Module`` built with its config and the number of heads, so it can own parameters
per head (SSA's b and n). The attention module calls :meth:`Scorer.attend`; the default computes the
logits x = q·kᵀ/√d_head and calls :meth:`forward` (logits, mask) -> weights. A scorer that needs q and
k themselves (CosFormer) overrides :meth:`weights`; one with a fused kernel (softmax through SDPA)
overrides :meth:`attend`, and must return the same weights through ``need_weights=True``.
A position scheme's additive bias β [H, T, S] (ALiBi, T5 buckets; ssa_repro/models/positions/) is
added to the scaled logits before the transform: weights = forward(x + β, mask); scorers of q and k
say in their docstring how they take it. One that gates its output with the layer input (gated
attention) overrides :meth:`output`. One whose
output is not plain w @ v (differential attention normalises it per head) overrides :meth:`combine`,
which the plain path (:meth:`attend`, also ``model.attn_impl=eager``) calls.

Masks are boolean, True = the key is visible, broadcastable to [B, H, T, S]. Masking is applied after
the transform, and masked weights are exactly 0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from omegaconf import ListConfig
from torch import nn


@dataclass
class ScorerConfig:
    """Fields every scorer config has. ``label`` names the option in tables, plots and run folders
    (presets such as ``ssa_n2`` share ``name: ssa`` but keep their own label)."""

    name: str = "softmax"
    label: str = "${.name}"


FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # 3.4e38: attention computes in float32 (or less)


def non_finite_values(cfg) -> list[tuple[str, float]]:
    """(key, value) for each float of a scorer config (a dataclass, dict or DictConfig; lists included)
    that is NaN, infinite or beyond float32's range."""
    if dataclasses.is_dataclass(cfg):
        items = [(f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg)]
    else:
        items = [(str(k), cfg[k]) for k in cfg]
    out = []
    for key, value in items:
        values = list(enumerate(value)) if isinstance(value, (list, tuple, ListConfig)) else [(None, value)]
        for i, v in values:
            if isinstance(v, float) and not (math.isfinite(v) and abs(v) <= FLOAT32_MAX):
                out.append((key if i is None else f"{key}[{i}]", v))
    return out


class Scorer(nn.Module):
    # Properties the shared tests (tests/test_scorers.py) hold each scorer to; set them where the
    # definition says otherwise, and document why in the scorer's docstring.
    rows_sum_to_one: bool = True  # False where the definition does not renormalise
    zero_rows_possible: bool = False  # a row may be all zeros (CosFormer with relu(q_i) = 0)
    smooth: bool = True  # differentiable everywhere, exact-zero logits included (no relu / min / max kinks)
    signed: bool = False  # weights may be negative (CogAttn's sgn(x)·softmax(|x|), differential attention)
    # Defined for the causal mask only (stick-breaking orders keys nearest-first before the query);
    # validation refuses such a scorer for a bidirectional model.
    causal_only: bool = False
    # Splits each head's q and k into two halves along the head dimension (differential attention): the
    # head width must be even.
    splits_head_dim: bool = False
    # Read by the layers above (they keep no tables by scorer name): the [B, H, T, T] float32 tensors
    # the scorer's fast path keeps per layer for the backward (training/memory.py; the plain path keeps
    # 4: logits, transformed logits, weights, mask fill), and whether torch.compile gains on it
    # (train.compile=auto; measured in docs/performance.md).
    attention_tensors: int = 4
    compile_gains: bool = True
    # Parameters that act on the attention output (:meth:`output`), not on the weights: the weight
    # tests leave them out (gated attention's gate)
    output_params: tuple[str, ...] = ()

    def __init__(self, cfg, n_head: int, layer: int = 0):
        super().__init__()
        self.cfg = cfg
        self.n_head = n_head
        self.layer = layer  # 0-based index of the attention layer (differential attention's λ_init)

    @classmethod
    def check_config(cls, cfg, n_head: int) -> list[str]:
        """Problems with this scorer's config values (each naming key, value and what is allowed): every
        float of the config is finite and within float32's range (where training computes), then the
        scorer's own ranges (:meth:`check_values`, not asked about a key already reported)."""
        bad = non_finite_values(cfg)
        out = [
            f"scorer.{key}={value} must be a finite number in float32's range (|value| <= {FLOAT32_MAX:.6g})"
            for key, value in bad
        ]
        keys = {f"scorer.{key.split('[')[0]}" for key, _ in bad}
        return out + [p for p in cls.check_values(cfg, n_head) if p.split("=")[0] not in keys]

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        """The scorer's own ranges (a subclass's; its float values are finite by then, NaN excepted)."""
        return []

    def forward(self, logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """logits [B, H, T, S] -> weights [B, H, T, S]."""
        raise NotImplementedError

    def weights(self, q, k, mask, bias: torch.Tensor | None = None) -> torch.Tensor:
        """q [B, H, T, D], k [B, H, S, D] -> weights [B, H, T, S]; ``bias`` [H, T, S] is added to the
        scaled logits."""
        logits = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        if bias is not None:
            logits = logits + bias
        return self(logits, mask)

    def attend(self, q, k, v, mask, is_causal: bool = False, need_weights: bool = False, bias=None):
        """Weighted values [B, H, T, D], and the weights [B, H, T, S] if ``need_weights`` (else None).

        ``is_causal`` says that ``mask`` is the plain causal mask, for kernels that take that shortcut;
        ``bias`` [H, T, S] is a position scheme's additive logit bias (or None).
        """
        w = self.weights(q, k, mask, bias)
        return self.combine(w, v), (w if need_weights else None)

    def output(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The attention output y [B, H, T, D] given the layer input x [B, T, C]: y itself, unless the
        scorer gates it (gated attention)."""
        return y

    def combine(self, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """weights [B, H, T, S], values [B, H, S, D] -> output [B, H, T, D]: w @ v."""
        return w @ v

    def score_mod(self):
        """The scorer as a FlexAttention score_mod ``(x, b, h, q_idx, kv_idx) -> score`` applied to the
        scaled logit x before a softmax (ssa_repro/scorers/flex.py), or None if it is not of that form
        (``model.attn_impl=flex`` then fails validation)."""
        return None

    def kernel_params(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(b, n), each [H] with its autograd intact, if the weights are SSA's softmax_j(t(x)) with
        t(x) = n_h·sgn(x)·log1p(b_h|x|), so the fused kernel (ssa_repro/kernels/, ``model.attn_impl=triton``)
        can compute them; None otherwise (the default)."""
        return None

    def stats(self) -> dict[str, torch.Tensor]:
        """Learnable scalars worth logging, each [H] (or [1] when shared by the layer's heads)."""
        return {}


def param_or_buffer(module: nn.Module, name: str, value: torch.Tensor, learn: bool) -> None:
    """A trainable parameter, or a buffer (saved in checkpoints, never trained) when ``learn`` is false."""
    if learn:
        setattr(module, name, nn.Parameter(value))
    else:
        module.register_buffer(name, value)


def visible_count(mask: torch.Tensor | None, shape: torch.Size, device) -> torch.Tensor:
    """Number of visible keys per query row, [.., T, 1] broadcastable to ``shape`` ([B, H, T, S])."""
    if mask is None:
        return torch.full((1, 1, 1), float(shape[-1]), device=device)
    return mask.sum(-1, keepdim=True).to(torch.float32)


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """Upcast bf16/fp16 to float32; float32 and float64 stay as they are."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last axis with masked entries exactly 0; computed in at least float32 (bf16
    and fp16 logits otherwise lose the small weights), returned in the input dtype."""
    s = at_least_float32(scores)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1).to(scores.dtype)
