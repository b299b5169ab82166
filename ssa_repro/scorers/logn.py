"""Log-length query temperature: softmax(s_i · x_ij), a scale s_i ≥ 1 that grows with the query's
position i (0-based), so that attention stays sharp as the context grows (the length-extrapolation
fixes of production long-context models; the same motivation as SSMax, ssmax.py).

    llama4   s_i = 1 + β · log(⌊(i + 1)/L₀⌋ + 1)
             Meta's Llama 4 "attention temperature tuning" (HF transformers, models/llama4/
             modeling_llama4.py: attn_scale β = 0.1, floor_scale L₀ = 8192, NoPE layers), which
             multiplies q by s_i. s_i = 1 for the first L₀ positions, then grows in steps.
    qwen     s_i = max(1, log(i + 1) / log L₀)
             Qwen's "logn-attn" (Qwen-7B modeling_qwen.py, ``use_logn_attn``: q ·= log_{L₀}(i + 1) past
             the training length L₀; the log-n rule of YaRN's and Su's entropy-invariance argument).

Scaling q by s_i scales the row of logits x_i· = q_i·k/√d by s_i; a position bias β(i, j) (ALiBi, T5)
enters as s_i·(x_ij + β_ij), as every scorer takes it (scorers/base.py). Both rules are fixed, no
parameters (they are inference-time rules; here they also train). L₀ (``length``) should be the
training context in tokens: 8192 (Llama 4) or 2048 (Qwen-7B) there, the curriculum's last prompt
here (default 32 tokens). It uses the query's position only, so it holds for any mask and is fused
(``score_mod``: x·s(q_idx)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch

from ssa_repro.core.enums import value_of
from ssa_repro.scorers.base import Scorer, ScorerConfig, masked_softmax
from ssa_repro.scorers.registry import SCORERS


class LogNRule(str, Enum):
    llama4 = "llama4"
    qwen = "qwen"


@dataclass
class LogNConfig(ScorerConfig):
    name: str = "logn"
    rule: LogNRule = LogNRule.llama4
    beta: float = 0.1  # llama4: attn_scale (Llama 4's 0.1)
    length: int = 32  # L₀, tokens: llama4's floor_scale, qwen's training length


def logn_scale(i: torch.Tensor, rule: str, beta: float, length: int) -> torch.Tensor:
    """s_i for query positions i (0-based), in i's floating dtype (see the module docstring)."""
    if rule == "llama4":
        return 1.0 + beta * torch.log(torch.floor((i + 1) / length) + 1.0)
    return torch.clamp(torch.log(i + 1.0) / math.log(length), min=1.0)


@SCORERS.register("logn", schema=LogNConfig)
class LogN(Scorer):
    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        self.rule = value_of(cfg.rule)

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        out = []
        if value_of(cfg.rule) == "qwen" and not cfg.length >= 2:
            out.append(f"scorer.length={cfg.length} must be >= 2 with scorer.rule=qwen (log L₀ > 0)")
        elif not cfg.length >= 1:
            out.append(f"scorer.length={cfg.length} must be >= 1")
        return out

    def forward(self, logits, mask):
        t, s = logits.shape[-2:]
        dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        i = torch.arange(t, device=logits.device, dtype=dtype) + (s - t)  # query positions
        scale = logn_scale(i, self.rule, float(self.cfg.beta), int(self.cfg.length))[:, None]  # [T, 1]
        return masked_softmax(scale.to(logits.dtype) * logits, mask)

    def score_mod(self):
        rule, beta, length = self.rule, float(self.cfg.beta), int(self.cfg.length)

        def logn_mod(x, b, h, q_idx, kv_idx):  # s(q_idx) · x
            return logn_scale(q_idx.to(x.dtype), rule, beta, length) * x

        return logn_mod
