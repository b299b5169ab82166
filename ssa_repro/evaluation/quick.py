"""The short evaluation every training run ends with (``evaluation`` config group).

Writes ``<run_dir>/eval/quick/``: ``grid.csv`` in long form (one row per cell and predictor: task,
scorer, model, predictor, sigma_f, sigma_x, length, metric, value, n_samples, ci_low, ci_high),
``grid.png``/``.pdf`` (the heat map), ``by_position.csv``/``.png`` and ``summary.json``.

- linear: MSE over prediction positions ``skip_first``.. on a σ_F × σ_I grid (a, b ~ N(0, σ_F),
  x ~ N(0, σ_I); the paper's figure 3 layout) at ``curriculum.end`` examples, with least squares and the
  zero predictor on the very same prompts; and MSE by number of in-context examples in distribution.
- every / some: sequence error (any wrong sign from ``skip_first`` on; the paper's metric) and token
  error on a σ × length grid, x ~ N(0, σ), sampled as in training (the ``balance`` setting applies).

Each cell draws fresh prompts from its own seed derived from ``evaluation.seed``, so every model is
scored on exactly the same prompts. Intervals are 95% normal intervals over prompts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch

from ssa_repro.evaluation import plots
from ssa_repro.evaluation.common import cell_generator, predict, sample_batches, stat
from ssa_repro.evaluation.linear_grid import linear_grid
from ssa_repro.evaluation.quantifier_grid import quantifier_grid, sequence_and_token_error


def _linear(model, task, cfg, device, base: dict):
    e = cfg.evaluation
    return linear_grid(
        model,
        task,
        sigmas_f=e.sigmas,
        sigmas_x=e.sigmas,
        n_points=cfg.curriculum.end,
        n_functions=e.n_batches * e.batch_size,
        batch_size=e.batch_size,
        skip_first=e.skip_first,
        seed=e.seed,
        device=device,
        baselines=("least_squares", "zero"),
        base=base,
    )


def _quantifier(model, task, cfg, device, base: dict):
    e, n = cfg.evaluation, cfg.curriculum.end
    rows = quantifier_grid(
        model,
        task,
        sigmas=e.sigmas,
        lengths=e.lengths,
        n_samples=e.n_batches,
        batch_size=e.batch_size,
        skip_first=e.skip_first,
        seed=e.seed,
        device=device,
        base=base,
    )
    seq, tok, pos, labels = [], [], [], []
    for b in sample_batches(task, cell_generator(e.seed, n), e.n_batches, e.batch_size, n, device):
        pred = predict(model, b)
        se, te = sequence_and_token_error(task, b, pred, e.skip_first)
        seq.append(se)
        tok.append(te)
        pos.append(task.error(pred, b.targets))
        labels.append(b.targets)
    y = torch.cat(labels)
    majority = (y > 0).float().mean(0)  # [P] share of true labels per position
    in_dist = {
        "model_sequence_error": stat(torch.cat(seq))["value"],
        "model_token_error": stat(torch.cat(tok))["value"],
        "constant_token_error": torch.minimum(majority, 1 - majority).mean().item(),
    }
    err = torch.cat(pos)
    pos_rows = [
        {**base, "predictor": "model", "position": p + 1, "metric": "token_error", **stat(err[:, p])}
        for p in range(err.shape[1])
    ]
    return rows, pos_rows, {"metric": "sequence_error", "in_distribution": in_dist, "n_points": n}


def evaluate_quick(model, task, cfg, device, out_dir: Path) -> dict:
    """Run the short evaluation; write tables and figures to ``out_dir``; return the summary."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Corpus tasks bring their own (perplexity, probes, ...): quick_evaluation(model, cfg, device, out_dir)
    # writes CSVs and figures into out_dir and returns a summary with "figures" (file names) and
    # "in_distribution" (the headline numbers), as below.
    if hasattr(task, "quick_evaluation"):
        was_training = model.training
        model.eval()
        try:
            return task.quick_evaluation(model, cfg, device, out_dir)
        finally:
            model.train(was_training)
    base = {"task": cfg.task.name, "scorer": cfg.scorer.label, "model": cfg.model.name}
    was_training = model.training
    model.eval()
    try:
        if cfg.task.name == "linear":
            rows, pos_rows, summary = _linear(model, task, cfg, device, base)
        else:
            rows, pos_rows, summary = _quantifier(model, task, cfg, device, base)
    finally:
        model.train(was_training)
    grid, by_pos = pd.DataFrame(rows), pd.DataFrame(pos_rows)
    grid.to_csv(out_dir / "grid.csv", index=False)
    by_pos.to_csv(out_dir / "by_position.csv", index=False)
    title = f"{cfg.task.name} · {cfg.scorer.label} · {cfg.model.name}"
    mine = grid[grid.predictor == "model"]
    if cfg.task.name == "linear":
        figs = plots.heatmap(
            mine, "sigma_f", "sigma_x", f"{title}: MSE, a,b~N(0,σ_F), x~N(0,σ_I)", out_dir / "grid", log=True
        )
        figs.append(
            plots.curves(
                by_pos,
                "position",
                "predictor",
                f"{title}: in distribution",
                out_dir / "by_position",
                logy=True,
            )
        )
    else:
        figs = plots.heatmap(
            mine[mine.metric == "sequence_error"],
            "sigma_x",
            "length",
            f"{title}: sequence error, x~N(0,σ)",
            out_dir / "grid",
        )
        if len(by_pos):
            figs.append(
                plots.curves(
                    by_pos, "position", "predictor", f"{title}: in distribution", out_dir / "by_position"
                )
            )
    summary = {**base, **summary, "figures": [str(p.name) for p in figs]}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
