"""SSA's training attention on the CPU as one autograd node whose [B, H, T, S] work is two C loops.

For q, k, v [B, H, T|S, D] float32, per head b > 0 (1/√D folded in) and n, and the logits z = q·kᵀ:

    y = softmax_j( t(z) ) @ v,    t(z) = n·sgn(z)·log1p(b|z|)   (masked keys: the lowest float32)

Forward: z by one bmm, then one C loop per row (t, its max, the exponentials, the normalisation: the row
stays in L1), then y = w @ v; it keeps z and w. Backward, with g_w = g_y @ vᵀ, one C loop per row:

    g_t = w ⊙ (g_w − ⟨g_w, w⟩)                    (softmax's backward)
    r   = g_t·n / (1 + b|z|)
    g_z = r·b,    ∂L/∂b_h = Σ r·z,    ∂L/∂n_h = Σ g_t·sgn(z)·log1p(b|z|)   (sums over the head's rows)

then g_q = g_z @ k, g_k = g_zᵀ @ q, g_v = wᵀ @ g_y. Against :class:`~ssa_repro.scorers.ssa.SSAFoldedWeights`
(the torch node, b folded into q) this drops about a dozen passes over [B, H, T, S] (each op of the
torch node reads and writes the whole tensor), the b·q product and its backward, and the copies bmm
makes of strided operands (here q, k, v are made contiguous once, as [B·H, T, D]).

The loops are C (``SOURCE``), compiled at first use with the C compiler on PATH (``CC``, else cc, gcc,
clang; ``-O3 -march=native``, well under a second) into a cache directory and loaded with ctypes, which
releases the GIL: with torch's N > 1 threads the rows are split into N fixed chunks run on N threads,
each with its own sums for b and n, added in chunk order (the same numbers run to run, so CPU resume
stays bit-exact). exp and log are written out (Cephes' single-precision polynomials, about 1 ulp;
``log1p`` by Goldberg's correction log(u)·a/(u − 1) of u = 1 + a), so the numbers do not depend on the C
library. No compiler, a failed build, or ``FUSED = False``: :func:`library` returns None (one warning)
and SSA trains through the torch node, with the same numbers to float32 rounding
(tests/test_ssa_cpu.py checks both against the float64 formula).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

log = logging.getLogger(__name__)

# False: SSA trains through the torch node (scripts/bench.py --torch-node compares them)
FUSED = True
# False: with N > 1 threads, one chunk in the calling thread (the bmm's on torch's N intra-op threads, the
# C loops on one), for comparing against the pooled batch chunks (docs/performance_log.md)
CHUNK_THREADS = True

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>

#define LOWEST (-3.4028234663852886e38f)

typedef union { float f; int32_t i; } pun;
static inline float bits_to_float(int32_t i) { pun p; p.i = i; return p.f; }
static inline int32_t float_to_bits(float f) { pun p; p.f = f; return p.i; }

/* exp(x) for x <= 0 (Cephes expf, its range reduction x = k ln2 + r with k rounded to nearest by
   adding 1.5 2^23, whose low bits then hold k), 0 below -87.3 (where float32's normal range ends) */
static inline float exp_nonpositive(float x) {
    float xc = x < -87.3f ? -87.3f : x;
    float shifted = xc * 1.44269504088896341f + 12582912.0f;
    float fx = shifted - 12582912.0f;
    float r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
    float z = r * r;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    float p = bits_to_float((float_to_bits(shifted) - 0x4B400000 + 127) << 23); /* 2^k */
    return x < -87.3f ? 0.0f : y * p;
}

/* log(u) for finite u >= 1 (Cephes logf) */
static inline float log_ge1(float u) {
    int32_t i = float_to_bits(u);
    float e = (float)((i >> 23) - 126);
    float m = bits_to_float((i & 0x007fffff) | 0x3f000000); /* u = m 2^e, m in [0.5, 1) */
    int low = m < 0.707106781186547524f;
    e = low ? e - 1.0f : e;
    m = low ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z + e * -2.12194440e-4f - 0.5f * z;
    return m + y + e * 0.693359375f;
}

/* log1p(a) for a >= 0: log(u)·a/(u - 1) with u = 1 + a rounded (Goldberg), a itself where u == 1 */
static inline float log1p_nonnegative(float a) {
    float u = 1.0f + a;
    float d = u - 1.0f;
    float l = log_ge1(u);
    return d == 0.0f ? a : l * (a / d);
}

/* Rows [r0, r1) of z [R, S] (row r: query r % T of head (r / T) % H) -> w: softmax of
   t = n_h sgn(z) log1p(b_h |z|), LOWEST where mask[r % T, j] == 0 (mask [T, S] or NULL). */
void ssa_forward(const float *z, float *w, const float *b, const float *n, const uint8_t *mask,
                 int64_t r0, int64_t r1, int64_t T, int64_t H, int64_t S) {
    for (int64_t r = r0; r < r1; r++) {
        const float *zr = z + r * S;
        float *wr = w + r * S;
        const int64_t h = (r / T) % H;
        const float bh = b[h], nh = n[h];
#pragma omp simd
        for (int64_t j = 0; j < S; j++) wr[j] = nh * copysignf(log1p_nonnegative(bh * fabsf(zr[j])), zr[j]);
        float mx = LOWEST;
        if (mask) {
            const uint8_t *mr = mask + (r % T) * S;
#pragma omp simd reduction(max:mx)
            for (int64_t j = 0; j < S; j++) {
                float t = mr[j] ? wr[j] : LOWEST;
                wr[j] = t;
                mx = t > mx ? t : mx;
            }
        } else {
#pragma omp simd reduction(max:mx)
            for (int64_t j = 0; j < S; j++) mx = wr[j] > mx ? wr[j] : mx;
        }
#pragma omp simd
        for (int64_t j = 0; j < S; j++) wr[j] = exp_nonpositive(wr[j] - mx);
        float sum = 0.0f;
#pragma omp simd reduction(+:sum)
        for (int64_t j = 0; j < S; j++) sum += wr[j];
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t j = 0; j < S; j++) wr[j] *= inv;
    }
}

/* Rows [r0, r1): g (g_w in) <- g_z = b r, r = g_t n / (1 + b|z|), g_t = w (g_w - <g_w, w>);
   gb[h] += sum r z, gn[h] += sum g_t sgn(z) log1p(b|z|) (double, over the chunk's rows). */
void ssa_backward(float *g, const float *w, const float *z, const float *b, const float *n,
                  double *gb, double *gn, int64_t r0, int64_t r1, int64_t T, int64_t H, int64_t S) {
    for (int64_t r = r0; r < r1; r++) {
        float *gr = g + r * S;
        const float *wr = w + r * S;
        const float *zr = z + r * S;
        const int64_t h = (r / T) % H;
        const float bh = b[h], nh = n[h];
        float dot = 0.0f;
#pragma omp simd reduction(+:dot)
        for (int64_t j = 0; j < S; j++) dot += gr[j] * wr[j];
        float acc_b = 0.0f, acc_n = 0.0f;
#pragma omp simd reduction(+:acc_b, acc_n)
        for (int64_t j = 0; j < S; j++) {
            float gt = wr[j] * (gr[j] - dot);
            float a = bh * fabsf(zr[j]);
            float rr = gt * nh / (1.0f + a);
            acc_n += gt * copysignf(log1p_nonnegative(a), zr[j]);
            acc_b += rr * zr[j];
            gr[j] = rr * bh;
        }
        gb[h] += acc_b;
        gn[h] += acc_n;
    }
}
"""

FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fPIC", "-shared"]

_lock = threading.Lock()
_state: dict = {}  # "lib": the loaded library, or "error": why there is none (decided once per process)


def c_compiler() -> str | None:
    """The C compiler on PATH: ``CC``, else cc, gcc or clang; None if there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    return None


def cache_dir() -> str:
    """Where the built library is kept: $SSA_REPRO_CACHE, else <tmp>/ssa_repro_<user> (like inductor's)."""
    user = os.environ.get("USER") or str(os.getuid() if hasattr(os, "getuid") else "user")
    return os.environ.get("SSA_REPRO_CACHE") or os.path.join(tempfile.gettempdir(), f"ssa_repro_{user}")


def host_cpu() -> str:
    """What ``-march=native`` builds for: the architecture and the CPU's model and feature flags (Linux's
    /proc/cpuinfo; elsewhere the platform's processor string). Part of the cache key, so that a cache
    directory shared by machines of different CPUs (``SSA_REPRO_CACHE`` on a cluster's shared disk) never
    hands one machine a library built for instructions it lacks."""
    found = {platform.machine(), platform.processor()}
    try:
        with open("/proc/cpuinfo") as f:
            found |= {ln.strip() for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))}
    except OSError:
        pass
    return "\n".join(sorted(found))


def _build() -> ctypes.CDLL:
    cc = c_compiler()
    if cc is None:
        raise RuntimeError("no C compiler on PATH (CC, cc, gcc, clang)")
    key = hashlib.sha256("\0".join([SOURCE, cc, *FLAGS, host_cpu()]).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"ssa_cpu_{key}.so")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
            src, out = os.path.join(tmp, "ssa_cpu.c"), os.path.join(tmp, "ssa_cpu.so")
            with open(src, "w") as f:
                f.write(SOURCE)
            run = subprocess.run([cc, *FLAGS, "-o", out, src, "-lm"], capture_output=True, text=True)
            if run.returncode != 0:
                raise RuntimeError(f"{cc} failed: {(run.stderr.strip().splitlines() or [''])[0][:200]}")
            os.replace(out, path)  # atomic: concurrent processes build the same file
    lib = ctypes.CDLL(path)
    p, i = ctypes.c_void_p, ctypes.c_int64
    lib.ssa_forward.argtypes = [p, p, p, p, p, i, i, i, i, i]
    lib.ssa_backward.argtypes = [p, p, p, p, p, p, p, i, i, i, i, i]
    lib.ssa_forward.restype = lib.ssa_backward.restype = None
    return lib


