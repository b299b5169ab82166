"""Linear functions in context: f(x) = a·x + b, one input dimension.

Prompt (interleaved, 2 tokens per example):  x_1, y_1, x_2, y_2, ..., x_n, y_n  with y_i = a·x_i + b,
a ~ ``a_dist``, b ~ ``b_dist`` (one function per prompt), x_i ~ ``x_dist`` i.i.d. The prediction for
y_i is read at the x_i token, so it is made from (x_1, y_1, ..., x_{i-1}, y_{i-1}, x_i). Loss and error:
squared error (y_hat_i - y_i)^2, averaged over positions and prompts.

Evaluation (the paper's figure 3): MSE on a σ_F × σ_I grid, a, b ~ N(0, σ_F) and x ~ N(0, σ_I), at the
run's ``curriculum.end`` examples, with least squares, averaging, 3-nearest-neighbours and the zero
predictor on the same prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ssa_repro.core import distributions as D
from ssa_repro.core.distributions import DistConfig, normal
from ssa_repro.tasks.base import Batch, Evaluation, Grid, Metric, Prompts, Task, interleave
from ssa_repro.tasks.registry import TASKS

SIGMAS_1_10 = [float(s) for s in range(1, 11)]


@dataclass
class LinearTaskConfig:
    name: str = "linear"
    a_dist: DistConfig = field(default_factory=DistConfig)
    b_dist: DistConfig = field(default_factory=DistConfig)
    x_dist: DistConfig = field(default_factory=DistConfig)


@TASKS.register("linear", schema=LinearTaskConfig)
class LinearTask(Task):
    metric = "squared_error"
    evaluation = Evaluation(
        default="grid",
        quick=("grid", {"preset": "quick"}),
        grid=Grid(
            axes=("sigma_f", "sigma_x"),
            rows="sigma_f",
            cols="sigma_x",
            # the paper's protocol: 100 functions per cell (one prompt each) at the training length
            paper={"sigmas": SIGMAS_1_10, "lengths": None, "n_samples": 1, "batch_size": 100},
            # a fixed length, so the jobs of a sweep over curriculum.end still share every cell
            quick={"sigmas": [1.0, 2.0, 4.0, 8.0], "lengths": [20], "n_samples": 10, "batch_size": 64},
            metrics=(Metric("mse", kind="positive"),),
            headline="mse",
            baselines=("least_squares", "averaging", "knn3", "zero"),
            by_position="mse",
        ),
    )

    def n_tokens(self, n_points: int) -> int:
        return 2 * n_points

    def draw(self, batch_size, n_points, generator, device, shift=None) -> Prompts:
        """a, b [B, 1] (from N(0, σ_F) when ``shift`` has ``sigma_f``) then xs [B, n] (N(0, σ_I) with
        ``sigma_x``), in that order from ``generator``."""
        shift = shift or {}
        f_dist = normal(shift["sigma_f"]) if "sigma_f" in shift else None
        x_dist = normal(shift["sigma_x"]) if "sigma_x" in shift else self.cfg.x_dist
        a = D.sample(f_dist or self.cfg.a_dist, (batch_size, 1), generator, device)
        b = D.sample(f_dist or self.cfg.b_dist, (batch_size, 1), generator, device)
        xs = D.sample(x_dist, (batch_size, n_points), generator, device)
        return Prompts(xs, {"a": a, "b": b})

    def label(self, prompts: Prompts) -> torch.Tensor:
        return prompts.params["a"] * prompts.xs + prompts.params["b"]  # [B, n]

    def encode(self, prompts: Prompts, ys: torch.Tensor) -> Batch:
        n = prompts.xs.shape[1]
        pred_idx = torch.arange(0, 2 * n, 2, device=prompts.xs.device)  # the x tokens
        return Batch(interleave(prompts.xs, ys), ys, pred_idx, prompts.xs, ys, dict(prompts.params))

    def train_sigmas(self) -> dict[str, float]:
        return {"sigma_x": float(self.cfg.x_dist.std), "sigma_f": float(self.cfg.a_dist.std)}

    def loss(self, pred, targets):
        return torch.nn.functional.mse_loss(pred, targets)

    def error(self, pred, targets):
        return (pred - targets).square()

    def prompt_metrics(self, pred, batch, skip_first):
        """``mse``: the mean squared error of a prompt's predictions from index ``skip_first`` on."""
        return {"mse": self.error(pred, batch.targets)[:, skip_first:].mean(1)}
