"""Scaled Signed Averaging (SSA), arXiv 2508.14685.

For the logits x_ij = q_i·k_j/√d_head of the keys j visible to query i:

    w_ij = (1 + b|x_ij|)^(sgn(x_ij)·n) / Σ_k (1 + b|x_ik|)^(sgn(x_ik)·n),    b > 0, n >= 1

computed in the equivalent, overflow-free softmax-of-log form

    w_i = softmax_j( t(x_ij) ),   t(x) = n·sgn(x)·log1p(b|x|)

(the literal power overflows float32 once n·log1p(b|x|) > 88.7; here the max is subtracted as in any
softmax). t is odd and C¹ with t'(x) = n·b / (1 + b|x|), so t'(0) = n·b: the sign is chosen with
``where(x >= 0)`` and t = s·n·log1p(b·s·x), which has that exact derivative at 0 (a form built from
torch.sign/abs would give 0 there). The mask is applied after the transform.

Parameters, per head (default; the paper's appendix B) or one pair per layer: b = exp(β), n = 1 +
softplus(ν), so b > 0 and n >= 1 whatever the optimiser does; each can train or stay fixed at its
initial value (fixed ones are buffers, still saved in checkpoints). With b = 1/m, n = m, m -> ∞, SSA
tends to softmax. Unlike softmax it is not shift-invariant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ssa_repro.scorers.base import Scorer, at_least_float32, masked_softmax
from ssa_repro.scorers.registry import SCORERS


@dataclass
class SSAConfig:
    name: str = "ssa"
    per_head: bool = True  # one (b, n) per head (paper appendix B), or one pair per layer
    b_init: float = 1.0  # b > 0, parameterised b = exp(beta)
    n_init: float = 1.5  # n >= 1, parameterised n = 1 + softplus(nu); n_init > 1 when learn_n
    learn_b: bool = True
    learn_n: bool = True


def ssa_transform(x: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """t(x) = n·sgn(x)·log1p(b|x|) with the exact derivative n·b at x = 0. b, n broadcast against x."""
    s = torch.where(x >= 0, 1.0, -1.0).to(x.dtype)
    return s * n * torch.log1p(b * (s * x))


def inverse_softplus(y: float) -> float:
    """nu with softplus(nu) = y; y = 0 gives -inf (n fixed at exactly 1)."""
    if y == 0:
        return float("-inf")
    return y + math.log(-math.expm1(-y))  # log(exp(y) - 1), stable for large y


@SCORERS.register("ssa", schema=SSAConfig)
class SSA(Scorer):
    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        size = n_head if cfg.per_head else 1
        beta = torch.full((size,), math.log(cfg.b_init))
        nu = torch.full((size,), inverse_softplus(cfg.n_init - 1.0))
        self._param_or_buffer("beta", beta, cfg.learn_b)
        self._param_or_buffer("nu", nu, cfg.learn_n)

    @classmethod
    def check_config(cls, cfg) -> list[str]:
        out = []
        if not cfg.b_init > 0:
            out.append(f"scorer.b_init={cfg.b_init} must be > 0")
        if not cfg.n_init >= 1:
            out.append(f"scorer.n_init={cfg.n_init} must be >= 1")
        elif cfg.learn_n and cfg.n_init == 1:
            out.append(
                "scorer.n_init=1 with scorer.learn_n=true: n = 1 + softplus(nu) reaches 1 only in the "
                "limit; use n_init > 1 or learn_n=false"
            )
        return out

    def _param_or_buffer(self, name, value, learn):
        if learn:
            setattr(self, name, nn.Parameter(value))
        else:
            self.register_buffer(name, value)

    @property
    def b(self) -> torch.Tensor:  # [H] or [1]
        return self.beta.exp()

    @property
    def n(self) -> torch.Tensor:  # [H] or [1]
        return 1.0 + nn.functional.softplus(self.nu)

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]; bf16 logits would lose the small weights
        b = self.b.view(-1, 1, 1)  # [H|1, 1, 1] broadcasts over [B, H, T, S]
        n = self.n.view(-1, 1, 1)
        return masked_softmax(ssa_transform(x, b, n), mask).to(logits.dtype)

    def stats(self):
        return {"b": self.b.detach(), "n": self.n.detach()}
