"""The fused SSA attention kernel (ssa_repro/kernels/) on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1``), against a float64 reference written here from the formula:

    y_i = Σ_j softmax_j(t(x_ij)) v_j over the visible keys, x = q·kᵀ/√d, t(x) = n·s·log1p(b·s·x), s = ±1

with its gradients by plain autograd in float64 (q, k, v, b, n). The interpreter runs the kernels'
own code (tiling, online softmax, masks, the per-head sums), blocks of 16 here, so shapes of a few
dozen tokens cross several blocks. The same checks on a GPU, larger: tests/test_cuda.py.

The interpreter is switched on per test (monkeypatch), and the kernels are jitted at their first call
in the mode then in force (ssa_repro/kernels/_ssa_triton.kernels), so it does not matter which test
module imported torch or triton first.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import subprocess
import sys

import pytest
import torch

from ssa_repro.kernels import KernelUnavailable, ssa_attention
from ssa_repro.models import build_model
from ssa_repro.training import validate
from tests.conftest import ROOT, make_cfg

pytest.importorskip("triton", reason="the kernels extra (pip install -e '.[kernels]') is not installed")
kmod = importlib.import_module(
    "ssa_repro.kernels.ssa_attention"
)  # the module (the package exports the function)


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def reference(q, k, v, b, n, causal, kpm):
    """The formula in float64 with plain autograd; a row with no visible key gives 0."""
    x = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, H, T, T]
    s = torch.where(x >= 0, 1.0, -1.0).to(x.dtype)  # +1 at 0, so autograd gives t'(0) = n·b
    t = s * n.view(-1, 1, 1) * torch.log1p(b.view(-1, 1, 1) * (s * x))
    return weights(t, causal, kpm) @ v


def weights(t, causal, kpm):
    """softmax_j(t) over the visible keys ([B, H, T, T]); a row with no visible key gives 0, not NaN."""
    T = t.shape[-1]
    vis = torch.ones(t.shape[0], 1, T, T, dtype=torch.bool, device=t.device)
    if causal:
        vis = vis & torch.ones(T, T, dtype=torch.bool, device=t.device).tril()
    if kpm is not None:
        vis = vis & kpm[:, None, None, :]
    w = torch.softmax(t.masked_fill(~vis, float("-inf")), -1)
    return torch.where(vis.any(-1, keepdim=True), w, 0.0)  # softmax of an all -inf row is NaN


def plain_in(dtype, q, k, v, b, n, causal, kpm):
    """The unfused path in ``dtype`` as training without the kernel computes it (scorers/ssa.py): q·kᵀ
    with ``dtype`` operands, logits, transform and softmax in float32, the weights rounded to ``dtype``
    before the value matmul. The yardstick for a 16-bit kernel (FlashAttention's test rule)."""
    x = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1])  # [B, H, T, T]
    s = torch.where(x >= 0, 1.0, -1.0)
    t = s * n.view(-1, 1, 1) * torch.log1p(b.view(-1, 1, 1) * (s * x))
    return weights(t, causal, kpm).to(dtype) @ v


def _run(fn, inputs, go, learn_bn):
    """fn's output and the gradients of its inputs (q, k, v, and b, n if learned) for output gradient go."""
    y = fn(*inputs)
    y.backward(go.to(y.dtype))
    return [y.detach()] + [z.grad for z in inputs[: 5 if learn_bn else 3]]


