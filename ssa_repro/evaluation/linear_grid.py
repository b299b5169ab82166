"""Linear functions under distribution shift: MSE on a σ_F × σ_I grid (the paper's figure 3).

For each cell, prompts of ``n_points`` examples with a, b ~ N(0, σ_F) (one function per prompt) and
x ~ N(0, σ_I); the error of a prompt is the mean squared error of its predictions from index
``skip_first`` on; a cell reports the mean over its prompts (``n_functions`` functions, one prompt each,
the paper's protocol) with a 95% interval. Baselines (ssa_repro/evaluation/baselines.py) are scored on
exactly the same prompts. Also returns the in-distribution MSE by number of in-context examples.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from ssa_repro.core.distributions import normal
from ssa_repro.evaluation import plots
from ssa_repro.evaluation.baselines import BASELINES
from ssa_repro.evaluation.common import Progress, cell_generator, predict, sample_batches, stat
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig

log = logging.getLogger("ssa_repro.evaluate")


def _errors(model, task, batch, baselines, skip_first) -> dict[str, torch.Tensor]:
    """Per-prompt, per-position squared errors [B, n] of the model and each baseline."""
    out = {"model": task.error(predict(model, batch), batch.targets)}
    for name in baselines:
        out[name] = task.error(BASELINES[name](batch.xs, batch.targets), batch.targets)
    return out


def linear_grid(
    model,
    task,
    *,
    sigmas_f,
    sigmas_x,
    n_points,
    n_functions,
    batch_size,
    skip_first,
    seed,
    device,
    baselines=("least_squares", "zero"),
    base=None,
    progress=None,
):
    """Rows (dicts) of the σ_F × σ_I grid, rows of the in-distribution MSE by position, and a summary."""
    base = base or {}
    n_batches = -(-n_functions // batch_size)
    rows = []
    for sf in sigmas_f:
        for sx in sigmas_x:
            g = cell_generator(seed, sf, sx, n_points)
            errs: dict[str, list] = {}
            dists = dict(a_dist=normal(sf), b_dist=normal(sf), x_dist=normal(sx))
            for b in sample_batches(task, g, n_batches, batch_size, n_points, device, **dists):
                for name, e in _errors(model, task, b, baselines, skip_first).items():
                    errs.setdefault(name, []).append(e[:, skip_first:].mean(1))
            for name, v in errs.items():
                rows.append(
                    {
                        **base,
                        "predictor": name,
                        "sigma_f": sf,
                        "sigma_x": sx,
                        "length": n_points,
                        "metric": "mse",
                        **stat(torch.cat(v)[:n_functions]),
                    }
                )
            if progress is not None:
                progress.update(1)
    # in distribution (the training distributions), by position
    g = cell_generator(seed, n_points)
    per_pos: dict[str, list] = {}
    for b in sample_batches(task, g, n_batches, batch_size, n_points, device):
        for name, e in _errors(model, task, b, baselines, skip_first).items():
            per_pos.setdefault(name, []).append(e)
    pos_rows, in_dist = [], {}
    for name, v in per_pos.items():
        err = torch.cat(v)[:n_functions]  # [N, n]
        in_dist[name] = stat(err[:, skip_first:].mean(1))["value"]
        for p in range(err.shape[1]):
            pos_rows.append(
                {**base, "predictor": name, "position": p + 1, "metric": "mse", **stat(err[:, p])}
            )
    return rows, pos_rows, {"metric": "mse", "in_distribution": in_dist, "n_points": n_points}


@dataclass
class LinearGridConfig(EvalConfig):
    """The paper's protocol: σ 1..10 for functions and inputs, 100 functions per cell, fixed seed."""

    name: str = "linear_grid"
    sigmas_f: list[float] = field(default_factory=lambda: [float(s) for s in range(1, 11)])
    sigmas_x: list[float] = field(default_factory=lambda: [float(s) for s in range(1, 11)])
    n_points: int | None = None  # examples per prompt; null = the run's curriculum.end
    n_functions: int = 100
    batch_size: int = 100
    skip_first: int = 3
    seed: int = 1234
    baselines: list[str] = field(default_factory=lambda: ["least_squares", "averaging", "knn3", "zero"])


@EVALUATORS.register("linear_grid", schema=LinearGridConfig)
class LinearGrid:
    @staticmethod
    def check(run_cfg, cfg) -> list[str]:
        out = (
            []
            if run_cfg.task.name == "linear"
            else [f"eval=linear_grid needs a linear run, not {run_cfg.task.name}"]
        )
        n = cfg.n_points or run_cfg.curriculum.end
        if 2 * n > run_cfg.model.max_positions:
            out.append(
                f"eval.n_points={n} needs {2 * n} tokens, more than model.max_positions={run_cfg.model.max_positions}"
            )
        if not 0 <= cfg.skip_first < n:
            out.append(f"eval.skip_first={cfg.skip_first} must be in [0, {n})")
        bad = [b for b in cfg.baselines if b not in BASELINES]
        if bad:
            out.append(f"eval.baselines has {bad}; allowed: {', '.join(BASELINES)}")
        if not cfg.sigmas_f or not cfg.sigmas_x or min([*cfg.sigmas_f, *cfg.sigmas_x]) <= 0:
            out.append("eval.sigmas_f and eval.sigmas_x must be non-empty lists of values > 0")
        if cfg.n_functions < 1 or cfg.batch_size < 1:
            out.append("eval.n_functions and eval.batch_size must be >= 1")
        return out

    @staticmethod
    def run(run, cfg, out_dir: Path):
        n = cfg.n_points or run.cfg.curriculum.end
        cells = len(cfg.sigmas_f) * len(cfg.sigmas_x)
        log.info(
            "linear_grid: %d cells × %d prompts of %d examples, on %s", cells, cfg.n_functions, n, run.device
        )
        with Progress(cells, "linear_grid") as bar:
            rows, pos_rows, summary = linear_grid(
                run.model,
                run.task,
                sigmas_f=cfg.sigmas_f,
                sigmas_x=cfg.sigmas_x,
                n_points=n,
                n_functions=cfg.n_functions,
                batch_size=cfg.batch_size,
                skip_first=cfg.skip_first,
                seed=cfg.seed,
                device=run.device,
                baselines=list(cfg.baselines),
                base=run.labels,
                progress=bar,
            )
        grid, by_pos = pd.DataFrame(rows), pd.DataFrame(pos_rows)
        mine = grid[grid.predictor == "model"]
        figs = plots.heatmap(
            mine,
            "sigma_f",
            "sigma_x",
            f"{run.title}\nMSE, a, b ~ N(0, σ_F), x ~ N(0, σ_I)",
            out_dir / "mse_grid",
            log=True,
            xlabel="σ_I (std of inputs x)",
            ylabel="σ_F (std of a and b)",
        )
        figs.append(
            plots.curves(
                by_pos,
                "position",
                "predictor",
                f"{run.title}\nin distribution",
                out_dir / "mse_by_position",
                logy=True,
                xlabel="prediction index (examples seen + 1)",
            )
        )
        return {"results": grid, "by_position": by_pos}, {**summary, "figures": [p.name for p in figs]}
