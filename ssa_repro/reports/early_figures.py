"""The early-learning report's figures: Zorro learning curves, the table-3 dot plot, perplexity and the
masked-LM loss over training, and the candidate regimes' curves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.core import plotting
from ssa_repro.core.plotting import plt, save
from ssa_repro.evaluation.zorro import PAPER_TABLE3
from ssa_repro.reports.early_cells import CHANCE, MEAN_12, MEAN_ALL, SPLIT_TEXT, main_group
from ssa_repro.reports.early_tables import MEAN_TEXT, PAPER12, SHORT, geometric_mean
from ssa_repro.stats.intervals import seed_interval


# ------------------------------------------------------------------ figures
def _scorer_order(values) -> list[str]:
    return sorted(set(values), key=lambda x: (x != "softmax", x))


def _step_axis(ax, steps) -> None:
    """A log step axis labelled at the checkpoints themselves (no minor ticks)."""
    steps = sorted({int(x) for x in steps})
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(steps, [f"{x:g}" for x in steps], fontsize=6)


def zorro_curves_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """Zorro learning curves per scorer: one panel per paper probe and the two means, accuracy (PLL)
    against the checkpoint step, the seed mean as a line and the seeds' range as a band; chance dashed."""
    z = frame[(frame.part == "zorro") & (frame.metric == "zorro_accuracy") & (frame.method == "pll")]
    g = main_group(z, "mlm")
    if g is None or z[z.group == g].step.nunique() < 2:
        return None
    z = z[z.group == g]
    if not plotting.enabled():  # saving off (plotting.saving): the path it would write, nothing built
        return figdir / "zorro_curves.png"
    short = SHORT
    items = [MEAN_12, MEAN_ALL, *PAPER12]
    fig, axes = plt.subplots(4, 4, figsize=(11, 8.5), sharex=True)
    for ax, item in zip(axes.flat, items):
        s = z[z.item == item]
        for j, sc in enumerate(_scorer_order(z.scorer)):
            t = s[s.scorer == sc].groupby("step").value.agg(["mean", "min", "max"])
            if t.empty:
                continue
            ax.plot(t.index, t["mean"], "-o", ms=2.5, color=f"C{j}", label=sc, lw=1.2)
            ax.fill_between(t.index, t["min"], t["max"], color=f"C{j}", alpha=0.15, lw=0)
        ax.axhline(CHANCE, color="grey", ls="--", lw=0.7)
        ax.set_title(MEAN_TEXT.get(item, short.get(item, item)), fontsize=7.5)
        ax.tick_params(labelsize=6)
        _step_axis(ax, z.step)
    for ax in list(axes.flat)[len(items) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.supxlabel("training step (log)", fontsize=8)
    fig.supylabel("Zorro accuracy, PLL (%)", fontsize=8)
    fig.suptitle("Zorro learning curves: seed mean (line) and range (band); chance 50% dashed", fontsize=9)
    fig.subplots_adjust(
        left=0.07, right=0.98, bottom=0.07, top=0.92, hspace=0.45, wspace=0.3
    )  # (tight_layout: seconds)
    save(fig, figdir / "zorro_curves.png", formats=("png",), dpi=90)
    return figdir / "zorro_curves.png"


def table3_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """The table-3 layout as a dot plot: per probe, each scorer's seeds (dots) and seed mean with its
    95% Student-t interval over seeds (bar), the paper's number (×), chance dashed."""
    z = frame[(frame.part == "zorro") & (frame.metric == "zorro_accuracy") & (frame.method == "pll")]
    g = main_group(z, "mlm")
    if g is None:
        return None
    z = z[z.group == g]
    z = z[z.step == z.step.max()]
    if not plotting.enabled():  # saving off (plotting.saving): the path it would write, nothing built
        return figdir / "zorro_table3.png"
    short = SHORT
    items = [*PAPER12, MEAN_12, MEAN_ALL]
    scorers = _scorer_order(z.scorer)
    paper_index = {"softmax": 0, "ssa_n1.5": 1, "ssa_n2": 2}
    fig, ax = plt.subplots(figsize=(7, 0.42 * len(items) + 1.2))
    h = 0.8 / len(scorers)
    for j, sc in enumerate(scorers):
        for i, item in enumerate(items):
            v = z[(z.item == item) & (z.scorer == sc)].value.to_numpy(float)
            if not len(v):
                continue
            y = i - 0.4 + h * (j + 0.5)
            ax.plot(v, np.full(len(v), y), "o", ms=2.5, color=f"C{j}", alpha=0.5)
            ci = seed_interval(v)
            labelled = sc in ax.get_legend_handles_labels()[1]
            ax.plot([ci["mean"]], [y], "|", ms=8, color=f"C{j}", mew=2, label=None if labelled else sc)
            if np.isfinite(ci["ci_low"]):  # (an accuracy: the interval clipped to [0, 100])
                ax.hlines(y, max(ci["ci_low"], 0.0), min(ci["ci_high"], 100.0), color=f"C{j}", lw=1.2)
            name = short.get(item)
            if name in PAPER_TABLE3 and sc in paper_index:
                ax.plot([PAPER_TABLE3[name][paper_index[sc]]], [y], "x", color=f"C{j}", ms=4)
    ax.axvline(CHANCE, color="grey", ls="--", lw=0.7)
    ax.set_xlim(0, 100)
    labels = [short.get(i, MEAN_TEXT.get(i, i)) for i in items]
    ax.set_yticks(range(len(items)), labels, fontsize=7)
    ax.set_ylim(len(items) - 0.5, -0.5)
    ax.set_xlabel(f"Zorro accuracy, PLL (%), step {int(z.step.max())}; × the paper's table 3", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save(fig, figdir / "zorro_table3.png", formats=("png",), dpi=90)
    return figdir / "zorro_table3.png"


def perplexity_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """Perplexity (log scale) against the checkpoint step per split: seed mean line, range band, per
    scorer; and the held-out masked-LM loss of the encoder leg beside them when stored."""
    p = frame[(frame.part == "lm") & (frame.metric == "perplexity")]
    m = frame[(frame.part == "zorro") & (frame.metric == "mlm_loss")]
    panels = []
    gp, gm = main_group(p, "lm"), main_group(m, "mlm")
    if gp is not None:
        p = p[p.group == gp]
        panels += [
            (f"perplexity: {SPLIT_TEXT.get(s, s)}", p[p.item == s], True) for s in sorted(p.item.unique())
        ]
    if gm is not None:
        panels.append(("masked LM: held-out loss (nats)", m[m.group == gm], False))
    if not panels:
        return None
    if not plotting.enabled():  # saving off (plotting.saving): the path it would write, nothing built
        return figdir / "perplexity_curves.png"
    fig, axes = plt.subplots(1, len(panels), figsize=(3.1 * len(panels), 2.7), squeeze=False)
    for ax, (title, s, logy) in zip(axes[0], panels):
        for j, sc in enumerate(_scorer_order(s.scorer)):
            t = s[s.scorer == sc].groupby("step").value.agg(["mean", "min", "max"])
            if logy:  # perplexity: the geometric seed mean (its contrast is a ratio)
                t["mean"] = s[s.scorer == sc].groupby("step").value.agg(geometric_mean)
            ax.plot(t.index, t["mean"], "-o", ms=2.5, color=f"C{j}", label=sc)
            ax.fill_between(t.index, t["min"], t["max"], color=f"C{j}", alpha=0.15, lw=0)
        if logy:
            ax.set_yscale("log")
        _step_axis(ax, s.step)
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=6)
        ax.set_xlabel("training step (log)", fontsize=7)
        ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, figdir / "perplexity_curves.png", formats=("png",), dpi=90)
    return figdir / "perplexity_curves.png"