def library():
    """The compiled loops (built on the first call of the process), or None with one warning saying why."""
    if not FUSED:
        return None
    with _lock:
        if not _state:
            try:
                _state["lib"] = _build()
            except Exception as e:  # no compiler, a failed build or load: the torch node
                _state["error"] = f"{type(e).__name__}: {e}"
                log.warning(
                    "SSA's fused CPU node is off (%s); training through the torch node", _state["error"]
                )
        return _state.get("lib")


def applies(q, k, v, mask, bias) -> bool:
    """Whether :class:`SSAFusedAttention` takes this training call: CPU float32 q, k, v (no autocast), a
    [T, S] mask or none, no additive bias, not inside torch.compile (dynamo cannot trace ctypes), and
    the library built."""
    if q.device.type != "cpu" or bias is not None or torch.compiler.is_compiling():
        return False
    if any(x.dtype != torch.float32 for x in (q, k, v)) or torch.is_autocast_enabled("cpu"):
        return False
    if mask is not None and (mask.dim() != 2 or mask.shape != (q.shape[-2], k.shape[-2])):
        return False
    return library() is not None


def _batch_chunks(bsz: int) -> list[tuple[int, int]]:
    """Batch entries split into torch.get_num_threads() fixed chunks (fixed: the sums for b and n are
    added in chunk order, so a run's numbers do not depend on which thread finished first)."""
    parts = max(1, min(torch.get_num_threads(), bsz)) if CHUNK_THREADS else 1
    step = -(-bsz // parts)
    return [(i, min(bsz, i + step)) for i in range(0, bsz, step)]


def _over_batch(fn, bsz: int) -> None:
    """``fn(i, b0, b1)`` for the chunks [b0, b1) of the batch, each on a worker thread running one
    intra-op thread: the whole attention of a chunk (copies, bmm, C loops) is one parallel region, not
    one per operation (each of which waits for the slowest thread: slow whenever the machine is shared,
    as ssa.blocked_inference measured). The workers are kept (one pool per thread count): a new thread
    would pay BLAS's per-thread set-up at every call. One chunk: in this thread."""
    chunks = _batch_chunks(bsz)
    if len(chunks) == 1:
        fn(0, *chunks[0])
        return

    def task(i, b0, b1):
        with torch.no_grad():  # grad mode is per thread
            fn(i, b0, b1)

    for f in [_pool(len(chunks)).submit(task, i, *c) for i, c in enumerate(chunks)]:
        f.result()  # re-raises a worker's error here


_pools: dict = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """The pool of ``workers`` threads of this process (keyed by pid too: a forked child has none of its
    parent's threads, and would wait forever on a pool it inherited)."""
    key = os.getpid(), workers
    with _lock:
        if key not in _pools:
            _pools[key] = ThreadPoolExecutor(
                workers, thread_name_prefix="ssa-cpu", initializer=torch.set_num_threads, initargs=(1,)
            )
        return _pools[key]


class SSAFusedAttention(torch.autograd.Function):
    """y = softmax_j(t(q·kᵀ)) @ v with t(z) = n·sgn(z)·log1p(b|z|) (see the module docstring): q, k, v
    [B, H, T|S, D] float32 (any strides), b and n [H|1, 1, 1] with b > 0 (1/√D folded into b), mask bool
    [T, S] (True = visible) or None -> [B, H, T, D]. With torch's N > 1 threads the batch is split into N
    chunks, each computed whole on one thread (:func:`_over_batch`)."""

    @staticmethod
    def forward(ctx, q, k, v, b, n, mask):
        lib = library()
        bsz, h, t, d = q.shape
        s = k.shape[2]
        qc, kc, vc = (torch.empty(bsz, h, x.shape[2], d, dtype=x.dtype) for x in (q, k, v))  # contiguous
        z = torch.empty(bsz, h, t, s, dtype=q.dtype)  # raw logits q·kᵀ
        w, y = torch.empty_like(z), torch.empty(bsz, h, t, d, dtype=q.dtype)
        bh, nh = (x.detach().reshape(-1).expand(h).contiguous() for x in (b, n))  # [H] float32
        m = None if mask is None else mask.to(torch.uint8).contiguous()  # [T, S]
        args = (bh.data_ptr(), nh.data_ptr(), None if m is None else m.data_ptr())

        def chunk(i, b0, b1):  # batch entries [b0, b1): rows [b0·H·T, b1·H·T) of z and w
            qi, ki, vi = (
                c[b0:b1].copy_(x[b0:b1]).view(-1, x.shape[2], d) for c, x in ((qc, q), (kc, k), (vc, v))
            )
            zi, wi = z[b0:b1].view(-1, t, s), w[b0:b1].view(-1, t, s)
            torch.bmm(qi, ki.transpose(1, 2), out=zi)
            lib.ssa_forward(z.data_ptr(), w.data_ptr(), *args, b0 * h * t, b1 * h * t, t, h, s)
            torch.bmm(wi, vi, out=y[b0:b1].view(-1, t, d))

        _over_batch(chunk, bsz)
        ctx.save_for_backward(qc, kc, vc, z, w, bh, nh)
        ctx.shapes = b.shape, n.shape
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy):
        qc, kc, vc, z, w, bh, nh = ctx.saved_tensors
        lib = library()
        bsz, h, t, s = w.shape
        d = qc.shape[-1]
        gw = torch.empty_like(w)  # g_w, then g_z in place
        gq, gk, gv = torch.empty_like(qc), torch.empty_like(kc), torch.empty_like(vc)
        gyc = torch.empty_like(gq)
        chunks = _batch_chunks(bsz)
        sums = torch.zeros(len(chunks), 2, h, dtype=torch.float64)  # per chunk: (Σ for b, Σ for n) per head

        def chunk(i, b0, b1):
            gyi = gyc[b0:b1].copy_(gy[b0:b1]).view(-1, t, d)
            wi, gwi = w[b0:b1].view(-1, t, s), gw[b0:b1].view(-1, t, s)
            vi, ki, qi = (x[b0:b1].view(-1, x.shape[2], d) for x in (vc, kc, qc))
            torch.bmm(gyi, vi.transpose(1, 2), out=gwi)
            torch.bmm(wi.transpose(1, 2), gyi, out=gv[b0:b1].view(-1, s, d))
            p = sums[i].data_ptr()
            lib.ssa_backward(
                gw.data_ptr(), w.data_ptr(), z.data_ptr(), bh.data_ptr(), nh.data_ptr(), p, p + 8 * h,
                b0 * h * t, b1 * h * t, t, h, s,
            )  # fmt: skip
            torch.bmm(gwi, ki, out=gq[b0:b1].view(-1, t, d))
            torch.bmm(gwi.transpose(1, 2), qi, out=gk[b0:b1].view(-1, s, d))

        _over_batch(chunk, bsz)
        total = sums.sum(0).to(torch.float32)  # [2, H]: chunks added in order
        b_shape, n_shape = ctx.shapes
        gb = total[0].view(-1, 1, 1).sum_to_size(b_shape) if ctx.needs_input_grad[3] else None
        gn = total[1].view(-1, 1, 1).sum_to_size(n_shape) if ctx.needs_input_grad[4] else None
        return gq, gk, gv, gb, gn, None
