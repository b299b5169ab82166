"""Garg et al.'s shift suite (dtsip/in-context-learning ``src/eval.py``, ``build_evals``): the trained
function class under shifted prompts, with the task's baselines on the same prompts.

A cell is (variant, length). Each variant transforms prompts drawn from the training distribution
(the task's own ``draw``), then the task labels and encodes them:

- ``standard``               the training distribution
- ``scale_x``                x → ``x_scale``·x
- ``scale_y``                y → ``y_scale``·y (the function scaled)
- ``noisy_labels``           y → y + ε, ε ~ N(0, ``noise_std``²) (context and target alike)
- ``skewed_covariance``      x → A z: A = Q Λ^{1/2}, Q a random orthogonal matrix, Λ = diag(1/(i+1)),
                             scaled so that ‖A‖_F² = d (Garg's normalised skewed sampler)
- ``half_subspace``          x → P x, P the projection on a random d/2-dimensional subspace, scaled
                             by √2 (the same ‖·‖_F² = d normalisation)
- ``random_quadrants``       context x's moved to one random orthant (|x| ⊙ s, s ∈ {±1}^d per prompt);
                             the query, the last example, is left as drawn
- ``orthogonal_subspaces``   context x's projected on a random d/2-dimensional subspace S, the query on
                             its orthogonal complement (both scaled by √2)
- ``overlapping_subspaces``  the query is a copy of one of the context x's (chosen at random)

Metrics per prompt: ``mse`` (the mean squared error of the predictions from ``skip_first`` on) and
``mse_last`` (the query's, the last example: what the context/query variants are about). Variants with
subspaces need ``task.n_dims`` >= 2. The prompts of a cell depend only on (seed, variant, length).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from matplotlib.colors import LogNorm

from ssa_repro.core import plotting
from ssa_repro.evaluation.inference import predict
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.models.positions import position_limit
from ssa_repro.stats.intervals import summarize
from ssa_repro.tasks.base import Prompts
from ssa_repro.tasks.baselines import BASELINES
from ssa_repro.tasks.baselines import problems as baseline_problems

log = logging.getLogger("ssa_repro.evaluate")

VARIANTS = (
    "standard",
    "scale_x",
    "scale_y",
    "noisy_labels",
    "skewed_covariance",
    "half_subspace",
    "random_quadrants",
    "orthogonal_subspaces",
    "overlapping_subspaces",
)
SUBSPACE = ("half_subspace", "orthogonal_subspaces", "overlapping_subspaces", "random_quadrants")


# ------------------------------------------------------------------ transformations
def random_orthogonal(d: int, g: torch.Generator) -> torch.Tensor:
    """[d, d] a random orthogonal matrix (QR of a Gaussian matrix, signs fixed: Haar distributed)."""
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


def skew(d: int, g: torch.Generator) -> torch.Tensor:
    """[d, d] A = Q diag(1/(i+1))^{1/2}, scaled to ‖A‖_F² = d (so E‖Az‖² = E‖z‖²)."""
    a = random_orthogonal(d, g) * torch.rsqrt(torch.arange(1, d + 1, dtype=torch.float32))
    return a * math.sqrt(d) / a.norm()


def half_projection(d: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """([d, d] the projection on a random d/2-dimensional subspace S, [d, d] on its complement)."""
    q = random_orthogonal(d, g)
    s, rest = q[:, : d // 2], q[:, d // 2 :]
    return s @ s.T, rest @ rest.T


def transform(
    variant: str, prompts: Prompts, cfg, g: torch.Generator
) -> tuple[Prompts, float, torch.Tensor | None]:
    """(transformed prompts, the factor on y, label noise [B, n] or None). xs [B, n, d]."""
    xs = prompts.xs.clone()
    bsz, n, d = xs.shape
    noise = None
    y_scale = 1.0
    if variant == "scale_x":
        xs = xs * float(cfg.x_scale)
    elif variant == "scale_y":
        y_scale = float(cfg.y_scale)
    elif variant == "noisy_labels":
        noise = torch.randn(bsz, n, generator=g) * float(cfg.noise_std)
    elif variant == "skewed_covariance":
        xs = xs @ skew(d, g).T
    elif variant == "half_subspace":
        p, _ = half_projection(d, g)
        xs = xs @ p.T * math.sqrt(2)
    elif variant == "random_quadrants":
        signs = torch.where(torch.rand(bsz, 1, d, generator=g) < 0.5, -1.0, 1.0)
        xs[:, :-1] = xs[:, :-1].abs() * signs  # the context in one orthant; the query as drawn
    elif variant == "orthogonal_subspaces":
        p, perp = half_projection(d, g)
        xs[:, :-1] = xs[:, :-1] @ p.T * math.sqrt(2)
        xs[:, -1:] = xs[:, -1:] @ perp.T * math.sqrt(2)
    elif variant == "overlapping_subspaces" and n > 1:
        pick = (torch.rand(bsz, generator=g) * (n - 1)).long()  # one earlier example per prompt
        xs[:, -1] = xs[torch.arange(bsz), pick]
    return prompts.with_xs(xs), y_scale, noise


# ------------------------------------------------------------------ evaluator
@dataclass
class ShiftConfig(EvalConfig):
    """Garg et al.'s shifted prompts, one row of cells per variant."""

    name: str = "shift"
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    lengths: list[int] | None = None  # examples per prompt; null = [the run's curriculum.end]
    x_scale: float = 2.0
    y_scale: float = 2.0
    noise_std: float = 0.5
    n_samples: int = 4  # batches per cell
    batch_size: int = 64
    skip_first: int = 0
    seed: int = 1234
    baselines: list[str] | None = None  # null: the task's baselines


