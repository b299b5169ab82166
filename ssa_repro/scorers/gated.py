"""Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models: Non-linearity,
Sparsity, and Attention-Sink-Free", arXiv 2505.06708; qiuzh20/gated_attention): softmax attention whose
output is multiplied by a sigmoid gate computed from the layer's input,

    Y' = Y ⊙ σ(X W_g + b_g)        Y = softmax(x) @ V per head, X [B, T, C] the attention input

(after the pre-LayerNorm), before the output projection: the paper's best position (G1, after
SDPA). ``gate: elementwise`` (the paper's best) has W_g [C, C], one gate per output channel of every
head; ``headwise`` has W_g [C, H], one scalar per head and token. The weights are softmax's (the
contract's), so the fused paths (SDPA, FlexAttention) are softmax's; the gate acts on their output
through :meth:`Scorer.output`. W_g is initialised as the model's other linear maps (N(0, 0.02²),
b_g = 0), so the gate starts near σ(0) = 1/2 (the paper does not specify beyond the model's default).
The paper reports the gate removes the attention sink and helps length extrapolation.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn

from ssa_repro.core.enums import value_of
from ssa_repro.scorers.registry import SCORERS
from ssa_repro.scorers.softmax import Softmax, SoftmaxConfig


class GateKind(str, Enum):
    elementwise = "elementwise"
    headwise = "headwise"


@dataclass
class GatedConfig(SoftmaxConfig):
    name: str = "gated"
    gate: GateKind = GateKind.elementwise


@SCORERS.register("gated", schema=GatedConfig)
class Gated(Softmax):
    output_params = ("gate.weight", "gate.bias")

    def __init__(self, cfg, n_head: int, layer: int = 0, n_embd: int | None = None):
        super().__init__(cfg, n_head, layer)
        self.elementwise = value_of(cfg.gate) == "elementwise"
        self.gate = nn.Linear(n_embd, n_embd if self.elementwise else n_head)  # X [B, T, C] -> [B, T, C|H]

    def output(self, y, x):
        """y [B, H, T, D] ⊙ σ(x W_g + b_g), x [B, T, C]."""
        bsz, h, t, d = y.shape
        g = torch.sigmoid(self.gate(x))  # [B, T, C] or [B, T, H]
        if self.elementwise:
            g = g.view(bsz, t, h, d).transpose(1, 2)  # [B, H, T, D]
        else:
            g = g.transpose(1, 2).unsqueeze(-1)  # [B, H, T, 1]
        return y * g.to(y.dtype)
