"""SSA's training attention on the CPU as one autograd node whose [B, H, T, S] work is two C loops.

For q, k, v [B, H, T|S, D] float32, per head b > 0 (1/√D folded in) and n, and the logits z = q·kᵀ:

    y = softmax_j( t(z) ) @ v,    t(z) = n·sgn(z)·log1p(b|z|)   (masked keys: the lowest float32)

Forward: zᵀ = k @ qᵀ by one bmm (the logits kept transposed, [B·H, S, T]), one C loop over it (t, each
query's max, the exponentials, the normalisation), then y = w @ v with wᵀ read transposed; it keeps z
and w. Backward, with g_wᵀ = v @ g_yᵀ, one C loop:

    g_t = w ⊙ (g_w − ⟨g_w, w⟩)                    (softmax's backward)
    r   = g_t·n / (1 + b|z|)
    g_z = r·b,    ∂L/∂b_h = Σ r·z,    ∂L/∂n_h = Σ g_t·sgn(z)·log1p(b|z|)   (sums over the head's scores)

then g_q = g_z @ k, g_k = g_zᵀ @ q, g_v = wᵀ @ g_y (bmm with transposed operands, no copies). Against
:class:`~ssa_repro.scorers.ssa.SSAFoldedWeights` (the torch node, b folded into q) this drops about a
dozen passes over [B, H, T, S], the b·q product and its backward, and the copies bmm makes of strided
operands (q, k, v are made contiguous once, as [B·H, T, D]). Why transposed: a query's keys are a
short row (20-80 at the default sizes), and per-row loops paid their start and horizontal reductions
more than their arithmetic; down a key's column of queries every pass is vertical, with the per-query
max, sum and dot in arrays (the forward loop 2x faster, the backward 1.3x). Scores a causal mask hides
are not computed (weight 0, gradient 0).

The loops are C (``SOURCE``), compiled at first use with the C compiler on PATH (``CC``, else cc, gcc,
clang; ``-O3 -march=native -fopenmp -fno-trapping-math``, under a second) into a cache directory and
loaded with ctypes (which releases the GIL). Their (batch, head) blocks are split among
torch.get_num_threads() OpenMP threads; the library links libgomp.so.1, which the process already holds
from torch's CPU wheels, so the loops run on torch's own thread team, not on a second pool whose threads
would contend with torch's spinning workers on every core (the pool of Python threads this replaced:
1.35× softmax's step on two threads). Like torch's own OpenMP ops, a child forked after the parent used
the team must run on one thread (as DataLoader's workers do). A compiler without OpenMP builds the loops
without it (one thread). The sums for b and n are kept per query and added in query order: the same
numbers for any number of threads, so CPU resume stays bit-exact. exp and log are written out (Cephes'
single-precision polynomials, about 1 ulp; ``log1p`` by Goldberg's correction log(u)·a/(u − 1) of
u = 1 + a), so the numbers do not depend on the C library. No compiler, a failed build, or
``FUSED = False``: :func:`library` returns None (one warning) and SSA trains through the torch node, with
the same numbers to float32 rounding (tests/test_ssa_cpu.py checks both against the float64 formula).
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

import torch

log = logging.getLogger(__name__)

# False: SSA trains through the torch node (scripts/bench.py --torch-node compares them)
FUSED = True

SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
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

/* The logits are kept transposed, zᵀ [B·H, S, T] (key j's logits against every query i, contiguous over
   i), so every pass runs down a key's column of queries with per-query running values (max, sum, dot) in
   arrays: vertical vector operations, no per-row horizontal reduction or short-row loop start, which
   with 20-80 keys a row cost more than the arithmetic (measured: half the forward's time).

   Key j is seen by the queries [begin[j], T) (mask [T, S], 1 = visible; NULL: all): the queries before
   are not computed (weight 0; under the causal mask half the scores). dense[j] = 1 when every query
   from begin[j] on sees key j; otherwise the transposed mask maskT [S, T] is tested there. */
typedef struct { int64_t *begin; uint8_t *dense, *maskT; } keys_seen;

static keys_seen keys_seen_by(const uint8_t *mask, int64_t T, int64_t S) {
    keys_seen k = {malloc(S * sizeof(int64_t)), malloc(S), mask ? malloc(S * T) : NULL};
    for (int64_t j = 0; j < S; j++) {
        int64_t begin = 0;
        uint8_t all = 1;
        if (mask) {
            for (int64_t i = 0; i < T; i++) k.maskT[j * T + i] = mask[i * S + j] != 0;
            while (begin < T && !k.maskT[j * T + begin]) begin++;
            for (int64_t i = begin; i < T; i++) all &= k.maskT[j * T + i];
        }
        k.begin[j] = begin;
        k.dense[j] = all;
    }
    return k;
}

static void keys_seen_free(keys_seen k) {
    free(k.begin);
    free(k.dense);
    free(k.maskT);
}

/* Blocks of zT [R / T, S, T] (block: a batch entry's head, (blk % H)) -> wT: the softmax over keys j of
   t = n_h sgn(z) log1p(b_h |z|), LOWEST where mask[i, j] == 0, in three passes (t and each query's
   max; the exponentials and each query's sum; the normalisation). A query that sees no key gets 1/S on
   every key (masked_softmax's equal weights). The blocks are split among `threads` OpenMP threads:
   torch's own pool (the process's libgomp), so no thread waits on another pool's spinning workers. */
void ssa_forward(const float *z, float *w, const float *b, const float *n, const uint8_t *mask,
                 int64_t R, int64_t T, int64_t H, int64_t S, int threads) {
    const keys_seen k = keys_seen_by(mask, T, S);
#pragma omp parallel num_threads(threads)
    {
        float *mx = malloc(2 * T * sizeof(float)), *sm = mx + T;  /* per query: running max, sum */
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < R / T; blk++) {
            const float bh = b[blk % H], nh = n[blk % H];
            const float *zb = z + blk * S * T;
            float *wb = w + blk * S * T;
            for (int64_t i = 0; i < T; i++) {
                mx[i] = LOWEST;
                sm[i] = 0.0f;
            }
            for (int64_t j = 0; j < S; j++) {
                const float *zc = zb + j * T;
                float *wc = wb + j * T;
                const uint8_t *mc = k.dense[j] ? NULL : k.maskT + j * T;
                if (!mc) {
#pragma omp simd
                    for (int64_t i = k.begin[j]; i < T; i++) {
                        const float t = nh * copysignf(log1p_nonnegative(bh * fabsf(zc[i])), zc[i]);
                        wc[i] = t;
                        mx[i] = t > mx[i] ? t : mx[i];
                    }
                } else {
#pragma omp simd
                    for (int64_t i = k.begin[j]; i < T; i++) {
                        float t = nh * copysignf(log1p_nonnegative(bh * fabsf(zc[i])), zc[i]);
                        t = mc[i] ? t : LOWEST;
                        wc[i] = t;
                        mx[i] = t > mx[i] ? t : mx[i];
                    }
                }
            }
            for (int64_t j = 0; j < S; j++) {
                float *wc = wb + j * T;
#pragma omp simd
                for (int64_t i = k.begin[j]; i < T; i++) {
                    const float e = exp_nonpositive(wc[i] - mx[i]);
                    wc[i] = e;
                    sm[i] += e;
                }
            }
            for (int64_t i = 0; i < T; i++) sm[i] = 1.0f / sm[i];
            for (int64_t j = 0; j < S; j++) {
                float *wc = wb + j * T;
                memset(wc, 0, k.begin[j] * sizeof(float));
#pragma omp simd
                for (int64_t i = k.begin[j]; i < T; i++) wc[i] *= sm[i];
            }
            for (int64_t i = 0; i < T; i++)  /* a query that sees no key */
                if (mx[i] == LOWEST)
                    for (int64_t j = 0; j < S; j++) wb[j * T + i] = 1.0f / (float)S;
        }
        free(mx);
    }
    keys_seen_free(k);
}

/* Blocks of gT [R / T, S, T] (g_wᵀ in) <- g_zᵀ: g_z = b r, r = g_t n / (1 + b|z|), g_t = w (g_w - <g_w, w>)
   where key j is visible to query i, 0 elsewhere (t is the constant LOWEST there). Each query's sums
   Σ r z and Σ g_t sgn(z) log1p(b|z|) (over keys in order) go to rb and rn [R]; then gb[h] and gn[h] add
   them in query order (double): the same sums whatever the number of threads. */
void ssa_backward(float *g, const float *w, const float *z, const float *b, const float *n,
                  const uint8_t *mask, double *rb, double *rn, double *gb, double *gn, int64_t R, int64_t T,
                  int64_t H, int64_t S, int threads) {
    const keys_seen k = keys_seen_by(mask, T, S);
#pragma omp parallel num_threads(threads)
    {
        float *dot = malloc(3 * T * sizeof(float)), *ab = dot + T, *an = dot + 2 * T;
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < R / T; blk++) {
            const float bh = b[blk % H], nh = n[blk % H];
            float *gbk = g + blk * S * T;
            const float *wb = w + blk * S * T, *zb = z + blk * S * T;
            for (int64_t i = 0; i < T; i++) dot[i] = ab[i] = an[i] = 0.0f;
            for (int64_t j = 0; j < S; j++) {  /* <g_w, w> per query; w = 0 where masked */
                const float *gc = gbk + j * T, *wc = wb + j * T;
#pragma omp simd
                for (int64_t i = k.begin[j]; i < T; i++) dot[i] += gc[i] * wc[i];
            }
            for (int64_t j = 0; j < S; j++) {
                float *gc = gbk + j * T;
                const float *wc = wb + j * T, *zc = zb + j * T;
                const uint8_t *mc = k.dense[j] ? NULL : k.maskT + j * T;
                memset(gc, 0, k.begin[j] * sizeof(float));
                if (mc)  /* g_t = 0 where masked; then g_z, r and both sums are 0 there */
                    for (int64_t i = k.begin[j]; i < T; i++) gc[i] = mc[i] ? gc[i] - dot[i] : 0.0f;
                else
#pragma omp simd
                    for (int64_t i = k.begin[j]; i < T; i++) gc[i] -= dot[i];
#pragma omp simd
                for (int64_t i = k.begin[j]; i < T; i++) {
                    const float gt = wc[i] * gc[i];
                    const float a = bh * fabsf(zc[i]);
                    const float rr = gt * nh / (1.0f + a);
                    an[i] += gt * copysignf(log1p_nonnegative(a), zc[i]);
                    ab[i] += rr * zc[i];
                    gc[i] = rr * bh;
                }
            }
            for (int64_t i = 0; i < T; i++) {
                rb[blk * T + i] = ab[i];
                rn[blk * T + i] = an[i];
            }
        }
        free(dot);
    }
    for (int64_t blk = 0; blk < R / T; blk++)
        for (int64_t i = 0; i < T; i++) {
            gb[blk % H] += rb[blk * T + i];
            gn[blk % H] += rn[blk * T + i];
        }
    keys_seen_free(k);
}
"""

