"""``model.pos=learned`` (the default, GPT-2's): a learned absolute embedding per position, [P, C] with
P = ``model.max_positions``, added to the token embeddings. Position t ≥ P has no entry, so prompts
are limited to P tokens; positions the training prompts never reached keep their initial N(0, 0.02²)
values (why length extrapolation with this scheme measures untrained embeddings as much as the scorer).

It is an ``nn.Embedding`` held by the model as ``wpe``, created where the model always created it, so
the state-dict key (``wpe.weight``), the initialisation and the random numbers it consumes are those of
every checkpoint written before ``model.pos`` existed."""

from __future__ import annotations

from torch import nn

from ssa_repro.models.positions.base import Positions


class LearnedPositions(nn.Embedding, Positions):
    table = True

    def __init__(self, cfg):
        nn.Embedding.__init__(self, cfg.max_positions, cfg.n_embd)

    def embedding(self, t, device):
        return self.weight[:t]  # [T, C]
