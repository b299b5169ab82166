"""Batched inference for the evaluations: as few forward passes as memory bounds allow."""

from __future__ import annotations

import torch

# Largest attention tensor (batch × heads × T × T elements) one forward pass may build in evaluation;
# bigger batches are split (SSA and the maps materialise it: 2^27 float32 = 512 MiB).
MAX_ATTENTION_ELEMENTS = 2**27


# Largest activation (batch × T × 4·width elements, the MLP's hidden layer) one forward pass may build.
MAX_ACTIVATION_ELEMENTS = 2**27


def chunk_size(model, t: int) -> int:
    """Prompts of t tokens per forward pass: the most that keep the attention tensor (B·H·T·T) and the
    MLP's hidden layer (B·T·4·C, C = the model's declared width ``n_embd``, whatever its position
    scheme) within the bounds above; at least 1."""
    heads = max((b.attn.n_head for b in model.blocks if b.attn is not None), default=1)
    width = getattr(model, "n_embd", 256)  # stub models in tests declare no width
    return max(1, min(MAX_ATTENTION_ELEMENTS // (heads * t * t), MAX_ACTIVATION_ELEMENTS // (4 * width * t)))


@torch.inference_mode()
def predict(model, batch) -> torch.Tensor:
    """Predictions [B, P] at the batch's prediction positions, in chunks as large as the memory bounds
    above allow (big batches keep the matmuls efficient; the bounds keep memory in check)."""
    bsz, t = batch.tokens.shape[:2]
    chunk = chunk_size(model, t)
    outs = [model(batch.tokens[i : i + chunk])[:, batch.pred_idx] for i in range(0, bsz, chunk)]
    return torch.cat(outs).float()


def predict_batches(model, batches: list) -> list[torch.Tensor]:
    """Predictions for many batches of one prompt length in as few forward passes as memory allows
    (the batches of several grid cells at once); returns one [B_i, P] tensor per batch, equal to
    ``predict`` on each batch alone."""
    if not batches:
        return []
    first = batches[0]
    joined = type(first)(
        tokens=torch.cat([b.tokens for b in batches]),
        targets=first.targets[:0],
        pred_idx=first.pred_idx,
        xs=first.xs[:0],
    )
    return list(predict(model, joined).split([len(b.tokens) for b in batches]))
