"""The attention function and mask function registered with ``transformers`` under ``ssa_repro``.

transformers' attention modules compute q, k, v (and RoPE, caches, …) themselves and hand them to a
function of the attention interface, ``f(module, q, k, v, attention_mask, scaling, dropout, **kw)``
with q [B, H, T, D], k and v [B, H_kv, S, D]; it returns the output [B, T, H, D] (and the weights or
None). This one reads the scorer that :func:`ssa_repro.hf.attach` put on the module and computes the
logits the model would have fed its softmax (its eager function, feature by feature), then the scorer:

    x_ij = scaling · q_i·k_j                 the model's scale (GPT-2's 1/(√D·(layer+1)), T5's 1, Gemma's
                                             query_pre_attn_scalar^-½); None: D^-½
    x_ij ← c · tanh(x_ij / c)                logit soft-capping ``softcap=c`` (Gemma2), before any bias
    x_ij ← x_ij + β_ij                       an additive bias: T5's ``position_bias`` and the finite part
                                             of a float ``attention_mask`` (ALiBi-style biases)
    w_i  = scorer([x_i1 … x_iS, s_h], visible_i ∪ {sink}),   y_i = Σ_{j ≤ S} w_ij v_j

The sink ``s_aux`` [H] (GPT-OSS) is one more key per row whose logit is s_h and whose value is 0: for
softmax that is exactly e^{x_ij} / (e^{s_h} + Σ_k e^{x_ik}), the model's own maths; for SSA the sink's
weight is (1 + b|s_h|)^(sgn(s_h)·n) beside the keys', i.e. the sink passes through the scorer like any
logit (the definition of softmax_sink.py with the model's s). Soft-capping and sinks need the scorer
as a function of the logits (``Scorer.forward``): scorers of q and k (``weights`` overridden: CosFormer,
differential attention, ASEntmax) are refused for such models by ``attach``. Sliding windows arrive in
the boolean mask the registered mask function builds (transformers composes the window into it).

Grouped-query heads: each k/v head serves H / H_kv query heads (``repeat_interleave``, as transformers'
``repeat_kv``). Dropout acts on the weights, as in transformers' eager functions.

Masks: the registered mask function is transformers' boolean ``sdpa_mask`` (True = visible,
[B, 1, T, S]) with the causal shortcut turned off, so the causal, padding and window masks always reach
the scorer. A query row with no visible key (a left-padded position under the causal mask) has output
0 instead of the NaN a normalising scorer would give; transformers' own kernels leave such rows
unspecified, and no loss reads them.

The fused SSA kernel (ssa_repro/kernels/, Triton). ``attach(..., attn_impl=...)`` chooses, per attention
module (``module.ssa_attn_impl``), as ``model.attn_impl`` does in this project: ``"plain"`` always
computes the maths above; ``"triton"`` runs :func:`ssa_repro.kernels.ssa_attention` for every call the
kernel can compute; ``"auto"`` (the default) does so only where the project's
:data:`ssa_repro.models.attention.AUTO_TRITON` says so (on: measured faster than the plain path on an
H200, docs/performance.md), on CUDA. A call the kernel can compute (:func:`kernel_call`): an SSA scorer (``kernel_params``), no
soft-cap, sink or additive bias (float mask, ``position_bias``), no dropout, as many queries as keys (not
a cached decoding step), head width and dtype the kernel takes, and a mask that is causal and/or a key
padding mask — :func:`kernel_mask` reads the causal flag and the key-padding mask [B, S] back from the
boolean [B, 1, T, S] mask (the last query row sees every real key in either case) and checks that they
rebuild it exactly (a sliding window or a packed-sequence mask does not, and takes the plain path). The
scale enters as in the plain path (q times ``scaling``·√D, the kernel's own 1/√D then gives
``scaling``); grouped-query k and v are repeated to the query heads first (the kernel takes q, k, v of
one shape), so their gradients sum back over the group. Under ``"triton"``, a device or dtype the
kernel cannot take raises (:class:`~ssa_repro.kernels.KernelUnavailable`); a call of another form
takes the plain path, with one warning per reason.

Every keyword argument is either one of the above, one that only other kernels read (listed in
:data:`IGNORED` with the reason), or refused with a ``TypeError`` naming it: an argument this function
does not know may carry maths it would otherwise silently drop.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn
from transformers.masking_utils import sdpa_mask

from ssa_repro.kernels import KernelUnavailable, ssa_attention, unsupported
from ssa_repro.models import attention as model_attention
from ssa_repro.scorers.base import Scorer, at_least_float32

SCORER_ATTR = "ssa_scorer"  # the scorer's attribute on each attention module (state dict: *.ssa_scorer.*)
IMPL_ATTR = "ssa_attn_impl"  # the attention path on each attention module: one of ATTN_IMPLS
ATTN_IMPLS = ("auto", "plain", "triton")
log = logging.getLogger(__name__)
_warned: set[str] = set()  # reasons already warned about under attn_impl="triton" (once each)

# Keyword arguments taken into the maths above.
HONOURED = ("scaling", "dropout", "softcap", "s_aux", "position_bias", "sliding_window", "is_causal")
# Keyword arguments transformers passes that the eager maths does not read: flash-attention's varlen and
# determinism switches (the padding they describe is in the mask here), bookkeeping of the forward pass.
IGNORED = frozenset(
    {
        "position_ids",  # RoPE is applied before the call; flash-attention reads them to find packed rows
        "cu_seq_lens_q",
        "cu_seq_lens_k",
        "max_length_q",
        "max_length_k",
        "deterministic",  # flash-attention's deterministic backward (ModernBERT)
        "output_attentions",  # the weights are not returned (None, as with sdpa)
        "output_hidden_states",
        "use_cache",  # the cache has been updated by the module before the call
        "cache_position",
        "past_key_values",
        "return_dict",
        "token_type_ids",
        "output_router_logits",  # mixture-of-experts bookkeeping (GPT-OSS, Mixtral)
        "num_items_in_batch",  # the loss's normaliser (Trainer)
        # cross-attention: the module has already made k and v from them
        "encoder_hidden_states",
        "encoder_attention_mask",
    }
)


def scorer_mask(*args, **kwargs) -> torch.Tensor | None:
    """transformers' boolean mask [B, 1, T, S] (True = visible), never skipped for the causal case:
    a scorer needs the mask itself, having no ``is_causal`` shortcut of SDPA's kind."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def split_mask(mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(boolean visibility, additive bias or None) from the mask the model passes.

    A boolean mask is visibility itself. A float mask is additive (transformers' eager masks: 0 visible,
    the dtype's minimum or −inf hidden): entries at or below half the dtype's minimum are hidden, and
    the rest, where not all zero, is a bias the logits receive (ALiBi-style models fold theirs in here).
    """
    if mask is None or mask.dtype == torch.bool:
        return mask, None
    hidden = mask <= torch.finfo(mask.dtype).min / 2
    bias = mask.masked_fill(hidden, 0.0)
    return ~hidden, (bias if bool(bias.any()) else None)


def default_visible(causal: bool, t: int, s: int, device) -> torch.Tensor | None:
    """With no mask at all: the causal mask aligned to the last query (query i sees keys up to
    i + S − T) for a causal module, else None (every key visible)."""
    if causal and t > 1:
        i = torch.arange(t, device=device)[:, None] + (s - t)
        return torch.arange(s, device=device)[None, :] <= i  # [T, S]
    return None


def logit_scorer(scorer: Scorer | type) -> bool:
    """Whether the scorer's (an instance's or a class's) weights are ``forward(logits, mask)`` of the scaled logits (so soft-capping
    and a sink column can be applied to those logits), not a function of q and k themselves."""
    return (scorer if isinstance(scorer, type) else type(scorer)).weights is Scorer.weights


def scorer_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    position_bias: torch.Tensor | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The attention interface function: q [B, H, T, D], k, v [B, H_kv, S, D] -> ([B, T, H, D], None)."""
    name = type(module).__name__
    unknown = sorted(set(kwargs) - IGNORED)
    if unknown:
        raise TypeError(
            f"ssa_repro attention ({name}): argument(s) {', '.join(unknown)} not understood; it takes "
            f"{', '.join(HONOURED)} and ignores only {', '.join(sorted(IGNORED))} (arguments other "
            "kernels read), so it refuses what it would otherwise drop"
        )
    scorer = getattr(module, SCORER_ATTR, None)
    if scorer is None:
        raise RuntimeError(
            f"{name} has no scorer but the model's attention implementation is "
            "'ssa_repro': call ssa_repro.hf.attach(model, scorer=...) (or ssa_repro.hf.load_pretrained)"
        )
    bsz, h, t, d = query.shape
    s = key.shape[2]
    if key.shape[1] != h:  # grouped-query attention: each k/v head serves h / h_kv query heads
        if h % key.shape[1]:
            raise ValueError(f"{name}: {h} query heads are no multiple of {key.shape[1]} key/value heads")
        key = key.repeat_interleave(h // key.shape[1], dim=1)
        value = value.repeat_interleave(h // value.shape[1], dim=1)
    if scaling is None:
        scaling = d**-0.5
    mask, bias = split_mask(attention_mask)
    if mask is None:
        if sliding_window is not None and s > sliding_window:
            raise ValueError(
                f"{name}: sliding_window={sliding_window} with {s} keys but no mask to carry the window"
            )
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
        mask = default_visible(causal, t, s, query.device)
    if position_bias is not None:  # T5's relative bias [1|B, H, T, S], added after the scale
        bias = position_bias if bias is None else bias + position_bias
    drop = dropout > 0.0 and module.training
    impl = getattr(module, IMPL_ATTR, "auto")
    if impl != "plain":
        plain_only = softcap is not None or s_aux is not None or bias is not None or drop
        y = kernel_call(impl, scorer, query, key, value, mask, scaling, plain_only)
        if y is not None:
            return y.transpose(1, 2).contiguous(), None  # [B, H, T, D] -> [B, T, H, D]
    if bias is not None:
        bias = bias.expand(bsz, h, t, s)  # scorers' masked_fill needs the full shape
    empty = None
    if mask is not None:
        empty = ~mask.any(-1, keepdim=True)  # [B, 1|H, T, 1]: rows with no visible key
        mask = mask | empty  # scored as if all visible, then zeroed below
    if softcap is not None or s_aux is not None:
        y = capped_sink_attention(
            scorer, query, key, value, mask, bias, scaling, softcap, s_aux, dropout, drop
        )
    else:
        if scaling != d**-0.5:
            query = query * (scaling * math.sqrt(d))  # the scorer's own 1/√D then gives `scaling`
        if drop:  # dropout on the weights, as transformers' own functions
            w = nn.functional.dropout(scorer.weights(query, key, mask, bias), p=dropout, training=True)
            y = scorer.combine(w.to(value.dtype), value)
        else:
            y, _ = scorer.attend(query, key, value, mask, is_causal=False, bias=bias)
    if empty is not None:
        y = y.masked_fill(empty, 0.0)
    return y.transpose(1, 2).contiguous(), None  # [B, H, T, D] -> [B, T, H, D]


def kernel_mask(mask: torch.Tensor | None, bsz: int, t: int) -> tuple[bool, torch.Tensor | None] | None:
    """(causal, key-padding mask bool [B, T] or None) that the fused kernel takes for the boolean
    visibility ``mask`` (broadcastable to [B, 1, T, T]; None: every key visible), or None where the mask
    is of no such form (a sliding window, packed sequences, per-head masks). The key-padding mask is the
    last query row's visibility (under the causal mask that row sees every real key); the mask must
    equal its rebuild exactly."""
    if mask is None:
        return False, None
    if mask.dim() == 2:
        mask = mask[None, None]
    if mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[-2:] != (t, t):
        return None
    vis = mask[:, 0].expand(bsz, t, t)  # [B, T, T]
    kpm = vis[:, -1, :]  # [B, T]
    tril = torch.ones(t, t, dtype=torch.bool, device=mask.device).tril()
    if torch.equal(vis, tril & kpm[:, None, :]):
        causal = True
    elif torch.equal(vis, kpm[:, None, :].expand(bsz, t, t)):
        causal = False
    else:
        return None
    return causal, (None if bool(kpm.all()) else kpm.contiguous())


def kernel_call(impl, scorer, query, key, value, mask, scaling, plain_only: bool) -> torch.Tensor | None:
    """The attention output [B, H, T, D] through the fused SSA kernel, or None where this call takes
    the plain path (module docstring). q [B, H, T, D], k and v [B, H, S, D] (grouped heads already
    repeated), ``mask`` the boolean visibility [B, 1, T, S] or None, built from ``is_causal`` already
    where the model passed none."""
    if impl == "auto" and not model_attention.AUTO_TRITON:
        return None
    params = scorer.kernel_params()
    if params is None:
        return None
    if impl == "auto":
        if not model_attention.kernel_on_gpu(query):
            return None
    else:  # "triton": the kernel wherever it computes the call; a device or dtype it lacks is an error
        why = unsupported(query)
        if why is not None:
            raise KernelUnavailable(f"attach(..., attn_impl='triton'): {why}; use attn_impl='plain'")
    bsz, _, t, d = query.shape
    if plain_only:
        return _plain(impl, "soft-capping, a sink, an additive bias or dropout")
    if key.shape[2] != t:
        return _plain(impl, "fewer queries than keys (a cached decoding step)")
    form = kernel_mask(mask, bsz, t)
    if form is None:
        return _plain(impl, "a mask that is neither causal nor key padding (a sliding window, packed rows)")
    causal, kpm = form
    if scaling != d**-0.5:
        query = query * (scaling * math.sqrt(d))  # the kernel's own 1/√D then gives `scaling`
    b, n = params
    return ssa_attention(query, key, value, b, n, causal=causal, key_padding_mask=kpm)


def _plain(impl: str, why: str) -> None:
    if impl == "triton" and why not in _warned:
        _warned.add(why)
        log.warning("attn_impl='triton': calls with %s take the plain path (the kernel cannot)", why)
    return None


def capped_sink_attention(scorer, query, key, value, mask, bias, scaling, softcap, s_aux, dropout, drop):
    """The logits built here (soft-cap, bias, sink column; module docstring), then ``scorer(x, mask)``:
    q [B, H, T, D], k, v [B, H, S, D], mask bool broadcastable to [B, H, T, S] or None -> [B, H, T, D]."""
    if not logit_scorer(scorer):  # attach refuses these first; a direct call still must not guess
        raise ValueError(
            f"scorer={scorer.cfg.name} scores q and k themselves, so soft-capping or a sink cannot be "
            "applied to its logits"
        )
    x = at_least_float32(query @ key.transpose(-2, -1)) * scaling  # [B, H, T, S]
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    if bias is not None:
        x = x + bias.to(x.dtype)
    if s_aux is not None:  # the sink: one more key, logit s_h, visible to every query, value 0
        bsz, h, t, _ = x.shape
        x = torch.cat([x, s_aux.to(x.dtype).view(1, h, 1, 1).expand(bsz, h, t, 1)], dim=-1)
        if mask is not None:
            mask = torch.cat([mask.expand(bsz, h, t, -1), mask.new_ones(bsz, h, t, 1)], dim=-1)
        value = torch.cat([value, value.new_zeros(*value.shape[:2], 1, value.shape[-1])], dim=2)
    w = scorer(x, mask)
    if drop:
        w = nn.functional.dropout(w, p=dropout, training=True)
    return scorer.combine(w.to(value.dtype), value)
