"""Quantifiers in context: "every number so far is positive" and "some number so far is positive".

Numbers x_1..x_n ~ ``x_dist`` (default N(0, 1)). The label at position i is

    every:  y_i = +1 if x_1 > 0 and ... and x_i > 0, else -1     (cumulative AND)
    some:   y_i = +1 if x_1 > 0 or  ... or  x_i > 0, else -1     (cumulative OR)

Encodings (``labels_in_context``):
  true   x_1, y_1, x_2, y_2, ..., x_n, y_n   (the public code's); the prediction for y_i is read at the
         x_i token. Earlier labels are visible, so y_i follows from y_{i-1} and x_i alone.
  false  x_1, ..., x_n  (numbers only); the prediction for y_i is read at x_i and must aggregate the
         whole prefix, which is where softmax attention breaks on large inputs.
``supervise``: ``all`` predicts every position, ``last`` only y_n.

Loss: the model's output is a logit; binary cross-entropy with the ±1 label (sigmoid + BCE). Error: the
sign of the logit disagrees with the label.

Balance (``balance``; null = on exactly when labels are out of context). Under N(0, 1), "every" is
false for almost every prefix past a few numbers (P(true at i) = 2^-i) and "some" is almost always
true, so a constant answer would look nearly perfect. Balancing draws, per prompt, the length K of the
leading run on which the label keeps its initial value ("every": true, "some": false) and sets signs
to match: x_1..x_K get the run's sign, x_{K+1} the opposite sign, x_{K+2}.. are left as drawn; only
signs change, so magnitudes keep their distribution (which must therefore be symmetric about 0).
K ~ Uniform{0..n} for ``supervise=all``, so on average half of all labels are true; for
``supervise=last``, K = n with probability 1/2 and Uniform{0..n-1} otherwise, so the last label is
true half the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import torch

from ssa_repro.core import distributions as D
from ssa_repro.core.distributions import DistConfig
from ssa_repro.core.enums import value_of
from ssa_repro.tasks.base import Batch, Task, interleave
from ssa_repro.tasks.registry import TASKS


class Supervise(str, Enum):
    all = "all"
    last = "last"


@dataclass
class QuantifierTaskConfig:
    name: str = "every"
    x_dist: DistConfig = field(default_factory=DistConfig)
    labels_in_context: bool = True
    supervise: Supervise = Supervise.all
    balance: bool | None = None  # null: on exactly when labels are out of context


class Quantifier(Task):
    metric = "sign_error"
    uses_eval_lengths = True
    every: bool  # True: cumulative AND; False: cumulative OR

    @property
    def supervise_last(self) -> bool:
        return value_of(self.cfg.supervise) == "last"

    @property
    def balanced(self) -> bool:
        balance = self.cfg.balance
        return (not self.cfg.labels_in_context) if balance is None else bool(balance)

    def n_tokens(self, n_points: int) -> int:
        return 2 * n_points if self.cfg.labels_in_context else n_points

    def labels(self, xs: torch.Tensor) -> torch.Tensor:
        """[B, n] numbers -> [B, n] labels in {-1, +1}."""
        pos = (xs > 0).to(torch.int8)
        run = pos.cummin(dim=1).values if self.every else pos.cummax(dim=1).values
        return run.float() * 2 - 1

    def _balance(self, xs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        bsz, n = xs.shape
        if self.supervise_last:
            coin = torch.rand(bsz, generator=generator, device=xs.device) < 0.5
            k = torch.randint(0, n, (bsz,), generator=generator, device=xs.device)
            k = torch.where(coin, torch.full_like(k, n), k)
        else:
            k = torch.randint(0, n + 1, (bsz,), generator=generator, device=xs.device)
        i = torch.arange(n, device=xs.device)
        lead = i[None, :] < k[:, None]  # [B, n] the run that keeps the initial label
        flip = i[None, :] == k[:, None]  # [B, n] the number that ends it
        run_sign = 1.0 if self.every else -1.0
        mag = xs.abs()
        xs = torch.where(lead, run_sign * mag, xs)
        return torch.where(flip, -run_sign * mag, xs)

    def sample(self, batch_size, n_points, generator, device, x_dist=None, balance=None) -> Batch:
        xs = D.sample(x_dist or self.cfg.x_dist, (batch_size, n_points), generator, device)
        if self.balanced if balance is None else balance:
            xs = self._balance(xs, generator)
        ys = self.labels(xs)
        if self.cfg.labels_in_context:
            tokens, stride = interleave(xs, ys), 2
        else:
            tokens, stride = xs.unsqueeze(-1), 1
        pred_idx = torch.arange(0, stride * n_points, stride, device=device)
        if self.supervise_last:
            pred_idx, ys = pred_idx[-1:], ys[:, -1:]
        return Batch(tokens=tokens, targets=ys, pred_idx=pred_idx, xs=xs)

    def loss(self, pred, targets):
        return torch.nn.functional.binary_cross_entropy_with_logits(pred, (targets > 0).to(pred.dtype))

    def error(self, pred, targets):
        return ((pred > 0) != (targets > 0)).float()


@TASKS.register("every", schema=QuantifierTaskConfig)
class Every(Quantifier):
    every = True


@TASKS.register("some", schema=QuantifierTaskConfig)
class Some(Quantifier):
    every = False
