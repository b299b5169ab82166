"""Linear functions under distribution shift: MSE on a σ_F × σ_I grid (the paper's figure 3).

For each cell, prompts of ``n_points`` examples with a, b ~ N(0, σ_F) (one function per prompt) and
x ~ N(0, σ_I); the error of a prompt is the mean squared error of its predictions from index
``skip_first`` on; a cell reports the mean over its prompts (``n_functions`` functions, one prompt each,
the paper's protocol) with a 95% interval. Baselines (ssa_repro/evaluation/baselines.py) are scored on
exactly the same prompts. Also returns the in-distribution MSE by number of in-context examples.
"""

from __future__ import annotations

import torch

from ssa_repro.distributions import normal
from ssa_repro.evaluation.baselines import BASELINES
from ssa_repro.evaluation.common import cell_generator, predict, sample_batches, stat


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
