"""Deviant prompts' figures (evaluation/deviant.py): an example prompt's attention before and after the
insertion, and the metrics against M and k.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from ssa_repro.core import plotting
from ssa_repro.evaluation.attention_maps import draw_map, token_labels
from ssa_repro.tasks.base import Batch


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
