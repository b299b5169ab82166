"""``model.pos=none`` (NoPE; Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length
Generalization in Transformers", arXiv 2305.19466): no position information at all. A causal model can
still tell positions apart: query i averages over i + 1 keys, so (with a first layer attending
uniformly) it can read 1/(i + 1) off a constant token — Kazemnejad et al.'s theorem 1 constructs
absolute and relative positions this way. A bidirectional model without positions sees a set."""

from __future__ import annotations

from ssa_repro.models.positions.base import Positions


class NoPositions(Positions):
    pass
