"""What every in-context-learning task provides: a prompt sampler, a loss and an error."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """One batch of prompts.

    tokens:   [B, T, 1] float, the model's input (one scalar per token, read in by a linear layer)
    targets:  [B, P] float, the value to predict at each prediction position
    pred_idx: [P] long, the token position at which prediction p is read (causal: it sees tokens <= it)
    xs:       [B, n] float, the example inputs, for diagnostics and baselines
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    pred_idx: torch.Tensor
    xs: torch.Tensor

    def to(self, device) -> Batch:
        return Batch(*(t.to(device) for t in (self.tokens, self.targets, self.pred_idx, self.xs)))


class Task:
    """A family of prompts. ``n_points`` is the number of in-context examples (what the curriculum
    counts); a prompt has ``n_tokens(n_points)`` tokens."""

    name: str
    metric: str  # the name of ``error``'s metric, for tables
    uses_eval_lengths: bool = False  # whether the quick evaluation sweeps evaluation.lengths

    def __init__(self, cfg):
        self.cfg = cfg

    def n_tokens(self, n_points: int) -> int:
        raise NotImplementedError

    def sample(
        self, batch_size: int, n_points: int, generator: torch.Generator, device, **overrides
    ) -> Batch:
        raise NotImplementedError

    def train_batch(
        self, index: int, batch_size: int, n_points: int, generator: torch.Generator, device
    ) -> Batch:
        """The ``index``-th training micro-batch (0, 1, 2, ... over the whole run, resumes included).
        Synthetic tasks draw fresh prompts from ``generator``; corpus tasks use ``index`` to read the
        data in order, so a resumed run continues at the exact data position."""
        return self.sample(batch_size, n_points, generator, device)

    def check(self, cfg) -> list[str]:
        """Problems with the whole run config that only this task knows about (data files, sizes),
        each naming the key, the value and what is allowed; called before any work starts."""
        return []

    def training_loss(self, model, batch: Batch) -> torch.Tensor:
        """The scalar loss the trainer minimises for one micro-batch (token tasks override this to
        skip gathering [B, T, V] logits)."""
        return self.loss(model(batch.tokens)[:, batch.pred_idx], batch.targets)

    def loss(self, pred: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Scalar training loss; pred and targets are [B, P]."""
        raise NotImplementedError

    def error(self, pred: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """[B, P] per-prediction error used for evaluation."""
        raise NotImplementedError


def interleave(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """[B, n] x's and [B, n] y's -> [B, 2n, 1] tokens x_1, y_1, x_2, y_2, ..."""
    return torch.stack([xs, ys], dim=2).reshape(xs.shape[0], -1, 1)
