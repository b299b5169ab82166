"""The Triton kernels behind :func:`ssa_repro.kernels.ssa_attention.ssa_attention` (imported on first use:
this module needs triton, the ``kernels`` extra).

Per (batch, head), with x_ij = q_i·k_j/√d over the visible keys j of query i,

    t(x) = n·s·log1p(b·s·x),   s = sgn(x) (+1 at 0),   t'(x) = n·b/(1 + b|x|)
    forward:   m_i = max_j t_ij,  l_i = Σ_j e^(t_ij − m_i),  o_i = Σ_j e^(t_ij − m_i) v_j / l_i,
               lse_i = m_i + log l_i  (+inf for a row with no visible key: its output is 0)
    backward:  p_ij = e^(t_ij − lse_i),  dP = dO·vᵀ,  dS = p ∘ (dP − Δ),  Δ_i = Σ_d dO_id·o_id,
               dV = pᵀ·dO,  dQ = (dS ∘ t')·k/√d,  dK = (dS ∘ t')ᵀ·q/√d,
               dn = Σ dS·s·log1p(b|x|),  db = Σ dS·n·x/(1 + b|x|)   (per head: partial sums per block)

FlashAttention-2 tiling: a program owns a block of BLOCK_M queries (forward, dQ) or BLOCK_N keys
(dK, dV, and the per-head partial sums of db and dn), loops over the other axis in blocks and never
forms the [T, T] matrix. dQ and dK/dV are separate kernels (each recomputes x, t and p): no atomics,
so the gradients are deterministic (resume on CUDA stays exact) at the cost of a second q·kᵀ.

The kernels are plain functions here and jitted by :func:`kernels` on first use, once per mode: triton
decides between compiling and its CPU interpreter (``TRITON_INTERPRET=1``) when a function is
decorated, so deciding at first call (not at import) lets tests switch the interpreter on without
caring which module imported what first. They call no helper function (a helper would have to be
jitted in the same mode), so the transform is written out in each.

log1p(y) is Kahan's form log(u)·y/(u − 1), u = fl(1 + y) (y itself where u = 1): accurate to a few ulp
with the plain log every backend has.
"""

from __future__ import annotations

import contextlib

import triton
import triton.language as tl


