"""Sparse normalisers from the ``entmax`` package: sparsemax, 1.5-entmax and α-entmax.

    sparsemax(z)  = argmin_{p ∈ simplex} ||p − z||²          (Martins & Astudillo 2016)
    α-entmax(z)   = argmax_{p ∈ simplex} pᵀz + H_α(p),  H_α Tsallis entropy   (Peters et al. 2019)

α = 2 is sparsemax, α → 1 is softmax; 1.5-entmax uses the exact sort-based algorithm, ``entmax_alpha``
the bisection one (24 iterations are enough in float32) with α = 1 + sigmoid(a) ∈ (1, 2) learnable per
head (init ``alpha``). All are shift-invariant; masked keys get −inf before the call, so they are
exactly 0. Why a temperature in front (z = x/τ, ``tau``, ``learn_tau``): at the usual 1/√d scale a logit
gap of 1–2 already makes these one-hot, so without one the comparison with softmax mostly measures
the scale of the logits; the default τ = 1 keeps the plain definitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import entmax
import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, param_or_buffer
from ssa_repro.scorers.registry import SCORERS
from ssa_repro.scorers.temperature import Temperature, check_tau


@dataclass
class SparseConfig(ScorerConfig):
    name: str = "sparsemax"
    tau: float = 1.0  # temperature in front: z = x / tau
    learn_tau: bool = False


@dataclass
class Entmax15Config(SparseConfig):
    name: str = "entmax15"


@dataclass
class EntmaxAlphaConfig(SparseConfig):
    name: str = "entmax_alpha"
    alpha: float = 1.5  # initial α in (1, 2), learnable per head
    learn_alpha: bool = True
    n_iter: int = 24  # bisection iterations (float32; float64 inputs use at least 60)


class _Sparse(Temperature):
    """Temperature in front (its τ and checks), then a sparse normaliser instead of softmax."""

    # not a softmax of anything: no FlexAttention score_mod (Temperature's would be wrong here); the
    # base method itself, so validate.py, which compares methods, refuses model.attn_impl=flex
    score_mod = Scorer.score_mod
    # piecewise: sparsemax is linear between kinks where the support changes (entmax likewise), so a
    # finite difference at tied logits is not a derivative (the contract tests use generic inputs)
    smooth = False

    def normalise(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, logits, mask):
        z = at_least_float32(self.temperature(logits))  # [B, H, T, S]
        if mask is not None:
            z = z.masked_fill(~mask, float("-inf"))
        return self.normalise(z).to(logits.dtype)

    def stats(self):
        return {"tau": self.temperature.tau.detach()} if self.cfg.learn_tau else {}


@SCORERS.register("sparsemax", schema=SparseConfig)
class Sparsemax(_Sparse):
    def normalise(self, z):
        return entmax.sparsemax(z, dim=-1)


@SCORERS.register("entmax15", schema=Entmax15Config)
class Entmax15(_Sparse):
    def normalise(self, z):
        return entmax.entmax15(z, dim=-1)


@SCORERS.register("entmax_alpha", schema=EntmaxAlphaConfig)
class EntmaxAlpha(_Sparse):
    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        a0 = math.log((cfg.alpha - 1) / (2 - cfg.alpha))  # sigmoid(a0) = alpha - 1
        param_or_buffer(self, "alpha_logit", torch.full((n_head,), a0), cfg.learn_alpha)

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        out = check_tau(cfg)
        if not 1 < cfg.alpha < 2:
            out.append(f"scorer.alpha={cfg.alpha} must be in (1, 2) (α = 1 + sigmoid(a))")
        if cfg.n_iter < 1:
            out.append(f"scorer.n_iter={cfg.n_iter} must be >= 1")
        return out

    @property
    def alpha(self) -> torch.Tensor:  # [H]
        return 1.0 + torch.sigmoid(self.alpha_logit)

    def normalise(self, z):
        alpha = self.alpha.to(z.dtype).view(1, -1, 1, 1).expand(*z.shape[:-1], 1)  # [B, H, T, 1]
        n_iter = self.cfg.n_iter if z.dtype != torch.float64 else max(self.cfg.n_iter, 60)  # precision of z
        return entmax.entmax_bisect(z, alpha, dim=-1, n_iter=n_iter)

    def stats(self):
        return {**super().stats(), "alpha": self.alpha.detach()}