# -fno-trapping-math (as torch's own build): lets GCC vectorise the selects around a division or a product
# without AVX-512's masks; on AVX2 (-march=haswell, znver3) the loops stayed scalar, 4.3x slower
FLAGS = ["-O3", "-fno-trapping-math", "-fPIC", "-shared"]
# tried in turn, the first that builds kept: for this CPU on torch's OpenMP team; for this CPU on one thread
# (a compiler without OpenMP: Apple's clang); portable (one refusing -march=native)
VARIANTS = (["-march=native", "-fopenmp"], ["-march=native", "-fopenmp-simd"], ["-fopenmp-simd"], [])

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
            found |= {
                ln.strip() for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))
            }
    except OSError:
        pass
    return "\n".join(sorted(found))


def _build() -> ctypes.CDLL:
    cc = c_compiler()
    if cc is None:
        raise RuntimeError("no C compiler on PATH (CC, cc, gcc, clang)")
    errors = []
    for variant in VARIANTS:
        flags = [*FLAGS, *variant]
        key = hashlib.sha256("\0".join([SOURCE, cc, *flags, host_cpu()]).encode()).hexdigest()[:16]
        path = os.path.join(cache_dir(), f"ssa_cpu_{key}.so")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
                src, out = os.path.join(tmp, "ssa_cpu.c"), os.path.join(tmp, "ssa_cpu.so")
                with open(src, "w") as f:
                    f.write(SOURCE)
                run = subprocess.run([cc, *flags, "-o", out, src, "-lm"], capture_output=True, text=True)
                if run.returncode != 0:
                    errors.append(
                        f"{cc} {' '.join(variant)} failed: "
                        f"{(run.stderr.strip().splitlines() or [''])[0][:200]}"
                    )
                    continue
                os.replace(out, path)  # atomic: concurrent processes build the same file
        lib = ctypes.CDLL(path)
        p, i, n = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        lib.ssa_forward.argtypes = [p, p, p, p, p, i, i, i, i, n]
        lib.ssa_backward.argtypes = [p, p, p, p, p, p, p, p, p, p, i, i, i, i, n]
        lib.ssa_forward.restype = lib.ssa_backward.restype = None
        return lib
    raise RuntimeError("; ".join(errors))


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
    if mask is not None and (mask.dtype != torch.bool or mask.shape != (q.shape[-2], k.shape[-2])):
        return False
    return library() is not None


