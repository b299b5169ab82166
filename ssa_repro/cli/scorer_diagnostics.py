"""Scorer diagnostics: how far a scorer saturates, and what its attention costs per training step.

- :func:`saturation`: the weight ``w`` a scorer gives one key whose logit exceeds the other N − 1 keys
  (all at logit 0) by ``g``; for softmax ``w = e^g / (e^g + N − 1)``, for SSA with base ``(1 + b|x|)^n``
  it is ``(1 + b g)^n / ((1 + b g)^n + N − 1)``.
- :func:`step_costs`: the median seconds of one forward + backward of attention (q·kᵀ, weights, ·v)
  per variant, timed interleaved so that drifts in machine load hit all alike.

Scorers with learnable parameters are measured at their initial values (``ssa_repro.config.load_scorer``
builds one from its YAML option). ``scripts/scorer_report.py`` (:mod:`ssa_repro.cli.scorer_report`)
tabulates both for every option against docs/scorers.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ssa_repro.scorers.base import Scorer

AttendFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# ----------------------------------------------------------------------------- saturation
@torch.no_grad()
def saturation(scorer: Scorer, n_keys: int, gap: float, dtype: torch.dtype = torch.float64) -> float:
    """Weight that ``scorer`` gives one key whose logit exceeds the other ``n_keys`` − 1 keys (all at
    logit 0) by ``gap``: one unmasked query row, logits [1, H, 1, n_keys], head 0.

    Head 0 matters only where heads differ (a hybrid's head 0 uses its first function). The logits are
    float64 by default so that comparisons with closed forms are not limited by float32 rounding.
    Scorers that score q and k rather than logits (CosFormer: its ``forward`` raises TypeError) have
    no such number: they return ``float('nan')``.
    """
    logits = torch.zeros(1, scorer.n_head, 1, n_keys, dtype=dtype)
    logits[..., 0] = gap
    try:
        w = scorer(logits, None)
    except TypeError:
        return float("nan")
    return float(w[0, 0, 0, 0])


# ----------------------------------------------------------------------------- cost
def scorer_attend(scorer: Scorer) -> AttendFn:
    """``scorer.attend`` under the causal mask (is_causal=True), output only."""
    return lambda q, k, v, mask: scorer.attend(q, k, v, mask, is_causal=True)[0]


def sdpa_attend(q, k, v, mask):
    """The baseline: plain F.scaled_dot_product_attention(q, k, v, is_causal=True) (mask unused)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def make_step(
    attend: AttendFn,
    B: int = 64,
    H: int = 8,
    T: int = 80,
    d: int = 32,
    seed: int = 0,
    module: torch.nn.Module | None = None,
) -> Callable[[], None]:
    """One forward + backward of ``attend`` on fixed random q, k, v [B, H, T, d] (requires_grad), the
    backward of a fixed random projection of the output. The q·kᵀ and ·v matmuls are inside ``attend``,
    so they are counted. ``step.clear()`` drops the gradients of q, k, v and of ``module``'s parameters
    (the scorer's b, n, ...); :func:`time_steps` calls it before each step, outside the timed part."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=g).requires_grad_() for _ in range(3))
    proj = torch.randn(B, H, T, d, generator=g)
    mask = torch.ones(T, T, dtype=torch.bool).tril()  # [T, S], True = visible, as in the model

    def step():
        (attend(q, k, v, mask) * proj).sum().backward()

    def clear():
        for t in (q, k, v):
            t.grad = None
        if module is not None:
            module.zero_grad(set_to_none=True)

    step.clear = clear
    return step


def time_steps(steps: dict[str, Callable[[], None]], reps: int) -> dict[str, list[float]]:
    """Seconds per call of each step, ``reps`` each. Each step is warmed up once; then the variants
    are interleaved (one call of each per repetition) so drifts in machine load hit all alike."""
    for step in steps.values():
        getattr(step, "clear", lambda: None)()
        step()  # warm-up
    times = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            getattr(step, "clear", lambda: None)()
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    return times


def step_costs(
    variants: dict[str, Scorer | AttendFn | None],
    B: int = 64,
    H: int = 8,
    T: int = 80,
    d: int = 32,
    reps: int = 10,
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds of forward + backward for each variant, timed interleaved: a Scorer (through
    ``attend`` with the causal mask, ``is_causal=True``), None (the plain SDPA baseline) or any
    ``attend(q, k, v, mask) -> out`` function. All variants see the same q, k, v (same ``seed``)."""
    steps = {}
    for name, v in variants.items():
        if v is None:
            fn = sdpa_attend
        elif isinstance(v, Scorer):
            if v.n_head != H:
                raise ValueError(f"{name}: scorer has {v.n_head} heads, the cost shape H={H}")
            fn = scorer_attend(v)
        else:
            fn = v
        steps[name] = make_step(fn, B, H, T, d, seed, module=v if isinstance(v, Scorer) else None)
    return {name: statistics.median(ts) for name, ts in time_steps(steps, reps).items()}
