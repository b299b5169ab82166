"""What every task provides: prompts built in one place, a loss, an error, and its evaluations.

Prompts are made in three steps, as in Garg et al.'s samplers and ``task.evaluate(xs)``:

    draw(batch, n, g, device, shift)  -> Prompts   inputs x [B, n] and the function drawn per prompt
    label(prompts)                    -> ys [B, n] the answer of every example
    encode(prompts, ys)               -> Batch     tokens, the targets read and where they are read

``sample`` is the three in a row (training). Shifted and deviant prompts in the evaluations are
transformations of :class:`Prompts` (scale x, replace x at some positions, sweep the query input)
followed by ``label`` and ``encode``, never copies of the sampler, so every prompt of the project is
built by the task's own code.

A task also declares how it is evaluated (:class:`Evaluation`): its default evaluation (the paper's
protocol) and the end-of-run one, the axes of its grid and their values, its metrics with their
scale, and its baselines. The evaluation layer reads these; no other file lists task names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Stage:
    """Where the training curriculum stands at a step (``tasks/curriculum.py``): the examples per
    prompt and, for tasks with vector inputs, the active input dimensions (None: all of them)."""

    n_points: int
    dims: int | None = None

    def shift(self) -> dict | None:
        """The draw's shift for this stage (``{"dims": d}``: coordinates from d on are 0), or None."""
        return None if self.dims is None else {"dims": self.dims}


@dataclass
class Prompts:
    """Inputs before labelling: ``xs`` [B, n] (one number per example) and the function of each prompt
    (``params``: e.g. linear's a and b, each [B, 1]; empty for the quantifiers)."""

    xs: torch.Tensor
    params: dict[str, torch.Tensor] = field(default_factory=dict)

    def to(self, device) -> Prompts:
        return Prompts(self.xs.to(device), {k: v.to(device) for k, v in self.params.items()})

    def with_xs(self, xs: torch.Tensor) -> Prompts:
        return Prompts(xs, self.params)


