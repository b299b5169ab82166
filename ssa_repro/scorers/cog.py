"""Cog attention, signed weights (Lv et al. 2024, "More Expressive Attention with Negative Weights",
arXiv 2411.07176; trestad/CogAttn, file ``Cogformer/attention.py``, class ``CogAttention``):

    w_ij = sgn(x_ij) · exp(|x_ij|) / Σ_{k visible} exp(|x_ik|)

over the keys j visible to query i; x [B, H, T, S]. The magnitudes are a softmax of |x|, so a large
logit of either sign takes the weight, and the sign of the logit becomes the sign of the weight: a
query can subtract a value as well as add it. Σ_j |w_ij| = 1 when no visible logit is exactly 0;
Σ_j w_ij itself lies in [−1, 1]. Masked keys get exactly 0 (their |x| is set to −inf before the
softmax, as in the reference).

sgn(0) = 0, as torch.sign in the reference: a key with logit exactly 0 gets weight 0 but its e^0 = 1
still counts in the denominator, so such a row's |w| sums to less than 1 (an all-zero row of logits
gives an all-zero row of weights).

Departures from the original: none in the weights; the reference's model around it (RoPE, its
choice of which layers use cog attention) is not part of a scorer.

Contract flags: ``signed = True`` (weights may be negative); ``rows_sum_to_one = False`` (neither w
nor, with exact-zero logits, |w| sums to 1); ``zero_rows_possible = True`` (a row of zero logits);
``smooth = False`` (sgn jumps at x = 0, |x| has a kink there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, masked_softmax
from ssa_repro.scorers.registry import SCORERS


@dataclass
class CogConfig(ScorerConfig):
    name: str = "cog"


@SCORERS.register("cog", schema=CogConfig)
class Cog(Scorer):
    signed = True
    rows_sum_to_one = False
    zero_rows_possible = True
    smooth = False

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        return (torch.sign(x) * masked_softmax(x.abs(), mask)).to(logits.dtype)