def compare(q, k, v, b, n, causal, kpm=None, dtype=torch.float32, learn_bn=True, tol=(2e-5, 1e-5)):
    """Kernel (inputs rounded to ``dtype``) against the float64 reference on the same rounded inputs:
    output and the gradients of q, k, v (and b, n if learned) for a random output gradient. On the
    inputs' device (CPU: the interpreter; CUDA: tests/test_cuda.py).

    float32: within ``tol`` (rtol, atol). bf16 / fp16: FlashAttention's rule, since the error of 16-bit
    matmuls grows with d and T: each tensor's largest error against float64 is at most twice that of the
    unfused 16-bit path (:func:`plain_in`) plus the rounding of the float64 value to ``dtype``."""
    q, k, v = (z.to(dtype).double() for z in (q, k, v))  # what the kernel sees
    ref_in = [z.clone().requires_grad_() for z in (q, k, v)]
    ref_in += [z.to(q.device, torch.float64).clone().requires_grad_(learn_bn) for z in (b, n)]
    go = torch.randn(q.shape[:3] + v.shape[3:], generator=torch.Generator().manual_seed(1)).to(q)
    refs = _run(lambda *a: reference(*a, causal, kpm), ref_in, go, learn_bn)

    def fresh():
        ins = [z.to(dtype).requires_grad_() for z in (q, k, v)]
        return ins + [z.to(q.device, torch.float32).clone().requires_grad_(learn_bn) for z in (b, n)]

    ker_in = fresh()
    got = _run(lambda *a: ssa_attention(*a, causal=causal, key_padding_mask=kpm), ker_in, go, learn_bn)
    y = got[0]
    assert y.dtype == dtype and y.shape == refs[0].shape
    if not learn_bn:
        assert ker_in[3].grad is None and ker_in[4].grad is None
    names = ["y"] + [f"d{c}" for c in "qkvbn"]
    if dtype == torch.float32:
        rtol, atol = tol
        for name, a, r in zip(names, got, refs):
            torch.testing.assert_close(a.double(), r, rtol=rtol, atol=atol, msg=name)
        return y
    plain = _run(lambda *a: plain_in(dtype, *a, causal, kpm), fresh(), go, learn_bn)
    for name, a, p, r in zip(names, got, plain, refs):
        err, bar = (a.double() - r).abs().max().item(), (p.double() - r).abs().max().item()
        rounding = (r.to(dtype).double() - r).abs().max().item()
        assert err <= 2 * bar + rounding, (
            f"{name}: kernel's largest error {err:.3g} > 2 × the unfused {dtype} path's {bar:.3g} + the "
            f"rounding {rounding:.3g} (largest |value| {r.abs().max().item():.3g})"
        )
    return y


def inputs(bsz, h, t, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(bsz, h, t, d, generator=g) for _ in range(3)]


# b and n per head at their extremes: a near-linear transform (b = 1e-3), a saturating one (b = 50),
# n = 1 (the constrained parametrisation's bound) and n = 3
B_EXT = torch.tensor([1e-3, 1.0, 50.0])
N_EXT = torch.tensor([1.0, 3.0, 1.5])


@pytest.mark.parametrize("causal", [True, False])
def test_ragged_padding_and_extreme_parameters(causal):
    """T = 37 (blocks of 16: a partial last block), head width 8 (padded to 16 inside), per-head b and
    n at their extremes, key padding: one sequence padded at both ends, so that under the causal mask
    its first rows see no key at all (their output is 0, their gradients 0)."""
    q, k, v = inputs(2, 3, 37, 8)
    kpm = torch.ones(2, 37, dtype=torch.bool)
    kpm[1, :3] = False
    kpm[1, 25:] = False
    y = compare(q, k, v, B_EXT, N_EXT, causal, kpm)
    if causal:
        assert torch.equal(y[1, :, :3], torch.zeros_like(y[1, :, :3]))


def test_single_token_and_non_power_of_two_width():
    """T = 1 (one key, weight 1: the output is v) and head width 24 (padded to 32)."""
    q, k, v = inputs(2, 2, 1, 24, seed=1)
    y = compare(q, k, v, torch.tensor([0.8, 2.0]), torch.tensor([1.5, 1.0]), causal=True)
    torch.testing.assert_close(y, v.float())


