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
import math
import zlib
from pathlib import Path

import pandas as pd
import torch

from ssa_repro.distributions import normal
from ssa_repro.evaluation import plots
from ssa_repro.evaluation.baselines import BASELINES


def _gen(seed: int, *cell) -> torch.Generator:
    """A CPU generator seeded from the evaluation seed and the cell's values (not its position in a
    list), so a cell gets the same prompts on any device and in any grid that contains it."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(repr((int(seed), *map(float, cell))).encode()))
    return g


def _sample(task, g, n_batches, batch_size, length, device, **dists):
    """Prompts drawn on the CPU (reproducible across devices), then moved to the model's device."""
    for _ in range(n_batches):
        yield task.sample(batch_size, length, g, "cpu", **dists).to(device)


def _stat(per_prompt: torch.Tensor) -> dict:
    """Mean and 95% normal interval of a [N] tensor of per-prompt values."""
    v = per_prompt.double().cpu()
    mean = v.mean().item()
    half = 1.96 * v.std().item() / math.sqrt(len(v)) if len(v) > 1 else float("nan")
    return {"value": mean, "n_samples": len(v), "ci_low": mean - half, "ci_high": mean + half}


@torch.no_grad()
def _predict(model, batch) -> torch.Tensor:
    return model(batch.tokens)[:, batch.pred_idx].float()  # [B, P]


def _linear(model, task, cfg, device, base: dict):
    e, n = cfg.evaluation, cfg.curriculum.end
    rows = []
    for sf in e.sigmas:
        for sx in e.sigmas:
            g = _gen(e.seed, sf, sx, n)
            errs = {name: [] for name in ("model", *BASELINES)}
            dists = dict(a_dist=normal(sf), b_dist=normal(sf), x_dist=normal(sx))
            for b in _sample(task, g, e.n_batches, e.batch_size, n, device, **dists):
                errs["model"].append(task.error(_predict(model, b), b.targets)[:, e.skip_first :].mean(1))
                for name, fn in BASELINES.items():
                    errs[name].append(task.error(fn(b.xs, b.targets), b.targets)[:, e.skip_first :].mean(1))
            for name, v in errs.items():
                rows.append(
                    {
                        **base,
                        "predictor": name,
                        "sigma_f": sf,
                        "sigma_x": sx,
                        "length": n,
                        "metric": "mse",
                        **_stat(torch.cat(v)),
                    }
                )
    # in distribution (the training distributions), by position
    g = _gen(e.seed, n)
    per_pos = {name: [] for name in ("model", *BASELINES)}
    for b in _sample(task, g, e.n_batches, e.batch_size, n, device):
        per_pos["model"].append(task.error(_predict(model, b), b.targets))
        for name, fn in BASELINES.items():
            per_pos[name].append(task.error(fn(b.xs, b.targets), b.targets))
    pos_rows, in_dist = [], {}
    for name, v in per_pos.items():
        err = torch.cat(v)  # [N, n]
        in_dist[name] = _stat(err[:, e.skip_first :].mean(1))["value"]
        for p in range(err.shape[1]):
            pos_rows.append(
                {**base, "predictor": name, "position": p + 1, "metric": "mse", **_stat(err[:, p])}
            )
    return rows, pos_rows, {"metric": "mse", "in_distribution": in_dist, "n_points": n}


def _quantifier(model, task, cfg, device, base: dict):
    e = cfg.evaluation

    def score(batch, pred):
        err = task.error(pred, batch.targets)  # [B, P]
        tail = err[:, e.skip_first :] if err.shape[1] > e.skip_first else err[:, -1:]
        return tail.amax(1), tail.mean(1)  # sequence error, token error

    rows = []
    for s in e.sigmas:
        for length in e.lengths:
            g = _gen(e.seed, s, length)
            seq, tok = [], []
            for b in _sample(task, g, e.n_batches, e.batch_size, length, device, x_dist=normal(s)):
                se, te = score(b, _predict(model, b))
                seq.append(se)
                tok.append(te)
            for metric, v in (("sequence_error", seq), ("token_error", tok)):
                rows.append(
                    {
                        **base,
                        "predictor": "model",
                        "sigma_f": None,
                        "sigma_x": s,
                        "length": length,
                        "metric": metric,
                        **_stat(torch.cat(v)),
                    }
                )
    n = cfg.curriculum.end
    g = _gen(e.seed, n)
    seq, tok, pos, labels = [], [], [], []
    for b in _sample(task, g, e.n_batches, e.batch_size, n, device):
        se, te = score(b, _predict(model, b))
        seq.append(se)
        tok.append(te)
        pos.append(task.error(_predict(model, b), b.targets))
        labels.append(b.targets)
    y = torch.cat(labels)
    majority = (y > 0).float().mean(0)  # [P] share of true labels per position
    in_dist = {
        "model_sequence_error": _stat(torch.cat(seq))["value"],
        "model_token_error": _stat(torch.cat(tok))["value"],
        "constant_token_error": torch.minimum(majority, 1 - majority).mean().item(),
    }
    err = torch.cat(pos)
    pos_rows = [
        {**base, "predictor": "model", "position": p + 1, "metric": "token_error", **_stat(err[:, p])}
        for p in range(err.shape[1])
    ]
    return rows, pos_rows, {"metric": "sequence_error", "in_distribution": in_dist, "n_points": n}


def evaluate_quick(model, task, cfg, device, out_dir: Path) -> dict:
    """Run the short evaluation; write tables and figures to ``out_dir``; return the summary."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
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