@EVALUATORS.register("shift", schema=ShiftConfig)
class Shift(Evaluator):
    name = "shift"
    axes = ("variants", "lengths")
    fills_length = "lengths"
    coords = ("variant", "length")

    @classmethod
    def applies_to(cls, task) -> bool:
        """Tasks of vector inputs (Garg et al.'s function classes): the variants move x in its space."""
        return task.vector_inputs

    def resolve(self) -> None:
        super().resolve()
        if self.cfg.baselines is None:
            grid = getattr(getattr(self.task, "evaluation", None), "grid", None)
            self.cfg.baselines = list(grid.baselines) if grid is not None else []

    def check(self) -> list[str]:
        c, out = self.cfg, []
        bad = [v for v in c.variants if v not in VARIANTS]
        if bad or not c.variants:
            out.append(f"eval.variants has {bad or 'nothing'}; allowed: {', '.join(VARIANTS)}")
        d = int(self.run_cfg.model.n_in)  # the task's n_dims (1 for scalar tasks)
        flat = [v for v in c.variants if v in SUBSPACE]
        if d < 2 and flat:
            out.append(f"eval.variants {flat} need task.n_dims >= 2 (task.n_dims={d})")
        limit = position_limit(self.run_cfg.model)  # None: the scheme has no table, any length
        top = limit // 2 if limit is not None else None  # 2 tokens an example
        if not c.lengths or min(c.lengths) < 2 or (top is not None and max(c.lengths) > top):
            allowed = f"in [2, {top}] (model.max_positions/2)" if top is not None else ">= 2"
            out.append(f"eval.lengths={list(c.lengths or [])} must be values {allowed}")
        elif not 0 <= c.skip_first < min(c.lengths):
            out.append(f"eval.skip_first={c.skip_first} must be in [0, {min(c.lengths)})")
        for key in ("x_scale", "y_scale"):
            if not float(c[key]) > 0:
                out.append(f"eval.{key}={c[key]} must be > 0")
        if float(c.noise_std) < 0:
            out.append(f"eval.noise_std={c.noise_std} must be >= 0")
        if c.n_samples < 1 or c.batch_size < 1:
            out.append(f"eval.n_samples={c.n_samples} and eval.batch_size={c.batch_size} must be >= 1")
        out += baseline_problems(c.baselines)
        return out

    def cells(self) -> list[dict]:
        return [{"variant": v, "length": int(n)} for v in self.cfg.variants for n in self.cfg.lengths]

    def prompts(self, task, cell: dict, g: torch.Generator):
        """One batch of the cell (on the CPU): transformed prompts, labelled and encoded."""
        c = self.cfg
        drawn = task.draw(c.batch_size, cell["length"], g, "cpu")
        shifted, y_scale, noise = transform(cell["variant"], drawn, c, g)
        ys = task.label(shifted) * y_scale
        if noise is not None:
            ys = ys + noise
        return task.encode(shifted, ys)

    def compute(self, run, cells, progress):
        c = self.cfg
        log.info("shift: %d cells × %d prompts on %s", len(cells), c.n_samples * c.batch_size, run.device)
        for cell in cells:
            g = cell_generator(c.seed, VARIANTS.index(cell["variant"]), cell["length"])
            per: dict[tuple[str, str], list] = {}
            for _ in range(c.n_samples):
                batch = self.prompts(run.task, cell, g)
                guesses = {"model": predict(run.model, batch.to(run.device)).cpu()}
                for name in c.baselines:
                    guesses[name] = BASELINES[name](batch.xs, batch.ys).float()  # [B, n], every example
                for predictor, pred in guesses.items():
                    err = (pred - batch.targets) ** 2  # [B, n]
                    per.setdefault((predictor, "mse"), []).append(err[:, c.skip_first :].mean(1))
                    per.setdefault((predictor, "mse_last"), []).append(err[:, -1])
            rows = [
                {
                    **run.labels,
                    "predictor": p,
                    **cell,
                    "metric": m,
                    **summarize(torch.cat(v).double().numpy(), "positive"),
                }
                for (p, m), v in per.items()
            ]
            yield {"results": pd.DataFrame(rows)}
            progress.update(1)

    def heatmap(self) -> dict:
        return {"rows": "variant", "cols": "length", "metric": "mse_last"}

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        if not plotting.enabled():  # figures off (plotting.saving): none built; this draw writes no table
            return []
        res = frames["results"]
        out = []
        for metric in ("mse_last", "mse"):
            model = res[(res.metric == metric) & (res.predictor == "model")]
            out += plotting.heatmap(
                model, "variant", "length", f"{title}\n{metric.replace('_', ' ')} of the model under shift",
                out_dir / f"{metric}_shift", log=True, ylabel="variant",
            )  # fmt: skip
        table = res[res.metric == "mse_last"].pivot_table(
            index="variant", columns="predictor", values="value"
        )
        fig, ax = plotting.plt.subplots(
            figsize=(3.0 + 1.1 * len(table.columns), 1.2 + 0.4 * len(table)), constrained_layout=True
        )
        plotting.sns.heatmap(table, annot=True, fmt=".2g", cmap="viridis", ax=ax, cbar=False,
                             norm=LogNorm() if (table.to_numpy() > 0).all() else None)  # fmt: skip
        ax.set_title(f"{title}\nquery MSE (last example), lengths pooled: model and baselines", fontsize=8)
        out += plotting.save(fig, out_dir / "baselines_shift")
        return out

    def summarize(self, frames) -> dict:
        res = frames["results"]
        last = res[res.metric == "mse_last"]
        return {
            "metric": "mse_last",
            "mse_last": {  # per predictor and variant, lengths pooled
                p: g.groupby("variant").value.mean().astype(float).to_dict()
                for p, g in last.groupby("predictor")
            },
        }
