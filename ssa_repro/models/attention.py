"""Multi-head causal self-attention whose scoring function is a pluggable :class:`Scorer`."""

from __future__ import annotations

import logging

import torch
from torch import nn

from ssa_repro.kernels import ssa_attention, unsupported
from ssa_repro.scorers import build_scorer
from ssa_repro.scorers.base import Scorer
from ssa_repro.scorers.flex import flex_attend, fused_inference, with_bias

# With AUTO_TRITON, model.attn_impl=auto trains SSA through the fused Triton kernel (ssa_repro/kernels/) on
# CUDA wherever it applies (no additive position bias, head width <= 128, triton installed), except inside
# torch.compile: the alternative is the fused autograd node over [B, H, T, T] scores, which the kernel
# beats at every size measured, fp32 and bf16 (the training step's SSA / softmax ratios: docs/performance.md,
# "The fused SSA attention kernel"). Under train.compile the node is left to inductor, which fuses it
# (compiled SSA about as fast as eager softmax), and the kernel would break the graph. Inference keeps
# compiled FlexAttention.
AUTO_TRITON = True
_auto_failed: list[str] = []  # why the kernel failed under auto (then auto leaves it for the process)
log = logging.getLogger("ssa_repro.train")


def kernel_on_gpu(q: torch.Tensor) -> bool:
    """q [B, H, T, D] is on CUDA and the kernel runs there (:func:`ssa_repro.kernels.unsupported`)."""
    return q.is_cuda and unsupported(q) is None


class SelfAttention(nn.Module):
    def __init__(
        self, n_embd: int, n_head: int, scorer_cfg, causal: bool = True, impl: str = "auto", layer: int = 0
    ):
        super().__init__()
        self.n_head = n_head
        self.causal = causal
        # "auto": the scorer's fast path; "eager": the plain path; "flex": FlexAttention; "triton": the fused
        # SSA kernel (ssa_repro/kernels/)
        self.impl = impl
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
        # where it has none, or prefers its own kernel (softmax: SDPA), or the compile failed. "triton"
        # runs the fused SSA kernel, training and inference; "auto" does so for SSA training on CUDA.
        y = w = None
        params = self._kernel_params(q, bias) if not need_weights else None
        if params is not None:
            y = self._ssa_kernel(q, k, v, params)  # None: it failed under auto (the plain path below)
        elif self.impl == "flex" and not need_weights:
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

    def _kernel_params(self, q, bias):
        """(b, n) [H] when this call runs the fused SSA kernel, else None. ``triton`` insists (a config
        it cannot run was refused by validation; here it raises); ``auto`` takes it for SSA training on
        CUDA where it applies (:data:`AUTO_TRITON`)."""
        if self.impl == "triton":
            params = self.scorer.kernel_params()
            if params is None or bias is not None:
                raise ValueError(
                    "model.attn_impl=triton runs SSA without an additive position bias (model.pos "
                    f"alibi/t5); got scorer {type(self.scorer).__name__}"
                    + (" with a bias" if bias is not None else "")
                )
            return params
        # auto: training only; inference keeps compiled FlexAttention (fused already, and measured)
        if self.impl != "auto" or not AUTO_TRITON or bias is not None or _auto_failed:
            return None
        if not torch.is_grad_enabled() or torch.compiler.is_compiling():
            return None
        if torch._C._functorch.is_batchedtensor(q):  # a seed ensemble's vmap: the kernel has no vmap rule
            return None
        params = self.scorer.kernel_params()  # None for a scorer that is not SSA
        return params if params is not None and kernel_on_gpu(q) else None

    def _ssa_kernel(self, q, k, v, params):
        """The kernel's output [B, H, T, D]; under ``auto``, None after a failure (a GPU whose shared
        memory is too small for the tiles, a compile error), which is warned about once, and the scorer's
        own path serves this and every later call. ``triton`` raises."""
        if self.impl == "triton":
            return ssa_attention(q, k, v, *params, causal=self.causal)
        try:
            return ssa_attention(q, k, v, *params, causal=self.causal)
        except Exception as e:  # auto never fails a run that the plain path can do
            _auto_failed.append(
                f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            )
            log.warning(
                "the fused SSA kernel failed (%s); SSA trains through its autograd node", _auto_failed[0]
            )
            return None
