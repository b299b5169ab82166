"""Quantifiers under distribution shift: error on a σ × length grid (the paper's figure 4).

Each cell holds ``n_samples`` × ``batch_size`` prompts of ``length`` numbers x ~ N(0, σ), sampled as the
task samples in training (its ``balance`` setting applies; off by default with labels in context,
the paper's protocol). A sequence is an error if any prediction from index ``skip_first`` on has the
wrong sign (the paper's metric; with ``supervise=last`` the one prediction counts); also the token
error rate. Prompts are fresh per cell from a seed derived from (seed, σ, length) — or, with ``nested``,
per σ at the longest length, every length scored on their prefixes (exact for a causal model, about
10× less work on the paper's grid, but the cells of one σ share prompts, so a row's errors are
correlated and non-decreasing in length; see ``quantifier_grid``). With
``reuse_draws`` the same standard-normal draws are scaled by every σ, so labels are identical across σ
and only magnitudes change — what the public code did, and so what the paper's figure shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from ssa_repro.core.distributions import normal
from ssa_repro.evaluation import plots
from ssa_repro.evaluation.common import (
    Progress,
    cell_generator,
    predict,
    predict_batches,
    sample_batches,
    stat,
)
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig

log = logging.getLogger("ssa_repro.evaluate")


def sequence_and_token_error(task, batch, pred, skip_first: int):
    """[B] sequence error (any wrong from skip_first on) and [B] token error rate."""
    err = task.error(pred, batch.targets)  # [B, P]
    tail = err[:, skip_first:] if err.shape[1] > skip_first else err[:, -1:]
    return tail.amax(1), tail.mean(1)


def _batches(task, seed, s, length, n_samples, batch_size, device, reuse_draws):
    if reuse_draws:  # the same N(0, 1) draws for every σ, scaled
        g = cell_generator(seed, 0.0, length)
        return (_scaled(task, b, s) for b in sample_batches(task, g, n_samples, batch_size, length, device))
    g = cell_generator(seed, s, length)
    return sample_batches(task, g, n_samples, batch_size, length, device, x_dist=normal(s))


@torch.inference_mode()
def _all_positions(model, task, batch):
    """Predictions [B, n] at every x token and the labels [B, n] of every prefix."""
    stride = 2 if task.cfg.labels_in_context else 1
    idx = torch.arange(0, batch.tokens.shape[1], stride, device=batch.tokens.device)
    full = type(batch)(tokens=batch.tokens, targets=batch.targets, pred_idx=idx, xs=batch.xs)
    return predict(model, full), task.labels(batch.xs)


def quantifier_grid(
    model,
    task,
    *,
    sigmas,
    lengths,
    n_samples,
    batch_size,
    skip_first,
    seed,
    device,
    reuse_draws=False,
    nested=False,
    base=None,
    progress=None,
    by_position=None,
):
    """Rows (dicts) of the σ × length grid, for the sequence and the token error.

    ``nested``: a causal model's predictions on the first L numbers of a prompt are exactly its
    predictions for that L-number prompt, and without balancing the first L numbers of an i.i.d. prompt
    are an i.i.d. L-number prompt; so one pass over prompts of the longest length scores every length
    (about sum(lengths)/max(lengths) times less work; 10× for the paper's grid). Cells of one σ then share
    prompts (each cell still has n_samples × batch_size of them), so a row is correlated and can only
    grow with length — with labels in context, where errors sit in the first positions, rows look
    constant. Off by default (the paper's independent cells). Balanced tasks are sampled per cell.

    ``by_position``: a list that receives rows of the error at each prediction position for the longest
    length (per σ), the per-position accuracy curves."""
    base = base or {}
    results: dict = {}  # (σ, length) -> (sequence errors, token errors)
    per_pos: dict = {}  # σ -> list of [B, P] errors at the longest length
    longest = max(lengths)
    if nested and not task.balanced:
        for s in sigmas:
            acc = {n: ([], []) for n in lengths}
            for b in _batches(task, seed, s, longest, n_samples, batch_size, device, reuse_draws):
                pred, labels = _all_positions(model, task, b)  # [B, longest]
                for n in lengths:
                    if task.supervise_last:
                        err = task.error(pred[:, n - 1 : n], labels[:, n - 1 : n])
                    else:
                        err = task.error(pred[:, :n], labels[:, :n])
                    if n == longest:
                        per_pos.setdefault(s, []).append(err)
                    tail = err[:, skip_first:] if err.shape[1] > skip_first else err[:, -1:]
                    acc[n][0].append(tail.amax(1))
                    acc[n][1].append(tail.mean(1))
            for n in lengths:
                results[s, n] = acc[n]
                if progress is not None:
                    progress.update(1)
    else:
        for n in lengths:
            # every σ's prompts of this length in one go (vectorised over cells); the same prompts
            # as cell by cell, since each cell draws from its own generator
            cells = {
                s: list(_batches(task, seed, s, n, n_samples, batch_size, device, reuse_draws))
                for s in sigmas
            }
            preds = iter(predict_batches(model, [b for bs in cells.values() for b in bs]))
            for s in sigmas:
                seq, tok = [], []
                for b in cells[s]:
                    pred = next(preds)
                    se, te = sequence_and_token_error(task, b, pred, skip_first)
                    if n == longest:
                        per_pos.setdefault(s, []).append(task.error(pred, b.targets))
                    seq.append(se)
                    tok.append(te)
                results[s, n] = (seq, tok)
                if progress is not None:
                    progress.update(1)
    rows = []
    for n in lengths:
        for s in sigmas:
            for metric, v in zip(("sequence_error", "token_error"), results[s, n]):
                rows.append(
                    {
                        **base,
                        "predictor": "model",
                        "sigma_x": s,
                        "length": n,
                        "metric": metric,
                        **stat(torch.cat(v)),
                    }
                )
    if by_position is not None:
        for s, errs in per_pos.items():
            err = torch.cat(errs)  # [N, P]
            by_position.extend(
                {
                    **base,
                    "predictor": "model",
                    "sigma_x": s,
                    "length": longest,
                    "position": p + 1,
                    "metric": "token_error",
                    **stat(err[:, p]),
                }
                for p in range(err.shape[1])
            )
    return rows


def _scaled(task, batch, sigma: float):
    """The same prompt with every number multiplied by σ (labels unchanged: only signs matter)."""
    tokens = batch.tokens.clone()
    stride = 2 if task.cfg.labels_in_context else 1
    tokens[:, 0::stride] *= sigma
    return type(batch)(tokens=tokens, targets=batch.targets, pred_idx=batch.pred_idx, xs=batch.xs * sigma)


@dataclass
class QuantifierGridConfig(EvalConfig):
    """The paper's protocol: lengths 10..200 step 10 × σ 1..29, 100 samples of 64 prompts per cell."""

    name: str = "quantifier_grid"
    sigmas: list[float] = field(default_factory=lambda: [float(s) for s in range(1, 30)])
    lengths: list[int] = field(default_factory=lambda: list(range(10, 201, 10)))
    n_samples: int = 100
    batch_size: int = 64
    skip_first: int = 3
    seed: int = 1234
    reuse_draws: bool = False  # true: the public code's (and so the paper figure's) same draws for every σ
    nested: bool = (
        False  # true: all lengths on prefixes of the longest prompts (~10x faster; see quantifier_grid)
    )


@EVALUATORS.register("quantifier_grid", schema=QuantifierGridConfig)
class QuantifierGrid:
    @staticmethod
    def check(run_cfg, cfg) -> list[str]:
        out = (
            []
            if run_cfg.task.name in ("every", "some")
            else [f"eval=quantifier_grid needs an every/some run, not {run_cfg.task.name}"]
        )
        per = 2 if run_cfg.task.get("labels_in_context", True) else 1
        too_long = [n for n in cfg.lengths if per * n > run_cfg.model.max_positions]
        if too_long:
            out.append(
                f"eval.lengths {too_long} need up to {per * max(too_long)} tokens, more than "
                f"model.max_positions={run_cfg.model.max_positions}"
            )
        if not cfg.lengths or min(cfg.lengths) < 1:
            out.append("eval.lengths must be a non-empty list of values >= 1")
        if not cfg.sigmas or min(cfg.sigmas) <= 0:
            out.append("eval.sigmas must be a non-empty list of values > 0")
        if cfg.n_samples < 1 or cfg.batch_size < 1 or cfg.skip_first < 0:
            out.append("eval.n_samples and eval.batch_size must be >= 1, eval.skip_first >= 0")
        return out

    @staticmethod
    def run(run, cfg, out_dir: Path):
        cells = len(cfg.sigmas) * len(cfg.lengths)
        prompts = cfg.n_samples * cfg.batch_size
        log.info(
            "quantifier_grid: %d cells × %d prompts = %s prompts of up to %d numbers, on %s",
            cells,
            prompts,
            f"{cells * prompts:,}",
            max(cfg.lengths),
            run.device,
        )
        pos_rows: list = []
        with Progress(cells, "quantifier_grid") as bar:
            rows = quantifier_grid(
                run.model,
                run.task,
                sigmas=cfg.sigmas,
                lengths=cfg.lengths,
                n_samples=cfg.n_samples,
                batch_size=cfg.batch_size,
                skip_first=cfg.skip_first,
                seed=cfg.seed,
                device=run.device,
                reuse_draws=cfg.reuse_draws,
                nested=cfg.nested,
                base=run.labels,
                progress=bar,
                by_position=pos_rows,
            )
        grid, by_pos = pd.DataFrame(rows), pd.DataFrame(pos_rows)
        draws = "same draws scaled per σ" if cfg.reuse_draws else "fresh draws per σ"
        figs = plots.heatmap(
            grid[grid.metric == "sequence_error"],
            "sigma_x",
            "length",
            f"{run.title}\nsequence error, x ~ N(0, σ), {draws}",
            out_dir / "error_grid",
            xlabel="prompt length (numbers)",
            ylabel="σ (std of test inputs)",
        )
        in_dist = grid[(grid.metric == "sequence_error") & (grid.sigma_x == min(cfg.sigmas))]
        sigmas = sorted(cfg.sigmas)
        shown = sorted({sigmas[round(i * (len(sigmas) - 1) / 5)] for i in range(6)})  # at most 6 curves
        figs.append(
            plots.curves(
                grid[(grid.metric == "token_error") & grid.sigma_x.isin(shown)],
                "length",
                "sigma_x",
                f"{run.title}\ntoken error by length",
                out_dir / "token_error_by_length",
                xlabel="prompt length (numbers)",
            )
        )
        accuracy = by_pos[by_pos.sigma_x.isin(shown)].assign(
            value=lambda f: 1 - f["value"], metric="accuracy"
        )
        figs.append(
            plots.curves(
                accuracy,
                "position",
                "sigma_x",
                f"{run.title}\naccuracy by position, prompts of {max(cfg.lengths)} numbers",
                out_dir / "accuracy_by_position",
                xlabel="prediction index",
            )
        )
        summary = {
            "metric": "sequence_error",
            "mean_error": grid[grid.metric == "sequence_error"]["value"].mean(),
            "error_at_smallest_sigma": dict(zip(in_dist["length"].tolist(), in_dist["value"].tolist())),
            "figures": [p.name for p in figs],
        }
        return {"results": grid, "by_position": by_pos}, summary
