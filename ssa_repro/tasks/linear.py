"""Linear functions in context: f(x) = a·x + b, one input dimension.

Prompt (interleaved, 2 tokens per example):  x_1, y_1, x_2, y_2, ..., x_n, y_n  with y_i = a·x_i + b,
a ~ ``a_dist``, b ~ ``b_dist`` (one function per prompt), x_i ~ ``x_dist`` i.i.d. The prediction for
y_i is read at the x_i token, so it is made from (x_1, y_1, ..., x_{i-1}, y_{i-1}, x_i). Loss and error:
squared error (y_hat_i - y_i)^2, averaged over positions and prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ssa_repro.core import distributions as D
from ssa_repro.core.distributions import DistConfig
from ssa_repro.tasks.base import Batch, Task, interleave
from ssa_repro.tasks.registry import TASKS


@dataclass
class LinearTaskConfig:
    name: str = "linear"
    a_dist: DistConfig = field(default_factory=DistConfig)
    b_dist: DistConfig = field(default_factory=DistConfig)
    x_dist: DistConfig = field(default_factory=DistConfig)


@TASKS.register("linear", schema=LinearTaskConfig)
class LinearTask(Task):
    metric = "squared_error"

    def n_tokens(self, n_points: int) -> int:
        return 2 * n_points

    def sample(self, batch_size, n_points, generator, device, a_dist=None, b_dist=None, x_dist=None) -> Batch:
        a = D.sample(a_dist or self.cfg.a_dist, (batch_size, 1), generator, device)  # [B, 1]
        b = D.sample(b_dist or self.cfg.b_dist, (batch_size, 1), generator, device)  # [B, 1]
        xs = D.sample(x_dist or self.cfg.x_dist, (batch_size, n_points), generator, device)  # [B, n]
        ys = a * xs + b
        pred_idx = torch.arange(0, 2 * n_points, 2, device=device)  # the x tokens
        return Batch(tokens=interleave(xs, ys), targets=ys, pred_idx=pred_idx, xs=xs)

    def loss(self, pred, targets):
        return torch.nn.functional.mse_loss(pred, targets)

    def error(self, pred, targets):
        return (pred - targets).square()
