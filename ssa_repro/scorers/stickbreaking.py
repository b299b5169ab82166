"""Stick-breaking attention (Tan et al. 2024, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", arXiv 2410.17980; shawntan/stickbreaking-attention, file
``stickbreaking_attention/sb_ref.py`` and its use in ``tests/test_attn.py``):

    β_ij = sigmoid(x_ij),    A_ij = β_ij · Π_{j < k < i, k visible} (1 − β_ik)      for j < i

Query i breaks a stick of length 1 going back from its nearest key: key i−1 takes the fraction β, the
next one β of what is left, and so on; x [B, H, T, S]. Rows sum to 1 − Π_j (1 − β_ij) <= 1; the rest
is the reference's "remainder". Computed in log space, as the reference does:

    log A_ij = logsigmoid(x_ij) + Σ_{j < k < i} logsigmoid(−x_ik)

(log(1 − sigmoid(x)) = logsigmoid(−x)), the sum over k as a reversed cumulative sum along the keys,
then one exp. Finite at logits of ±1e4 (the terms are then 0 or −1e4; exp underflows to 0).

The diagonal: the reference's default (``attend_current=False`` in ``sb_attn``, the mask
``triu(0)`` in its test's ``ref_fwd``) excludes key i itself, so the first query has no key at all
(an all-zero row). ``attend_current: true`` (the reference's option, mask ``triu(1)``) includes it as
the nearest key: A_ii = β_ii and key i's (1 − β_ii) enters every earlier key's product.

Order and masks: the keys are ordered by position, nearest first, so the scorer is causal by
construction (``causal_only``): query i (aligned with key i + S − T, as the reference's mask slice
does when S > T) sees only the keys before it, whatever ``mask`` says; ``mask`` (e.g. padding) can only
remove keys further, and a removed key neither takes weight nor breaks the stick. Without a mask the
causal order is still applied.

Departures from the original: the remainder 1 − Σ_j A_ij is dropped. The reference returns it
beside the output and its users add it back outside the attention weights (its test adds
remainder·v_i, the current token's value; IBM's dolomite model adds remainder·(a learned per-head
bias)); here only the weights A are used, so a query whose stick is mostly unbroken reads little.
The Triton kernels are not used (the T×T log-space form is exact and cheap at these lengths).

Contract flags: ``rows_sum_to_one = False`` (rows sum to at most 1); ``zero_rows_possible = True``
(the first query without ``attend_current``); smooth (logsigmoid is smooth); ``causal_only = True``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32
from ssa_repro.scorers.registry import SCORERS


@dataclass
class StickBreakingConfig(ScorerConfig):
    name: str = "stickbreaking"
    attend_current: bool = False  # the reference's default: key i is not among query i's keys


def allowed_keys(t: int, s: int, attend_current: bool, mask, device) -> torch.Tensor:
    """Bool [T, S] (or mask's broadcast shape): keys before query i (key i too with attend_current),
    query i aligned with key i + S − T; and'ed with ``mask``."""
    i = torch.arange(t, device=device)[:, None] + (s - t)
    j = torch.arange(s, device=device)[None, :]
    causal = j <= i if attend_current else j < i
    return causal if mask is None else causal & mask


@SCORERS.register("stickbreaking", schema=StickBreakingConfig)
class StickBreaking(Scorer):
    rows_sum_to_one = False
    zero_rows_possible = True
    causal_only = True

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]
        keep = allowed_keys(x.shape[-2], x.shape[-1], self.cfg.attend_current, mask, x.device)
        log_beta = F.logsigmoid(x)  # log β_ij
        log_rest = F.logsigmoid(-x).masked_fill(~keep, 0.0)  # log(1 − β_ik); removed keys break nothing
        # Σ_{k > j} log(1 − β_ik): suffix sums along the keys (nearest first), shifted by one key rather
        # than minus the key's own term (which would cancel −1e4 against −1e4 in float32). Removed keys
        # contribute 0, so this is the sum over the allowed keys strictly between j and query i.
        after = F.pad(log_rest[..., 1:].flip(-1).cumsum(-1).flip(-1), (0, 1))
        log_a = (log_beta + after).masked_fill(~keep, float("-inf"))
        return log_a.exp().to(logits.dtype)
