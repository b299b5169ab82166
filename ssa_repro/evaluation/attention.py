"""Attention maps and how concentrated attention is: does it collapse onto the largest element?

(a) Maps of every layer and head on one prompt: by default an in-distribution prompt of ``length``
    examples (the task's sampler, seeded from ``seed``), with ``deviant_magnitude`` written at example
    ``deviant_position`` (0-based; null = the middle) when non-zero; or the given ``prompt`` (the x
    values; quantifier labels are computed, linear answers are ``a``·x + ``b``). Saved as ``maps.npz``
    (``maps`` [L, H, T, T] with query rows and key columns, ``tokens`` [T], ``marked`` the token index of
    the deviant value or -1) and as a figure grid, layers × heads.
(b) Over ``n_prompts`` prompts per point, per layer: the entropy and the largest weight of each query's
    attention row (averaged over query rows, heads and then prompts, with a 95% interval over prompts),
      - against σ: x ~ N(0, σ) for every σ in ``sigmas`` (the task's sampler otherwise unchanged), all
        query rows but the first (which sees only itself), ``M = 0``;
      - against M: in-distribution prompts with one value M (positive) at a uniform example position,
        the same prompts and positions for every M (M = 0: nothing inserted), the query rows from the
        inserted x token on; ``sigma_x`` is empty for these rows.
    Rows with ``predictor=uniform`` give what uniform causal attention would score on the same rows
    (entropy log(#visible), largest weight 1/#visible): a collapsing softmax falls far below them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ssa_repro.core.distributions import normal
from ssa_repro.evaluation import plots
from ssa_repro.evaluation.common import Progress, cell_generator, stat
from ssa_repro.evaluation.deviant import (
    SUPPORTED,
    attention_chunk,
    draw_map,
    insert,
    make_batch,
    stride,
    token_labels,
    tokens_per_example,
)
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig
from ssa_repro.tasks.base import Batch
from ssa_repro.tasks.quantifier import Quantifier

log = logging.getLogger("ssa_repro.evaluate")

MAX_LABELLED_TOKENS = 48  # token values on the axes of the map grid up to this prompt length


def row_stats(w: torch.Tensor, queries: torch.Tensor) -> dict[str, torch.Tensor]:
    """Entropy (nats) and largest weight of each query row of ``w`` [B, H, T, S], averaged over heads and
    the rows where ``queries`` [B, T] is true: [B] each (NaN where no row counts)."""
    w = w.double()
    ent = -torch.special.xlogy(w, w).sum(-1).mean(1)  # [B, T]; 0·log 0 = 0
    mx = w.amax(-1).mean(1)
    q = queries.double()
    return {
        "entropy": (ent * q).sum(1) / q.sum(1),
        "max_weight": (mx * q).sum(1) / q.sum(1),
    }


def uniform_stats(queries: torch.Tensor) -> dict[str, torch.Tensor]:
    """What uniform causal attention scores on the same rows: entropy log(t+1), largest weight 1/(t+1)."""
    t = queries.shape[1]
    visible = torch.arange(1, t + 1, dtype=torch.float64, device=queries.device)
    q = queries.double()
    return {
        "entropy": (visible.log() * q).sum(1) / q.sum(1),
        "max_weight": (visible.reciprocal() * q).sum(1) / q.sum(1),
    }


@torch.inference_mode()
def attention_maps(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Every attention layer's weights on ``tokens`` [B, T, 1], in chunks: a list of [B, H, T, T] (CPU)."""
    chunk = attention_chunk(model, tokens.shape[1])
    parts = [model(tokens[i : i + chunk], need_weights=True)[1] for i in range(0, len(tokens), chunk)]
    return [torch.cat([p[layer].float().cpu() for p in parts]) for layer in range(len(parts[0]))]


