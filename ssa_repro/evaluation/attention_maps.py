"""Attention maps in evaluation: every layer's weights read in chunks that memory bounds allow, and one map
drawn with its tokens labelled (the deviant prompts, the attention and recall evaluations share them).
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.colors import PowerNorm

from ssa_repro.core import plotting
from ssa_repro.evaluation.inference import MAX_ATTENTION_ELEMENTS
from ssa_repro.tasks.base import Batch


def attention_chunk(model, t: int) -> int:
    """Prompts per forward pass with ``need_weights`` (all layers' maps are kept at once)."""
    attn = [b.attn for b in model.blocks if b.attn is not None]
    heads = max((a.n_head for a in attn), default=1)
    return max(1, MAX_ATTENTION_ELEMENTS // (heads * t * t * max(1, len(attn))))


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
