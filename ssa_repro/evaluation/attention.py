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
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ssa_repro.core import plotting
from ssa_repro.core.atomic import atomic_path
from ssa_repro.evaluation import checks
from ssa_repro.evaluation.attention_maps import attention_chunk, draw_map, token_labels
from ssa_repro.evaluation.deviant_cells import insert
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.models.positions import position_limit
from ssa_repro.stats.intervals import summarize
from ssa_repro.tasks.base import Batch, Prompts

log = logging.getLogger("ssa_repro.evaluate")

MAX_LABELLED_TOKENS = 48  # token values on the axes of the map grid up to this prompt length
KINDS = {"entropy": "real", "max_weight": "rate"}


def row_stats(w: torch.Tensor, queries: torch.Tensor) -> dict[str, torch.Tensor]:
    """Entropy (nats) and largest weight of each query row of ``w`` [B, H, T, S], averaged over heads and
    the rows where ``queries`` [B, T] is true: [B] each (NaN where no row counts). Signed scorers (cog,
    diff) and rows that do not sum to 1 are measured on |w| / Σ|w| (the distribution of attention mass),
    and their largest weight is the largest |w|."""
    mag = w.double().abs()
    p = mag / mag.sum(-1, keepdim=True).clamp_min(1e-30)  # [B, H, T, S] rows of attention mass
    ent = -torch.special.xlogy(p, p).sum(-1).mean(1)  # [B, T]; 0·log 0 = 0
    mx = mag.amax(-1).mean(1)
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


def _merge(per_batch: list[list[dict]]) -> list[dict[str, torch.Tensor]]:
    """[batch][layer]{metric: [b]} -> [layer]{metric: [N]}."""
    return [
        {k: torch.cat([b[layer][k] for b in per_batch]) for k in per_batch[0][layer]}
        for layer in range(len(per_batch[0]))
    ]


def _rows(stats, cell: dict, length: int, predictor: str, base: dict) -> list[dict]:
    rows = []
    for layer, d in enumerate(stats):
        for metric, v in d.items():
            s = summarize(v.numpy(), KINDS[metric])
            if s["n_samples"]:
                rows.append(
                    {
                        **base,
                        **cell,
                        "predictor": predictor,
                        "layer": layer if predictor == "model" else np.nan,
                        "length": int(length),
                        "metric": metric,
                        **s,
                    }
                )
    return rows


def sigma_rows(model, task, sigma, *, length, n_prompts, batch_size, seed, device, base) -> list[dict]:
    """Entropy and largest weight per layer with x ~ N(0, σ), all query rows but the first."""
    g = cell_generator(seed, sigma, length)
    t = task.n_tokens(length)
    per, uni = [], []
    for bsz in _batches(n_prompts, batch_size):
        b = task.sample(bsz, length, g, "cpu", {"sigma_x": float(sigma)}).to(device)
        queries = torch.ones(bsz, t, dtype=torch.bool, device=device)
        queries[:, 0] = False
        per.append(layer_stats(model, b.tokens, queries))
        uni.append(uniform_stats(queries.cpu()))
    cell = {"sweep": "sigma", "sigma_x": float(sigma), "M": 0.0}
    return _rows(_merge(per), cell, length, "model", base) + _rows(
        _merge([[u] for u in uni]), cell, length, "uniform", base
    )


def magnitude_rows(model, task, m, *, length, n_prompts, batch_size, seed, device, base) -> list[dict]:
    """The same with one value M at a uniform example position (the same prompts and positions for
    every M; M = 0: nothing inserted), the query rows from the inserted x token on."""
    g = cell_generator(seed, -1.0, length)
    s, t = task.stride(), task.n_tokens(length)
    per, uni = [], []
    for bsz in _batches(n_prompts, batch_size):
        clean = task.sample(bsz, length, g, "cpu")
        pos = torch.randint(0, length, (bsz, 1), generator=g)
        b = clean if m == 0 else insert(task, clean, pos, torch.full(pos.shape, float(m)))
        queries = torch.arange(t)[None, :] >= pos * s  # from the inserted x token on
        per.append(layer_stats(model, b.tokens.to(device), queries.to(device)))
        uni.append(uniform_stats(queries))
    cell = {"sweep": "magnitude", "sigma_x": math.nan, "M": float(m)}
    return _rows(_merge(per), cell, length, "model", base) + _rows(
        _merge([[u] for u in uni]), cell, length, "uniform", base
    )


