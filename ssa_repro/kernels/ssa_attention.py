"""Fused SSA attention: ``softmax_j(t(q_i·k_j/√d)) @ v`` in Triton, forward and backward, without the
[B, H, T, T] scores.

    t(x) = n_h·sgn(x)·log1p(b_h|x|)   (SSA, arXiv 2508.14685; ssa_repro/scorers/ssa.py)

    y = ssa_attention(q, k, v, b, n, causal=True, key_padding_mask=None)

q, k, v [B, H, T, d] (any strides; float32, bfloat16 or float16, all one dtype; 1 <= d <= 128), b and n
[H] (per head; a per-layer scorer passes its pair expanded to [H]); ``key_padding_mask`` bool [B, T],
True = a real key (visible), False = padding. A query row with no visible key (every key padded) gives
an output of 0. The result has q's dtype; logits, the transform, the softmax and every sum accumulate
in float32 (matmul inputs stay in the input dtype, as in FlashAttention). Gradients reach q, k, v and
those of b and n that require grad (per-head sums, see ``_ssa_triton``); a b or n that does not
require grad (a fixed scorer parameter, a buffer) gets none and costs nothing.

Runs on CUDA, or on CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1``: slow, for tests).
triton is imported on first call, so the package imports without it; calling without it raises
:class:`KernelUnavailable` naming ``pip install -e '.[kernels]'``. Float32 matmuls follow torch's own
setting: TF32 only where ``torch.backends.cuda.matmul.allow_tf32`` is on (off by default), so float32
results match the plain path to float32 rounding. Checked against a float64 reference in
tests/test_kernels.py (interpreter) and tests/test_cuda.py (GPU).
"""

from __future__ import annotations

import functools
import importlib
import math
import os

import torch

MAX_HEAD_DIM = 128  # one [BLOCK, d] tile of q, k, v, dO per program must fit in shared memory
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INSTALL = "pip install -e '.[kernels]'"
# Tiles on a GPU: 64 queries × 32 keys, 3 pipeline stages, 4 warps up to d = 64 (8 above). Measured on an
# H200 (scripts/bench_kernel.py, forward + backward; docs/performance_log.md): the fastest or within 5% of it of four
# settings at every shape timed (d 16/32 fp32, T 82-1,024; d 64 bf16, T 1,024); 64 × 64 with 2 stages
# (the first choice) was 1.1-4× slower in fp32. Under the interpreter 16 × 16, so that small test shapes
# already span several blocks (partial last blocks, the causal diagonal inside a block and between blocks).
GPU_BLOCK_M, GPU_BLOCK_N, GPU_STAGES = 64, 32, 3
INTERPRET_BLOCK = 16
# None: the settings above; a dict of BLOCK_M, BLOCK_N, num_warps, num_stages replaces them (scripts/bench_kernel.py)
GPU_TILES: dict | None = None