@dataclass
class Batch:
    """One batch of prompts.

    tokens:   [B, T, 1] float, the model's input (one scalar per token, read in by a linear layer)
    targets:  [B, P] float, the value to predict at each prediction position
    pred_idx: [P] long, the token position at which prediction p is read (causal: it sees tokens <= it)
    xs:       [B, n] float, the example inputs, for diagnostics and baselines
    ys:       [B, n] float, the answer of every example (targets may hold only the last one)
    params:   the function of each prompt (see Prompts)
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    pred_idx: torch.Tensor
    xs: torch.Tensor
    ys: torch.Tensor | None = None
    params: dict[str, torch.Tensor] = field(default_factory=dict)

    def to(self, device) -> Batch:
        return Batch(
            *(t.to(device) for t in (self.tokens, self.targets, self.pred_idx, self.xs)),
            ys=None if self.ys is None else self.ys.to(device),
            params={k: v.to(device) for k, v in self.params.items()},
        )

    @property
    def prompts(self) -> Prompts:
        return Prompts(self.xs, self.params)


@dataclass(frozen=True)
class Metric:
    """A per-prompt metric of the grid evaluations. ``kind``: ``rate`` (values in [0, 1]: Wilson
    intervals) or ``positive`` (squared errors: intervals on the log scale, log colour scales)."""

    name: str
    kind: str = "rate"

    @property
    def log_scale(self) -> bool:
        return self.kind == "positive"


@dataclass(frozen=True)
class Grid:
    """A grid evaluation: which shifts it sweeps, laid out how, with which values.

    ``axes`` are the task's shift axes, besides the prompt length: ``sigma_x`` (x ~ N(0, σ)) and, for
    tasks that draw a function per prompt, ``sigma_f`` (its parameters ~ N(0, σ_F)). ``rows``/``cols``
    are the heat map's axes (any of the axes and ``length``). ``paper`` and ``quick`` give the values of
    ``sigmas`` and ``lengths`` (None: the run's ``curriculum.end``) of the paper's protocol and of the
    end-of-run preset."""

    axes: tuple[str, ...]
    rows: str
    cols: str
    paper: dict
    quick: dict
    metrics: tuple[Metric, ...]
    headline: str  # the metric of heat maps, summaries and comparisons
    baselines: tuple[str, ...] = ()  # tasks/baselines.py names, scored on the same prompts
    by_position: str | None = None  # the per-position metric (task.error), for accuracy curves
    # the grid's eval.skip_first where it is null: predictions scored from this index on (the in-context
    # tasks' first predictions see too few examples to determine the answer; a token task's are all
    # determined by the prompt: 0)
    skip_first: int = 3


@dataclass(frozen=True)
class Evaluation:
    """What ``python evaluate.py run_dir=R`` (``default``) and the end of training (``quick``) run for
    this task: an evaluation name (``conf/eval/<name>.yaml``) and settings over its schema's defaults.
    ``grid`` describes the task's grid (ICL tasks). Which further evaluations apply (deviant, attention,
    boundary, ...) each evaluator says from what the task is (``Evaluator.applies_to``): a new evaluator
    touches no task."""

    default: str
    quick: tuple[str, dict]
    grid: Grid | None = None


class Task:
    """A family of prompts. ``n_points`` is the number of in-context examples (what the curriculum
    counts); a prompt has ``n_tokens(n_points)`` tokens."""

    name: str
    metric: str  # the name of ``error``'s metric, for tables
    evaluation: Evaluation | None = None  # a task without one cannot be evaluated (said loudly)
    classification: bool = False  # outputs are logits of a ±1 label (error = wrong sign), not values
    tokens: bool = False  # outputs are logits over a token vocabulary (tasks/tokens.py)
    vector_inputs: bool = False  # an example's input is a vector (x [B, n, d]: Garg's function classes)
    # True where a prediction is scored against a token of the same prompt that follows the position
    # reading it (its next token: linear's y_i after x_i, copy's b_j): bidirectional attention would show
    # each position its own answer, and the loss would mean nothing, so validation refuses
    # model.causal=false. A task opts out where its targets are not in the prompt (masked LM, counting).
    needs_causal: bool = True

    def __init__(self, cfg):
        self.cfg = cfg

    def n_tokens(self, n_points: int) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------------ prompts
    def draw(self, batch_size: int, n_points: int, generator: torch.Generator, device, shift=None) -> Prompts:
        """Inputs (and functions) of ``batch_size`` prompts; ``shift`` maps grid axes to values
        (``{"sigma_x": 5.0}``: x ~ N(0, 5) instead of the training distribution)."""
        raise NotImplementedError

    def label(self, prompts: Prompts) -> torch.Tensor:
        raise NotImplementedError

    def encode(self, prompts: Prompts, ys: torch.Tensor) -> Batch:
        raise NotImplementedError

    def build(self, prompts: Prompts) -> Batch:
        """``encode(prompts, label(prompts))``: the batch of given inputs (transformations end here)."""
        return self.encode(prompts, self.label(prompts))

    def sample(self, batch_size: int, n_points: int, generator: torch.Generator, device, shift=None) -> Batch:
        return self.build(self.draw(batch_size, n_points, generator, device, shift))

    def train_batch(
        self, index: int, batch_size: int, stage: Stage, generator: torch.Generator, device
    ) -> Batch:
        """The ``index``-th training micro-batch (0, 1, 2, ... over the whole run, resumes included) at
        the curriculum's ``stage``. Synthetic tasks draw fresh prompts from ``generator``; corpus tasks
        use ``index`` to read the data in order, so a resumed run continues at the exact data position."""
        return self.sample(batch_size, stage.n_points, generator, device, stage.shift())

    def logit_share(self) -> float:
        """The share of a sequence's positions whose token logits the training loss computes (the
        memory estimate's [B, T, V] term): all of them, unless the task predicts a few (masked LM)."""
        return 1.0

    def stride(self) -> int:
        """Tokens per example (2 when the answers are in the context)."""
        return 2

    def example_tokens(self, n_points: int, device=None) -> torch.Tensor:
        """[n] the token position of each example's input x."""
        return torch.arange(0, self.stride() * n_points, self.stride(), device=device)

    def train_sigmas(self) -> dict[str, float]:
        """The grid axes' values of the training distribution (where 'in distribution' is)."""
        return {}

    def grid_problems(self, sigmas, lengths, prefix: str = "eval") -> list[str]:
        """Grid values (σ settings, prompt lengths) this task's sampler would refuse while drawing prompts,
        each naming ``<prefix>.sigmas`` or ``<prefix>.lengths`` (``eval`` or ``evaluation``); tasks with
        limits (MQAR's keys, flip-flop's settings) override it."""
        return []

    def n_predictions(self, n_points: int) -> int:
        """Predictions scored per prompt of ``n_points`` examples (``eval.skip_first`` must leave one)."""
        return n_points

    def quick_evaluation(self) -> tuple[str, dict]:
        """(evaluation name, settings) of the end-of-run evaluation; tasks whose settings depend on
        their config override this."""
        return self.evaluation.quick

    # ------------------------------------------------------------------ loss and metrics
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

    def prompt_metrics(self, pred: torch.Tensor, batch: Batch, skip_first: int) -> dict[str, torch.Tensor]:
        """The grid's per-prompt metrics, [B] each, from predictions [B, P] (see ``Grid.metrics``)."""
        raise NotImplementedError


def interleave(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """[B, n] x's and [B, n] y's -> [B, 2n, 1] tokens x_1, y_1, x_2, y_2, ..."""
    return torch.stack([xs, ys], dim=2).reshape(xs.shape[0], -1, 1)


__all__ = ["Batch", "Evaluation", "Grid", "Metric", "Prompts", "Stage", "Task", "interleave"]
