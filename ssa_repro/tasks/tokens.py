"""What the discrete-token length-generalisation tasks share (mqar, flip_flop, copy, counting).

The model has a token table (``model.vocab_size`` > 0; each task's YAML sets it): tokens [B, T] long ->
logits [B, T, V]. A prediction read at position p is the next-token distribution there, scored
against a target token id. Positions whose next token is not determined (flip-flop's ignored bits) get
the target ``IGNORE`` (−100, cross-entropy's ignore_index) and count in no metric.

Loss: cross-entropy over the vocabulary. Metrics per prompt: ``token_error`` (the share of wrong
argmax predictions) and ``sequence_error`` (any wrong); ``token_error`` is the headline.

The grid (evaluation/grid.py) sweeps the prompt length (``length``: the task's examples — key-value
pairs, instructions, symbols) and one task setting on its ``sigma_x`` axis; each task says what its
setting means (:attr:`TokenTask.setting`) and which value is the training one (:meth:`train_sigmas`).
Tasks without a setting declare the single value 1. The grids reach 16× the training length (8×
for flip-flop); with ``model.pos=learned`` the positions past the training prompts are untrained
table entries, which is the point of comparing schemes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssa_repro.tasks.base import Batch, Evaluation, Grid, Metric, Task
from ssa_repro.tasks.baselines import TOKEN_GUESSES

IGNORE = -100


def token_evaluation(
    train_end: int, factors=(1, 2, 4, 8, 16), settings=(1.0,), paper_settings=None
) -> Evaluation:
    """A length × setting grid of token_error / sequence_error at ``train_end`` × ``factors`` examples."""
    lengths = [train_end * f for f in factors]
    return Evaluation(
        default="grid",
        quick=("grid", {"preset": "quick"}),
        grid=Grid(
            axes=("sigma_x",),
            rows="sigma_x",
            cols="length",
            paper={
                "sigmas": list(paper_settings or settings),
                "lengths": lengths,
                "n_samples": 16,
                "batch_size": 64,
                "nested": False,
            },
            quick={
                "sigmas": list(settings),
                "lengths": lengths,
                "n_samples": 2,
                "batch_size": 64,
                "nested": False,
            },
            metrics=(Metric("token_error"), Metric("sequence_error")),
            headline="token_error",
            baselines=TOKEN_GUESSES,  # the floors a model must beat (tasks/baselines.py)
            skip_first=0,  # every scored token is determined by the prompt
        ),
    )


class TokenTask(Task):
    metric = "token_error"
    tokens = True
    setting = "none (the grid's σ axis is ignored: 1)"  # what the grid's sigma_x means for this task

    def vocab_size(self) -> int:
        """Token ids the task uses (the model's table must have at least this many)."""
        raise NotImplementedError

    def stride(self) -> int:
        return 1

    def train_sigmas(self) -> dict[str, float]:
        return {"sigma_x": 1.0}

    def check(self, cfg) -> list[str]:
        need, have = self.vocab_size(), int(cfg.model.vocab_size)
        if have < need:
            return [
                f"model.vocab_size={have} but task={cfg.task.name} needs a token table of at least {need} "
                f"tokens (conf/task/{cfg.task.name}.yaml sets it); set model.vocab_size={need}"
            ]
        return []

    def end_of_run_problems(self, cfg) -> list[str]:
        """:meth:`grid_problems` of the end-of-run evaluation, found before training."""
        return self.grid_problems(
            self.end_of_run_grid(cfg, "sigmas"), self.end_of_run_grid(cfg, "lengths"), "evaluation"
        )

    def end_of_run_grid(self, cfg, key: str) -> list:
        """The values of ``key`` (``lengths``, ``sigmas``) the end-of-run evaluation will draw prompts with:
        ``evaluation.<key>``, else the task's quick grid ([] when training ends without one)."""
        if "evaluation" not in cfg or not cfg.evaluation.enabled:  # (evaluate.py checks its own eval keys)
            return []
        given = cfg.evaluation[key]
        return list(given) if given is not None else list(self.evaluation.grid.quick[key])

    def batch(self, tokens: torch.Tensor, targets: torch.Tensor, pred_idx: torch.Tensor, prompts) -> Batch:
        """tokens [B, T] long, targets [B, P] long (IGNORE where not scored), pred_idx [P]."""
        return Batch(tokens, targets, pred_idx, tokens, targets, dict(prompts.params))

    def loss(self, pred, targets):
        """pred [B, P, V] logits, targets [B, P] token ids."""
        return F.cross_entropy(pred.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)

    def error(self, pred, targets):
        """[B, P] 1 where the argmax is not the target (0 at IGNORE targets)."""
        return ((pred.argmax(-1) != targets) & (targets != IGNORE)).float()

    def prompt_metrics(self, pred, batch, skip_first):
        """``token_error``: the share of a prompt's scored tokens (target not IGNORE, from prediction
        ``skip_first`` on) that are wrong; ``sequence_error``: any of them wrong. A prompt with no scored
        token is an error, not a zero (it hid a grid that scored nothing)."""
        scored = (batch.targets != IGNORE).float()  # [B, P]
        scored[:, :skip_first] = 0.0
        if (scored.sum(1) == 0).any():
            raise ValueError(
                f"{self.cfg.name}: a prompt has no scored token from prediction {skip_first} on "
                f"({batch.targets.shape[1]} predictions); lower eval.skip_first"
            )
        wrong = self.error(pred, batch.targets) * scored
        return {
            "token_error": wrong.sum(1) / scored.sum(1),
            "sequence_error": wrong.amax(1),
        }


def uniform_ints(high: int, shape, generator, device) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=generator, device=device)


def random_perms(batch: int, n: int, k: int, generator, device) -> torch.Tensor:
    """[batch, k]: for each row, the first k of a uniformly random permutation of 0 .. n−1 (distinct)."""
    return torch.rand(batch, n, generator=generator, device=device).argsort(dim=1)[:, :k]
