"""``model.pos=t5``: T5's learned relative-position buckets (Raffel et al. 2020, "Exploring the Limits of
Transfer Learning with a Unified Text-to-Text Transformer", section 2.1): a learned scalar per head and
bucket, added to the logits,

    β_h(i, j) = w[bucket(j − i), h],      w: [NUM_BUCKETS, H], one table shared by every layer (as T5)

Buckets (T5's scheme; 32 buckets, maximum distance 128): a causal model uses the distance d = i − j
(≥ 0 for the visible keys); a bidirectional one spends half the buckets on each direction. Of the
buckets for one direction, the first half are exact distances 0, 1, ..., N/2 − 1; the rest cover
N/2 .. MAX_DISTANCE logarithmically, bucket N/2 + ⌊log(d / (N/2)) / log(MAX_DISTANCE / (N/2)) · N/2⌋,
and every distance beyond MAX_DISTANCE shares the last bucket — so any length works (no table over
positions), and the scheme sees distances, never absolute positions.

The fused path indexes the bias by j − i (clamped to ±MAX_DISTANCE, beyond which the bucket no longer
changes) inside the score_mod; gradients reach w through the capture."""

from __future__ import annotations

import math

import torch
from torch import nn

from ssa_repro.models.positions.base import PositionContext, Positions

NUM_BUCKETS = 32
MAX_DISTANCE = 128


def relative_bucket(
    rel: torch.Tensor, causal: bool, n_buckets: int = NUM_BUCKETS, max_distance: int = MAX_DISTANCE
):
    """Bucket ids (long, same shape) of the relative positions rel = j − i (key minus query)."""
    offset = torch.zeros_like(rel)
    if causal:
        dist = (-rel).clamp_min(0)  # keys after the query (never visible) share bucket 0
    else:
        n_buckets //= 2
        offset = (rel > 0).long() * n_buckets  # keys after the query: the upper half
        dist = rel.abs()
    exact = n_buckets // 2
    far = (
        exact
        + (
            torch.log(dist.clamp_min(1).double() / exact)
            / math.log(max_distance / exact)
            * (n_buckets - exact)
        ).long()
    )
    far = far.clamp_max(n_buckets - 1)
    return offset + torch.where(dist < exact, dist, far)


class T5Positions(Positions):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.causal = bool(cfg.causal)
        self.bias_table = nn.Embedding(NUM_BUCKETS, cfg.n_head)  # N(0, 0.02²) like every embedding

    def context(self, t, device):
        # every distance beyond MAX_DISTANCE is in the last bucket, so the bias of j − i clamped to
        # [−MAX_DISTANCE, MAX_DISTANCE] is exact: one [H, 2·MAX_DISTANCE + 1] row per head, whatever T
        rel = torch.arange(-MAX_DISTANCE, MAX_DISTANCE + 1, device=device)
        by_rel = self.bias_table(relative_bucket(rel, self.causal)).T  # [H, 2·MAX_DISTANCE + 1]
        i = torch.arange(t, device=device)
        idx = (i[None, :] - i[:, None]).clamp(-MAX_DISTANCE, MAX_DISTANCE) + MAX_DISTANCE  # [T, S]
        bias = by_rel[:, idx]  # [H, T, S]

        def t5_term(b, h, q_idx, kv_idx):
            return by_rel[h, torch.clamp(kv_idx - q_idx, -MAX_DISTANCE, MAX_DISTANCE) + MAX_DISTANCE]

        return PositionContext(bias=bias, term=t5_term)
