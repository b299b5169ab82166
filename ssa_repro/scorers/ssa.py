"""Scaled Signed Averaging (SSA), arXiv 2508.14685.

For the logits x_ij = q_i·k_j/√d_head of the keys j visible to query i:

    w_ij = (1 + b|x_ij|)^(sgn(x_ij)·n) / Σ_k (1 + b|x_ik|)^(sgn(x_ik)·n),    b > 0, n >= 1

computed in the equivalent, overflow-free softmax-of-log form

    w_i = softmax_j( t(x_ij) ),   t(x) = n·sgn(x)·log1p(b|x|)

(the literal power overflows float32 once n·log1p(b|x|) > 88.7; here the max is subtracted as in any
softmax). t is odd and C¹ with t'(x) = n·b / (1 + b|x|), so t'(0) = n·b: the sign is chosen with
``where(x >= 0)`` and t = s·n·log1p(b·s·x), which has that exact derivative at 0 (a form built from
torch.sign/abs would give 0 there). The mask is applied after the transform.

Parameters, per head (default; the paper's appendix B) or one pair per layer; each can train or stay
fixed at its initial value (fixed ones are buffers, still saved in checkpoints). ``param`` chooses how
the stored numbers (β, ν) map to (b, n):

    constrained (default)  b = exp(β), n = 1 + softplus(ν): b > 0 and n >= 1 whatever the optimiser does
    exp                    b = exp(β), n = exp(ν): the public nanoGPT fork's (n may fall below 1)
    raw                    b = β, n = ν: the public Triton kernel's (nothing keeps b > 0 or n >= 1)

Presets (conf/scorer/): ``ssa`` (learnable b and n per head), ``ssa_n1.5`` and ``ssa_n2`` (n fixed,
the paper's BabyBERTa runs), ``ssa_nanogpt`` (per layer, exp, b = e, n = e^0.4 ≈ 1.49, both learnable)
and ``ssa_triton`` (per layer, raw, n = 1.5 learnable, b = 0.8 fixed).

Training goes through :class:`SSAWeights` (one autograd node with a hand-written backward); the plain
autograd path (``forward``) serves attention maps and ``model.attn_impl=eager``. With b = 1/m, n = m, m -> ∞, SSA
tends to softmax. Unlike softmax it is not shift-invariant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn

from ssa_repro.core.enums import value_of
from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, masked_softmax, param_or_buffer
from ssa_repro.scorers.registry import SCORERS


class SSAParam(str, Enum):
    constrained = "constrained"
    exp = "exp"
    raw = "raw"


@dataclass
class SSAConfig(ScorerConfig):
    name: str = "ssa"
    per_head: bool = True  # one (b, n) per head (paper appendix B), or one pair per layer
    b_init: float = 1.0
    n_init: float = 1.5  # with param=constrained: n_init > 1 when learn_n
    learn_b: bool = True
    learn_n: bool = True
    param: SSAParam = SSAParam.constrained


def ssa_transform(x: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """t(x) = n·sgn(x)·log1p(b|x|) with the exact derivative n·b at x = 0. b, n broadcast against x."""
    s = torch.where(x >= 0, 1.0, -1.0).to(x.dtype)
    return s * n * torch.log1p(b * (s * x))


class SSAWeights(torch.autograd.Function):
    """w = softmax_j(mask(t(x))), t(x) = n·sgn(x)·log1p(b|x|), as one autograd node (the fast path).

    Plain autograd through :func:`ssa_transform` + :func:`masked_softmax` keeps six [B, H, T, S]
    intermediates and runs about a dozen elementwise kernels backwards. Here the forward works in place
    and keeps x, t and w; the backward is ATen's fused softmax backward g_t = w ⊙ (g_w − ⟨g_w, w⟩_row),
    then, in place on g_t,

        ∂t/∂x = n·b / (1 + b|x|),   ∂t/∂b = n·x / (1 + b|x|),   ∂t/∂n = t / n  (= sgn(x)·log1p(b|x|))

    with the per-head sums for b and n taken as batched dot products (bmm of [1, T·S] by [T·S, 1]), so
    no [B, H, T, S] product is materialised for them. Masked entries have w = 0, hence g_t = 0, and add
    nothing. x is [B, H, T, S] float32/float64, b and n are [H|1, 1, 1], mask is bool [T, S] (True =
    visible) or None. Checked against the plain path and with gradcheck (tests/test_fast_paths.py).
    """

    @staticmethod
    def forward(ctx, x, b, n, mask):
        with torch.autocast(x.device.type, enabled=False):  # the maths stays in x's dtype
            # copysign before the factor n: with param=raw, n may be negative
            t = x.abs().mul_(b).log1p_().copysign_(x).mul_(n)
            w = torch.softmax(t if mask is None else t.masked_fill(~mask, float("-inf")), dim=-1)
        ctx.save_for_backward(x, b, n, t if ctx.needs_input_grad[2] else None, w)
        return w

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gw):
        x, b, n, t, w = ctx.saved_tensors
        gt = torch._softmax_backward_data(gw.contiguous(), w, -1, w.dtype)  # [B, H, T, S], fresh
        gb = gn = None
        if ctx.needs_input_grad[2]:
            gn = _head_dot(gt, t).sum_to_size(n.shape) / n
        gt.div_(x.abs().mul_(b).add_(1.0))  # g_t / (1 + b|x|)
        if ctx.needs_input_grad[1]:
            gb = _head_dot(gt, x).sum_to_size(b.shape) * n
        return gt.mul_(n * b), gb, gn, None


def _head_dot(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Σ_{t,s} a·c for each (batch, head): [B, H, T, S] x2 -> [B, H, 1, 1], without a temporary."""
    bsz, h, t, s = a.shape
    return torch.bmm(a.reshape(bsz * h, 1, t * s), c.reshape(bsz * h, t * s, 1)).view(bsz, h, 1, 1)


