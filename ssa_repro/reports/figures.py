"""Comparison figures: side-by-side heat maps on one colour scale, and difference maps.

One panel per run or group, all on ONE colour scale from the smallest to the largest value over all
panels (logarithmic for positive metrics such as MSE); cells annotated with the mean (and ± the
seeds' std when a group has several seeds and the grid is small). Difference maps use the diverging
RdBu_r palette centred on 0 with symmetric limits shared by all panels: blue = lower error than the
baseline, red = higher.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.colors import LogNorm, Normalize
from matplotlib.ticker import FuncFormatter

from ssa_repro.core.atomic import atomic_path
from ssa_repro.core.plotting import plt, sns
from ssa_repro.reports.difference import FLOOR, difference, difference_mode, resolve_baseline
from ssa_repro.reports.results import fmt


@dataclass
class Plot:
    fig: plt.Figure
    vmin: float
    vmax: float
    log: bool
    paths: list[Path] = field(default_factory=list)


def short_number(v: float, signed: bool = False) -> str:
    """At most about 5 characters: 0.015, 0.53, 3.4, 41, 4123, 2e4, 3e-4."""
    if v is None or not np.isfinite(v):
        return ""
    sign = "+" if signed and v > 0 else ""
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e4 or a < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{sign}{m}e{int(e)}"
    if a >= 10:
        return f"{sign}{v:.0f}"
    if a >= 1:
        return f"{sign}{v:.1f}"
    return f"{sign}{v:.2g}"


def short_rate(v: float, signed: bool = False, decimals: int = 2) -> str:
    """Error rates in [0, 1] (and their differences) with fixed decimals: 0, <.01, 0.05, 1.00, +0.12."""
    if v is None or not np.isfinite(v):
        return ""
    if v == 0:
        return "0"
    if signed:
        return f"{v:+.{decimals}f}"
    if abs(v) < 0.5 * 10**-decimals:
        return "<." + "0" * (decimals - 1) + "1"
    return f"{v:.{decimals}f}"


def _formatter(comp, values: np.ndarray):
    """Rates get fixed decimals (3 when every value is below 0.1, 4 below 0.01); other values 2-3 digits."""
    values = values[np.isfinite(values)]
    if comp.log or not values.size or np.min(values) < -1 or np.max(values) > 1:
        return short_number
    top = np.max(np.abs(values))
    decimals = 2 if top >= 0.1 else 3 if top >= 0.01 else 4
    return lambda v, signed=False: short_rate(v, signed, decimals)


def _layout(n: int, n_rows: int, n_cols: int, lines: int, two_line_cells: bool = False):
    """Figure size and panels per row so that cells keep a readable size for 1 to many panels."""
    cell_w = 0.5 if n_cols <= 12 else 0.42
    cell_h = (0.34 if n_rows <= 12 else 0.27) * (1.6 if two_line_cells else 1.0)
    pw = n_cols * cell_w + 1.2
    ph = n_rows * cell_h + 0.9 + 0.2 * lines
    per_row = max(1, min(n, 4, int(22 // pw)))
    fig_rows = math.ceil(n / per_row)
    per_row = math.ceil(n / fig_rows)
    size = (max(6.5, per_row * pw + 1.3), fig_rows * ph + 0.7)
    font = 7.5 if cell_h >= 0.32 else 6.0
    return per_row, fig_rows, size, font


def _panels(tables, titles, norm, cmap, suptitle, cbar_label, annot, comp, font_scale=1.0, center=None):
    n = len(tables)
    n_rows, n_cols = tables[0].shape
    two = any("\n" in str(x) for a in annot for x in np.ravel(a))
    lines = max(t.count("\n") + 1 for t in titles)
    per_row, fig_rows, size, font = _layout(n, n_rows, n_cols, lines, two)
    fig, axes = plt.subplots(fig_rows, per_row, figsize=size, squeeze=False, layout="constrained")
    flat = axes.ravel()
    for ax, table, title, ann in zip(flat, tables, titles, annot):
        log = isinstance(norm, LogNorm)
        with warnings.catch_warnings():  # seaborn 0.13 calls cmap.set_bad (deprecated in matplotlib 3.11)
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            sns.heatmap(
                table.clip(lower=norm.vmin) if log else table,
                annot=ann,
                fmt="",
                annot_kws={"fontsize": font * font_scale},
                cmap=cmap,
                norm=norm if log else None,
                vmin=None if log else norm.vmin,
                vmax=None if log else norm.vmax,
                center=center,
                cbar=False,
                linewidths=0.4,
                linecolor="white",
                square=False,
                ax=ax,
            )
        ax.set_title(title, fontsize=8.5)
        ax.set_xlabel(comp.axis_label(comp.cols), fontsize=8)
        ax.set_ylabel(comp.axis_label(comp.rows), fontsize=8)
        ax.set_xticklabels([fmt(c) for c in table.columns], rotation=0, fontsize=7)
        ax.set_yticklabels([fmt(r) for r in table.index], rotation=0, fontsize=7)
    for ax in flat[n:]:
        ax.set_visible(False)
    mappable = flat[0].collections[0]
    cbar = fig.colorbar(
        mappable, ax=list(flat[:n]), shrink=min(1.0, 0.5 + 0.25 * fig_rows), pad=0.02, aspect=20 * fig_rows
    )
    cbar.set_label(cbar_label, fontsize=8.5)
    cbar.ax.tick_params(which="both", labelsize=7.5)
    if not isinstance(norm, LogNorm):
        cbar.formatter = FuncFormatter(lambda x, _: f"{x:.3g}")
        cbar.update_ticks()
    width = int(size[0] * 13)  # characters that fit at 10 pt
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in suptitle.splitlines()), fontsize=10)
    return fig


def plot_grids(
    comp, path: Path | None = None, annotate_std: bool | None = None, formats=("png", "pdf")
) -> Plot:
    """Side-by-side heat maps, one panel per run or group, on one colour scale (log for MSE):
    vmin/vmax are the smallest/largest value over all panels (smallest positive one for log)."""
    tables = [comp.grid(lab) for lab in comp.labels]
    values = np.concatenate([t.to_numpy(dtype=float).ravel() for t in tables])
    values = values[np.isfinite(values)]
    if comp.log:
        pos = values[values > 0]
        vmin = float(pos.min()) if pos.size else FLOOR
        vmax = float(values.max()) if values.size else 1.0
        vmax = vmax if vmax > vmin else vmin * 10
        norm = LogNorm(vmin=vmin, vmax=vmax)
    else:
        vmin = float(values.min()) if values.size else 0.0
        vmax = float(values.max()) if values.size else 1.0
        vmax = vmax if vmax > vmin else vmin + 1.0
        norm = Normalize(vmin=vmin, vmax=vmax)
    n_cells = tables[0].size
    multi = comp.cells["count"].max() > 1
    if annotate_std is None:
        annotate_std = multi and n_cells <= 36
    fmt = _formatter(comp, values)
    annot = []
    for lab, t in zip(comp.labels, tables):
        a = np.vectorize(fmt, otypes=[object])(t.to_numpy(dtype=float))
        if annotate_std:
            s = comp.grid(lab, "std").to_numpy(dtype=float)
            sd = np.vectorize(fmt, otypes=[object])(s)
            a = np.where(np.isfinite(s), a + "\n±" + sd, a)
        annot.append(a)
    titles = [f"{g.label}\n{g.describe()}" for g in comp.groups]
    scale = "log colour scale" if comp.log else "linear colour scale"
    spread = " · cells: seed mean ± std" if annotate_std else (" · cells: seed mean" if multi else "")
    fig = _panels(
        tables,
        titles,
        norm,
        "viridis",
        f"{comp.what()}\none shared {scale}{spread}",
        f"{comp.metric}{' (log scale)' if comp.log else ''}",
        annot,
        comp,
    )
    return Plot(fig, vmin, vmax, comp.log, _save(fig, path, formats))


def plot_difference(
    comp, baseline: str | None = None, mode: str = "auto", path: Path | None = None, formats=("png", "pdf")
) -> Plot | None:
    """The difference map of every run or group against the baseline (see ``difference``): RdBu_r,
    centred on 0, limits ±max|difference| shared by all panels. None when there is no baseline."""
    diffs = difference(comp, baseline, mode)
    if not diffs:
        return None
    base = resolve_baseline(comp, baseline)
    mode = difference_mode(comp, mode)
    values = np.concatenate([d.to_numpy(dtype=float).ravel() for d in diffs.values()])
    lim = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
    lim = lim if lim > 0 else 1.0
    norm = Normalize(vmin=-lim, vmax=lim)
    if mode == "log10_ratio":
        titles = [f"log10({lab} / {base})" for lab in diffs]
        label = f"log10({comp.metric} / {comp.metric} of {base})"
    else:
        titles = [f"{lab} − {base}" for lab in diffs]
        label = f"{comp.metric} − {comp.metric} of {base}"
    titles = [f"{t}\n{comp.group(lab).describe().splitlines()[-1]}" for t, lab in zip(titles, diffs)]
    fmt = _formatter(comp, values)
    annot = [
        np.vectorize(lambda x: fmt(x, True), otypes=[object])(d.to_numpy(dtype=float)) for d in diffs.values()
    ]
    fig = _panels(
        list(diffs.values()),
        titles,
        norm,
        "RdBu_r",
        f"{comp.what()}\nagainst {base}: blue = lower error, red = higher",
        label,
        annot,
        comp,
        center=0,
    )
    return Plot(fig, -lim, lim, False, _save(fig, path, formats))


def _save(fig, path: Path | None, formats=("png", "pdf")) -> list[Path]:
    """PNG and PDF (``formats``), each written atomically; the figure stays open (notebooks show it)."""
    if path is None:
        return []
    out = [Path(path).with_suffix(f".{ext}") for ext in formats]
    for p in out:
        with atomic_path(p) as tmp:
            fig.savefig(tmp, dpi=120, format=p.suffix[1:])
    return out