def regime_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """The candidates' learning curves (softmax, first seed, per group × architecture): mean Zorro
    accuracy of the paper's 12 and all 23 against the step."""
    z = frame[
        (frame.part == "zorro")
        & (frame.scorer == "softmax")
        & (frame.metric == "zorro_accuracy")
        & (frame.method == "pll")
        & frame.item.isin([MEAN_12, MEAN_ALL])
    ]
    if z.empty or z.step.nunique() < 2:
        return None
    if not plotting.enabled():  # saving off (plotting.saving): the path it would write, nothing built
        return figdir / "regime.png"
    fig, ax = plt.subplots(figsize=(5, 3))
    for j, ((group, arch), g) in enumerate(z.groupby(["group", "arch"], sort=False)):
        g = g[g.seed == g.seed.min()]
        for item, ls in ((MEAN_12, "-"), (MEAN_ALL, ":")):
            t = g[g.item == item].groupby("step").value.mean()
            ax.plot(
                t.index,
                t.values,
                ls,
                marker="o",
                ms=2.5,
                color=f"C{j}",
                label=f"{group}/{arch}, {'12' if item == MEAN_12 else '23'}",
            )
    ax.axhline(CHANCE, color="grey", ls="--", lw=0.7)
    _step_axis(ax, z.step)
    ax.set_xlabel("training step (log)", fontsize=8)
    ax.set_ylabel("mean Zorro accuracy, PLL (%)", fontsize=8)
    ax.legend(fontsize=6)
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    save(fig, figdir / "regime.png", formats=("png",), dpi=90)
    return figdir / "regime.png"