def inverse_softplus(y: float) -> float:
    """nu with softplus(nu) = y; y = 0 gives -inf (n fixed at exactly 1)."""
    if y == 0:
        return float("-inf")
    return y + math.log(-math.expm1(-y))  # log(exp(y) - 1), stable for large y


@SCORERS.register("ssa", schema=SSAConfig)
class SSA(Scorer):
    attention_tensors = 3  # the fused function (SSAWeights) keeps x, t and w for its backward

    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        size = n_head if cfg.per_head else 1
        self.param = value_of(cfg.param)
        b0, n0 = float(cfg.b_init), float(cfg.n_init)
        if self.param == "constrained":
            beta, nu = math.log(b0), inverse_softplus(n0 - 1.0)
        elif self.param == "exp":
            beta, nu = math.log(b0), math.log(n0)
        else:
            beta, nu = b0, n0
        param_or_buffer(self, "beta", torch.full((size,), beta), cfg.learn_b)
        param_or_buffer(self, "nu", torch.full((size,), nu), cfg.learn_n)

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        # b multiplies every logit inside log1p(b|x|), n multiplies that log (at most 88.7 in float32). Up
        # to 1e30, b|x| stays finite for logits up to |x| = 3e8 (the scorer tests go to 1e4) and n·log1p
        # for any finite b|x|; 1e40 is no float32 at all (inf: NaN logits at the first step).
        out = [
            f"scorer.{k}={v} must be <= 1e30" for k in ("b_init", "n_init") if (v := getattr(cfg, k)) > 1e30
        ]
        if not cfg.b_init > 0:
            out.append(f"scorer.b_init={cfg.b_init} must be > 0")
        param = value_of(cfg.param)
        if param != "constrained":
            if not cfg.n_init > 0:
                out.append(f"scorer.n_init={cfg.n_init} must be > 0")
        elif not cfg.n_init >= 1:
            out.append(f"scorer.n_init={cfg.n_init} must be >= 1 (param=constrained keeps n >= 1)")
        elif cfg.learn_n and cfg.n_init == 1:
            out.append(
                "scorer.n_init=1 with scorer.learn_n=true: n = 1 + softplus(nu) reaches 1 only in the "
                "limit; use n_init > 1 or learn_n=false"
            )
        return out

    @property
    def b(self) -> torch.Tensor:  # [H] or [1]
        return self.beta if self.param == "raw" else self.beta.exp()

    @property
    def n(self) -> torch.Tensor:  # [H] or [1]
        if self.param == "constrained":
            return 1.0 + nn.functional.softplus(self.nu)
        return self.nu.exp() if self.param == "exp" else self.nu

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]; bf16 logits would lose the small weights
        b = self.b.view(-1, 1, 1)  # [H|1, 1, 1] broadcasts over [B, H, T, S]
        n = self.n.view(-1, 1, 1)
        return masked_softmax(ssa_transform(x, b, n), mask).to(logits.dtype)

    def attend(self, q, k, v, mask, is_causal=False, need_weights=False, bias=None):
        if need_weights:  # the plain path (same numbers, tested), whose weights are the maps
            return super().attend(q, k, v, mask, is_causal, need_weights, bias)
        # 1/√d folded into b: t(x/√d) with b equals t(x) with b/√d, which saves a [B, H, T, S] pass
        x = at_least_float32(q @ k.transpose(-2, -1))  # [B, H, T, S] raw q·k
        if bias is not None:  # t(b·(x/√d + β)) = t((b/√d)·(x + √d·β))
            x = x + bias.to(x.dtype) * math.sqrt(q.shape[-1])
        b = self.b.view(-1, 1, 1) * (1.0 / math.sqrt(q.shape[-1]))  # [H|1, 1, 1]
        w = SSAWeights.apply(x, b.to(x.dtype), self.n.view(-1, 1, 1).to(x.dtype), mask)
        return w.to(v.dtype) @ v, None

    def score_mod(self):
        # b, n [H]: per-layer values repeated over the heads, so that per-head and per-layer SSA are one
        # compiled graph (the tensors are kernel inputs, indexed by the head); fresh tensors, not the
        # parameters themselves (param=raw), whose requires_grad would be a graph of its own at inference.
        # Gradients flow through the capture (computed once per forward)
        b, n = (z.expand(self.n_head).clone() for z in (self.b, self.n))

        def ssa_mod(x, batch, h, q_idx, kv_idx):  # t(x) = n_h·sgn(x)·log1p(b_h|x|), as in ssa_transform
            s = torch.where(x >= 0, 1.0, -1.0)
            return s * n[h] * torch.log1p(b[h] * (s * x))

        return ssa_mod

    def kernel_params(self):
        # [H] each: a per-layer pair is expanded over the heads (its gradient sums back through expand)
        return self.b.expand(self.n_head), self.n.expand(self.n_head)

    def stats(self):
        return {"b": self.b.detach(), "n": self.n.detach()}
