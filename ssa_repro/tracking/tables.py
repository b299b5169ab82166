"""What a training run and an evaluation become in W&B: headline numbers for the runs table, an
evaluation grid as rows x columns, per-layer means of the scorer's parameters, charts and heat maps.

Plain functions of frames and tensors; ``wandb``, torch and matplotlib are imported inside the functions
that use them (after :func:`ssa_repro.tracking.environment.configure_environment`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def training_headline(
    *,
    final_loss: float | None = None,
    parameters: int | None = None,
    steps_per_sec: float | None = None,
    wall_time_s: float | None = None,
    scorer_stats: Mapping[str, Any] | None = None,
) -> dict:
    """The training run's headline numbers under their summary keys (``None`` values are left out)."""
    out: dict[str, Any] = {
        "train/final_loss": final_loss,
        "model/parameters": parameters,
        "perf/steps_per_sec": steps_per_sec,
        "perf/wall_time_s": wall_time_s,
    }
    for p, per_layer in layer_means(scorer_stats).items():
        out.update({f"scorer/{p}_mean/L{layer}": v for layer, v in enumerate(per_layer)})
    return {k: v for k, v in out.items() if v is not None}


def grid_headline(frame, grid: Mapping[str, Any], name: str) -> dict:
    """Mean and worst cell of an evaluation grid (the model's rows; larger is worse) as summary values.

    ``grid``: ``{"rows": "sigma_x", "cols": "length", "metric": "mse", "table": "grid",
    "predictor": "model"}``; the frame is the long-form table (columns predictor, <rows>, <cols>, metric,
    value, ...). Other dimensions (e.g. ``sigma_f``) are averaged over.
    """
    cells = grid_cells(frame, grid)
    if cells is None or cells.empty:
        return {}
    worst = cells.stack().idxmax()
    return {
        f"eval/{name}/grid_mean": float(cells.stack().mean()),
        f"eval/{name}/grid_worst": float(cells.stack().max()),
        f"eval/{name}/grid_worst_at": f"{grid['rows']}={worst[0]}, {grid['cols']}={worst[1]}",
    }


def grid_cells(frame, grid: Mapping[str, Any]):
    """The model's cells as a rows x cols frame (mean over any other dimension), or None."""
    rows, cols = grid.get("rows"), grid.get("cols")
    if frame is None or rows not in frame or cols not in frame or "value" not in frame:
        return None
    sel = frame
    predictor = grid.get("predictor", "model")
    if "predictor" in sel and predictor in set(sel["predictor"]):
        sel = sel[sel["predictor"] == predictor]
    if grid.get("metric") and "metric" in sel and grid["metric"] in set(sel["metric"]):
        sel = sel[sel["metric"] == grid["metric"]]
    return sel.pivot_table(index=rows, columns=cols, values="value", aggfunc="mean")


def layer_means(stats: Mapping[str, Any] | None) -> dict[str, list[float]]:
    """{"b": [L, H] tensor or nested list, ...} -> {"b": [mean over heads per layer], ...}."""
    import torch

    out = {}
    for p, v in (stats or {}).items():
        t = torch.as_tensor(v, dtype=torch.float32).detach().cpu()
        t = t.reshape(t.shape[0], -1) if t.dim() else t.reshape(1, 1)
        out[p] = t.mean(dim=1).tolist()
    return out


# --------------------------------------------------------------------------------------------------
# Charts


def is_scalar(v) -> bool:
    """A number (int, float, or a 0-d tensor/array), not a bool."""
    if isinstance(v, bool):
        return False
    return isinstance(v, (int, float)) or (hasattr(v, "item") and getattr(v, "ndim", 1) == 0)


def line_chart(frame, title: str):
    """By-position curves (one per predictor) as W&B's built-in line-series chart."""
    import wandb

    groups = frame.groupby("predictor") if "predictor" in frame else [("value", frame)]
    xs, ys, keys = [], [], []
    for key, g in groups:
        g = g.groupby("position", sort=True)["value"].mean()
        xs.append([float(x) for x in g.index])
        ys.append([float(y) for y in g.values])
        keys.append(str(key))
    metric = str(frame["metric"].iloc[0]) if "metric" in frame and len(frame) else "value"
    return wandb.plot.line_series(xs=xs, ys=ys, keys=keys, title=f"{title} ({metric})", xname="position")


def heatmap_array(values, title: str):
    """A small annotated [layer x head] heat map rendered to an RGB array (no pyplot, no global state)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_layer, n_head = values.shape
    fig = Figure(figsize=(1.2 + 0.55 * n_head, 0.9 + 0.4 * n_layer), dpi=100)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = ax.imshow(values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(n_head), [f"H{h}" for h in range(n_head)])
    ax.set_yticks(range(n_layer), [f"L{layer}" for layer in range(n_layer)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    if n_layer * n_head <= 256:
        mid = (float(values.min()) + float(values.max())) / 2
        for i in range(n_layer):
            for j in range(n_head):
                ax.text(j, i, f"{values[i, j]:.3g}", ha="center", va="center", fontsize=7,
                        color="black" if values[i, j] > mid else "white")  # fmt: skip
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