class SSAFusedAttention(torch.autograd.Function):
    """y = softmax_j(t(q·kᵀ)) @ v with t(z) = n·sgn(z)·log1p(b|z|) (see the module docstring): q, k, v
    [B, H, T|S, D] float32 (any strides), b and n [H|1, 1, 1] with b > 0 (1/√D folded into b), mask bool
    [T, S] (True = visible) or None -> [B, H, T, D]."""

    @staticmethod
    def forward(ctx, q, k, v, b, n, mask):
        lib = library()
        bsz, h, t, d = q.shape
        s = k.shape[2]
        q3, k3, v3 = (x.reshape(bsz * h, x.shape[2], d).contiguous() for x in (q, k, v))  # [B·H, T|S, D]
        z = torch.bmm(k3, q3.transpose(1, 2))  # [B·H, S, T]: the raw logits q·kᵀ, transposed
        w = torch.empty_like(z)
        bh, nh = (x.detach().reshape(-1).expand(h).contiguous() for x in (b, n))  # [H] float32
        m = None if mask is None else mask.contiguous()  # [T, S] bool: one byte, 0 or 1
        mp = None if m is None else m.data_ptr()
        lib.ssa_forward(
            z.data_ptr(), w.data_ptr(), bh.data_ptr(), nh.data_ptr(), mp,
            bsz * h * t, t, h, s, torch.get_num_threads(),
        )  # fmt: skip
        y = torch.bmm(w.transpose(1, 2), v3).view(bsz, h, t, d)  # w [B·H, S, T] transposed too
        ctx.save_for_backward(q3, k3, v3, z, w, bh, nh)
        ctx.mask = m
        ctx.shapes = b.shape, n.shape, (bsz, h)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy):
        q3, k3, v3, z, w, bh, nh = ctx.saved_tensors
        lib = library()
        b_shape, n_shape, (bsz, h) = ctx.shapes
        rows, s, t = w.shape  # z, w: [B·H, S, T] (transposed)
        d = q3.shape[-1]
        gy3 = gy.reshape(rows, t, d).contiguous()
        gw = torch.bmm(v3, gy3.transpose(1, 2))  # g_wᵀ [B·H, S, T], then g_zᵀ in place
        gv = torch.bmm(w, gy3)
        per_row = torch.empty(2, rows * t, dtype=torch.float64)  # each row's sums for b and n
        sums = torch.zeros(2, h, dtype=torch.float64)  # per head, added in row order
        lib.ssa_backward(
            gw.data_ptr(), w.data_ptr(), z.data_ptr(), bh.data_ptr(), nh.data_ptr(),
            None if ctx.mask is None else ctx.mask.data_ptr(), per_row[0].data_ptr(),
            per_row[1].data_ptr(), sums[0].data_ptr(), sums[1].data_ptr(), rows * t, t, h, s,
            torch.get_num_threads(),
        )  # fmt: skip
        gq = torch.bmm(gw.transpose(1, 2), k3).view(bsz, h, t, d)
        gk = torch.bmm(gw, q3).view(bsz, h, s, d)
        total = sums.to(torch.float32)
        gb = total[0].view(-1, 1, 1).sum_to_size(b_shape) if ctx.needs_input_grad[3] else None
        gn = total[1].view(-1, 1, 1).sum_to_size(n_shape) if ctx.needs_input_grad[4] else None
        return gq, gk, gv.view(bsz, h, s, d), gb, gn, None
