"""Temperature-scaled softmax: w = softmax(x / τ), τ = exp(t) > 0.

τ is fixed (``learn_tau=false``) or learnable per head (init ``tau``). τ < 1 sharpens, τ > 1 flattens;
whatever τ, the weights stay exponential in the logits, so one large logit still takes nearly all
the weight once its gap exceeds a few τ (the paper's appendix C found no τ that beat plain softmax).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, masked_softmax, param_or_buffer
from ssa_repro.scorers.registry import SCORERS


@dataclass
class TemperatureConfig(ScorerConfig):
    name: str = "temperature"
    tau: float = 1.0  # initial (or fixed) temperature, > 0
    learn_tau: bool = True  # one learnable τ per head


class PerHeadTemperature(torch.nn.Module):
    """τ = exp(t) per head, as [H, 1, 1] to broadcast over [B, H, T, S]; shared by the sparse scorers."""

    def __init__(self, tau: float, learn: bool, n_head: int):
        super().__init__()
        param_or_buffer(self, "log_tau", torch.full((n_head,), math.log(tau)), learn)

    @property
    def tau(self) -> torch.Tensor:  # [H]
        return self.log_tau.exp()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.tau.view(-1, 1, 1).to(logits.dtype)


def check_tau(cfg) -> list[str]:
    # x/τ: below 1e-4 entmax's bisection gives NaN weights (measured at 1e-6 on logits of a few units)
    # and the gradient in τ, −x/τ², leaves float32's range (measured at 1e-20)
    return [] if cfg.tau >= 1e-4 else [f"scorer.tau={cfg.tau} must be >= 1e-4 (> 0; x/τ must stay finite)"]


@SCORERS.register("temperature", schema=TemperatureConfig)
class Temperature(Scorer):
    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        self.temperature = PerHeadTemperature(cfg.tau, cfg.learn_tau, n_head)

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        return check_tau(cfg)

    def forward(self, logits, mask):
        return masked_softmax(self.temperature(logits), mask)

    def score_mod(self):
        tau = self.temperature.tau  # [H]

        def temperature_mod(x, b, h, q_idx, kv_idx):  # x / τ_h
            return x / tau[h]

        return temperature_mod

    def stats(self):
        return {"tau": self.temperature.tau.detach()}