class KernelUnavailable(RuntimeError):
    """The fused kernel cannot run here (no triton, or a CPU tensor without the interpreter)."""


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreter_on() -> bool:
    """TRITON_INTERPRET is set to a true value (triton's own reading of it: 1, true, on, yes)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def unsupported(q: torch.Tensor) -> str | None:
    """Why the kernel cannot run on tensors like ``q`` [B, H, T, d] here, or None if it can."""
    if not triton_available():
        return f"the fused SSA kernel needs triton, which is not installed ({INSTALL})"
    if q.device.type != "cuda" and not (q.device.type == "cpu" and interpreter_on()):
        return (
            f"the fused SSA kernel runs on CUDA (or on CPU under TRITON_INTERPRET=1, slowly); got a "
            f"{q.device.type} tensor"
        )
    if q.dtype not in DTYPES:
        return f"the fused SSA kernel takes float32, bfloat16 or float16; got {q.dtype}"
    if not 1 <= q.shape[-1] <= MAX_HEAD_DIM:
        return f"the fused SSA kernel takes head widths 1..{MAX_HEAD_DIM}; got {q.shape[-1]}"
    return None


# a graph break under torch.compile (train.compile compiles the rest): dynamo does not trace the launches.
# torch's lazy form of torch.compiler.disable: that one imports torch._dynamo (2 s) when this module loads
@torch._disable_dynamo
def ssa_attention(q, k, v, b, n, *, causal: bool, key_padding_mask=None) -> torch.Tensor:
    """softmax over the visible keys of t(q·kᵀ/√d), times v: [B, H, T, d] (see the module docstring)."""
    why = unsupported(q)
    if why is not None:
        raise KernelUnavailable(why)
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(
            f"ssa_attention takes q, k, v of one shape [B, H, T, d]; got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.dtype != q.dtype or v.dtype != q.dtype or k.device != q.device or v.device != q.device:
        raise ValueError("ssa_attention takes q, k, v of one dtype on one device")
    heads = q.shape[1]
    for name, z in (("b", b), ("n", n)):
        if z.shape != (heads,) or z.device != q.device:
            raise ValueError(
                f"ssa_attention: {name} must have shape [H] = [{heads}] on {q.device}; got "
                f"{tuple(z.shape)} on {z.device}"
            )
    kpm = key_padding_mask
    if kpm is not None and (
        kpm.dtype != torch.bool or kpm.shape != (q.shape[0], q.shape[2]) or kpm.device != q.device
    ):
        raise ValueError(
            f"ssa_attention: key_padding_mask must be bool [B, T] = [{q.shape[0]}, {q.shape[2]}] on "
            f"{q.device} (True = visible); got {kpm.dtype} {tuple(kpm.shape)} on {kpm.device}"
        )
    return _SSAAttention.apply(q, k, v, b, n, bool(causal), key_padding_mask)


def _strides(z: torch.Tensor) -> tuple[int, ...]:
    return tuple(z.stride())


def _launch_config(q: torch.Tensor) -> dict:
    d = q.shape[-1]
    # tl.dot needs every dimension >= 16 and a power of two: d is padded with zeros (masked loads)
    block_d = max(16, _next_pow2(d))
    if q.device.type == "cpu":  # the interpreter
        return dict(BLOCK_M=INTERPRET_BLOCK, BLOCK_N=INTERPRET_BLOCK, BLOCK_D=block_d)
    tiles = dict(
        BLOCK_M=GPU_BLOCK_M, BLOCK_N=GPU_BLOCK_N, num_warps=4 if d <= 64 else 8, num_stages=GPU_STAGES
    )
    return {**tiles, **(GPU_TILES or {}), "BLOCK_D": block_d}


def _next_pow2(x: int) -> int:
    return 1 << (x - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _triton_kernels():
    """The module of kernels (imports triton), by name: triton is loaded only when a kernel runs."""
    return importlib.import_module("ssa_repro.kernels._ssa_triton")


def _upcast(q: torch.Tensor) -> bool:
    """Matmul operands in float32: under the interpreter for bf16 (its tl.dot reads bf16 wrongly: numpy has
    no bf16). The same numbers as a bf16 tl.dot: operands are rounded to bf16 first, bf16 products are
    exact in float32, and tl.dot sums in float32 either way."""
    return q.device.type == "cpu" and q.dtype == torch.bfloat16


def _precision(q: torch.Tensor) -> str:
    if q.dtype == torch.float32 and not (q.is_cuda and torch.backends.cuda.matmul.allow_tf32):
        return "ieee"
    return "tf32"  # bf16/fp16 matmuls are exact products with float32 sums either way


class _SSAAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, b, n, causal, kpm):
        kern = _triton_kernels()
        fwd, _, _ = kern.kernels()
        bsz, heads, t, d = q.shape
        bf, nf = b.detach().float().contiguous(), n.detach().float().contiguous()
        kp = kpm.to(torch.uint8).contiguous() if kpm is not None else q.new_zeros(1, dtype=torch.uint8)
        # the output in float32, rounded to q's dtype on return: the backward's Δ = Σ_d dO·O reads the
        # unrounded O (from a bf16/fp16 O, Δ's error is the same for every key of a row and adds up in dQ,
        # db and dn: 2-4x the unfused 16-bit path's error, measured on an H200; tests/test_kernels.compare)
        o = torch.empty((bsz, heads, t, d), dtype=torch.float32, device=q.device)
        lse = torch.empty((bsz, heads, t), dtype=torch.float32, device=q.device)
        cfg = _launch_config(q)
        prec, up = _precision(q), _upcast(q)
        grid = (_cdiv(t, cfg["BLOCK_M"]), bsz * heads)
        with kern.launching():
            fwd[grid](
                q, k, v, bf, nf, kp, o, lse, *_strides(q), *_strides(k), *_strides(v),
                heads, t, d, 1.0 / math.sqrt(d),
                CAUSAL=causal, HAS_KPM=kpm is not None, PRECISION=prec, UPCAST=up, **cfg,
            )  # fmt: skip
        ctx.save_for_backward(q, k, v, bf, nf, kp, o, lse)  # o: float32 [B, H, T, d]
        ctx.causal, ctx.has_kpm, ctx.b_dtype, ctx.n_dtype = causal, kpm is not None, b.dtype, n.dtype
        return o.to(q.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        kern = _triton_kernels()
        _, bwd_dkv, bwd_dq = kern.kernels()
        q, k, v, bf, nf, kp, o, lse = ctx.saved_tensors
        bsz, heads, t, d = q.shape
        do = do.to(q.dtype)
        delta = (do.float() * o).sum(-1).contiguous()  # Δ_i = Σ_d dO·O, [B, H, T]
        need_bn = ctx.needs_input_grad[3] or ctx.needs_input_grad[4]
        cfg = _launch_config(q)
        prec, up = _precision(q), _upcast(q)
        nblk = _cdiv(t, cfg["BLOCK_N"])
        dq = torch.empty((bsz, heads, t, d), dtype=q.dtype, device=q.device)
        dk, dv = torch.empty_like(dq), torch.empty_like(dq)
        dbp = torch.zeros((bsz * heads, nblk), dtype=torch.float32, device=q.device)
        dnp = torch.zeros_like(dbp)
        scale = 1.0 / math.sqrt(d)
        common = (*_strides(q), *_strides(k), *_strides(v), *_strides(do), heads, t, d, scale)
        with kern.launching():
            bwd_dkv[(nblk, bsz * heads)](
                q, k, v, bf, nf, kp, do, lse, delta, dk, dv, dbp, dnp, *common, nblk,
                CAUSAL=ctx.causal, HAS_KPM=ctx.has_kpm, NEED_BN=need_bn, PRECISION=prec, UPCAST=up, **cfg,
            )  # fmt: skip
            bwd_dq[(_cdiv(t, cfg["BLOCK_M"]), bsz * heads)](
                q, k, v, bf, nf, kp, do, lse, delta, dq, *common,
                CAUSAL=ctx.causal, HAS_KPM=ctx.has_kpm, PRECISION=prec, UPCAST=up, **cfg,
            )  # fmt: skip
        db = dbp.view(bsz, heads, nblk).sum((0, 2)).to(ctx.b_dtype) if ctx.needs_input_grad[3] else None
        dn = dnp.view(bsz, heads, nblk).sum((0, 2)).to(ctx.n_dtype) if ctx.needs_input_grad[4] else None
        return dq, dk, dv, db, dn, None, None