# ------------------------------------------------------------------ one prompt
def one_prompt(task, cfg, length: int) -> tuple[Batch, int]:
    """The prompt of part (a) (a batch of one) and the token index of its deviant value (-1: none)."""
    if cfg.prompt:
        xs = torch.tensor([list(cfg.prompt)], dtype=torch.float32)
        params = {"a": torch.tensor([[float(cfg.a)]]), "b": torch.tensor([[float(cfg.b)]])}
        return task.build(Prompts(xs, params if not task.classification else {})), -1
    g = cell_generator(cfg.seed, length, 0.5)
    batch = task.sample(1, length, g, "cpu")
    if not cfg.deviant_magnitude:
        return batch, -1
    p = length // 2 if cfg.deviant_position is None else int(cfg.deviant_position)
    batch = insert(task, batch, torch.tensor([[p]]), torch.tensor([[float(cfg.deviant_magnitude)]]))
    return batch, p * task.stride()


def maps_figure(maps: np.ndarray, labels: list[str] | None, marked: int, title: str, path: Path):
    """Grid of maps [L, H, T, T]: layers in rows, heads in columns; one shared colour scale."""
    plt = plotting.plt
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
    return plotting.save(fig, path)


def concentration_figure(frame: pd.DataFrame, sweep: str, x: str, title: str, path: Path) -> list[Path]:
    """Entropy and largest weight against ``x``, one line per layer; uniform attention dashed."""
    plt = plotting.plt
    d = frame[frame.sweep == sweep]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    layers = sorted(d[d.predictor == "model"].layer.unique())
    colours = plotting.sns.color_palette("viridis", len(layers)) if len(layers) > 1 else ["C0"]
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
    return plotting.save(fig, path)


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
class Attention(Evaluator):
    """Cells: the one-prompt maps (``sweep=maps``), each σ (``sweep=sigma``) and each M (``sweep=magnitude``)."""

    name = "attention"
    axes = ("sigmas", "magnitudes")
    fills_length = "length"
    coords = ("sweep", "sigma_x", "M")

    @classmethod
    def applies_to(cls, task) -> bool:
        """In-context tasks of numeric inputs (a grid, and no token vocabulary)."""
        return task.evaluation is not None and task.evaluation.grid is not None and not task.tokens

    def check(self) -> list[str]:
        if self.run_cfg.model.name == "ff_only":
            return ["eval=attention needs a model with attention, not model=ff_only"]
        cfg = self.cfg
        per = self.task.stride()
        limit = position_limit(self.run_cfg.model)  # None: the scheme has no table, any length
        n = cfg.length
        out = checks.prompt_length(n, per, self.run_cfg.model)
        if cfg.prompt is not None:
            if not len(cfg.prompt):
                out.append("eval.prompt must be null or a non-empty list of numbers")
            elif limit is not None and per * len(cfg.prompt) > limit:
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
        out += checks.positive_values("sigmas", cfg.sigmas)
        if not cfg.magnitudes or min(cfg.magnitudes) < 0:
            out.append(f"eval.magnitudes={list(cfg.magnitudes)} must be a non-empty list of values >= 0")
        if cfg.n_prompts < 2:
            out.append(f"eval.n_prompts={cfg.n_prompts} must be >= 2")
        if cfg.batch_size < 1:
            out.append(f"eval.batch_size={cfg.batch_size} must be >= 1")
        return out

    def cells(self) -> list[dict]:
        return [
            {"sweep": "maps", "sigma_x": math.nan, "M": math.nan},
            *({"sweep": "sigma", "sigma_x": float(s), "M": 0.0} for s in self.cfg.sigmas),
            *({"sweep": "magnitude", "sigma_x": math.nan, "M": float(m)} for m in self.cfg.magnitudes),
        ]

    def compute(self, run, cells, progress):
        c = self.cfg
        kw = dict(
            length=c.length,
            n_prompts=c.n_prompts,
            batch_size=c.batch_size,
            seed=c.seed,
            device=run.device,
            base=run.labels,
        )
        log.info(
            "attention: %d points × %d prompts of %d examples, on %s",
            len(cells),
            c.n_prompts,
            c.length,
            run.device,
        )
        for cell in cells:
            if cell["sweep"] == "maps":
                rows = self._maps(run)
            elif cell["sweep"] == "sigma":
                rows = sigma_rows(run.model, run.task, cell["sigma_x"], **kw)
            else:
                rows = magnitude_rows(run.model, run.task, cell["M"], **kw)
            yield {"results": pd.DataFrame(rows)}
            progress.update(1)

    def _maps(self, run) -> list[dict]:
        """(a): every layer's and head's map on one prompt: ``maps.npz`` and the figure; one marker row."""
        cfg, task, n = self.cfg, run.task, self.cfg.length
        batch, marked = one_prompt(task, cfg, n)
        maps = torch.stack([m[0] for m in attention_maps(run.model, batch.tokens.to(run.device))]).numpy()
        with atomic_path(self.out_dir / "maps.npz") as tmp, open(tmp, "wb") as f:
            np.savez_compressed(f, maps=maps, tokens=batch.tokens[0, :, 0].numpy(), marked=np.array(marked))
        t = maps.shape[-1]
        labels = token_labels(task, batch) if t <= MAX_LABELLED_TOKENS else None
        what = (
            "given prompt"
            if cfg.prompt
            else (
                f"generated prompt, x at example {marked // task.stride()} set to {cfg.deviant_magnitude:g} (red)"
                if marked >= 0
                else "generated in-distribution prompt"
            )
        )
        maps_figure(
            maps,
            labels,
            marked,
            f"{run.title} · step {run.step}\nattention maps (query rows, key columns), {what}",
            self.out_dir / "maps",
        )
        return [
            {
                **run.labels,
                "sweep": "maps",
                "sigma_x": math.nan,
                "M": math.nan,
                "predictor": "model",
                "layer": math.nan,
                "length": n,
                "metric": "maps_shape",
                "value": float(np.prod(maps.shape)),
                "n_samples": 1,
                "ci_low": math.nan,
                "ci_high": math.nan,
            }
        ]

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        if not plotting.enabled():  # figures off (plotting.saving): none built; this draw writes no table
            return []
        frame = frames["results"]
        frame = frame[frame.sweep != "maps"]
        n = self.cfg.length
        figs = []
        if (frame.sweep == "sigma").any():
            figs += concentration_figure(
                frame,
                "sigma",
                "sigma_x",
                f"{title}\nattention concentration against input scale ({n} examples)",
                out_dir / "concentration_by_sigma",
            )
        if (frame.sweep == "magnitude").any():
            figs += concentration_figure(
                frame,
                "magnitude",
                "M",
                f"{title}\nattention concentration with one inserted value M (queries from it on)",
                out_dir / "concentration_by_magnitude",
            )
        return figs

    def summarize(self, frames) -> dict:
        frame = frames["results"]
        model = frame[(frame.predictor == "model") & (frame.sweep != "maps")]

        def table(sweep, x, metric):
            d = model[(model.sweep == sweep) & (model.metric == metric)]
            return {
                f"layer {int(k)}": dict(zip(g[x].tolist(), g.value.tolist())) for k, g in d.groupby("layer")
            }

        return {
            "length": self.cfg.length,
            "arrays": ["maps.npz"],
            "entropy_by_sigma": table("sigma", "sigma_x", "entropy"),
            "max_weight_by_M": table("magnitude", "M", "max_weight"),
            "entropy_by_M": table("magnitude", "M", "entropy"),
        }