def _fwd(
    Q, K, V, B, N, KPM, OUT, LSE,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd,
    H, T, D, sm_scale,
    CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    bi = bh // H
    hi = bh % H
    DT: tl.constexpr = Q.dtype.element_ty  # the input dtype: matmul operands are rounded to it
    MM: tl.constexpr = tl.float32 if UPCAST else DT  # the operands' dtype in tl.dot
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    q = tl.load(
        Q + bi * sqb + hi * sqh + offs_m[:, None] * sqt + offs_d[None, :] * sqd,
        mask=(offs_m[:, None] < T) & dmask[None, :],
        other=0.0,
    ).to(MM)  # [BM, BD]
    b = tl.load(B + hi)
    n = tl.load(N + hi)
    # a finite start, so that a block with no visible key gives exp(-inf - m) = 0, never inf - inf
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if CAUSAL:
        hi_n = tl.minimum((pid_m + 1) * BLOCK_M, T)
    else:
        hi_n = T
    for start_n in range(0, hi_n, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kmask = offs_n < T
        kv_off = offs_n[:, None] * skt + offs_d[None, :] * skd
        k = tl.load(K + bi * skb + hi * skh + kv_off, mask=kmask[:, None] & dmask[None, :], other=0.0).to(MM)
        x = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # [BM, BN] float32
        s = tl.where(x >= 0, 1.0, -1.0)
        y = b * (s * x)
        u = 1.0 + y
        t = n * s * tl.where(u == 1.0, y, tl.log(u) * (y / tl.where(u == 1.0, 1.0, u - 1.0)))
        vis = kmask[None, :] & (offs_m[:, None] < T)
        if CAUSAL:
            vis = vis & (offs_m[:, None] >= offs_n[None, :])
        if HAS_KPM:
            kp = tl.load(KPM + bi * T + offs_n, mask=kmask, other=0)
            vis = vis & (kp != 0)[None, :]
        t = tl.where(vis, t, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(t, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(t - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            V + bi * svb + hi * svh + offs_n[:, None] * svt + offs_d[None, :] * svd,
            mask=kmask[:, None] & dmask[None, :],
            other=0.0,
        ).to(MM)
        # p split into two numbers of the input dtype, p = hi + lo to ~16 bits (float32: lo = 0): O then
        # carries the float32 weights, so the backward's Δ = Σ_d dO·O equals Σ_j p·dP; with p rounded to
        # bf16 (FlashAttention's choice) Δ is off by the rounding, alike for every key of a row, and dn, db,
        # dQ came out 4-10x less accurate than the unfused 16-bit path (measured on an H200: docs/performance_log.md)
        if UPCAST:  # the interpreter's bf16 (held in float32): rounded to nearest, as on a GPU
            pb = p.to(tl.uint32, bitcast=True)
            p_hi = ((pb + 0x7FFF + ((pb >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
        else:
            p_hi = p.to(DT).to(MM)
        pv = tl.dot(p_hi, v, input_precision=PRECISION)
        if DT != tl.float32:
            p_rest = p - p_hi.to(tl.float32)
            if UPCAST:  # the interpreter's bf16 (held in float32): rounded to nearest, as on a GPU
                p_restb = p_rest.to(tl.uint32, bitcast=True)
                p_lo = ((p_restb + 0x7FFF + ((p_restb >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
            else:
                p_lo = p_rest.to(DT).to(MM)
            pv += tl.dot(p_lo, v, input_precision=PRECISION)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    empty = l_i == 0.0  # no visible key (a fully padded row, or past T)
    l_safe = tl.where(empty, 1.0, l_i)
    o = acc / l_safe[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.log(l_safe))
    rows = bh * T + offs_m
    tl.store(
        OUT + rows[:, None] * D + offs_d[None, :],
        o.to(OUT.dtype.element_ty),
        mask=(offs_m[:, None] < T) & dmask[None, :],
    )
    tl.store(LSE + rows, lse, mask=offs_m < T)


def _bwd_dkv(
    Q, K, V, B, N, KPM, DO, LSE, DELTA, DK, DV, DBP, DNP,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdb, sdh, sdt, sdd,
    H, T, D, sm_scale, NBLK,
    CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, NEED_BN: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    bi = bh // H
    hi = bh % H
    DT: tl.constexpr = Q.dtype.element_ty  # the input dtype: matmul operands are rounded to it
    MM: tl.constexpr = tl.float32 if UPCAST else DT  # the operands' dtype in tl.dot
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    kmask = offs_n < T
    kd = kmask[:, None] & dmask[None, :]
    k = tl.load(
        K + bi * skb + hi * skh + offs_n[:, None] * skt + offs_d[None, :] * skd, mask=kd, other=0.0
    ).to(MM)
    v = tl.load(
        V + bi * svb + hi * svh + offs_n[:, None] * svt + offs_d[None, :] * svd, mask=kd, other=0.0
    ).to(MM)
    kvis = kmask
    if HAS_KPM:
        kp = tl.load(KPM + bi * T + offs_n, mask=kmask, other=0)
        kvis = kvis & (kp != 0)
    b = tl.load(B + hi)
    n = tl.load(N + hi)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    db_acc = tl.zeros([BLOCK_N], tl.float32)
    dn_acc = tl.zeros([BLOCK_N], tl.float32)
    if CAUSAL:
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M  # queries before the block's first key see none of it
    else:
        lo = 0
    for start_m in range(lo, T, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        qmask = offs_m < T
        qd = qmask[:, None] & dmask[None, :]
        q = tl.load(
            Q + bi * sqb + hi * sqh + offs_m[:, None] * sqt + offs_d[None, :] * sqd, mask=qd, other=0.0
        ).to(MM)
        do = tl.load(
            DO + bi * sdb + hi * sdh + offs_m[:, None] * sdt + offs_d[None, :] * sdd, mask=qd, other=0.0
        ).to(MM)
        lse = tl.load(LSE + bh * T + offs_m, mask=qmask, other=float("inf"))
        delta = tl.load(DELTA + bh * T + offs_m, mask=qmask, other=0.0)
        x = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # [BM, BN]
        s = tl.where(x >= 0, 1.0, -1.0)
        y = b * (s * x)
        u = 1.0 + y
        l1p = tl.where(u == 1.0, y, tl.log(u) * (y / tl.where(u == 1.0, 1.0, u - 1.0)))
        vis = kvis[None, :] & qmask[:, None]
        if CAUSAL:
            vis = vis & (offs_m[:, None] >= offs_n[None, :])
        p = tl.where(vis, tl.exp(n * s * l1p - lse[:, None]), 0.0)
        if UPCAST:  # the interpreter's bf16 (held in float32): rounded to nearest, as on a GPU
            pb = p.to(tl.uint32, bitcast=True)
            p_r = ((pb + 0x7FFF + ((pb >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
        else:
            p_r = p.to(DT).to(MM)
        dv += tl.dot(tl.trans(p_r), do, input_precision=PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        g = ds * (n * b / u)
        # g split as p is in the forward (g = hi + lo, each of the input dtype; float32: lo = 0): rounded
        # once to fp16, dK came out 1.4x the bound of tests/test_kernels.py's 16-bit rule (H200, d = 8)
        if UPCAST:  # the interpreter's bf16 (held in float32): rounded to nearest, as on a GPU
            gb = g.to(tl.uint32, bitcast=True)
            g_r = ((gb + 0x7FFF + ((gb >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
        else:
            g_r = g.to(DT).to(MM)
        dk += tl.dot(tl.trans(g_r), q, input_precision=PRECISION)
        if DT != tl.float32:
            g_rest = g - g_r.to(tl.float32)
            if UPCAST:  # the interpreter's bf16 (held in float32): rounded to nearest, as on a GPU
                g_restb = g_rest.to(tl.uint32, bitcast=True)
                g_lo = ((g_restb + 0x7FFF + ((g_restb >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
            else:
                g_lo = g_rest.to(DT).to(MM)
            dk += tl.dot(tl.trans(g_lo), q, input_precision=PRECISION)
        if NEED_BN:
            dn_acc += tl.sum(ds * s * l1p, 0)
            db_acc += tl.sum(ds * (n * x / u), 0)
    rows = bh * T + offs_n
    tl.store(DK + rows[:, None] * D + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty), mask=kd)
    tl.store(DV + rows[:, None] * D + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kd)
    if NEED_BN:
        tl.store(DBP + bh * NBLK + pid_n, tl.sum(db_acc, 0))
        tl.store(DNP + bh * NBLK + pid_n, tl.sum(dn_acc, 0))


def _bwd_dq(
    Q, K, V, B, N, KPM, DO, LSE, DELTA, DQ,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sdb, sdh, sdt, sdd,
    H, T, D, sm_scale,
    CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    bi = bh // H
    hi = bh % H
    DT: tl.constexpr = Q.dtype.element_ty  # the input dtype: matmul operands are rounded to it
    MM: tl.constexpr = tl.float32 if UPCAST else DT  # the operands' dtype in tl.dot
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    qmask = offs_m < T
    qd = qmask[:, None] & dmask[None, :]
    q = tl.load(
        Q + bi * sqb + hi * sqh + offs_m[:, None] * sqt + offs_d[None, :] * sqd, mask=qd, other=0.0
    ).to(MM)
    do = tl.load(
        DO + bi * sdb + hi * sdh + offs_m[:, None] * sdt + offs_d[None, :] * sdd, mask=qd, other=0.0
    ).to(MM)
    lse = tl.load(LSE + bh * T + offs_m, mask=qmask, other=float("inf"))
    delta = tl.load(DELTA + bh * T + offs_m, mask=qmask, other=0.0)
    b = tl.load(B + hi)
    n = tl.load(N + hi)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if CAUSAL:
        hi_n = tl.minimum((pid_m + 1) * BLOCK_M, T)
    else:
        hi_n = T
    for start_n in range(0, hi_n, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kmask = offs_n < T
        kd = kmask[:, None] & dmask[None, :]
        k = tl.load(
            K + bi * skb + hi * skh + offs_n[:, None] * skt + offs_d[None, :] * skd, mask=kd, other=0.0
        ).to(MM)
        v = tl.load(
            V + bi * svb + hi * svh + offs_n[:, None] * svt + offs_d[None, :] * svd, mask=kd, other=0.0
        ).to(MM)
        x = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale
        s = tl.where(x >= 0, 1.0, -1.0)
        y = b * (s * x)
        u = 1.0 + y
        t = n * s * tl.where(u == 1.0, y, tl.log(u) * (y / tl.where(u == 1.0, 1.0, u - 1.0)))
        vis = kmask[None, :] & qmask[:, None]
        if CAUSAL:
            vis = vis & (offs_m[:, None] >= offs_n[None, :])
        if HAS_KPM:
            kp = tl.load(KPM + bi * T + offs_n, mask=kmask, other=0)
            vis = vis & (kp != 0)[None, :]
        p = tl.where(vis, tl.exp(t - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        g = p * (dp - delta[:, None]) * (n * b / u)
        if UPCAST:  # the interpreter's bf16 (held in float32): rounded to nearest, as on a GPU
            gb = g.to(tl.uint32, bitcast=True)
            g_r = ((gb + 0x7FFF + ((gb >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
        else:
            g_r = g.to(DT).to(MM)
        dq += tl.dot(g_r, k, input_precision=PRECISION)
        if DT != tl.float32:  # g = hi + lo, as in _bwd_dkv
            g_rest = g - g_r.to(tl.float32)
            if UPCAST:  # the interpreter's bf16 (held in float32): rounded to nearest, as on a GPU
                g_restb = g_rest.to(tl.uint32, bitcast=True)
                g_lo = ((g_restb + 0x7FFF + ((g_restb >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
            else:
                g_lo = g_rest.to(DT).to(MM)
            dq += tl.dot(g_lo, k, input_precision=PRECISION)
    rows = bh * T + offs_m
    tl.store(DQ + rows[:, None] * D + offs_d[None, :], (dq * sm_scale).to(DQ.dtype.element_ty), mask=qd)


_jitted: dict[bool, tuple] = {}


def kernels() -> tuple:
    """(forward, dK/dV, dQ) jitted in the current mode (compiled, or interpreted under TRITON_INTERPRET=1)."""
    mode = bool(triton.knobs.runtime.interpret)
    if mode not in _jitted:
        _jitted[mode] = tuple(triton.jit(f) for f in (_fwd, _bwd_dkv, _bwd_dq))
    return _jitted[mode]


@contextlib.contextmanager
def launching():
    """Around a launch. Under the interpreter, when triton was imported before TRITON_INTERPRET was set
    (torch._dynamo imports it), the library's functions written in Triton itself (tl.zeros, tl.max,
    tl.sum, ...) are compiled-mode functions that refuse to run in the interpreter: for the launch they
    are replaced by interpreted copies of the same code (restored after). A compiled launch is untouched."""
    swap = {}
    if triton.knobs.runtime.interpret:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        swap = {name: f for name, f in vars(tl).items() if isinstance(f, JITFunction)}
        for name, f in swap.items():
            setattr(tl, name, InterpretedFunction(f.fn))
    try:
        yield
    finally:
        for name, f in swap.items():
            setattr(tl, name, f)
