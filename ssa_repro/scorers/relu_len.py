"""ReLU attention divided by the number of keys (Wortsman et al. 2023, "Replacing softmax with ReLU in
Vision Transformers", arXiv 2309.08586; ReLU attention scaled by 1/(number of tokens) is also the
activation of in-context-learning analyses such as Bai et al. 2023, arXiv 2306.04637):

    w_ij = relu(x_ij) / n_i

over the keys j visible to query i, n_i their number (i + 1 under the causal mask); x [B, H, T, S].
Rows are not normalised: a row sums to the mean of relu(x) over its keys (which can exceed 1), and is
all zeros when no visible logit is positive. Masked keys get exactly 0.

Departure from the original: the paper divides by the sequence length L (a ViT attends to all L
tokens, so L = n_i there); under a causal mask this uses each row's own count n_i, not the prompt
length, so a query's weights do not depend on how many tokens follow it. The paper gives no public
code; none was compared. (The same function is one of ``hybrid``'s per-head options, ``relu``.)

Contract flags: ``rows_sum_to_one = False``; ``zero_rows_possible = True``; ``smooth = False``
(relu has a kink at 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, visible_count
from ssa_repro.scorers.registry import SCORERS


@dataclass
class ReluLenConfig(ScorerConfig):
    name: str = "relu_len"


@SCORERS.register("relu_len", schema=ReluLenConfig)
class ReluLen(Scorer):
    rows_sum_to_one = False
    zero_rows_possible = True
    smooth = False

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        w = torch.relu(x) / visible_count(mask, x.shape, x.device).clamp_min(1).to(x.dtype)
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)
        return w.to(logits.dtype)
