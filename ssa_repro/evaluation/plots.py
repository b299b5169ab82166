"""Figures made from the evaluation tables (so they can be re-made from the files alone)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402


def save(fig, path: Path) -> list[Path]:
    """Write ``fig`` as PNG (for people) and PDF (for papers) next to each other; close it."""
    out = [path.with_suffix(".png"), path.with_suffix(".pdf")]
    for p in out:
        fig.savefig(p, dpi=150)
    plt.close(fig)
    return out


def heatmap(
    frame: pd.DataFrame,
    rows: str,
    cols: str,
    title: str,
    path: Path,
    log: bool = False,
    xlabel: str | None = None,
    ylabel: str | None = None,
) -> list[Path]:
    """An annotated heat map of ``frame`` (columns rows, cols, value, metric), largest row value on top;
    a log colour scale for errors spanning decades. Writes PNG and PDF, returns their paths."""
    table = frame.pivot_table(index=rows, columns=cols, values="value").sort_index(ascending=False)
    n_rows, n_cols = table.shape
    fig, ax = plt.subplots(figsize=(1.6 + 0.75 * n_cols, 1.2 + 0.45 * n_rows))
    norm = None
    if log:
        positive = table.values[table.values > 0]
        vmin = max(positive.min(), 1e-4) if positive.size else 1e-4
        norm = LogNorm(vmin=vmin, vmax=max(float(np.nanmax(table.values)), vmin * 10))
    sns.heatmap(
        table.clip(lower=norm.vmin) if log else table,
        annot=True,
        fmt=".2g" if n_cols > 12 else ".3g",
        annot_kws={"fontsize": 6 if n_rows * n_cols > 150 else 8},
        cmap="viridis",
        norm=norm,
        ax=ax,
        cbar_kws={"label": frame["metric"].iloc[0]},
    )
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel or cols)
    ax.set_ylabel(ylabel or rows)
    fig.tight_layout()
    return save(fig, path)


def curves(
    frame: pd.DataFrame,
    x: str,
    hue: str,
    title: str,
    path: Path,
    logy: bool = False,
    xlabel: str | None = None,
) -> Path:
    """One line per ``hue`` value of ``value`` against ``x``; legend outside the axes. Writes a PNG."""
    many = frame[x].nunique() > 30  # markers would hide the lines
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    palette = "viridis" if pd.api.types.is_numeric_dtype(frame[hue]) else None
    sns.lineplot(
        data=frame,
        x=x,
        y="value",
        hue=hue,
        marker=None if many else "o",
        linewidth=1 if many else 1.5,
        palette=palette,
        ax=ax,
    )
    ax.legend(title=hue, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title_fontsize=8)
    if logy:
        ax.set_yscale("symlog", linthresh=1e-4)  # exact zeros (least squares) stay on the plot
        ax.set_ylim(bottom=0)
    ax.set_ylabel(frame["metric"].iloc[0])
    ax.set_xlabel(xlabel or x)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out
