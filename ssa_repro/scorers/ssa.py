"""Scaled Signed Averaging (SSA), arXiv 2508.14685.

For the logits x_ij = q_i·k_j/√d_head of the keys j visible to query i:

    w_ij = (1 + b|x_ij|)^(sgn(x_ij)·n) / Σ_k (1 + b|x_ik|)^(sgn(x_ik)·n),    b > 0, n >= 1

computed in the equivalent, overflow-free softmax-of-log form

    w_i = softmax_j( t(x_ij) ),   t(x) = n·sgn(x)·log1p(b|x|)

(the literal power overflows float32 once n·log1p(b|x|) > 88.7; here the max is subtracted as in any
softmax). t is odd and C¹ with t'(x) = n·b / (1 + b|x|), so t'(0) = n·b: the sign is chosen with
``where(x >= 0)`` and t = s·n·log1p(b·s·x), which has that exact derivative at 0 (a form built from
torch.sign/abs would give 0 there). The mask is applied after the transform.

Parameters, per head (default; the paper's appendix B) or one pair per layer; each can train or stay
fixed at its initial value (fixed ones are buffers, still saved in checkpoints). ``param`` chooses how
the stored numbers (β, ν) map to (b, n):

    constrained (default)  b = exp(β), n = 1 + softplus(ν): b > 0 and n >= 1 whatever the optimiser does
    exp                    b = exp(β), n = exp(ν): the public nanoGPT fork's (n may fall below 1)
    raw                    b = β, n = ν: the public Triton kernel's (nothing keeps b > 0 or n >= 1)

Presets (conf/scorer/): ``ssa`` (learnable b and n per head), ``ssa_n1.5`` and ``ssa_n2`` (n fixed,
the paper's BabyBERTa runs), ``ssa_nanogpt`` (per layer, exp, b = e, n = e^0.4 ≈ 1.49, both learnable)
and ``ssa_triton`` (per layer, raw, n = 1.5 learnable, b = 0.8 fixed).

Training goes through one autograd node with a hand-written backward: on a CPU with b > 0 (float32, no
additive bias), :class:`~ssa_repro.scorers.ssa_cpu.SSAFusedAttention` (q, k, v -> output, its [B, H, T, S]
work in two C loops built at first use); else :class:`SSAFoldedWeights` where b > 0 (param=constrained
and exp: b folded into q), :class:`SSAWeights` for param=raw; inference on the
CPU (nothing requires a gradient) through :func:`blocked_inference` (query blocks, in place, the causal
upper triangle skipped, blocks spread over threads); the plain autograd path (``forward``) serves
attention maps and ``model.attn_impl=eager``. With b = 1/m, n = m, m -> ∞, SSA tends to softmax. Unlike softmax it is not shift-invariant.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn

from ssa_repro.core.enums import value_of
from ssa_repro.scorers import ssa_cpu
from ssa_repro.scorers.base import Scorer, ScorerConfig, at_least_float32, masked_softmax, param_or_buffer
from ssa_repro.scorers.registry import SCORERS


class SSAParam(str, Enum):
    constrained = "constrained"
    exp = "exp"
    raw = "raw"


@dataclass
class SSAConfig(ScorerConfig):
    name: str = "ssa"
    per_head: bool = True  # one (b, n) per head (paper appendix B), or one pair per layer
    b_init: float = 1.0
    n_init: float = 1.5  # with param=constrained: n_init > 1 when learn_n
    learn_b: bool = True
    learn_n: bool = True
    param: SSAParam = SSAParam.constrained


def ssa_transform(x: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """t(x) = n·sgn(x)·log1p(b|x|) with the exact derivative n·b at x = 0. b, n broadcast against x."""
    s = torch.where(x >= 0, 1.0, -1.0).to(x.dtype)
    return s * n * torch.log1p(b * (s * x))


class SSAWeights(torch.autograd.Function):
    """w = softmax_j(mask(t(x))), t(x) = n·sgn(x)·log1p(b|x|), as one autograd node (the fast path for
    param=raw, whose b may be ≤ 0; b > 0 takes :class:`SSAFoldedWeights`).

    Plain autograd through :func:`ssa_transform` + :func:`masked_softmax` keeps six [B, H, T, S]
    intermediates and runs about a dozen elementwise kernels backwards. Here the forward works in place
    and keeps x, t and w; the backward is ATen's fused softmax backward g_t = w ⊙ (g_w − ⟨g_w, w⟩_row),
    then, in place on g_t,

        ∂t/∂x = n·b / (1 + b|x|),   ∂t/∂b = n·x / (1 + b|x|),   ∂t/∂n = t / n  (= sgn(x)·log1p(b|x|))

    with the per-head sums for b and n taken as batched dot products (bmm of [1, T·S] by [T·S, 1]), so
    no [B, H, T, S] product is materialised for them. Masked entries have w = 0, hence g_t = 0, and add
    nothing. x is [B, H, T, S] float32/float64, b and n are [H|1, 1, 1], mask is bool [T, S] (True =
    visible) or None. Checked against the plain path and with gradcheck (tests/test_fast_paths.py).
    """

    @staticmethod
    def forward(ctx, x, b, n, mask):
        with torch.autocast(x.device.type, enabled=False):  # the maths stays in x's dtype
            # copysign before the factor n: with param=raw, n may be negative
            t = x.abs().mul_(b).log1p_().copysign_(x).mul_(n)
            w = torch.softmax(t if mask is None else t.masked_fill(~mask, float("-inf")), dim=-1)
        ctx.save_for_backward(x, b, n, t if ctx.needs_input_grad[2] else None, w)
        return w

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gw):
        x, b, n, t, w = ctx.saved_tensors
        gt = torch._softmax_backward_data(gw.contiguous(), w, -1, w.dtype)  # [B, H, T, S], fresh
        gb = gn = None
        if ctx.needs_input_grad[2]:
            gn = _head_dot(gt, t).sum_to_size(n.shape) / n
        gt.div_(x.abs().mul_(b).add_(1.0))  # g_t / (1 + b|x|)
        if ctx.needs_input_grad[1]:
            gb = _head_dot(gt, x).sum_to_size(b.shape) * n
        return gt.mul_(n * b), gb, gn, None


# Inference blocks (blocked_inference): 64 query rows at a time, and as many (batch, head) pairs as keep one
# block's [.., 64, S] logits within 2^20 float32 (4 MiB: with its second buffer, inside a core's share of
# the L3 cache). Measured on the 2-core CPU against blocks of 128 and 256 rows and of 1 to 64 MiB
# (docs/performance_log.md).
BLOCK_ROWS = 64
BLOCK_ELEMENTS = 2**20
# False: CPU inference goes through the training node as before (scripts/bench.py's "node" rows compare)
BLOCKED_INFERENCE = True


def blocked_inference(q, k, v, b, n, mask, causal: bool) -> torch.Tensor:
    """softmax_j(t(q_i·k_j)) @ v without autograd, block by block: q, k, v [B, H, T|S, D], b and n
    [H|1, 1, 1] with b > 0 and n > 0 (b carries 1/√D), ``mask`` bool broadcastable to [B, H, T, S]
    (True = visible) or None; ``causal``: the mask is the causal one (T = S), so query block [q0, q1)
    reads keys [0, q1) only and masks just the diagonal square (``mask`` is then not read).
    -> [B, H, T, D] in v's dtype.

    Since b > 0, b·|x| = |(b·q)·k| and sgn(x) = sgn((b·q)·k): b is folded into q, and for each block of
    queries and batch entries the logits x' = (b·q)·kᵀ are written into one buffer, turned into
    t = copysign(n·log1p(|x'|), x') in a second one (n > 0 keeps the sign), masked there, normalised
    back into the first, and multiplied by v into the output: the [B, H, T, S] tensor is never formed, and a block
    stays in cache through its passes. The same numbers as the plain path to float32 rounding
    (tests/test_fast_paths.py).

    Parallelism is over blocks, not inside each operation: with torch's N > 1 threads, N worker threads
    each run whole blocks on one thread, taking the next block as they finish. A block is 8 small
    operations, and inside-operation threading would make each of them a barrier of all threads, which
    is slow whenever the machine is shared (measured: 4.3x slower than the blocks run this way, under
    load, 2 cores; docs/performance_log.md).
    """
    dtype = v.dtype
    q, k, v = (at_least_float32(z) for z in (q, k, v))
    bsz, h, t, d = q.shape
    s = k.shape[2]
    qb = (q * b.to(q.dtype)).contiguous()  # [B, H, T, D]: b folded in (b > 0)
    kt = k.transpose(-2, -1).contiguous()  # [B, H, D, S]
    v = v.contiguous()
    n = n.to(q.dtype).view(1, -1, 1, 1)  # [1, H|1, 1, 1]
    out = torch.empty(bsz, h, t, d, dtype=q.dtype, device=q.device)
    hidden = None  # -inf where hidden, 0 where visible (added: faster than masked_fill_ with a broadcast)
    if mask is not None and not causal:
        hidden = hidden_bias(mask, float("-inf"), q.dtype).expand(bsz, h, t, s)  # blocks slice a view
    upper = torch.ones(BLOCK_ROWS, BLOCK_ROWS, dtype=torch.bool, device=q.device).triu_(1)
    upper = hidden_bias(~upper, float("-inf"), q.dtype)  # [64, 64]: -inf above the diagonal
    blocks = []  # (q0, q1, b0, b1): query rows [q0, q1) of batch entries [b0, b1)
    for q0 in range(0, t, BLOCK_ROWS):
        q1 = min(t, q0 + BLOCK_ROWS)
        chunk = max(1, BLOCK_ELEMENTS // (h * (q1 - q0) * (q1 if causal else s)))
        blocks += [(q0, q1, b0, min(bsz, b0 + chunk)) for b0 in range(0, bsz, chunk)]
    size = max(BLOCK_ELEMENTS, h * BLOCK_ROWS * s)

    def run(todo) -> None:  # the blocks ``todo`` yields, with this thread's two buffers
        buf_x, buf_t = (torch.empty(size, dtype=q.dtype, device=q.device) for _ in range(2))
        for q0, q1, b0, b1 in todo:
            shape = (b1 - b0, h, q1 - q0, q1 if causal else s)
            keys = shape[-1]
            x = buf_x[: math.prod(shape)].view(shape)
            torch.matmul(qb[b0:b1, :, q0:q1], kt[b0:b1, :, :, :keys], out=x)  # x' = (b·q)·kᵀ
            tx = torch.abs(x, out=buf_t[: x.numel()].view(shape)).log1p_().mul_(n).copysign_(x)
            if causal:  # keys beyond q1 were never computed; inside the block, j > i is hidden
                tx[..., q0:q1].add_(upper[: q1 - q0, : q1 - q0])
            elif hidden is not None:
                tx.add_(hidden[b0:b1, :, q0:q1])
            # into x's buffer (x is no longer needed): ATen's softmax in place, out=tx, took twice as
            # long on rows of 40-100 keys (docs/performance_log.md)
            w = torch.softmax(tx, dim=-1, out=x)
            torch.matmul(w, v[b0:b1, :, :keys], out=out[b0:b1, :, q0:q1])

    in_parallel(run, blocks)
    return out.to(dtype)


def in_parallel(run, items: list) -> None:
    """``run(iterator)`` on torch's N threads at once (N = ``torch.get_num_threads()``), each thread with
    one intra-op thread and pulling the next item from one shared iterator (a thread that the machine
    holds up leaves its share to the others); N = 1 or a single item: in this thread."""
    threads = torch.get_num_threads()
    if threads == 1 or len(items) == 1:
        run(iter(items))
        return
    source, lock, errors = iter(items), threading.Lock(), []
    # grad and inference modes are per thread: the workers take the caller's (inference tensors are
    # written in place only under inference_mode)
    modes = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def pull():
        while True:
            with lock:
                item = next(source, None)
            if item is None:
                return
            yield item

    def worker():
        torch.set_num_threads(1)  # this thread's operations run on it alone
        try:
            # inference_mode(False) switches gradients on: it goes first, the grad mode inside it
            with torch.inference_mode(modes[1]), torch.set_grad_enabled(modes[0]):
                run(pull())
        except BaseException as e:  # re-raised in the calling thread
            errors.append(e)

    pool = [threading.Thread(target=worker, name=f"ssa-block-{i}") for i in range(threads)]
    try:
        for th in pool:
            th.start()
        for th in pool:
            th.join()
    finally:
        # set_num_threads also sets the default new threads start with: give it back
        torch.set_num_threads(threads)
    if errors:
        raise errors[0]


LOWEST = float(torch.finfo(torch.float32).min)  # a masked logit: exp(LOWEST − max) = 0, and LOWEST·0 = 0


class SSAFoldedWeights(torch.autograd.Function):
    """The training node for b > 0 (param=constrained and exp): w = softmax_j(mask(t(z))) with
    t(z) = n·sgn(z)·log1p(|z|) of z = b·x, b already folded into the logits (z = (b·q)·kᵀ; b's gradient
    flows through that [B, H, T, D] product, no [B, H, T, S] pass for it). Since b > 0,
    t(z) = n·sgn(x)·log1p(b|x|), SSA's transform. Backward, in place on g_t (softmax's fused backward):

        ∂t/∂z = n / (1 + |z|),   ∂t/∂n = t / n

    with 1 + |z| kept from the forward (in place of z: the backward needs no |z| pass), so g_z is two
    passes. Masked logits are set to the lowest float32 rather than −inf: their weights are still 0
    and t·g_t is 0 there (−inf·0 would be NaN in the sum for n); a row with no visible key gets uniform
    weights instead of NaN. z is [B, H, T, S] float32/float64, n [H|1, 1, 1], mask bool [T, S] or None.
    Checked against the plain path and by gradcheck (tests/test_fast_paths.py).
    """

    @staticmethod
    def forward(ctx, z, n, mask):
        with torch.autocast(z.device.type, enabled=False):  # the maths stays in z's dtype
            u = z.abs()
            t = torch.log1p(u).copysign_(z).mul_(n)  # copysign before n: n's sign is its own
            u.add_(1.0)  # 1 + |z|, for the backward
            if mask is not None:  # added, not masked_fill_: 10x faster with a broadcast mask (CPU)
                t.add_(hidden_bias(mask, LOWEST, t.dtype))
            w = torch.softmax(t, dim=-1)
        ctx.save_for_backward(u, n, t if ctx.needs_input_grad[1] else None, w)
        return w

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gw):
        u, n, t, w = ctx.saved_tensors
        gt = torch._softmax_backward_data(gw.contiguous(), w, -1, w.dtype)  # [B, H, T, S], fresh
        gn = _head_dot(gt, t).sum_to_size(n.shape) / n if ctx.needs_input_grad[1] else None
        return gt.div_(u).mul_(n), gn, None


def hidden_bias(mask: torch.Tensor, value: float, dtype) -> torch.Tensor:
    """0 where ``mask`` (bool, True = visible) is True, ``value`` where it is False: mask's shape."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, value)


