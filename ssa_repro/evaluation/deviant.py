"""Deviant prompts: in-distribution numbers plus k values of magnitude M (the paper's figure 2).

A cell (M, k) holds ``n_samples`` × ``batch_size`` prompts of ``length`` examples drawn with the task's
own sampler and training distributions (prompts fresh per cell, from a seed derived from (seed, M, k,
length, sign)). In each prompt k distinct example positions, chosen uniformly, get their input x
*replaced* by ±M (``sign``: positive, negative or random per value), so the prompt keeps its length.
The answers are then recomputed from the modified inputs, and the tokens rebuilt with them (with
labels in context the y tokens change too) by the task's own labelling of the new inputs: quantifiers
relabel from the new xs; a linear prompt keeps its function, so y = a·M + b at the modified positions
(untouched pairs are the same numbers as before).

Metrics per cell (long form, one row per metric):
  quantifiers  ``sequence_error`` (any wrong sign from ``skip_first`` on), ``token_error``, and
               ``follows_largest``: over the predictions strictly after the first inserted position,
               the share whose sign equals the model's prediction sign at the largest inserted element
               (largest value, earliest on ties), read at every x token even with ``supervise=last``.
               The same share computed on the true labels (``predictor=labels``) is what a perfect model
               scores: the finding is a model near 1 where the labels are not. Read it beside
               ``error_at_inserted`` (with ``supervise=all``): the sign error of the predictions at the
               inserted positions themselves, whatever ``skip_first`` (a model can follow its own wrong
               answer at the deviant value).
  linear       ``mse`` from ``skip_first`` on; ``mse_untouched``: the same without the inserted
               positions (the damage the deviant values do to the other predictions); ``mse_inserted``:
               at the inserted positions only (whatever ``skip_first``; boundary values show here).
  attention    in the last attention layer, for the queries at x tokens strictly after the first
               inserted position: the weight put on the inserted x tokens (``attention_on_inserted``
               averaged over heads, ``attention_on_inserted_max_head`` the largest head), and the share
               uniform attention would give them, #inserted visible / #visible (``uniform_share``).
Each value is a mean over prompts with a 95% interval (prompts where nothing follows the first inserted
position have no value for the query-based metrics and are left out of their ``n_samples``).

``detail: true`` (the falsifying protocol; off by default, so today's tables are unchanged) adds
  errors apart  quantifiers (``supervise=all``): ``error_elsewhere``, the sign error at the positions
               not inserted from ``skip_first`` on, and ``error_after_inserted``, the same at the
               positions strictly after the first inserted one (beside ``error_at_inserted``: a *local*
               failure errs at the inserted token and not after it; the paper's whole-sequence
               following errs after it too); linear: ``mse_after_inserted`` likewise.
  ``attention`` table: for every attention layer (``layer``, 1-based) the weight on the inserted
               tokens with the same queries, per ``head``: ``mean`` (heads averaged), ``max`` (the most
               attending head per prompt) and each head ``0``, ``1``, ...; ``metric`` is
               ``attention_on_inserted``, or ``uniform_share`` (``head`` = ``uniform``).

The sign decides whether following the largest element is wrong (:func:`adverse_sign`): for "every", a
+M value answers "true" at itself, which later labels contradict wherever an earlier or later number is
negative; a -M value makes every later label false, so following it is right. For "some" it is the
other way round (-M adverse, +M the control: labels follow a +M exactly). Evaluate both signs (two
protocols): the labels' own ``follows_largest`` is exactly 1 under the control sign.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.colors import PowerNorm

from ssa_repro.core import plotting
from ssa_repro.core.enums import value_of
from ssa_repro.evaluation import checks
from ssa_repro.evaluation.inference import MAX_ATTENTION_ELEMENTS
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.stats.intervals import summarize
from ssa_repro.tasks.base import Batch

log = logging.getLogger("ssa_repro.evaluate")


class Sign(str, Enum):
    positive = "positive"
    negative = "negative"
    random = "random"


# ------------------------------------------------------------------ prompts
def draw_insertions(g: torch.Generator, bsz: int, n: int, k: int, magnitude: float, sign) -> tuple:
    """Positions [B, k] (distinct example indices, uniform) and values [B, k] (±magnitude)."""
    positions = torch.rand(bsz, n, generator=g).argsort(dim=1)[:, :k]
    sign = value_of(sign)
    if sign == "random":
        signs = torch.where(torch.rand(bsz, k, generator=g) < 0.5, -1.0, 1.0)
    else:
        signs = torch.full((bsz, k), -1.0 if sign == "negative" else 1.0)
    return positions, signs * float(magnitude)


def insert(task, batch: Batch, positions: torch.Tensor, values: torch.Tensor) -> Batch:
    """The batch with x at ``positions`` [B, k] replaced by ``values`` [B, k], labelled and encoded by
    the task (each prompt keeps its function)."""
    xs = batch.xs.clone()
    xs.scatter_(1, positions, values.to(xs.dtype))
    return task.build(batch.prompts.with_xs(xs))


def largest_inserted(positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """[B] the example index of the largest inserted value (the earliest among equal ones)."""
    big = values == values.amax(1, keepdim=True)
    masked = torch.where(big, positions, torch.iinfo(positions.dtype).max)
    return masked.amin(1)


def adverse_sign(task) -> str | None:
    """The insertion sign under which following the inserted value's answer is wrong: ``positive`` for
    "every", ``negative`` for "some", None for tasks without a quantifier rule."""
    every = getattr(task, "every", None)
    return None if every is None else ("positive" if every else "negative")


# ------------------------------------------------------------------ metrics
def follows_largest(signs: torch.Tensor, positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """[B] share of the signs at example indices strictly after the first inserted position that equal
    the sign at the largest inserted element; NaN where no index follows. ``signs`` [B, n] (±1 or bool)."""
    n = signs.shape[1]
    ref = signs.gather(1, largest_inserted(positions, values)[:, None])  # [B, 1]
    after = torch.arange(n, device=signs.device)[None, :] > positions.amin(1, keepdim=True)
    same = (signs == ref) & after
    return same.sum(1).double() / after.sum(1).double()  # 0/0 = NaN


def inserted_share(w: torch.Tensor, inserted: torch.Tensor, queries: torch.Tensor) -> dict:
    """Attention on inserted keys, per prompt: ``w`` [B, H, T, T] one layer's weights, ``inserted`` [B, T]
    the inserted tokens (keys), ``queries`` [B, T] the query rows to average. Returns [B] tensors
    (NaN where no query counts): heads averaged, the largest head, and the uniform share."""
    ins = inserted.to(w.dtype)
    share = (w * ins[:, None, None, :]).sum(-1)  # [B, H, T]
    t = w.shape[-1]
    uniform = ins.cumsum(1) / torch.arange(1, t + 1, device=w.device, dtype=w.dtype)  # causal
    q = queries.to(w.dtype)

    def avg(v):  # [B, T] -> [B], over the counted queries
        return (v * q).sum(1).double() / q.sum(1).double()

    return {
        "attention_on_inserted": avg(share.mean(1)),
        "attention_on_inserted_max_head": avg(share.amax(1)),
        "uniform_share": avg(uniform.expand_as(q)),
    }


def attention_chunk(model, t: int) -> int:
    """Prompts per forward pass with ``need_weights`` (all layers' maps are kept at once)."""
    attn = [b.attn for b in model.blocks if b.attn is not None]
    heads = max((a.n_head for a in attn), default=1)
    return max(1, MAX_ATTENTION_ELEMENTS // (heads * t * t * max(1, len(attn))))


def head_shares(w: torch.Tensor, inserted: torch.Tensor, queries: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head, the attention on inserted keys averaged over the counted queries: ``{"0": [B], ...}``
    (the same quantities as :func:`inserted_share`, head by head)."""
    share = (w * inserted.to(w.dtype)[:, None, None, :]).sum(-1)  # [B, H, T]
    q = queries.to(w.dtype)[:, None, :]
    per = (share * q).sum(-1).double() / q.sum(-1).double()  # [B, H]
    return {str(h): per[:, h] for h in range(per.shape[1])}


@torch.inference_mode()
def outputs_and_maps(model, tokens: torch.Tensor, fn):
    """Runs ``model(tokens, need_weights=True)`` in chunks; ``fn(chunk_slice, out, maps)`` per chunk
    (``maps`` every attention layer's [b, H, T, T] weights, float). Returns the outputs [B, T] (float)."""
    bsz, t = tokens.shape[:2]
    chunk = attention_chunk(model, t)
    outs = []
    for i in range(0, bsz, chunk):
        out, maps = model(tokens[i : i + chunk], need_weights=True)
        if maps:
            fn(slice(i, i + chunk), out, [m.float() for m in maps])
        outs.append(out.float())
    return torch.cat(outs)


RATE_METRICS = {
    "sequence_error",
    "token_error",
    "follows_largest",
    "error_at_inserted",
    "attention_on_inserted",
    "attention_on_inserted_max_head",
    "uniform_share",
    "error_elsewhere",
    "error_after_inserted",
}


def deviant_cell(
    model, task, batch: Batch, positions, values, skip_first: int, detail: bool = False
) -> dict[str | tuple, torch.Tensor]:
    """Per-prompt metrics [B] of one deviant batch (on the model's device). With ``detail``, also the
    errors apart and, under keys ``("attention", layer, head, metric)``, every layer's shares."""
    s = task.stride()
    bsz, n = batch.xs.shape
    t = batch.tokens.shape[1]
    x_tok = task.example_tokens(n, batch.tokens.device)
    inserted = torch.zeros(bsz, t, dtype=torch.bool, device=batch.tokens.device)
    inserted.scatter_(1, positions * s, True)
    after = torch.arange(n, device=x_tok.device)[None, :] > positions.amin(1, keepdim=True)  # [B, n]
    queries = torch.zeros_like(inserted)
    queries[:, x_tok] = after
    attn: dict[str, list] = {}

    def on_chunk(sl, out, maps):
        for key, v in inserted_share(maps[-1], inserted[sl], queries[sl]).items():
            attn.setdefault(key, []).append(v)
        for layer, w in enumerate(maps if detail else [], start=1):
            both = inserted_share(w, inserted[sl], queries[sl])
            heads = {"mean": both["attention_on_inserted"], "max": both["attention_on_inserted_max_head"]}
            for head, v in {**heads, **head_shares(w, inserted[sl], queries[sl])}.items():
                attn.setdefault(("attention", layer, head, "attention_on_inserted"), []).append(v)
            attn.setdefault(("attention", layer, "uniform", "uniform_share"), []).append(
                both["uniform_share"]
            )

    out = outputs_and_maps(model, batch.tokens, on_chunk)  # [B, T]
    pred = out[:, batch.pred_idx]
    res: dict[str, torch.Tensor] = {}
    if task.classification:
        res.update(task.prompt_metrics(pred, batch, skip_first))
        res["follows_largest"] = follows_largest(out[:, x_tok] > 0, positions, values)
        labels = batch.ys  # [B, n] every example's label
        res["labels:follows_largest"] = follows_largest(labels > 0, positions, values)
        if pred.shape[1] == n:  # the model was trained to answer at every x token
            wrong = (out[:, x_tok] > 0) != (labels > 0)  # [B, n]
            res["error_at_inserted"] = wrong.gather(1, positions).double().mean(1)
            if detail:
                res.update(
                    _apart(wrong.double(), positions, skip_first, "error_elsewhere", "error_after_inserted")
                )
    else:
        err = task.error(pred, batch.targets)  # [B, n]
        res["mse"] = err[:, skip_first:].mean(1)
        untouched = torch.ones_like(err, dtype=torch.bool).scatter_(1, positions, False)
        res["mse_inserted"] = err.gather(1, positions).mean(1)
        untouched[:, :skip_first] = False
        res["mse_untouched"] = (err * untouched).sum(1) / untouched.sum(1).clamp_min(1)
        if detail:
            res["mse_after_inserted"] = _apart(err.double(), positions, skip_first, "", "after")["after"]
    for key, v in attn.items():
        res[key] = torch.cat(v)
    return res


def _apart(err: torch.Tensor, positions: torch.Tensor, skip_first: int, elsewhere: str, after: str) -> dict:
    """Mean of ``err`` [B, n] over the positions not inserted from ``skip_first`` on (``elsewhere``) and
    over those strictly after the first inserted position (``after``; NaN where none): [B] each."""
    n = err.shape[1]
    idx = torch.arange(n, device=err.device)[None, :]
    other = torch.ones_like(err, dtype=torch.bool).scatter_(1, positions, False)  # [B, n]
    rest = other & (idx >= skip_first)
    later = other & (idx > positions.amin(1, keepdim=True))
    return {
        elsewhere: (err * rest).sum(1) / rest.sum(1).double(),  # 0/0 = NaN
        after: (err * later).sum(1) / later.sum(1).double(),
    }


def deviant_rows(
    model, task, cell: dict, *, sign, length, n_samples, batch_size, skip_first, seed, device, base=None
) -> list[dict]:
    """Rows (dicts) of one cell {"M": m, "k": k}: one per predictor × metric, mean over prompts with an
    interval that respects the metric's range (prompts where a metric is undefined left out)."""
    return deviant_tables(
        model,
        task,
        cell,
        sign=sign,
        length=length,
        n_samples=n_samples,
        batch_size=batch_size,
        skip_first=skip_first,
        seed=seed,
        device=device,
        base=base,
    )["results"]


def deviant_tables(
    model,
    task,
    cell: dict,
    *,
    sign,
    length,
    n_samples,
    batch_size,
    skip_first,
    seed,
    device,
    base=None,
    detail: bool = False,
) -> dict[str, list[dict]]:
    """``{"results": rows, "attention": rows}`` of one cell (see :func:`deviant_rows`); the attention
    table (every layer and head) is filled with ``detail``."""
    m, k = float(cell["M"]), int(cell["k"])
    g = cell_generator(seed, m, k, length, list(Sign).index(Sign(value_of(sign))))
    per: dict[str, list] = {}
    for _ in range(n_samples):
        clean = task.sample(batch_size, length, g, "cpu")
        positions, values = draw_insertions(g, batch_size, length, k, m, sign)
        batch = insert(task, clean, positions, values).to(device)
        for key, v in deviant_cell(
            model, task, batch, positions.to(device), values.to(device), skip_first, detail
        ).items():
            per.setdefault(key, []).append(v)
    rows, attn_rows = [], []
    for key, v in per.items():
        v = torch.cat(v).double().cpu().numpy()
        if isinstance(key, tuple):  # ("attention", layer, head, metric)
            _, layer, head, metric = key
            stats = summarize(v, "rate")
            cell_row = {**(base or {}), "M": m, "k": k, "length": int(length), "layer": layer, "head": head}
            if stats["n_samples"]:
                attn_rows.append({**cell_row, "metric": metric, **stats})
            continue
        predictor, metric = key.split(":") if ":" in key else ("model", key)
        kind = "rate" if metric in RATE_METRICS else "positive"
        stats = summarize(v, kind)
        if stats["n_samples"]:
            rows.append(
                {
                    **(base or {}),
                    "predictor": predictor,
                    "M": m,
                    "k": k,
                    "length": int(length),
                    "metric": metric,
                    **stats,
                }
            )
    return {"results": rows, "attention": attn_rows}


# ------------------------------------------------------------------ figures
def token_labels(task, batch: Batch, i: int = 0) -> list[str]:
    """Short labels of prompt ``i``'s tokens: x values, and labels (+/-) or y values."""
    vals = batch.tokens[i, :, 0].tolist()
    s = task.stride()
    out = []
    for j, v in enumerate(vals):
        if s == 2 and j % 2 == 1:
            out.append(("y+" if v > 0 else "y−") if task.classification else f"y {v:.3g}")
        else:
            out.append(f"{v:.3g}")
    return out


def draw_map(ax, w: np.ndarray, labels: list[str] | None, marks=(), vmax: float = 1.0, fontsize: float = 6):
    """One [T, T] attention map (query rows, key columns) with token labels and marked key columns."""
    t = w.shape[0]
    # square-root colour scale: weights near 1/T stay visible beside a collapsed row's weight near 1
    im = ax.imshow(w, cmap="viridis", norm=PowerNorm(0.5, vmin=0.0, vmax=vmax), interpolation="nearest")
    if labels is not None:
        ax.set_xticks(range(t), labels, rotation=90, fontsize=fontsize)
        ax.set_yticks(range(t), labels, fontsize=fontsize)
    for j in marks:
        ax.add_patch(
            plotting.plt.Rectangle((j - 0.5, j - 0.5), 1, t - j, fill=False, edgecolor="red", linewidth=1.2)
        )
        if labels is not None:
            ax.get_xticklabels()[j].set_color("red")
            ax.get_yticklabels()[j].set_color("red")
    return im


def example_figure(run, task, clean: Batch, dev: Batch, inserted_tok: list[int], title: str, path: Path):
    """The last attention layer (heads averaged) on one prompt, before and after the insertion."""
    plt = plotting.plt
    maps = []
    with torch.inference_mode():
        for b in (clean, dev):
            _, m = run.model(b.tokens[:1].to(run.device), need_weights=True)
            maps.append(m[-1][0].float().mean(0).cpu().numpy())
    t = maps[0].shape[0]
    size = min(12.0, max(5.0, 0.16 * t))
    fig, axes = plt.subplots(1, 2, figsize=(2 * size + 1.2, size + 0.9), constrained_layout=True)
    fs = 7 if t <= 30 else 5.5
    for ax, w, b, sub, marks in (
        (axes[0], maps[0], clean, "in distribution", ()),
        (axes[1], maps[1], dev, "with the inserted value(s) (red)", inserted_tok),
    ):
        im = draw_map(ax, w, token_labels(task, b) if t <= 64 else None, marks, fontsize=fs)
        ax.set_title(sub, fontsize=10)
        ax.set_xlabel("key token (attended to)")
        ax.set_ylabel("query token")
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight (last layer, heads averaged; sqrt scale)")
    fig.suptitle(title, fontsize=10)
    return plotting.save(fig, path)


def share_figure(frame: pd.DataFrame, title: str, path: Path) -> list[Path]:
    """Attention share on inserted tokens vs M, one colour per k; uniform share dashed."""
    plt = plotting.plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, constrained_layout=True)
    ks = sorted(frame["k"].unique())
    colours = plotting.sns.color_palette("viridis", len(ks)) if len(ks) > 1 else ["C0"]
    for ax, metric, sub in (
        (axes[0], "attention_on_inserted", "heads averaged"),
        (axes[1], "attention_on_inserted_max_head", "most-attending head"),
    ):
        for k, c in zip(ks, colours):
            d = frame[(frame.k == k) & (frame.metric == metric)].sort_values("M")
            u = frame[(frame.k == k) & (frame.metric == "uniform_share")].sort_values("M")
            ax.plot(d.M, d.value, marker="o", color=c, label=f"k = {k}")
            ax.fill_between(d.M, d.ci_low, d.ci_high, color=c, alpha=0.2, linewidth=0)
            ax.plot(u.M, u.value, linestyle="--", color=c, label=f"k = {k}, uniform share")
        ax.set_xscale("log")
        ax.set_xlabel("magnitude M of the inserted values (log scale)")
        ax.set_title(sub, fontsize=9)
        ax.grid(alpha=0.3)
    top = frame[frame.metric.str.startswith(("attention_on", "uniform"))].ci_high.max()
    axes[0].set_ylim(0, min(1.02, 1.15 * top + 0.02))  # one scale for both panels (sharey)
    axes[0].set_ylabel("attention weight on inserted tokens\n(last layer, queries after the first one)")
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(title, fontsize=9)
    return plotting.save(fig, path)


def follows_figure(frame: pd.DataFrame, title: str, path: Path) -> list[Path]:
    """follows_largest vs M, one colour per k; the labels' own rate dashed."""
    plt = plotting.plt
    fig, ax = plt.subplots(figsize=(6.5, 3.8), constrained_layout=True)
    ks = sorted(frame["k"].unique())
    colours = plotting.sns.color_palette("viridis", len(ks)) if len(ks) > 1 else ["C0"]
    for k, c in zip(ks, colours):
        d = frame[(frame.k == k) & (frame.predictor == "model")].sort_values("M")
        lab = frame[(frame.k == k) & (frame.predictor == "labels")].sort_values("M")
        ax.plot(d.M, d.value, marker="o", color=c, label=f"k = {k}, model")
        ax.fill_between(d.M, d.ci_low, d.ci_high, color=c, alpha=0.2, linewidth=0)
        ax.plot(lab.M, lab.value, linestyle="--", color=c, label=f"k = {k}, true labels")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("magnitude M of the inserted values (log scale)")
    ax.set_ylabel("share of later predictions with the\nsign predicted at the largest element")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    return plotting.save(fig, path)


def lines_figure(frame: pd.DataFrame, by: str, title: str, path: Path, ylabel: str) -> list[Path]:
    """``value`` vs M, one panel per k, one line per value of column ``by``, with 95% bands."""
    plt = plotting.plt
    ks = sorted(frame["k"].unique())
    fig, axes = plt.subplots(1, len(ks), figsize=(4.2 * len(ks) + 1.5, 3.6), sharey=True, squeeze=False,
                             constrained_layout=True)  # fmt: skip
    for ax, k in zip(axes[0], ks):
        for i, (name, d) in enumerate(frame[frame.k == k].groupby(by, sort=True)):
            d = d.sort_values("M")
            ax.plot(d.M, d.value, marker="o", color=f"C{i}", label=str(name))
            ax.fill_between(d.M, d.ci_low, d.ci_high, color=f"C{i}", alpha=0.2, linewidth=0)
        ax.set_xscale("log")
        ax.set_xlabel("magnitude M (log scale)")
        ax.set_title(f"k = {k}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(title, fontsize=9)
    return plotting.save(fig, path)


def layers_figure(attn: pd.DataFrame, title: str, path: Path) -> list[Path]:
    """Attention on inserted tokens vs M for every layer: heads averaged, the most attending head, and
    the uniform share, at the smallest k."""
    k = attn["k"].min()
    d = attn[attn.k == k].assign(head=lambda f: f["head"].astype(str))
    shown = d[d["head"].isin(["mean", "max", "uniform"])]
    shown = shown.assign(line=lambda f: "layer " + f.layer.astype(int).astype(str) + ", " + f["head"])
    return lines_figure(shown, "line", f"{title}, k = {k}", path, "attention weight on inserted tokens")


# ------------------------------------------------------------------ evaluator
@dataclass
class DeviantConfig(EvalConfig):
    """k values of magnitude M put into in-distribution prompts, on an M × k grid."""

    name: str = "deviant"
    magnitudes: list[float] = field(default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0])
    counts: list[int] = field(default_factory=lambda: [1, 2, 4])  # k, inserted values per prompt
    sign: Sign = Sign.positive  # of the inserted values: positive | negative | random (each ±1)
    length: int | None = None  # examples per prompt; null = the run's curriculum.end
    n_samples: int = 20  # batches per cell
    batch_size: int = 64
    skip_first: int = 3
    seed: int = 1234
    detail: bool = False  # the errors apart and every layer's and head's attention (the attention table)


@EVALUATORS.register("deviant", schema=DeviantConfig)
class Deviant(Evaluator):
    name = "deviant"
    axes = ("magnitudes", "counts")
    fills_length = "length"
    coords = ("M", "k")

    @classmethod
    def applies_to(cls, task) -> bool:
        """In-context tasks of one number per example (a grid, no token vocabulary, no vector inputs):
        a deviant x is inserted among them."""
        return (
            task.evaluation is not None
            and task.evaluation.grid is not None
            and not task.tokens
            and not task.vector_inputs
        )

    def check(self) -> list[str]:
        cfg = self.cfg
        n = cfg.length
        out = checks.prompt_length(n, self.task.stride(), self.run_cfg.model)
        if not 0 <= cfg.skip_first < max(n, 1):
            out.append(f"eval.skip_first={cfg.skip_first} must be in [0, {n}) (eval.length={n})")
        top = n - max(cfg.skip_first, 1)
        if not cfg.counts or min(cfg.counts) < 1 or max(cfg.counts) > top:
            out.append(
                f"eval.counts={list(cfg.counts)} must be a non-empty list of values in [1, {top}] "
                f"(eval.length={n} minus eval.skip_first={cfg.skip_first})"
            )
        out += checks.positive_values("magnitudes", cfg.magnitudes)
        if value_of(cfg.sign) not in Sign.__members__:
            out.append(
                f"eval.sign={value_of(cfg.sign)!r} is not allowed; allowed: {', '.join(Sign.__members__)}"
            )
        if cfg.n_samples < 1:
            out.append(f"eval.n_samples={cfg.n_samples} must be >= 1")
        if cfg.batch_size < 1:
            out.append(f"eval.batch_size={cfg.batch_size} must be >= 1")
        return out

    def cells(self) -> list[dict]:
        return [{"M": float(m), "k": int(k)} for k in self.cfg.counts for m in self.cfg.magnitudes]

    def compute(self, run, cells, progress):
        c = self.cfg
        log.info(
            "deviant: %d cells × %d prompts of %d examples, sign %s, on %s",
            len(cells),
            c.n_samples * c.batch_size,
            c.length,
            value_of(c.sign),
            run.device,
        )
        for cell in cells:
            tables = deviant_tables(
                run.model,
                run.task,
                cell,
                sign=c.sign,
                length=c.length,
                n_samples=c.n_samples,
                batch_size=c.batch_size,
                skip_first=c.skip_first,
                seed=c.seed,
                device=run.device,
                base=run.labels,
                detail=bool(c.detail),
            )
            yield {name: pd.DataFrame(rows) for name, rows in tables.items()}
            progress.update(1)
        if (
            plotting.enabled()
            and any(b.attn is not None for b in run.model.blocks)
            and getattr(self, "out_dir", None)
        ):
            self.example(run)

    def example(self, run) -> list[Path]:
        """One prompt of the cell (largest M, smallest k), last-layer attention before and after."""
        c = self.cfg
        m, k, n = max(c.magnitudes), min(c.counts), c.length
        g = cell_generator(c.seed, m, k, n, list(Sign).index(Sign(value_of(c.sign))))
        clean = run.task.sample(c.batch_size, n, g, "cpu")
        positions, values = draw_insertions(g, c.batch_size, n, k, m, c.sign)
        dev = insert(run.task, clean, positions, values)
        marks = sorted((positions[0] * run.task.stride()).tolist())
        return example_figure(
            run,
            run.task,
            clean,
            dev,
            marks,
            f"{run.title} · step {run.step}\nexample prompt: x at example(s) {sorted(positions[0].tolist())} "
            f"(0-based) replaced by {', '.join(f'{v:g}' for v in values[0].tolist())}",
            self.out_dir / "example_attention",
        )

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        if not plotting.enabled():  # figures off (plotting.saving): none is built; this draw writes no table
            return []
        grid, c = frames["results"], self.cfg
        quant = self.task.classification
        main = "sequence_error" if quant else "mse"
        mine = grid[grid.predictor == "model"]
        sign, n = value_of(c.sign), c.length
        figs = plotting.heatmap(
            mine[mine.metric == main],
            "M",
            "k",
            f"{title}\n{main.replace('_', ' ')}, {n} examples with\nk inserted values ({sign}) of magnitude M",
            out_dir / f"{main}_grid",
            log=not quant,
            xlabel="k (inserted values per prompt)",
            ylabel="M (magnitude of the inserted values)",
        )
        have_attn = "attention_on_inserted" in set(mine.metric)
        if have_attn:
            figs += share_figure(
                mine,
                f"{title}\nlast-layer attention on the inserted tokens (solid) vs uniform share (dashed)",
                out_dir / "attention_on_inserted",
            )
        if quant:
            figs += follows_figure(
                grid[grid.metric == "follows_largest"],
                f"{title}\npredictions following the prediction at the largest inserted element",
                out_dir / "follows_largest",
            )
        apart = [
            m
            for m in ("error_at_inserted", "error_after_inserted", "error_elsewhere")
            if m in set(mine.metric)
        ]
        if len(apart) > 1:
            figs += lines_figure(
                mine[mine.metric.isin(apart)],
                "metric",
                f"{title}\nsign error at the inserted tokens vs after them vs elsewhere ({sign})",
                out_dir / "errors_apart",
                "sign error rate",
            )
        attn = frames.get("attention", pd.DataFrame())
        if len(attn):
            figs += layers_figure(attn, f"{title}\nattention on the inserted tokens, every layer ({sign})",
                                  out_dir / "attention_by_layer")  # fmt: skip
        return figs

    def tables(self) -> tuple[str, ...]:
        return ("results", "attention")

    def covers(self, table: str, cells: list[dict]) -> list[dict]:
        """``attention``: every cell with ``detail`` on a model with attention (none else); ``results``:
        every cell."""
        maps = self.cfg.detail and self.run_cfg.model.name != "ff_only"
        return list(cells) if table != "attention" or maps else []

    def heatmap(self) -> dict | None:
        return {"rows": "M", "cols": "k", "metric": "sequence_error" if self.task.classification else "mse"}

    def summarize(self, frames) -> dict:
        grid = frames["results"]
        main = "sequence_error" if self.task.classification else "mse"

        def table(metric, predictor="model"):
            d = grid[(grid.metric == metric) & (grid.predictor == predictor)]
            return {f"k={k}": dict(zip(g.M.tolist(), g.value.tolist())) for k, g in d.groupby("k")}

        sign, adverse = value_of(self.cfg.sign), adverse_sign(self.task)
        summary = {
            "metric": main,
            "length": self.cfg.length,
            "sign": sign,
            "adverse_sign": adverse,
            # following the inserted value's answer is wrong (the falsifying sign) or right (the control)
            "following_is": None
            if adverse is None or sign == "random"
            else ("wrong" if sign == adverse else "right"),
            main: table(main),
        }
        for metric in (
            "follows_largest",
            "error_at_inserted",
            "error_after_inserted",
            "error_elsewhere",
            "mse_after_inserted",
            "attention_on_inserted",
            "uniform_share",
            "mse_untouched",
            "mse_inserted",
        ):
            if metric in set(grid.metric):
                summary[metric] = table(metric)
        if self.task.classification:
            summary["labels_follows_largest"] = table("follows_largest", "labels")
        attn = frames.get("attention", pd.DataFrame())
        if len(attn):  # {layer: {mean | max: {k: {M: value}}}}
            on = attn[attn.metric == "attention_on_inserted"]
            summary["attention_by_layer"] = {
                f"layer={layer}": {
                    head: {f"k={k}": dict(zip(g.M.tolist(), g.value.tolist())) for k, g in h.groupby("k")}
                    for head, h in part[part["head"].astype(str).isin(["mean", "max"])].groupby(
                        part["head"].astype(str)
                    )
                }
                for layer, part in on.groupby("layer")
            }
        return summary