@torch.inference_mode()
def layer_stats(model, tokens: torch.Tensor, queries: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Per attention layer, :func:`row_stats` on every prompt ([B] each), in memory-bounded chunks."""
    chunk = attention_chunk(model, tokens.shape[1])
    per: list[dict[str, list]] = []
    for i in range(0, len(tokens), chunk):
        _, maps = model(tokens[i : i + chunk], need_weights=True)
        for layer, w in enumerate(maps):
            if len(per) <= layer:
                per.append({})
            for key, v in row_stats(w, queries[i : i + chunk]).items():
                per[layer].setdefault(key, []).append(v.cpu())
    return [{k: torch.cat(v) for k, v in d.items()} for d in per]


def _batches(n_prompts: int, batch_size: int):
    left = n_prompts
    while left > 0:
        yield min(batch_size, left)
        left -= batch_size


def concentration_rows(
    model, task, *, sigmas, magnitudes, length, n_prompts, batch_size, seed, device, base=None, progress=None
):
    """Rows (dicts) of entropy and largest weight per layer, against σ and against M."""
    base = base or {}
    s = stride(task)
    t = s * length
    rows = []

    def add(stats, sweep, sigma, m, predictor):
        for layer, d in enumerate(stats):
            for metric, v in d.items():
                v = v[~torch.isnan(v)]
                if len(v):
                    rows.append(
                        {
                            **base,
                            "predictor": predictor,
                            "sweep": sweep,
                            "layer": layer if predictor == "model" else np.nan,
                            "sigma_x": sigma,
                            "M": float(m),
                            "length": int(length),
                            "metric": metric,
                            **stat(v),
                        }
                    )

    for sigma in sigmas:
        g = cell_generator(seed, sigma, length)
        per, uni = [], []
        for bsz in _batches(n_prompts, batch_size):
            b = task.sample(bsz, length, g, "cpu", x_dist=normal(sigma)).to(device)
            queries = torch.ones(bsz, t, dtype=torch.bool, device=device)
            queries[:, 0] = False
            per.append(layer_stats(model, b.tokens, queries))
            uni.append(uniform_stats(queries.cpu()))
        add(_merge(per), "sigma", float(sigma), 0.0, "model")
        add(_merge([[u] for u in uni]), "sigma", float(sigma), 0.0, "uniform")
        if progress is not None:
            progress.update(1)

    # the same prompts and positions for every M: only the inserted value changes
    g = cell_generator(seed, -1.0, length)
    base_batches = []
    for bsz in _batches(n_prompts, batch_size):
        clean = task.sample(bsz, length, g, "cpu")
        base_batches.append((clean, torch.randint(0, length, (bsz, 1), generator=g)))
    for m in magnitudes:
        per, uni = [], []
        for clean, pos in base_batches:
            b = clean if m == 0 else insert(task, clean, pos, torch.full(pos.shape, float(m)))
            queries = torch.arange(t)[None, :] >= pos * s  # from the inserted x token on
            per.append(layer_stats(model, b.tokens.to(device), queries.to(device)))
            uni.append(uniform_stats(queries))
        add(_merge(per), "magnitude", np.nan, float(m), "model")
        add(_merge([[u] for u in uni]), "magnitude", np.nan, float(m), "uniform")
        if progress is not None:
            progress.update(1)
    return rows


def _merge(per_batch: list[list[dict]]) -> list[dict[str, torch.Tensor]]:
    """[batch][layer]{metric: [b]} -> [layer]{metric: [N]}."""
    return [
        {k: torch.cat([b[layer][k] for b in per_batch]) for k in per_batch[0][layer]}
        for layer in range(len(per_batch[0]))
    ]


# ------------------------------------------------------------------ one prompt
def one_prompt(task, cfg, length: int) -> tuple[Batch, int]:
    """The prompt of part (a) (a batch of one) and the token index of its deviant value (-1: none)."""
    if cfg.prompt:
        xs = torch.tensor([list(cfg.prompt)], dtype=torch.float32)
        if isinstance(task, Quantifier):
            return make_batch(task, xs), -1
        return make_batch(task, xs, float(cfg.a) * xs + float(cfg.b)), -1
    g = cell_generator(cfg.seed, length, 0.5)
    batch = task.sample(1, length, g, "cpu")
    if not cfg.deviant_magnitude:
        return batch, -1
    p = length // 2 if cfg.deviant_position is None else int(cfg.deviant_position)
    batch = insert(task, batch, torch.tensor([[p]]), torch.tensor([[float(cfg.deviant_magnitude)]]))
    return batch, p * stride(task)


def maps_figure(maps: np.ndarray, labels: list[str] | None, marked: int, title: str, path: Path):
    """Grid of maps [L, H, T, T]: layers in rows, heads in columns; one shared colour scale."""
    plt = plots.plt
    n_layer, n_head, t = maps.shape[:3]
    size = 2.6 if labels is None else min(6.0, max(2.6, 0.11 * t))
    fig, axes = plt.subplots(
        n_layer,
        n_head,
        figsize=(size * n_head + 1.2, size * n_layer + 0.8),
        squeeze=False,
        constrained_layout=True,
    )
    fs = 7 if t <= 24 else 5.5
    for i in range(n_layer):
        for h in range(n_head):
            ax = axes[i, h]
            im = draw_map(ax, maps[i, h], labels, [marked] if marked >= 0 else [], fontsize=fs)
            ax.set_title(f"layer {i} · head {h}", fontsize=9)
            if labels is None:
                ax.tick_params(labelsize=7)
            # token values on the outer panels only (the rows and columns are the same in every panel)
            ax.tick_params(labelbottom=i == n_layer - 1, labelleft=h == 0)
            if i == n_layer - 1:
                ax.set_xlabel("key token (attended to)", fontsize=8)
            if h == 0:
                ax.set_ylabel("query token", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.5, aspect=30, label="attention weight (sqrt scale)")
    fig.suptitle(title, fontsize=9)
    return plots.save(fig, path)


def concentration_figure(frame: pd.DataFrame, sweep: str, x: str, title: str, path: Path) -> list[Path]:
    """Entropy and largest weight against ``x``, one line per layer; uniform attention dashed."""
    plt = plots.plt
    d = frame[frame.sweep == sweep]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    layers = sorted(d[d.predictor == "model"].layer.unique())
    colours = plots.sns.color_palette("viridis", len(layers)) if len(layers) > 1 else ["C0"]
    for ax, metric, ylabel in (
        (axes[0], "entropy", "attention entropy per query (nats)"),
        (axes[1], "max_weight", "largest attention weight per query"),
    ):
        for layer, c in zip(layers, colours):
            e = d[(d.predictor == "model") & (d.layer == layer) & (d.metric == metric)].sort_values(x)
            ax.plot(e[x], e.value, marker="o", color=c, label=f"layer {int(layer)}")
            ax.fill_between(e[x], e.ci_low, e.ci_high, color=c, alpha=0.2, linewidth=0)
        u = d[(d.predictor == "uniform") & (d.metric == metric)].sort_values(x)
        ax.plot(u[x], u.value, linestyle="--", color="black", label="uniform attention")
        if sweep == "magnitude" and (d[x] > 0).any():
            ax.set_xscale("symlog", linthresh=1.0)
        elif sweep == "sigma":
            ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        if metric == "max_weight":
            ax.set_ylim(0, 1.02)
        ax.set_xlabel(
            "σ of the inputs, x ~ N(0, σ) (log scale)"
            if x == "sigma_x"
            else "inserted value M (symlog scale; 0: none)"
        )
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(title, fontsize=9)
    return plots.save(fig, path)


# ------------------------------------------------------------------ evaluator
@dataclass
class AttentionConfig(EvalConfig):
    """Maps on one prompt, and attention entropy / largest weight against σ and against M."""

    name: str = "attention"
    length: int | None = None  # examples per prompt; null = the run's curriculum.end
    prompt: list[float] | None = None  # the x values of the mapped prompt; null = a generated one
    a: float = 1.0  # linear tasks, with a given prompt: y = a·x + b
    b: float = 0.0
    deviant_magnitude: float = 0.0  # generated prompt: value written at deviant_position (0 = none)
    deviant_position: int | None = None  # 0-based example index; null = length // 2
    sigmas: list[float] = field(default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0])
    magnitudes: list[float] = field(default_factory=lambda: [0.0, 5.0, 20.0, 100.0])
    n_prompts: int = 256
    batch_size: int = 64
    seed: int = 1234


@EVALUATORS.register("attention", schema=AttentionConfig)
class Attention:
    @staticmethod
    def check(run_cfg, cfg) -> list[str]:
        task = run_cfg.task.name
        if task not in SUPPORTED:
            return [f"eval=attention needs a {'/'.join(SUPPORTED)} run, not {task}"]
        if run_cfg.model.name == "ff_only":
            return ["eval=attention needs a model with attention, not model=ff_only"]
        out = []
        per = tokens_per_example(run_cfg)
        limit = run_cfg.model.max_positions
        n = cfg.length if cfg.length is not None else run_cfg.curriculum.end
        if n < 1:
            out.append(f"eval.length={n} must be >= 1")
        elif per * n > limit:
            out.append(f"eval.length={n} needs {per * n} tokens, more than model.max_positions={limit}")
        if cfg.prompt is not None:
            if not len(cfg.prompt):
                out.append("eval.prompt must be null or a non-empty list of numbers")
            elif per * len(cfg.prompt) > limit:
                out.append(
                    f"eval.prompt has {len(cfg.prompt)} numbers = {per * len(cfg.prompt)} tokens, more than "
                    f"model.max_positions={limit}"
                )
            if cfg.deviant_magnitude:
                out.append(
                    "eval.deviant_magnitude applies to generated prompts; with eval.prompt, write the "
                    "value into the prompt"
                )
        if cfg.deviant_position is not None and not 0 <= cfg.deviant_position < max(n, 1):
            out.append(f"eval.deviant_position={cfg.deviant_position} must be in [0, {n}) (eval.length={n})")
        if task == "linear" and cfg.deviant_magnitude and n < 3:
            out.append(f"eval.length={n}: a deviant linear prompt needs >= 3 examples (a, b are recovered)")
        if task == "linear" and n < 3 and any(m != 0 for m in cfg.magnitudes):
            out.append(f"eval.length={n}: eval.magnitudes on a linear task need >= 3 examples")
        if not cfg.sigmas or min(cfg.sigmas) <= 0:
            out.append(f"eval.sigmas={list(cfg.sigmas)} must be a non-empty list of values > 0")
        if not cfg.magnitudes or min(cfg.magnitudes) < 0:
            out.append(f"eval.magnitudes={list(cfg.magnitudes)} must be a non-empty list of values >= 0")
        if cfg.n_prompts < 2:
            out.append(f"eval.n_prompts={cfg.n_prompts} must be >= 2")
        if cfg.batch_size < 1:
            out.append(f"eval.batch_size={cfg.batch_size} must be >= 1")
        return out

    @staticmethod
    def run(run, cfg, out_dir: Path):
        n = cfg.length if cfg.length is not None else run.cfg.curriculum.end
        task = run.task
        # (a) one prompt
        batch, marked = one_prompt(task, cfg, n)
        maps = torch.stack([m[0] for m in attention_maps(run.model, batch.tokens.to(run.device))]).numpy()
        np.savez_compressed(
            out_dir / "maps.npz",
            maps=maps,
            tokens=batch.tokens[0, :, 0].numpy(),
            marked=np.array(marked),
        )
        t = maps.shape[-1]
        labels = token_labels(task, batch) if t <= MAX_LABELLED_TOKENS else None
        what = (
            "given prompt"
            if cfg.prompt
            else (
                f"generated prompt, x at example {marked // stride(task)} set to {cfg.deviant_magnitude:g} (red)"
                if marked >= 0
                else "generated in-distribution prompt"
            )
        )
        figs = maps_figure(
            maps,
            labels,
            marked,
            f"{run.title}\nattention maps (query rows, key columns), {what}",
            out_dir / "maps",
        )

        # (b) concentration against σ and M
        points = len(cfg.sigmas) + len(cfg.magnitudes)
        log.info(
            "attention: %d points × %d prompts of %d examples, on %s", points, cfg.n_prompts, n, run.device
        )
        with Progress(points, "attention") as bar:
            rows = concentration_rows(
                run.model,
                task,
                sigmas=list(cfg.sigmas),
                magnitudes=list(cfg.magnitudes),
                length=n,
                n_prompts=cfg.n_prompts,
                batch_size=cfg.batch_size,
                seed=cfg.seed,
                device=run.device,
                base=run.labels,
                progress=bar,
            )
        frame = pd.DataFrame(rows)
        figs += concentration_figure(
            frame,
            "sigma",
            "sigma_x",
            f"{run.title}\nattention concentration against input scale ({n} examples)",
            out_dir / "concentration_by_sigma",
        )
        figs += concentration_figure(
            frame,
            "magnitude",
            "M",
            f"{run.title}\nattention concentration with one inserted value M (queries from it on)",
            out_dir / "concentration_by_magnitude",
        )
        model = frame[frame.predictor == "model"]

        def table(sweep, x, metric):
            d = model[(model.sweep == sweep) & (model.metric == metric)]
            return {
                f"layer {int(k)}": dict(zip(g[x].tolist(), g.value.tolist())) for k, g in d.groupby("layer")
            }

        summary = {
            "length": n,
            "maps_shape": list(maps.shape),
            "arrays": ["maps.npz"],
            "entropy_by_sigma": table("sigma", "sigma_x", "entropy"),
            "max_weight_by_M": table("magnitude", "M", "max_weight"),
            "entropy_by_M": table("magnitude", "M", "entropy"),
            "figures": [p.name for p in figs],
        }
        return {"results": frame}, summary