def _head_dot(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Σ_{t,s} a·c for each (batch, head): [B, H, T, S] x2 -> [B, H, 1, 1], without a temporary."""
    bsz, h, t, s = a.shape
    return torch.bmm(a.reshape(bsz * h, 1, t * s), c.reshape(bsz * h, t * s, 1)).view(bsz, h, 1, 1)


def inverse_softplus(y: float) -> float:
    """nu with softplus(nu) = y; y = 0 gives -inf (n fixed at exactly 1)."""
    if y == 0:
        return float("-inf")
    return y + math.log(-math.expm1(-y))  # log(exp(y) - 1), stable for large y


@SCORERS.register("ssa", schema=SSAConfig)
class SSA(Scorer):
    attention_tensors = 3  # the training node keeps three [B, H, T, S] tensors: 1 + |z| (or x), t and w
    # CPU training goes through ssa_cpu.SSAFusedAttention when its C loops are built: train.compile=auto
    # then trains eagerly (ssa_repro/training/compile_policy.py)
    fused_cpu_node = True

    def __init__(self, cfg, n_head: int):
        super().__init__(cfg, n_head)
        size = n_head if cfg.per_head else 1
        self.param = value_of(cfg.param)
        b0, n0 = float(cfg.b_init), float(cfg.n_init)
        if self.param == "constrained":
            beta, nu = math.log(b0), inverse_softplus(n0 - 1.0)
        elif self.param == "exp":
            beta, nu = math.log(b0), math.log(n0)
        else:
            beta, nu = b0, n0
        param_or_buffer(self, "beta", torch.full((size,), beta), cfg.learn_b)
        param_or_buffer(self, "nu", torch.full((size,), nu), cfg.learn_n)

    @classmethod
    def check_values(cls, cfg, n_head: int) -> list[str]:
        # b multiplies every logit inside log1p(b|x|), n multiplies that log (at most 88.7 in float32). Up
        # to 1e30, b|x| stays finite for logits up to |x| = 3e8 (the scorer tests go to 1e4) and n·log1p
        # for any finite b|x|; 1e40 is no float32 at all (inf: NaN logits at the first step).
        out = [
            f"scorer.{k}={v} must be <= 1e30" for k in ("b_init", "n_init") if (v := getattr(cfg, k)) > 1e30
        ]
        if not cfg.b_init > 0:
            out.append(f"scorer.b_init={cfg.b_init} must be > 0")
        param = value_of(cfg.param)
        if param != "constrained":
            if not cfg.n_init > 0:
                out.append(f"scorer.n_init={cfg.n_init} must be > 0")
        elif not cfg.n_init >= 1:
            out.append(f"scorer.n_init={cfg.n_init} must be >= 1 (param=constrained keeps n >= 1)")
        elif cfg.learn_n and cfg.n_init == 1:
            out.append(
                "scorer.n_init=1 with scorer.learn_n=true: n = 1 + softplus(nu) reaches 1 only in the "
                "limit; use n_init > 1 or learn_n=false"
            )
        return out

    @property
    def b(self) -> torch.Tensor:  # [H] or [1]
        return self.beta if self.param == "raw" else self.beta.exp()

    @property
    def n(self) -> torch.Tensor:  # [H] or [1]
        if self.param == "constrained":
            return 1.0 + nn.functional.softplus(self.nu)
        return self.nu.exp() if self.param == "exp" else self.nu

    def forward(self, logits, mask):
        x = at_least_float32(logits)  # [B, H, T, S]; bf16 logits would lose the small weights
        b = self.b.view(-1, 1, 1)  # [H|1, 1, 1] broadcasts over [B, H, T, S]
        n = self.n.view(-1, 1, 1)
        return masked_softmax(ssa_transform(x, b, n), mask).to(logits.dtype)

    def attend(self, q, k, v, mask, is_causal=False, need_weights=False, bias=None):
        if need_weights:  # the plain path (same numbers, tested), whose weights are the maps
            return super().attend(q, k, v, mask, is_causal, need_weights, bias)
        b = self.b.view(-1, 1, 1) * (1.0 / math.sqrt(q.shape[-1]))  # [H|1, 1, 1]
        if self._blocked(q, k, v, b, bias):
            n = self.n.view(-1, 1, 1)
            causal = is_causal and q.shape[-2] == k.shape[-2]  # the causal mask of self-attention
            return blocked_inference(q, k, v, b, n, mask, causal=causal), None
        # 1/√d folded into b: t(x/√d) with b equals t(x) with b/√d, which saves a [B, H, T, S] pass
        if self.param != "raw" and ssa_cpu.applies(q, k, v, mask, bias):  # CPU training: the C loops
            return ssa_cpu.SSAFusedAttention.apply(q, k, v, b, self.n.view(-1, 1, 1), mask), None
        if self.param != "raw":  # b > 0: folded into q as well, z = (b·q)·kᵀ (SSAFoldedWeights)
            z = at_least_float32((q * b.to(q.dtype)) @ k.transpose(-2, -1))  # [B, H, T, S]
            if bias is not None:  # b·(x + √d·β) with x the raw q·k
                z = z + bias.to(z.dtype) * (b.to(z.dtype) * math.sqrt(q.shape[-1]))
            w = SSAFoldedWeights.apply(z, self.n.view(-1, 1, 1).to(z.dtype), mask)
            return w.to(v.dtype) @ v, None
        x = at_least_float32(q @ k.transpose(-2, -1))  # [B, H, T, S] raw q·k
        if bias is not None:  # t(b·(x/√d + β)) = t((b/√d)·(x + √d·β))
            x = x + bias.to(x.dtype) * math.sqrt(q.shape[-1])
        w = SSAWeights.apply(x, b.to(x.dtype), self.n.view(-1, 1, 1).to(x.dtype), mask)
        return w.to(v.dtype) @ v, None

    def _blocked(self, q, k, v, b, bias) -> bool:
        """Whether this call takes :func:`blocked_inference`: on the CPU (CUDA has fused inference
        kernels), outside torch.compile (its threads and the sign test below would break the graph),
        with no gradient to compute, no additive bias, b > 0 and n > 0 (param=raw allows others: they
        keep the node)."""
        if not BLOCKED_INFERENCE or q.device.type != "cpu" or bias is not None:
            return False
        if torch.compiler.is_compiling():
            return False
        n = self.n
        if torch.is_grad_enabled() and any(z.requires_grad for z in (q, k, v, b, n)):
            return False
        return bool((b > 0).all()) and bool((n > 0).all())

    def score_mod(self):
        # b, n [H]: per-layer values repeated over the heads, so that per-head and per-layer SSA are one
        # compiled graph (the tensors are kernel inputs, indexed by the head); fresh tensors, not the
        # parameters themselves (param=raw), whose requires_grad would be a graph of its own at inference.
        # Gradients flow through the capture (computed once per forward)
        b, n = (z.expand(self.n_head).clone() for z in (self.b, self.n))

        def ssa_mod(x, batch, h, q_idx, kv_idx):  # t(x) = n_h·sgn(x)·log1p(b_h|x|), as in ssa_transform
            s = torch.where(x >= 0, 1.0, -1.0)
            return s * n[h] * torch.log1p(b[h] * (s * x))

        return ssa_mod

    def kernel_params(self):
        # [H] each: a per-layer pair is expanded over the heads (its gradient sums back through expand)
        return self.b.expand(self.n_head), self.n.expand(self.n_head)

    def stats(self):
        return {"b": self.b.detach(), "n": self.n.detach()}
