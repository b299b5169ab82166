"""Figure primitives shared by the evaluations and the reports: PNG + PDF written atomically, an
annotated heat map (faceted by a third coordinate when it varies), and curves with interval bands."""

from __future__ import annotations

import contextlib
import contextvars
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm

from ssa_repro.core.atomic import atomic_path

matplotlib.use("Agg")  # before pyplot is first imported (_pyplot)

_SAVING = contextvars.ContextVar("saving", default=True)


def _seaborn():
    """seaborn, imported on first use: at the top it cost every process start (train.py, each worker of a
    sweep) ~1.5 s of imports (seaborn and the scipy.stats it loads) before any figure was asked for."""
    import seaborn

    return seaborn


def _pyplot():
    """matplotlib.pyplot, imported on first use (~0.3 s of every process start otherwise)."""
    import matplotlib.pyplot

    return matplotlib.pyplot


def __getattr__(name: str):
    """``plotting.sns`` and ``plotting.plt`` (and ``from ssa_repro.core.plotting import sns, plt``):
    seaborn and matplotlib.pyplot, imported then."""
    if name == "sns":
        return _seaborn()
    if name == "plt":
        return _pyplot()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def saving(enabled: bool = True):
    """Within it, :func:`save` writes figures only when ``enabled`` (off: it closes them, writes nothing
    and returns no paths; rendering is most of an evaluation's cost on the CPU)."""
    token = _SAVING.set(bool(enabled))
    try:
        yield
    finally:
        _SAVING.reset(token)


def enabled() -> bool:
    """Whether figures are written here (see :func:`saving`): callers skip building figures when not."""
    return _SAVING.get()


def save(fig, path: Path, formats=("png", "pdf"), dpi: int = 150) -> list[Path]:
    """Write ``fig`` as PNG (for people) and PDF (for papers) next to each other, each to a temporary
    name then renamed (a killed write never leaves a truncated figure); close it."""
    if not _SAVING.get():
        _pyplot().close(fig)
        return []
    out = [Path(path).with_suffix(f".{ext}") for ext in formats]
    for p in out:
        with atomic_path(p) as tmp:
            fig.savefig(tmp, dpi=dpi, format=p.suffix[1:])
    _pyplot().close(fig)
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
    facet: str | None = None,
) -> list[Path]:
    """An annotated heat map of ``frame`` (columns rows, cols, value, metric), largest row value on top;
    a log colour scale for errors spanning decades. With ``facet`` (a column with several values, e.g.
    the prompt length of a linear grid evaluated at several lengths) one panel per value, all on one
    colour scale. Writes PNG and PDF, returns their paths (none, and nothing built, while figures are
    off: :func:`saving`)."""
    if not _SAVING.get():
        return []
    sns = _seaborn()
    groups = list(frame.groupby(facet, sort=True)) if facet else [(None, frame)]
    tables = [
        (key, g.pivot_table(index=rows, columns=cols, values="value").sort_index(ascending=False))
        for key, g in groups
    ]
    values = np.concatenate([t.to_numpy(dtype=float).ravel() for _, t in tables])
    values = values[np.isfinite(values)]
    n_rows = max(t.shape[0] for _, t in tables)
    n_cols = max(t.shape[1] for _, t in tables)
    longest = max((len(_tick(r)) for _, t in tables for r in t.index), default=0)
    pad = 0.08 * max(0, longest - 4)  # room for row names (shift variants), not only numbers
    fig, axes = _pyplot().subplots(
        1,
        len(tables),
        figsize=(len(tables) * (1.6 + pad + 0.75 * n_cols), 1.2 + 0.45 * n_rows),
        squeeze=False,
    )
    norm, vmin, vmax = None, None, None
    if log:
        positive = values[values > 0]
        vmin = max(positive.min(), 1e-4) if positive.size else 1e-4
        norm = LogNorm(vmin=vmin, vmax=max(float(values.max()) if values.size else 1.0, vmin * 10))
    elif values.size:
        vmin, vmax = float(values.min()), float(values.max())
    for ax, (key, table) in zip(axes[0], tables):
        sns.heatmap(
            table.clip(lower=norm.vmin) if log else table,
            annot=True,
            fmt=".2g" if n_cols > 12 else ".3g",
            annot_kws={"fontsize": 6 if n_rows * n_cols > 150 else 8},
            cmap="viridis",
            norm=norm,
            vmin=None if log else vmin,
            vmax=None if log else vmax,
            ax=ax,
            cbar_kws={"label": frame["metric"].iloc[0]},
        )
        ax.set_title(title if key is None else f"{title}\n{facet} = {key:g}", fontsize=9)
        ax.set_xlabel(xlabel or cols)
        ax.set_ylabel(ylabel or rows)
        ax.set_xticklabels([_tick(c) for c in table.columns], rotation=0)
        ax.set_yticklabels([_tick(r) for r in table.index], rotation=0)
    fig.tight_layout()
    return save(fig, path)


def _tick(value) -> str:
    """A tick label: numbers in short form, names (a shift variant) as they are."""
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


def curves(
    frame: pd.DataFrame,
    x: str,
    hue: str,
    title: str,
    path: Path,
    logy: bool = False,
    xlabel: str | None = None,
) -> list[Path]:
    """One line per ``hue`` value of ``value`` against ``x``; legend outside the axes. Writes a PNG (its
    path, in a list: empty, and nothing built, while figures are off)."""
    if not _SAVING.get():
        return []
    sns = _seaborn()
    many = frame[x].nunique() > 30  # markers would hide the lines
    fig, ax = _pyplot().subplots(figsize=(6.5, 3.4))
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
    return save(fig, path, formats=("png",))
