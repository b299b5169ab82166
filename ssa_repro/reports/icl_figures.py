"""The ICL report's figures: per-seed dots with seed means (:func:`dots`), the shift and deviant grids,
boundary values, linear MSE per σ_F and a ladder's rungs side by side."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.core import plotting
from ssa_repro.core.plotting import plt, save
from ssa_repro.reports import paired
from ssa_repro.reports.icl_claims import ladder_cells
from ssa_repro.reports.icl_frame import (
    ADVERSE,
    ARCH_TEXT,
    BASE,
    KNOWN_GROUPS,
    TASK_TEXT,
    _g,
    _prefix,
    _suffix,
    axes,
)


def dots(
    frame: pd.DataFrame,
    x: str,
    hue: str,
    title: str,
    ylabel: str,
    path: Path,
    *,
    log: bool = False,
    refs: Mapping[str, float] | None = None,
    order=None,
) -> Path | None:
    """Per-seed dots (jittered) and the seed mean (a bar) of ``value`` per ``x`` × ``hue``; horizontal
    reference lines ``refs`` (label → value)."""
    if frame.empty:
        return None
    if not plotting.enabled():  # saving off (plotting.saving): the path it would write, nothing built
        return Path(path)
    xs = list(order) if order is not None else list(dict.fromkeys(frame[x]))
    hues = list(dict.fromkeys(frame[hue]))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(xs) * len(hues) + 1.5), 3.0))
    width = 0.8 / max(1, len(hues))
    rng = np.random.default_rng(0)
    for j, h in enumerate(hues):
        for i, xv in enumerate(xs):
            v = frame[(frame[x] == xv) & (frame[hue] == h)].value.to_numpy(float)
            if not len(v):
                continue
            pos = i - 0.4 + width * (j + 0.5)
            ax.plot(
                pos + rng.uniform(-width / 4, width / 4, len(v)),
                v,
                "o",
                ms=3,
                color=f"C{j}",
                alpha=0.7,
                label=h if i == 0 else None,
            )
            ax.hlines(v.mean(), pos - width / 2.5, pos + width / 2.5, color=f"C{j}", lw=2)
    for k, (label, v) in enumerate((refs or {}).items()):
        ax.axhline(v, color="k", ls=["--", ":", "-."][k % 3], lw=0.8, label=label)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs], rotation=20, ha="right", fontsize=7)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=8)
    if log:
        ax.set_yscale("symlog", linthresh=1e-3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, path, formats=("png",), dpi=100)
    return Path(path)


def shift_figure(frame: pd.DataFrame, task: str, out: Path, base: tuple[str, str] = BASE) -> Path | None:
    """σ shift at training lengths and length shift at the training σ, per seed (the arm ``base``,
    sequence error)."""
    g = paired.select(
        frame, part="grid", group=base[0], arch=base[1], predictor="model", metric="sequence_error", task=task
    )
    if g.empty:
        return None
    ax_ = axes(frame)
    sig = g[g.summary.str.startswith("train_lengths")].assign(
        point=lambda f: "σ=" + f.summary.str.split("=").str[-1]
    )
    if ax_["sigma_min"] is None:  # no cell at training lengths (a run whose curriculum stopped short)
        return None
    lng = g[g.summary.str.match(rf"sigma={_g(ax_['sigma_min'])} length=")].assign(
        point=lambda f: "L=" + f.summary.str.split("=").str[-1]
    )
    both = pd.concat([sig, lng])
    order = list(
        dict.fromkeys(sig.sort_values("summary", key=lambda s: s.str.split("=").str[-1].astype(float)).point)
    )
    order += list(
        dict.fromkeys(lng.sort_values("summary", key=lambda s: s.str.split("=").str[-1].astype(float)).point)
    )
    return dots(
        both,
        "point",
        "scorer",
        f"{_prefix(base)}{TASK_TEXT.get(task, task)}: σ shift at training lengths | length shift "
        f"at σ = {_g(ax_['sigma_min'])}",
        "sequence error",
        out / f"shift_{task}{_suffix(base)}.png",
        order=order,
    )


def deviant_grid_figure(
    frame: pd.DataFrame, task: str, out: Path, base: tuple[str, str] = BASE
) -> Path | None:
    """The M × k grid of the sequence error (MSE for linear), seed mean per scorer and sign (arm ``base``)."""
    metric = "mse" if task == "linear" else "sequence_error"
    d = paired.select(
        frame, part="deviant", group=base[0], arch=base[1], predictor="model", metric=metric, task=task
    )
    if d.empty:
        return None
    parts = d.summary.str.extract(r"sign=(\w+) M=([\d.e+]+) k=(\d+)")
    d = d.assign(sign=parts[0], M=parts[1].astype(float), k=parts[2].astype(int))
    if not plotting.enabled():  # saving off (plotting.saving): the path it would write, nothing built
        return out / f"deviant_{task}{_suffix(base)}.png"
    panels = list(d.groupby(["scorer", "sign"], sort=True))
    fig, axs = plt.subplots(1, len(panels), figsize=(2.6 * len(panels) + 0.8, 2.8), squeeze=False)
    for a, ((scorer, sign), p) in zip(axs[0], panels):
        m = p.groupby(["k", "M"]).value.mean().unstack("M")
        im = a.imshow(
            m.to_numpy(),
            aspect="auto",
            cmap="viridis",
            vmin=0 if metric != "mse" else None,
            vmax=1 if metric != "mse" else None,
        )
        a.set_xticks(range(m.shape[1]), [_g(v) for v in m.columns], fontsize=6)
        a.set_yticks(range(m.shape[0]), [str(v) for v in m.index], fontsize=6)
        for (i, j), v in np.ndenumerate(m.to_numpy()):
            a.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=6, color="w")
        role = (
            ""
            if task == "linear"
            else (" (adverse)" if ADVERSE[task.split("_")[0]] == sign else " (control)")
        )
        a.set_title(f"{scorer}, {sign}{role}", fontsize=7)
        a.set_xlabel("M", fontsize=7)
        a.set_ylabel("k", fontsize=7)
    fig.suptitle(
        f"{_prefix(base)}{TASK_TEXT.get(task, task)}: deviant {metric.replace('_', ' ')} (seed mean)",
        fontsize=8,
    )
    fig.subplots_adjust(top=0.78, bottom=0.2, right=0.88)
    fig.colorbar(im, cax=fig.add_axes([0.9, 0.2, 0.012, 0.58]))
    save(fig, out / f"deviant_{task}{_suffix(base)}.png", formats=("png",), dpi=100)
    return out / f"deviant_{task}{_suffix(base)}.png"


def boundary_figure(frame: pd.DataFrame, out: Path) -> Path | None:
    """The 99.5% quantile of ŷ per architecture × scorer (query sweep, per seed), with the training range
    of y, the true quantile and the mean read-out bound from the checkpoints as lines."""
    b = paired.select(frame, part="boundary", summary="prompts=query_sweep", predictor="model")
    up = b[b.metric == "upper"]
    if up.empty:
        return None
    refs = {}
    for metric, label in (("train_high", "y in training (99.5%)"), ("bound_high", "read-out bound (mean)")):
        v = b[b.metric == metric].value.dropna()
        if len(v):
            refs[label] = float(v.mean())
    up = up.assign(arch=up.arch.map(lambda a: ARCH_TEXT.get(a, a)))
    return dots(
        up,
        "arch",
        "scorer",
        "linear, query sweep: 99.5% quantile of ŷ per seed",
        "upper boundary of ŷ",
        out / "boundary.png",
        refs=refs,
    )


def linear_figure(frame: pd.DataFrame, out: Path, base: tuple[str, str] = BASE) -> Path | None:
    """MSE per σ_F at x ~ N(0, 1) per seed and scorer (the arm ``base``)."""
    g = paired.select(frame, part="grid", group=base[0], arch=base[1], task="linear", predictor="model")
    g = g[g.summary.str.endswith("sigma_x=1")]
    if g.empty:
        return None
    g = g.assign(sigma_f="σ_F=" + g.summary.str.extract(r"sigma_f=([\d.]+)")[0])
    return dots(
        g,
        "sigma_f",
        "scorer",
        f"{_prefix(base)}linear, x ~ N(0, 1): MSE per σ_F (the paper's table 1), per seed",
        "MSE",
        out / f"linear_mse{_suffix(base)}.png",
        log=True,
    )


def ladder_figures(frame: pd.DataFrame, out: Path) -> list[Path]:
    """Per group outside :data:`KNOWN_GROUPS` with several architectures (a ladder's rungs): one figure per
    :func:`ladder_cells` cell, the per-seed values of softmax and SSA across the rungs."""
    ax, paths = axes(frame), []
    for group in sorted(set(frame.group.unique()) - set(KNOWN_GROUPS)):
        g = frame[(frame.group == group) & (frame.predictor == "model")]
        if g.arch.nunique() < 2:
            continue
        for i, (label, task, metric, summ) in enumerate(ladder_cells(ax, set(g.task.unique()), g)):
            rows = g[(g.task == task) & (g.metric == metric) & (g.summary == summ)]
            path = dots(
                rows,
                "arch",
                "scorer",
                f"{TASK_TEXT.get(task, task)}, {label}: per seed across `{group}`",
                metric.replace("_", " "),
                out / f"{group}_arms_{i}_{task}.png",
                log=metric == "mse",
                order=sorted(rows.arch.unique()),
            )
            if path:
                paths.append(path)
    return paths