def test_zero_logits_use_the_slope_at_zero():
    """q = 0: every logit is exactly 0, the weights are uniform over the visible keys (output: the
    running mean of v under the causal mask), and dq needs t'(0) = n·b (a sgn-based form gives 0)."""
    _, k, v = inputs(1, 2, 20, 16, seed=2)
    q = torch.zeros_like(k)
    b, n = torch.tensor([0.5, 3.0]), torch.tensor([2.0, 1.0])
    y = compare(q, k, v, b, n, causal=True)
    running_mean = v.cumsum(2) / torch.arange(1, 21).view(1, 1, 20, 1)
    torch.testing.assert_close(y, running_mean, rtol=1e-5, atol=1e-6)


def test_fixed_b_and_n_get_no_gradient():
    q, k, v = inputs(1, 2, 18, 16, seed=3)
    compare(q, k, v, torch.tensor([0.8, 0.8]), torch.tensor([1.5, 2.0]), causal=True, learn_bn=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs(dtype):
    """bf16/fp16 q, k, v (the reference gets the same rounded values in float64): every tensor within
    FlashAttention's rule of the unfused 16-bit path (:func:`compare`). Head width 128, 64 tokens,
    causal, b and n at their extremes: the kernel that rounded the weights to bf16 in the
    forward's P·V (so that the backward's Δ = Σ dO·O disagreed with Σ_j p·dP) failed here (bf16: dn
    0.0755 against a bar of 0.0714), as it failed on an H200 at T = 300 (dn 0.4 against 0.25)."""
    g = torch.Generator().manual_seed(128)
    q, k, v = (torch.randn(2, 3, 64, 128, generator=g) for _ in range(3))
    kpm = torch.ones(2, 64, dtype=torch.bool)
    kpm[1] = False  # a sequence of padding alone: every row 0, every gradient 0
    compare(q, k, v, B_EXT, N_EXT, causal=True, kpm=kpm, dtype=dtype)


def ulp(r: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` numbers at ``r``: 2^(e − 1 − mantissa bits) for |r| in [2^(e−1), 2^e)
    (torch.frexp), at least the smallest subnormal's."""
    bits, tiny = {torch.float16: (10, 2.0**-24), torch.bfloat16: (7, 2.0**-133)}[dtype]
    _, e = torch.frexp(r)
    return torch.clamp(torch.ldexp(torch.ones_like(r), e - 1 - bits), min=tiny)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_y_dq_dk_are_float32_values_rounded_once(dtype):
    """With p (forward) and g = dS·t' (both backward kernels) split into two 16-bit numbers, the 16-bit
    kernel's y, dQ and dK are float32 sums rounded once to the input dtype: each within one ulp, at its
    largest value, of the float64 reference on the same rounded inputs and output gradient. (Not element
    by element: where a sum cancels, float32's error is larger than the small result's ulp.) Rounding g
    once to fp16 put dK at 1.4x FlashAttention's bound on an H200 (d = 8, T = 300). Here (measured through
    the interpreter) with the split: bf16 dQ 0.89, dK 0.49 ulp; fp16 0.26 and 0.25; without it: bf16 dQ
    1.06, fp16 dQ 0.43 and dK 0.41. The bounds, 1 ulp (bf16) and 0.35 ulp (fp16: its float32 sums are
    closer to the rounded value at T = 100), fail without the split in both dtypes. dV keeps P rounded to
    the dtype, FlashAttention's choice (1.17 ulp here in bf16)."""
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 3, 100, 16, generator=g).to(dtype) for _ in range(3))
    kpm = torch.ones(2, 100, dtype=torch.bool)
    kpm[1, :20], kpm[1, 90:] = False, False
    go = torch.randn(2, 3, 100, 16, generator=g).to(dtype)
    ref_in = [z.double().requires_grad_() for z in (q, k, v)] + [z.double() for z in (B_EXT, N_EXT)]
    refs = _run(lambda *a: reference(*a, True, kpm), ref_in, go.double(), False)
    ins = [z.clone().requires_grad_() for z in (q, k, v)] + [B_EXT, N_EXT]
    got = _run(lambda *a: ssa_attention(*a, causal=True, key_padding_mask=kpm), ins, go, False)
    bound = {torch.bfloat16: 1.0, torch.float16: 0.35}[dtype]
    for name, a, r in zip(["y", "dq", "dk"], got, refs):
        off = ((a.double() - r).abs().max() / ulp(r.abs().max(), dtype)).item()
        assert off <= bound, f"{name}: {off:.2f} ulp (at its largest value) from the float64 value"


def test_bad_input_is_refused_before_any_work(monkeypatch):
    q = torch.zeros(1, 2, 4, 8)
    b = n = torch.ones(2)
    with pytest.raises(ValueError, match=r"b must have shape \[H\] = \[2\]"):
        ssa_attention(q, q, q, torch.ones(3), n, causal=True)
    with pytest.raises(ValueError, match="one shape"):
        ssa_attention(q, q[:, :, :3], q, b, n, causal=True)
    with pytest.raises(ValueError, match="key_padding_mask must be bool"):
        ssa_attention(q, q, q, b, n, causal=True, key_padding_mask=torch.ones(1, 4))
    with pytest.raises(KernelUnavailable, match="head widths 1..128; got 129"):
        ssa_attention(*(torch.zeros(1, 2, 4, 129) for _ in range(3)), b, n, causal=True)
    with pytest.raises(KernelUnavailable, match="float32, bfloat16 or float16"):
        ssa_attention(*(torch.zeros(1, 2, 4, 8, dtype=torch.float64) for _ in range(3)), b, n, causal=True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(KernelUnavailable, match="runs on CUDA .*TRITON_INTERPRET=1"):
        ssa_attention(q, q, q, b, n, causal=True)


def test_without_triton_a_call_names_the_extra(monkeypatch):
    monkeypatch.setattr(kmod, "triton_available", lambda: False)
    with pytest.raises(
        KernelUnavailable, match=r"needs triton, which is not installed \(pip install -e '\.\[kernels\]'\)"
    ):
        ssa_attention(*(torch.zeros(1, 1, 2, 8) for _ in range(3)), torch.ones(1), torch.ones(1), causal=True)


@pytest.mark.slow  # a fresh process (imports torch: ~10 s on 2 busy cores)
def test_without_triton_the_package_imports_and_the_kernel_names_the_extra():
    """A process where ``import triton`` fails: the model imports, a call says how to install it."""
    code = (
        "import sys; sys.modules['triton'] = None\n"  # None in sys.modules: import raises ImportError
        "import torch\n"
        "import ssa_repro.models\n"
        "from ssa_repro.kernels import KernelUnavailable, ssa_attention\n"
        "q = torch.zeros(1, 1, 2, 8)\n"
        "try:\n"
        "    ssa_attention(q, q, q, torch.ones(1), torch.ones(1), causal=True)\n"
        "except KernelUnavailable as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "needs triton, which is not installed (pip install -e '.[kernels]')" in out.stdout


@pytest.mark.parametrize("name", ["ssa", "ssa_nanogpt", "ssa_n2"])
def test_model_triton_equals_eager(name):
    """The tiny model (head width 8) with model.attn_impl=triton and =eager, the same weights, b and n
    moved off their initial values: outputs and every parameter gradient agree. ssa: b, n per head;
    ssa_nanogpt: one pair per layer (expanded over the heads for the kernel), exp parametrisation;
    ssa_n2: n fixed (a buffer: the kernel is asked for db only)."""
    cfg = make_cfg(f"scorer={name}")
    cfg.model.attn_impl = "triton"
    torch.manual_seed(0)
    fused = build_model(cfg.model, cfg.scorer)
    with torch.no_grad():
        for key, p in fused.named_parameters():
            if key.endswith(("beta", "nu")):
                p.add_(torch.randn_like(p) * 0.5)
    cfg.model.attn_impl = "eager"
    plain = build_model(cfg.model, cfg.scorer)
    plain.load_state_dict(fused.state_dict())
    tokens = torch.randn(3, 21, 1, generator=torch.Generator().manual_seed(0))
    results = []
    for m in (fused, plain):
        out = m(tokens)
        out.square().mean().backward()
        results.append([out.detach()] + [p.grad for p in m.parameters()])
    names = [n for n, _ in plain.named_parameters()]
    assert any(n.endswith("beta") for n in names) and any(n.endswith("nu") for n in names) == (
        name != "ssa_n2"
    )
    for key, a, r in zip(["output", *names], *results):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6, msg=key)


def test_auto_takes_the_kernel_for_training_and_leaves_it_after_a_failure(monkeypatch, caplog):
    """model.attn_impl=auto as on a GPU with the kernel switched on for auto (``kernel_on_gpu`` made
    true, ``AUTO_TRITON`` on): training calls the kernel, with the plain path's
    numbers; inference does not (it keeps FlexAttention / the plain path); a kernel that fails is warned
    about once and the autograd node serves that call and every later one."""
    from ssa_repro.models import attention

    calls = []
    real = attention.ssa_attention
    monkeypatch.setattr(attention, "AUTO_TRITON", True)
    monkeypatch.setattr(attention, "kernel_on_gpu", lambda q: True)
    monkeypatch.setattr(attention, "_auto_failed", [])
    monkeypatch.setattr(attention, "ssa_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    cfg = make_cfg("scorer=ssa")  # attn_impl=auto, one layer
    torch.manual_seed(0)
    auto = build_model(cfg.model, cfg.scorer)
    cfg.model.attn_impl = "eager"
    plain = build_model(cfg.model, cfg.scorer)
    plain.load_state_dict(auto.state_dict())
    tokens = torch.randn(3, 9, 1, generator=torch.Generator().manual_seed(0))
    ref = plain(tokens).detach()
    torch.testing.assert_close(auto(tokens), ref, rtol=1e-4, atol=1e-6)
    assert len(calls) == 1
    with torch.no_grad():
        auto(tokens)
    assert len(calls) == 1

    def broken(*a, **kw):
        raise RuntimeError("out of resources: shared memory\nmore")

    monkeypatch.setattr(attention, "ssa_attention", broken)
    with caplog.at_level("WARNING", logger="ssa_repro.train"):
        for _ in range(2):
            torch.testing.assert_close(auto(tokens), ref, rtol=1e-4, atol=1e-6)
    assert attention._auto_failed == ["RuntimeError: out of resources: shared memory"]
    assert sum("fused SSA kernel failed" in r.getMessage() for r in caplog.records) == 1


def test_auto_leaves_the_kernel_alone_under_vmap(monkeypatch):
    """A seed ensemble runs the model under torch.func.vmap, where the kernel (an autograd.Function
    without a vmap rule) cannot run: auto does not try it there (so it neither fails nor switches itself
    off for the process, ``_auto_failed``)."""
    from torch.func import functional_call, stack_module_state, vmap

    from ssa_repro.models import attention
    from ssa_repro.scorers import ssa

    calls = []
    monkeypatch.setattr(attention, "AUTO_TRITON", True)
    monkeypatch.setattr(attention, "kernel_on_gpu", lambda q: True)
    monkeypatch.setattr(attention, "_auto_failed", [])
    monkeypatch.setattr(attention, "ssa_attention", lambda *a, **kw: calls.append(1) or a[0] * 0)
    cfg = make_cfg("scorer=ssa", "model.attn_impl=eager")
    models = [build_model(cfg.model, cfg.scorer) for _ in range(2)]
    params, buffers = stack_module_state(models)
    for m in models:  # the skeleton: auto
        for mod in m.modules():
            if hasattr(mod, "impl"):
                mod.impl = "auto"
    monkeypatch.setattr(ssa, "BLOCKED_INFERENCE", False)  # the CPU's inference blocks branch on values
    tokens = torch.randn(3, 9, 1, generator=torch.Generator().manual_seed(0))
    # the node has no vmap rule either: it raises, and an ensemble's probe then trains eager
    # (training/ensemble.py); the stand-in kernel would have run
    with pytest.raises(RuntimeError, match="vmap"):
        vmap(lambda p, b: functional_call(models[0], (p, b), (tokens,)))(params, buffers)
    assert calls == [] and attention._auto_failed == []


def test_auto_leaves_the_kernel_to_the_node_under_torch_compile(monkeypatch):
    """Inside torch.compile (train.compile) auto trains through the autograd node, which inductor fuses,
    not the kernel (a graph break per layer): no kernel call while compiling, same numbers as eager."""
    from ssa_repro.models import attention

    calls = []
    monkeypatch.setattr(attention, "AUTO_TRITON", True)
    monkeypatch.setattr(attention, "kernel_on_gpu", lambda q: True)
    monkeypatch.setattr(attention, "_auto_failed", [])
    monkeypatch.setattr(attention, "ssa_attention", lambda *a, **kw: calls.append(1) or a[0] * 0)
    cfg = make_cfg("scorer=ssa")
    torch.manual_seed(0)
    auto = build_model(cfg.model, cfg.scorer)
    tokens = torch.randn(3, 9, 1, generator=torch.Generator().manual_seed(0))
    auto(tokens).sum().backward()
    assert len(calls) == 1  # eager: the (stand-in) kernel
    cfg.model.attn_impl = "eager"
    plain = build_model(cfg.model, cfg.scorer)
    plain.load_state_dict(auto.state_dict())
    torch._dynamo.reset()
    out = torch.compile(auto, backend="eager")(tokens)
    assert len(calls) == 1  # compiled: the node
    torch.testing.assert_close(out, plain(tokens), rtol=1e-5, atol=1e-6)


def test_validation_of_attn_impl_triton(monkeypatch):
    def problems(*overrides):
        found = validate.problems(make_cfg("model.attn_impl=triton", "device=cpu", *overrides))
        return [p for p in found if "attn_impl=triton" in p]

    assert problems("scorer=ssa") == []  # CPU under the interpreter (the fixture sets it)
    assert problems("scorer=ssa_nanogpt", "model.pos=rope") == []
    (msg,) = problems("scorer=softmax")
    assert "scorer.name='softmax' is not SSA (allowed: ssa)" in msg
    (msg,) = problems("scorer=ssa", "model.pos=alibi")
    assert "model.pos=alibi adds one" in msg
    (msg,) = problems("scorer=ssa", "model.n_embd=258", "model.n_head=2")
    assert "head widths 1..128; model.n_embd / model.n_head = 129" in msg
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    (msg,) = problems("scorer=ssa")
    assert "needs CUDA (device=cpu); on CPU only under TRITON_INTERPRET=1" in msg
    monkeypatch.setattr(kmod, "triton_available", lambda: False)
    monkeypatch.setattr(validate, "triton_available", lambda: False)
    (msg,) = problems("scorer=ssa")
    assert "needs triton, which is not installed: pip install -e '.[kernels]'" in msg


COMPILE_FOR_SM90 = """
import inspect
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ssa_repro.kernels import _ssa_triton as K
from ssa_repro.kernels import ssa_attention as _package  # noqa: F401  (the module, via sys.modules)
import sys
S = sys.modules["ssa_repro.kernels.ssa_attention"]

for dtype, precision in (("fp32", "ieee"), ("bf16", "tf32")):  # as _precision() chooses for each
    consts = dict(CAUSAL=True, HAS_KPM=True, NEED_BN=True, PRECISION=precision, UPCAST=False)
    consts.update(BLOCK_M=S.GPU_BLOCK_M, BLOCK_N=S.GPU_BLOCK_N, BLOCK_D=32)  # the GPU tiles; d 32
    types = {a: f"*{dtype}" for a in "Q K V DO DQ DK DV".split()}  # the input dtype
    types.update({a: "*fp32" for a in "OUT B N LSE DELTA DBP DNP".split()})  # float32 (O too)
    types.update(KPM="*u8", sm_scale="fp32")  # the rest: int32 sizes and strides
    for raw in (K._fwd, K._bwd_dkv, K._bwd_dq):
        names = list(inspect.signature(raw).parameters)
        signature = {a: "constexpr" if a in consts else types.get(a, "i32") for a in names}
        consts_here = {(names.index(a),): v for a, v in consts.items() if a in names}
        src = ASTSource(fn=triton.jit(raw), signature=signature, constexprs=consts_here)
        options = {"num_warps": 4, "num_stages": S.GPU_STAGES}
        out = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        print(raw.__name__, dtype, len(out.asm["cubin"]), "bytes of cubin")
"""


@pytest.mark.slow  # a fresh process and three compiles through ptxas: about 30 s
def test_kernels_compile_for_an_h100_without_a_gpu(monkeypatch):
    """The interpreter runs the kernels' Python; this compiles them as a GPU would (Triton → PTX → cubin
    for sm_90 with triton's bundled ptxas), so a construct the compiler rejects fails here, not first on
    a lent GPU. The training configuration: fp32 (IEEE matmuls) and bf16 (the hi + lo weights), causal,
    key padding, b and n learned.
    In its own process: triton's library functions are compiled-mode ones only if triton was imported
    without TRITON_INTERPRET."""
    if importlib.util.find_spec("triton.backends.nvidia") is None:
        pytest.skip("this triton has no NVIDIA backend")
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9's default, said (silences a warning)
    out = subprocess.run([sys.executable, "-c", COMPILE_FOR_SM90], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    kernels = [line.split()[:2] for line in out.stdout.splitlines()]
    assert kernels == [[k, t] for t in ("fp32", "bf16") for k in ("_fwd", "_bwd_dkv", "_bwd_dq")]


@pytest.mark.slow  # two tiny trainings with their end-of-run evaluations, one through the interpreter
def test_training_with_attn_impl_triton_equals_eager(tmp_path):
    """A run end to end (validation, 6 steps, checkpoints, the quick evaluation: training and inference
    through the kernel) with model.attn_impl=triton and =eager: the same losses step by step and the
    same evaluation figures."""
    from ssa_repro.jobs.train_job import run_job
    from ssa_repro.training.metrics_log import read_metrics

    losses, quick = {}, {}
    for impl in ("triton", "eager"):
        summary = run_job(make_cfg("scorer=ssa", f"model.attn_impl={impl}", "device=cpu"), tmp_path / impl)
        assert summary["steps"] == 6
        rows = read_metrics(tmp_path / impl / "metrics.jsonl")
        losses[impl] = torch.tensor([r["loss"] for r in rows if "loss" in r], dtype=torch.float64)
        q = summary["evaluations"]["quick"]
        quick[impl] = torch.tensor(
            [q["in_distribution"]["model"], q["mean"], q["worst"]], dtype=torch.float64
        )
    assert len(losses["triton"]) >= 3
    torch.testing.assert_close(losses["triton"], losses["eager"], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(quick["triton"], quick["eager"], rtol=1e-4, atol=1e-6)


def test_the_memory_estimate_keeps_no_attention_tensor_for_the_kernel():
    """attn_impl=triton keeps only the output and the row log-sum-exp, never [B, H, T, T] scores: the
    memory estimate counts no attention tensor for it, against SSA's three on its autograd node."""
    from ssa_repro.training import memory

    node = memory.estimate(make_cfg("scorer=ssa", "model.attn_impl=auto"))
    fused = memory.estimate(make_cfg("scorer=ssa", "model.attn_impl=triton"))
    assert node["attention_bytes"] > 0 and fused["attention_bytes"] == 0
    assert node["total_bytes"] - fused["total_bytes"] == node["attention_bytes"]
