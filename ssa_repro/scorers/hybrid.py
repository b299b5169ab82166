"""Hybrid heads: each head of a layer uses its own scoring function (the paper's appendix C).

``heads`` lists functions, one per head or one per block of heads (head h gets entry
⌊h·len/n_head⌋): with 8 heads, ``[softmax, average]`` gives heads 0–3 softmax and 4–7 average;
``[tanh, average, relu, softmax]`` gives two heads each. Functions (the paper does not publish exact definitions; these are the choices made):

    softmax   softmax over the visible keys
    average   1/n_i on each of the n_i visible keys (uniform averaging; ignores the logits)
    tanh      tanh(x_ij) / n_i      relu  relu(x_ij) / n_i      sigmoid  sigmoid(x_ij) / n_i

The elementwise ones are divided by the number of visible keys n_i, not by their row sum (a row sum
of tanh scores can be ~0 and gave weights of ±1e6). So rows sum to 1 for softmax and average heads
only; a tanh row sums to the mean tanh of its logits (possibly negative). The paper's "four scoring
functions" variant names tanh, average, ReLU and a fourth whose formula was lost from the text; the
``hybrid_4fn`` preset uses softmax as the fourth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ssa_repro.scorers.base import Scorer, ScorerConfig, masked_softmax, visible_count
from ssa_repro.scorers.registry import SCORERS


def _elementwise(fn):
    def score(x, mask):
        w = fn(x) / visible_count(mask, x.shape, x.device)
        return w if mask is None else w * mask

    return score


FUNCTIONS = {
    "softmax": masked_softmax,
    "average": _elementwise(torch.ones_like),
    "tanh": _elementwise(torch.tanh),
    "relu": _elementwise(torch.relu),
    "sigmoid": _elementwise(torch.sigmoid),
}
NORMALISED = {"softmax", "average"}


@dataclass
class HybridConfig(ScorerConfig):
    name: str = "hybrid"
    heads: list[str] = field(default_factory=lambda: ["softmax", "average"])


def assign(heads: list[str], n_head: int) -> list[str]:
    """One function name per head: head h gets entry ⌊h·len(heads)/n_head⌋ (equal blocks when they divide)."""
    return [heads[h * len(heads) // n_head] for h in range(n_head)]


@SCORERS.register("hybrid", schema=HybridConfig)
class Hybrid(Scorer):
    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        self.per_head = assign(list(cfg.heads), n_head)
        self.rows_sum_to_one = set(self.per_head) <= NORMALISED
        self.smooth = "relu" not in self.per_head

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        out = [
            f"scorer.heads contains {h!r}; allowed: {', '.join(FUNCTIONS)}"
            for h in cfg.heads
            if h not in FUNCTIONS
        ]
        if not 1 <= len(cfg.heads) <= n_head:
            out.append(f"scorer.heads has {len(cfg.heads)} entries; it needs 1 to model.n_head={n_head}")
        return out

    def forward(self, logits, mask):
        m = None if mask is None else torch.broadcast_to(mask, logits.shape)  # [B, H, T, S]
        cols = [
            FUNCTIONS[name](logits[:, h], None if m is None else m[:, h])
            for h, name in enumerate(self.per_head)
        ]
        return torch.stack(cols, dim=1).to(logits.dtype)  # [B, H, T, S]

    def score_mod(self):
        """Softmax heads keep x; average heads score every key 0, and a softmax of zeros over the n_i
        visible keys is 1/n_i. Other functions are not a softmax of anything: no score_mod (None)."""
        if not set(self.per_head) <= NORMALISED:
            return None
        # the heads that average, as bits of a Python int: no tensor to place on the model's device
        average = sum(1 << h for h, name in enumerate(self.per_head) if name == "average")

        def hybrid_mod(x, b, h, q_idx, kv_idx):
            return torch.where(((average >> h) & 1) == 1, 0.0, x)

        return hybrid_mod
