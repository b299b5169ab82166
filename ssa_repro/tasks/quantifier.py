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

Evaluation (the paper's figure 4): sequence error (any wrong sign from index ``skip_first`` on) and
token error on a σ × length grid, x ~ N(0, σ).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import torch

from ssa_repro.core import distributions as D
from ssa_repro.core.distributions import DistConfig, normal
from ssa_repro.core.enums import value_of
from ssa_repro.tasks.base import Batch, Evaluation, Grid, Metric, Prompts, Task, interleave
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


QUANTIFIER_EVALUATION = Evaluation(
    default="grid",
    quick=("grid", {"preset": "quick"}),
    grid=Grid(
        axes=("sigma_x",),
        rows="sigma_x",
        cols="length",
        # the paper's protocol: 100 samples of 64 prompts per cell. nested: every length scored on
        # prefixes of the longest prompts (exact for a causal model; 10.8x fewer prompt tokens on this
        # grid, measured in docs/performance.md); balanced tasks are drawn per cell whatever it says
        paper={
            "sigmas": [float(s) for s in range(1, 30)],
            "lengths": list(range(10, 201, 10)),
            "n_samples": 100,
            "batch_size": 64,
            "nested": True,
        },
        quick={
            "sigmas": [1.0, 2.0, 4.0, 8.0],
            "lengths": [10, 20, 40, 80],
            "n_samples": 10,
            "batch_size": 64,
            "nested": True,
        },
        metrics=(Metric("sequence_error"), Metric("token_error")),
        headline="sequence_error",
        by_position="token_error",
    ),
)


class Quantifier(Task):
    metric = "sign_error"
    classification = True
    evaluation = QUANTIFIER_EVALUATION
    every: bool  # True: cumulative AND; False: cumulative OR

    @property
    def supervise_last(self) -> bool:
        return value_of(self.cfg.supervise) == "last"

    @property
    def balanced(self) -> bool:
        balance = self.cfg.balance
        return (not self.cfg.labels_in_context) if balance is None else bool(balance)

    @property
    def needs_causal(self) -> bool:
        """With labels in context y_i is the token after x_i, where y_i is read (see Task.needs_causal);
        numbers only, the labels are no tokens of the prompt."""
        return bool(self.cfg.labels_in_context)

    def n_predictions(self, n_points: int) -> int:
        return 1 if self.supervise_last else n_points

    def n_tokens(self, n_points: int) -> int:
        return 2 * n_points if self.cfg.labels_in_context else n_points

    def stride(self) -> int:
        return 2 if self.cfg.labels_in_context else 1

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

    def draw(self, batch_size, n_points, generator, device, shift=None, balance=None) -> Prompts:
        """xs [B, n] from ``x_dist`` (N(0, σ) when ``shift`` has ``sigma_x``), balanced if the task is
        (``balance`` overrides)."""
        shift = shift or {}
        x_dist = normal(shift["sigma_x"]) if "sigma_x" in shift else self.cfg.x_dist
        xs = D.sample(x_dist, (batch_size, n_points), generator, device)
        if self.balanced if balance is None else balance:
            xs = self._balance(xs, generator)
        return Prompts(xs)

    def label(self, prompts: Prompts) -> torch.Tensor:
        return self.labels(prompts.xs)

    def encode(self, prompts: Prompts, ys: torch.Tensor) -> Batch:
        xs = prompts.xs
        tokens = interleave(xs, ys) if self.cfg.labels_in_context else xs.unsqueeze(-1)
        pred_idx = self.example_tokens(xs.shape[1], xs.device)
        targets = ys
        if self.supervise_last:
            pred_idx, targets = pred_idx[-1:], ys[:, -1:]
        return Batch(tokens, targets, pred_idx, xs, ys, dict(prompts.params))

    def train_sigmas(self) -> dict[str, float]:
        return {"sigma_x": float(self.cfg.x_dist.std)}

    def loss(self, pred, targets):
        return torch.nn.functional.binary_cross_entropy_with_logits(pred, (targets > 0).to(pred.dtype))

    def error(self, pred, targets):
        return ((pred > 0) != (targets > 0)).float()

    def prompt_metrics(self, pred, batch, skip_first):
        """``sequence_error``: any wrong sign from prediction ``skip_first`` on (the paper's metric; with
        ``supervise=last`` the one prediction counts); ``token_error``: the share of wrong signs there."""
        err = self.error(pred, batch.targets)  # [B, P]
        tail = err[:, skip_first:] if err.shape[1] > skip_first else err[:, -1:]
        return {"sequence_error": tail.amax(1), "token_error": tail.mean(1)}


@TASKS.register("every", schema=QuantifierTaskConfig)
class Every(Quantifier):
    every = True


@TASKS.register("some", schema=QuantifierTaskConfig)
class Some(Quantifier):
    every = False
