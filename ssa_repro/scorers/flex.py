"""FlexAttention (CUDA): a scorer written as a ``score_mod`` runs inside PyTorch's fused, tiled
attention kernel, so the [B, H, T, S] weights never reach memory (``model.attn_impl=flex``).

A score_mod maps each scaled logit x = q·k/√d (a 0-d tensor inside the kernel) to the value the softmax
sees; SSA's is t(x) = n_h·sgn(x)·log1p(b_h|x|) with b and n captured per head, so gradients reach them.
torch 2.13 has no FlexAttention backward on CPU, so training with it needs CUDA (validate.py says so);
its forward runs anywhere, which is how tests/test_fast_paths.py checks each score_mod against the plain
path on CPU.
"""

from __future__ import annotations

import functools

import torch

_compiled = None


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@functools.lru_cache(maxsize=64)
def _causal_block_mask(t: int, s: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, None, None, t, s, device=device)


def flex_attend(q, k, v, score_mod, causal: bool, compiled: bool = True) -> torch.Tensor:
    """softmax(score_mod(q·kᵀ/√d)) @ v with the causal mask as a block mask; q, k, v [B, H, T, D]."""
    from torch.nn.attention.flex_attention import flex_attention

    global _compiled
    fn = flex_attention
    if compiled:  # uncompiled flex_attention is a slow reference implementation
        if _compiled is None:
            _compiled = torch.compile(flex_attention)
        fn = _compiled
    mask = _causal_block_mask(q.shape[-2], k.shape[-2], str(q.device)) if causal else None
    return fn(q, k, v, score_mod=score_mod, block_mask=mask)
