"""FlexAttention: a scorer written as a ``score_mod`` runs inside PyTorch's fused, tiled attention kernel,
so the [B, H, T, S] weights never reach memory.

A score_mod maps each scaled logit x = q·k/√d (a 0-d tensor inside the kernel) to the value the softmax
sees; SSA's is t(x) = n_h·sgn(x)·log1p(b_h|x|) with b and n captured per head, so gradients reach them.
The kernel then computes, for the keys j visible to query i,

    y_i = Σ_j softmax_j(score_mod(x_ij)) · v_j,     q, k, v [B, H, T, D] -> y [B, H, T, D]

which is the plain path (logits -> weights [B, H, T, S] -> weights @ v) whenever the scorer's weights are a
softmax of a function of x, the head and the positions (softmax, SSA, temperature, SSMax, softplus,
hybrid softmax/average heads; each scorer's ``score_mod`` says it).

Two uses:

- **Training on CUDA**, ``model.attn_impl=flex`` (:func:`flex_attend`). torch 2.13 has no FlexAttention
  backward on CPU (validate.py refuses it there).
- **Inference on CPU and CUDA**, ``model.attn_impl=auto`` (the default) while gradients are disabled
  (``torch.no_grad`` or ``torch.inference_mode``: :func:`fused_inference`). The condition is
  ``not torch.is_grad_enabled()`` rather than ``torch.is_inference_mode_enabled()``: it is exactly the case
  in which no backward can be asked for (inference mode implies it), so evaluations written with
  ``no_grad`` (perplexity, multiple choice) get the kernel too. Softmax keeps SDPA, a fused kernel
  already (see :data:`PLAIN_FIRST`); scorers without a score_mod, attention maps (``need_weights``)
  and ``model.attn_impl=eager`` keep the plain path; so does training (grad enabled), whose CPU path is
  the scorer's fused eager ``attend``.

Compilation (inference). ``flex_attention`` is compiled once with ``dynamic=True``: batch size and
sequence length are symbols, so the many prompt lengths and chunk sizes of an evaluation share a graph.
The compiler still specialises sizes of 1 (a one-block mask, a batch of one), and the first call of a
fresh process compiles a graph specialised to its sizes (measured on CPU, torch 2.13): a causal scorer
costs three graphs there — the first call's, then a dynamic one for T <= block and one for T > block — and
two once the function has been compiled before; batches of one and single tokens (little work, a graph
each) take the plain path. Each graph is a compile of a few seconds
(more on a cold inductor cache), logged as "compiling FlexAttention for ... took N s". The captured
score_mod tensors (SSA's b and n per head) are graph inputs, not constants, so new model or scorer
instances reuse the graphs (tests/test_cuda.py checks the graph count); inputs made under
``inference_mode`` and under ``no_grad`` differ in dispatch keys, so a process using both compiles both.
If compiling or running the kernel fails (no C++ compiler, an unsupported platform, dynamo's recompile
limit), that scorer runs the plain path for the rest of the process, after one warning.

Position schemes (ssa_repro/models/positions/). RoPE rotates q and k before either path, so nothing
changes here. An additive logit bias β_h(i, j) (ALiBi, T5 buckets) enters as a term of the score_mod,
score_mod(x + β_h(q_idx, kv_idx)) (:func:`with_bias`), the plain path's scorer(x + β). A bias that
comes without a score_mod term cannot be fused: such a combination runs the plain path, after one
warning.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time

import torch

log = logging.getLogger("ssa_repro.evaluate")

# Sparse block size of the causal block mask on CPU. The C++ kernel tiles queries and keys by it and
# skips the tiles above the diagonal: 64 was as fast as 128 at 400 tokens and faster at 100-200
# (finer causal skipping) with the default model's head size 16. CUDA keeps 128, the Triton default.
CPU_BLOCK = 64

# Scorers (registered names) whose own attend is a fused kernel, kept at inference: softmax through SDPA
# (and gated attention, softmax with an output gate).
# On the quantifier grid FlexAttention was 1.05x faster in steady state (scripts/bench.py --eval-only),
# but it costs two compiles per process (2-10 s), more than it saves on the short evaluation a training
# run ends with; an empty tuple sends softmax through FlexAttention too.
PLAIN_FIRST = ("softmax", "gated")
# On the CPU the compiled kernel is not used under ``auto``: with torch 2.13 on an AVX2 AMD EPYC it returned
# wrong rows (differences up to 2.7 and NaN against SDPA) for some batch sizes and lengths that are not a
# multiple of the block (e.g. T = 40 with blocks of 64 or 128), static and dynamic shapes alike, and not the
# same cases from run to run (the observations, dated: docs/performance_log.md; to look on a machine,
# compare a model's outputs under inference_path("fused") and inference_path("plain")). Evaluations on CPU
# therefore take the plain path; ``inference_path("fused")`` still forces the kernel (benchmarks, tests),
# and CUDA keeps it.
CPU_UNTRUSTED = True

# Graph budget for the inference compile: dynamo's default limit (8 graphs per function) is shared by
# every score_mod in the process; past this limit dynamo raises, and the plain path takes over.
RECOMPILE_LIMIT = 64

_mode = "auto"  # inference_path(): "auto" | "plain" | "fused"
_compiled = None  # flex_attention compiled for training (model.attn_impl=flex)
_compiled_inference = None  # flex_attention compiled with dynamic shapes, for inference
_failed: dict = {}  # score_mod code -> why fused inference failed for it (the plain path takes over)
_unfusible_warned: set = set()  # scorer classes warned about a position bias without a score_mod term


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@functools.lru_cache(maxsize=64)
def _causal_block_mask(t: int, s: int, device: str, block: int = 128):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, None, None, t, s, device=device, BLOCK_SIZE=block)


def _check(score_mod, causal: bool) -> None:
    if score_mod is None:
        raise ValueError("this scorer (with this config) has no FlexAttention score_mod")
    if getattr(score_mod, "causal_only", False) and not causal:
        raise ValueError(
            "this scorer's score_mod counts the visible keys as q_idx + 1, which holds under the causal "
            "mask only (model.causal=false needs the plain path: model.attn_impl=auto|eager)"
        )


def flex_attend(q, k, v, score_mod, causal: bool, compiled: bool = True) -> torch.Tensor:
    """softmax(score_mod(q·kᵀ/√d)) @ v with the causal mask as a block mask; q, k, v [B, H, T, D]."""
    from torch.nn.attention.flex_attention import flex_attention

    _check(score_mod, causal)
    global _compiled
    fn = flex_attention
    if compiled:  # uncompiled flex_attention is a slow reference implementation
        if _compiled is None:
            _compiled = torch.compile(flex_attention)
        fn = _compiled
    mask = _causal_block_mask(q.shape[-2], k.shape[-2], str(q.device)) if causal else None
    # specialize_float: floats a score_mod captures (softplus' c and p, logn's beta) stay constants. As
    # symbolic floats (what dynamo makes of them after a recompile) the CUDA backward failed to lower
    # ("all unwrapped values must be FakeTensor, int, or SymInt", torch 2.11 on an H200); recompile_limit:
    # every scorer and position term in a process shares this one compiled function
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, specialize_float=True):
        return fn(q, k, v, score_mod=score_mod, block_mask=mask)


def with_bias(score_mod, term, bias=None):
    """score_mod(x + term(b, h, q_idx, kv_idx)): the scorer's score_mod after a position scheme's
    additive logit bias; ``score_mod`` itself without a term (None stays None)."""
    if score_mod is None or term is None:
        if bias is not None and score_mod is not None:
            raise ValueError(
                "this position scheme's bias has no FlexAttention term: use model.attn_impl=auto"
            )
        return score_mod

    def biased_mod(x, b, h, q_idx, kv_idx):
        return score_mod(x + term(b, h, q_idx, kv_idx), b, h, q_idx, kv_idx)

    biased_mod.causal_only = getattr(score_mod, "causal_only", False)
    biased_mod.parts = (score_mod.__code__, term.__code__)  # what the failure cache is keyed by
    return biased_mod


def _key(mod):
    return getattr(mod, "parts", mod.__code__)


@contextlib.contextmanager
def inference_path(mode: str):
    """Within the block, inference under ``model.attn_impl=auto`` takes the path ``mode``: "auto" (the
    default: FlexAttention where a score_mod exists, except :data:`PLAIN_FIRST`), "plain" (never), or
    "fused" (wherever a score_mod exists, softmax included). For benchmarks and tests."""
    global _mode
    if mode not in ("auto", "plain", "fused"):
        raise ValueError(f"inference path {mode!r}; allowed: auto, plain, fused")
    old, _mode = _mode, mode
    try:
        yield
    finally:
        _mode = old


def inference_score_mod(scorer, causal: bool):
    """The score_mod the fused inference path would run for ``scorer``, or None (plain path)."""
    if _mode == "plain" or (_mode == "auto" and getattr(scorer.cfg, "name", None) in PLAIN_FIRST):
        return None
    mod = scorer.score_mod()
    if mod is None or (getattr(mod, "causal_only", False) and not causal):
        return None
    return mod


def fused_inference(scorer, q, k, v, causal: bool, bias=None, term=None) -> torch.Tensor | None:
    """The scorer's attention output [B, H, T, D] through compiled FlexAttention, or None where the plain
    path should run: gradients enabled, inside another compile, no score_mod (or softmax, see
    :data:`PLAIN_FIRST`), a dtype or device the kernel lacks, B = 1 or T = 1, a position ``bias``
    [H, T, T] without its score_mod ``term`` (one warning), or after a failure.

    q, k, v [B, H, T, D] (self-attention: S = T). Their strides are part of the compiled graph's guards:
    the model's are views of one [B, T, 3C] projection, the same at every call.
    """
    global _compiled_inference
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return None
    if q.device.type not in ("cpu", "cuda") or q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    if q.device.type == "cpu" and CPU_UNTRUSTED and _mode == "auto":
        return None
    bsz, _, t, d = q.shape
    if q.device.type == "cuda" and d < 16:  # the CUDA kernel's lowering needs a head width of 16 or more
        return None
    if bsz == 1 or t == 1:  # the compiler specialises sizes of 1: a graph of its own, for little work
        return None
    mod = inference_score_mod(scorer, causal)
    if mod is None:
        return None
    if bias is not None and term is None:
        if type(scorer) not in _unfusible_warned:
            _unfusible_warned.add(type(scorer))
            log.warning(
                "%s with this position scheme's bias cannot be fused (no score_mod term); it runs the "
                "plain path",
                type(scorer).__name__,
            )
        return None
    mod = with_bias(mod, term)
    if _key(mod) in _failed:
        return None
    cpu = q.device.type == "cpu"
    block = CPU_BLOCK if cpu else 128
    mask = _causal_block_mask(t, t, str(q.device), block) if causal else None
    from torch._dynamo.utils import counters
    from torch.nn.attention.flex_attention import flex_attention

    if _compiled_inference is None:
        _compiled_inference = torch.compile(flex_attention, dynamic=True)
    graphs, start = counters["stats"]["unique_graphs"], time.perf_counter()
    try:
        # specialize_float: floats captured by a score_mod (softplus' c and p) are constants; as symbolic
        # floats (dynamic=True's default) the CPU kernel's lowering fails on them
        with torch._dynamo.config.patch(
            recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True, specialize_float=True
        ):
            y = _compiled_inference(q, k, v, score_mod=mod, block_mask=mask)
    except Exception as e:  # no compiler, unsupported platform, recompile limit: never fail an evaluation
        why = str(e).strip().splitlines()[0] if str(e).strip() else ""
        _failed[_key(mod)] = f"{type(e).__name__}: {why}"
        log.warning(
            "FlexAttention failed for %s (%s); it runs the plain path for the rest of this process",
            type(scorer).__name__,
            _failed[_key(mod)],
        )
        return None
    if counters["stats"]["unique_graphs"] != graphs:
        family = (f"causal, T {'<=' if t <= block else '>'} {block}") if causal else "bidirectional"
        log.info(
            "compiling FlexAttention for %s (%s, %s, %s) took %.1f s",
            type(scorer).__name__,
            family,
            q.device.type,
            str(q.dtype).removeprefix("torch."),
            time.perf_counter() - start,
        )
    return y
