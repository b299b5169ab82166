"""The attention function and mask function registered with ``transformers`` under ``ssa_repro``.

transformers' attention modules compute q, k, v (and RoPE, caches, …) themselves and hand them to a
function of the attention interface, ``f(module, q, k, v, attention_mask, scaling, dropout, **kw)``
with q [B, H, T, D], k and v [B, H_kv, S, D]; it returns the output [B, T, H, D] (and the weights or
None). This one reads the scorer that :func:`ssa_repro.hf.attach` put on the module and computes

    y_i = Σ_j w_ij v_j,    w_i = scorer(x_i, visible_i),    x_ij = scaling · q_i·k_j

so the logits carry the model's own scale (GPT-2's 1/(√d·(layer+1)) option, Llama's head_dim^-½);
a scorer scales by 1/√D itself, so q is multiplied by scaling·√D first (exactly 1 in the usual case).

Masks: the registered mask function is transformers' boolean ``sdpa_mask`` (True = visible,
[B, 1, T, S]) with the causal shortcut turned off, so the causal and padding masks always reach the
scorer. A query row with no visible key (a left-padded position under the causal mask) has output 0
instead of the NaN a normalising scorer would give; transformers' own kernels leave such rows
unspecified, and no loss reads them.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers.masking_utils import sdpa_mask

SCORER_ATTR = "ssa_scorer"  # the scorer's attribute on each attention module (state dict: *.ssa_scorer.*)


def scorer_mask(*args, **kwargs) -> torch.Tensor | None:
    """transformers' boolean mask [B, 1, T, S] (True = visible), never skipped for the causal case:
    a scorer needs the mask itself, having no ``is_causal`` shortcut of SDPA's kind."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def visible(mask: torch.Tensor | None, module: nn.Module, t: int, s: int, device) -> torch.Tensor | None:
    """Boolean visibility broadcastable to [B, H, T, S], or None (every key visible).

    A float mask (additive: 0 visible, a large negative number hidden, as transformers' eager masks)
    is read as a mask: additive biases other than that have no meaning for a scorer. With no mask at
    all on a causal module (a caller that built none), the causal mask aligned to the last query
    (query i sees keys up to i + S − T) is used.
    """
    if mask is not None:
        if mask.dtype != torch.bool:
            mask = mask > torch.finfo(mask.dtype).min / 2
        return mask
    if getattr(module, "is_causal", False) and t > 1:
        i = torch.arange(t, device=device)[:, None] + (s - t)
        return torch.arange(s, device=device)[None, :] <= i  # [T, S]
    return None


def scorer_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The attention interface function: q [B, H, T, D], k, v [B, H_kv, S, D] -> ([B, T, H, D], None)."""
    scorer = getattr(module, SCORER_ATTR, None)
    if scorer is None:
        raise RuntimeError(
            f"{type(module).__name__} has no scorer but the model's attention implementation is "
            "'ssa_repro': call ssa_repro.hf.attach(model, scorer=...) (or ssa_repro.hf.load_pretrained)"
        )
    h, d = query.shape[1], query.shape[-1]
    if key.shape[1] != h:  # grouped-query attention: each k/v head serves h / h_kv query heads
        key = key.repeat_interleave(h // key.shape[1], dim=1)
        value = value.repeat_interleave(h // value.shape[1], dim=1)
    if scaling is not None and scaling != d**-0.5:
        query = query * (scaling * math.sqrt(d))  # the scorer's own 1/√D then gives `scaling`
    mask = visible(attention_mask, module, query.shape[2], key.shape[2], query.device)
    empty = None
    if mask is not None:
        empty = ~mask.any(-1, keepdim=True)  # [B, 1, T, 1]: rows with no visible key
        mask = mask | empty  # scored as if all visible, then zeroed below
    if dropout > 0.0 and module.training:  # dropout on the weights, as transformers' own functions
        w = nn.functional.dropout(scorer.weights(query, key, mask), p=dropout, training=True)
        y = scorer.combine(w.to(value.dtype), value)
    else:
        y, _ = scorer.attend(query, key, value, mask, is_causal=False)
    if empty is not None:
        y = y.masked_fill(empty, 0.0)
    return y.transpose(1, 2).contiguous(), None  # [B, H, T, D] -> [B, T, H, D]
