"""The boundary evaluation's figures (evaluation/boundary.py): ``boundary.png`` (ŷ against y_true per
prompt set: prompts as dots, binned median and IQR band, identity line, estimated boundaries, training
range shaded, saturation points) and ``functions.png`` (the prediction along x_q for a few contexts).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.core import plotting


def _decorate(ax, b: pd.Series, show_sat: bool = True) -> None:
    """Training range (shaded), estimated boundaries (red) and saturation points (dotted)."""
    pct = f"{(1 - b['quantile']) * 100:g}–{b['quantile'] * 100:g}%"
    ax.axhspan(
        b.train_low, b.train_high, color="tab:green", alpha=0.15, lw=0, label=f"y range in training ({pct})"
    )
    for v, lab in ((b.upper, f"estimated boundaries ({pct} of ŷ, all prompts)"), (b.lower, None)):
        ax.axhline(v, color="tab:red", lw=1.3, ls="--", label=lab)
    if "bound_high" in b and not math.isnan(b.bound_high):
        lab = "read-out bound (last LayerNorm and read-out)"
        for v in (b.bound_low, b.bound_high):
            ax.axhline(v, color="black", lw=1.0, ls="-.", label=lab)
            lab = None
    if show_sat:
        lab = "saturation points (all prompts)"
        for v in (b.saturation_neg, b.saturation_pos):
            if not math.isnan(v):
                ax.axvline(v, color="0.35", lw=1, ls=":", label=lab)
                lab = None


def plot_boundary(pred: pd.DataFrame, results: pd.DataFrame, bound: pd.DataFrame, title: str, path: Path):
    """y_hat against y_true, one panel per prompt set. Writes PNG and PDF, returns their paths."""
    sets = [("query_sweep", math.nan)] + [
        ("scaled_f", s) for s in sorted(pred.loc[pred.variant == "scaled_f", "sigma_f"].unique())
    ]
    ncol = min(2, len(sets))
    nrow = -(-len(sets) // ncol)
    width = 5.6 * ncol if ncol > 1 else 7.2
    plt = plotting.plt
    fig, axes = plt.subplots(
        nrow, ncol, figsize=(width, 4.6 * nrow + 1.2), squeeze=False, layout="constrained"
    )
    b_all = bound[(bound.predictor == "model") & (bound.prompts == "all")].iloc[0]
    # one y scale for every panel: the predictions (0.1–99.9%), boundaries and training range, padded
    ymin, ymax = np.quantile(pred.pred_model, [0.001, 0.999])
    ymin, ymax = min(ymin, b_all.lower, b_all.train_low), max(ymax, b_all.upper, b_all.train_high)
    pad = 0.35 * max(ymax - ymin, 1e-6)
    for ax, (variant, sf) in zip(axes.flat, sets):
        is_sweep = variant == "query_sweep"
        sel = (pred.variant == variant) & (pred.sigma_f.isna() if is_sweep else pred.sigma_f == sf)
        part = pred[sel]
        res = results[
            (results.variant == variant)
            & (results.sigma_f.isna() if is_sweep else results.sigma_f == sf)
            & (results.predictor == "model")
            & (results.metric == "prediction")
        ].sort_values("y_true")
        ax.scatter(
            part.y_true,
            part.pred_model,
            s=4,
            alpha=0.18,
            color="tab:blue",
            lw=0,
            rasterized=True,
            label="prompts",
        )
        ax.fill_between(
            res.y_true, res.q25, res.q75, color="tab:blue", alpha=0.3, lw=0, label="model: IQR per bin"
        )
        ax.plot(res.y_true, res.value, color="navy", lw=1.8, label="model: median per bin")
        lo, hi = np.quantile(part.y_true, [0.001, 0.999])
        ax.plot(
            [lo, hi], [lo, hi], color="black", lw=1, ls="-", alpha=0.7, label="ŷ = true value (least squares)"
        )
        _decorate(ax, b_all)
        ax.set_xlim(lo, hi)
        ax.set_ylim(ymin - pad, ymax + pad)
        if is_sweep:
            xq = pred.loc[sel, "query_x"]
            ax.set_title(
                f"query input x_q swept over [{xq.min():g}, {xq.max():g}]\n(a, b, context x as in training)",
                fontsize=9,
            )
        else:
            ax.set_title(f"a, b ~ N(0, {sf:g}²), x as in training", fontsize=9)
        ax.set_xlabel("true value f(x_q) = a·x_q + b")
        ax.set_ylabel("model prediction ŷ")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(sets) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for h in handles:
        if hasattr(h, "set_alpha") and h.get_label() == "prompts":
            h.set_alpha(0.6)
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=4 if ncol > 1 else 2,
        fontsize=8,
        frameon=False,
        markerscale=3,
    )
    sat = ", ".join(f"{v:.3g}" for v in (b_all.saturation_neg, b_all.saturation_pos))
    fig.suptitle(
        f"{title}\nboundary values: the model stays in [{b_all.lower:.3g}, {b_all.upper:.3g}] "
        f"({(1 - b_all['quantile']) * 100:g}% / {b_all['quantile'] * 100:g}% quantiles of ŷ over all prompts)\n"
        f"y in training: [{b_all.train_low:.3g}, {b_all.train_high:.3g}]; saturation points: {sat}",
        fontsize=9,
    )
    return plotting.save(fig, path)


def plot_functions(pred: pd.DataFrame, bound: pd.DataFrame, title: str, path: Path, n_show: int = 4):
    """Prediction along the query input for a few fixed contexts, against the true line."""
    sweep = pred[pred.variant == "query_sweep"]
    per_f = sweep.groupby("function")[["a", "b"]].first()
    # contexts with slopes spread over the range: those closest to evenly spaced quantiles of a
    targets = np.quantile(per_f.a, np.linspace(0.1, 0.9, n_show)) if len(per_f) > n_show else per_f.a.values
    chosen = []
    for t in targets:
        rest = per_f.drop(index=chosen)
        if len(rest):
            chosen.append((rest.a - t).abs().idxmin())
    b_all = bound[(bound.predictor == "model") & (bound.prompts == "all")].iloc[0]
    n_ctx = f"{int(pred.n_points.iloc[0]) - 1}" if "n_points" in pred else "n - 1"
    plt = plotting.plt
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, f in enumerate(chosen):
        part = sweep[sweep.function == f].sort_values("query_x")
        c = colors[i % len(colors)]
        a, b = per_f.loc[f, "a"], per_f.loc[f, "b"]
        ax.plot(part.query_x, part.y_true, color=c, lw=1, ls="--", alpha=0.8)
        ax.plot(
            part.query_x,
            part.pred_model,
            color=c,
            lw=1.6,
            marker="o",
            ms=2.5,
            label=f"a = {a:.2f}, b = {b:.2f}",
        )
    _decorate(ax, b_all, show_sat=False)
    ax.axvspan(
        b_all.x_train_low, b_all.x_train_high, color="0.5", alpha=0.12, lw=0, label="x range in training"
    )
    y = sweep[sweep.function.isin(chosen)]
    ymin, ymax = y.pred_model.min(), y.pred_model.max()
    span = max(ymax - ymin, b_all.upper - b_all.lower, 1e-6)
    ax.set_ylim(
        min(ymin, b_all.lower, b_all.train_low) - 0.6 * span,
        max(ymax, b_all.upper, b_all.train_high) + 0.6 * span,
    )
    ax.plot([], [], color="0.3", ls="--", lw=1, label="true f(x_q) (dashed)")
    ax.set_xlabel("query input x_q")
    ax.set_ylabel("prediction ŷ (solid) and true value (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.set_title(
        f"{title}\nsingle functions (same {n_ctx} in-context examples at every x_q): "
        "the prediction never leaves the boundaries",
        fontsize=9,
    )
    fig.tight_layout()
    return plotting.save(fig, path)
