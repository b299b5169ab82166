"""Attention scorers checked against independent references (numpy / float64 literal formulas).

The generic tests run over ``SCORERS.names()``, so a newly registered scorer is tested automatically;
its config is built from its registered schema dataclass. They go through ``Scorer.weights(q, k, mask)``
(the entry point the attention module uses through ``attend``), so scorers that need q and k are covered
as well as those that transform logits. SSA-specific tests follow, then the scorers added after the
paper (sigmoid, softpick, stickbreaking, cog, softmax_sink, relu_len, diff), each checked against an
independent float64 numpy reference written from its paper's formula (loops or plain numpy, never the
package's helpers) with a causal mask, a padding mask and no mask, and the properties each definition
implies.

Modules hold float32 parameters: the tests cast them to float64 (``.double()``) and set parameters
exactly, so most comparisons are at float64 precision.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.models import build_model
from ssa_repro.scorers import SCORERS, Scorer, build_scorer
from ssa_repro.scorers.ssa import SSA, SSAConfig, ssa_transform
from tests.conftest import make_cfg

H = 3  # heads in most tests
RECENT = ["sigmoid", "softpick", "stickbreaking", "cog", "softmax_sink", "relu_len", "diff"]


# ----------------------------------------------------------------------------- helpers
def scorer_cfg(name: str, **overrides):
    cfg = OmegaConf.structured(SCORERS.schemas[name])
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def make(name: str, n_head: int = H, layer: int = 0, d: int = 8, **overrides):
    # n_embd = d · heads: the layer width for scorers that read the layer input (gated) or have per-head
    # maps of the query (asentmax: d must be the head width of the q passed in)
    return build_scorer(scorer_cfg(name, **overrides), n_head, layer=layer, n_embd=d * n_head)


def causal(t: int, s: int | None = None) -> torch.Tensor:
    s = t if s is None else s
    return torch.ones(t, s, dtype=torch.bool).tril()


def inv_softplus64(y: float) -> float:
    """nu with log(1 + e^nu) = y, in float64 (independent of the package's inverse_softplus)."""
    return float(np.log(np.expm1(y)))


def set_ssa(s: SSA, b, n) -> None:
    """Set the SSA module's beta, nu so that b = exp(beta), n = 1 + softplus(nu) take the given values."""
    b = np.broadcast_to(np.asarray(b, dtype=np.float64), s.beta.shape)
    n = np.broadcast_to(np.asarray(n, dtype=np.float64), s.nu.shape)
    with torch.no_grad():
        s.beta.copy_(torch.from_numpy(np.log(b).copy()))
        s.nu.copy_(torch.tensor([inv_softplus64(v - 1.0) for v in n]))


def ssa_literal_np(x, b, n, mask):
    """The paper's ratio, literally, in float64: (1+b|x|)^(sgn(x)·n) over visible keys / row sum."""
    x = np.asarray(x, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 1, 1)
    n = np.asarray(n, dtype=np.float64).reshape(-1, 1, 1)
    p = np.power(1.0 + b * np.abs(x), np.sign(x) * n)
    p = np.where(np.asarray(mask), p, 0.0)
    return p / p.sum(-1, keepdims=True)


def softmax_np(x, mask):
    x = np.where(np.asarray(mask), np.asarray(x, dtype=np.float64), -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def ref_masked_softmax64(z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A masked softmax that stays in the input dtype (float64), written here for gradchecks."""
    return torch.softmax(z.masked_fill(~mask, float("-inf")), dim=-1)


def qk_with_zero_logits(dtype, t=5, d=4, seed=0):
    """q [1, H, t, d], k [1, H, t, d]; query 2 and key 1 are zero vectors, so the logits have an
    exact-zero row and column."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, t, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, H, t, d, generator=g, dtype=torch.float64)
    q[:, :, 2] = 0.0
    k[:, :, 1] = 0.0
    return q.to(dtype), k.to(dtype)


def padded(b: int, t: int, seed: int) -> torch.Tensor:
    """Causal & a random [B, 1, T, T] padding pattern; the diagonal stays visible."""
    g = torch.Generator().manual_seed(seed)
    m = (torch.rand(b, 1, t, t, generator=g) < 0.6) | torch.eye(t, dtype=torch.bool)
    return m & causal(t)


def randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def np_(t) -> np.ndarray:
    return t.detach().double().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, dtype=np.float64)


def visible(mask, shape) -> np.ndarray:
    return np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(np_(mask) > 0, shape)


def close(actual, expected, atol=1e-12, rtol=1e-12, msg=""):
    np.testing.assert_allclose(np_(actual), np_(expected), atol=atol, rtol=rtol, err_msg=msg)


def set_param(tensor: torch.Tensor, values) -> None:
    with torch.no_grad():
        tensor.copy_(torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=tensor.dtype))


def sigm(z):
    return 1.0 / (1.0 + np.exp(-z))


MASKS = {
    "causal": lambda b, t: causal(t),
    "padded": lambda b, t: padded(b, t, seed=99),
    "none": lambda b, t: None,
}


ALL = SCORERS.names()


def assert_rows_normalised(s, w, atol):
    """Rows sum to 1 where the scorer's definition says so (``rows_sum_to_one``); a scorer that may
    give all-zero rows (``zero_rows_possible``) may instead have exactly-zero rows."""
    if not s.rows_sum_to_one:
        return
    ok = (w.double().sum(-1) - 1).abs() <= atol
    if s.zero_rows_possible:
        ok |= (w == 0).all(-1)
    assert ok.all(), w.double().sum(-1)


def gradcheck_inputs(s, dtype=torch.float64):
    """Exact-zero logits for smooth scorers; scorers with relu / min / max kinks at 0 get generic
    inputs (a finite difference across a kink is not a derivative)."""
    if s.smooth:
        return qk_with_zero_logits(dtype)
    g = torch.Generator().manual_seed(11)
    return (torch.randn(1, H, 5, 4, generator=g, dtype=dtype) for _ in range(2))


# ----------------------------------------------------------------------------- generic properties
def test_registry_has_the_paper_scorers_with_schemas():
    assert {
        "softmax",
        "ssa",
        "temperature",
        "sparsemax",
        "entmax15",
        "entmax_alpha",
        "ssmax",
        "sa_softmax",
        "cosformer",
        "hybrid",
        "softplus",
    } <= set(ALL)
    assert all(name in SCORERS.schemas for name in ALL)


@pytest.mark.parametrize("name", ALL)
def test_schema_default_name_is_the_registered_name(name):
    # the generic tests below build each scorer from its schema's defaults: they must build that scorer
    assert SCORERS.schemas[name]().name == name
    assert type(make(name)) is SCORERS.get(name)


@pytest.mark.parametrize("name", ALL)
def test_masked_weights_zero_and_rows_sum_to_one(name):
    g = torch.Generator().manual_seed(1)
    t, d = 7, 8
    q = torch.randn(2, H, t, d, generator=g) * 2
    k = torch.randn(2, H, t, d, generator=g) * 2
    w = make(name).weights(q, k, causal(t))
    assert w.shape == (2, H, t, t)
    upper = torch.ones(t, t, dtype=torch.bool).triu(1)
    assert (w[..., upper] == 0).all(), "masked (future) keys must get weight exactly 0"
    s = make(name)
    if not s.signed:  # signed scorers (cog, diff) may give negative weights by definition
        assert (w[..., ~upper] >= 0).all()
    assert_rows_normalised(s, w, 1e-6)
    if s.rows_sum_to_one and not s.zero_rows_possible:  # the first query sees only itself
        torch.testing.assert_close(w[..., 0, 0], torch.ones(2, H))


@pytest.mark.parametrize("name", ALL)
def test_float64_rows_sum_to_one_at_float64_precision(name):
    q, k = qk_with_zero_logits(torch.float64, t=9)
    s = make(name, d=q.shape[-1])
    w = s.weights(q, k, causal(9))
    assert w.dtype == torch.float64
    assert_rows_normalised(s, w, 1e-12)


@pytest.mark.parametrize("name", ALL)
def test_finite_forward_backward_for_huge_logits_float32(name):
    # d = 1 so the logits are exactly q_i·k_j: products of ±100 -> logits up to ±1e4.
    t = 8
    g = torch.Generator().manual_seed(2)
    q = (torch.randint(-100, 101, (2, H, t, 1), generator=g)).float()
    k = (torch.randint(0, 2, (2, H, t, 1), generator=g) * 200 - 100).float()
    q[0, 0, :, 0] = torch.tensor([100.0, -100.0, 0.0, 100.0, -100.0, 50.0, -50.0, 1.0])
    logits = q * k.transpose(-2, -1)
    assert logits.abs().max() == 1e4 and (logits == 1e4).any() and (logits == -1e4).any()
    s = make(name, d=1)
    if s.splits_head_dim:  # diff scores two halves of the head: each half gets the same ±1e4 logits
        q, k = torch.cat([q, q], -1), torch.cat([k, k], -1)
    q.requires_grad_(True)
    k.requires_grad_(True)
    w = s.weights(q, k, causal(t))
    assert torch.isfinite(w).all()
    assert_rows_normalised(s, w, 1e-5)
    r = torch.randn(w.shape, generator=g)
    (w * r).sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    for pname, p in s.named_parameters():
        if pname in s.output_params:  # not used by the weights
            continue
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname


@pytest.mark.parametrize("name", ALL)
def test_finite_forward_in_bf16(name):
    t = 8
    g = torch.Generator().manual_seed(3)
    q = (torch.randn(2, H, t, 16, generator=g) * 30).bfloat16()
    k = (torch.randn(2, H, t, 16, generator=g) * 30).bfloat16()
    s = make(name, d=16)
    w = s.weights(q, k, causal(t))
    assert w.dtype == torch.bfloat16
    assert torch.isfinite(w).all()
    assert (w[..., torch.ones(t, t, dtype=torch.bool).triu(1)] == 0).all()
    assert_rows_normalised(s, w, 2e-2)


@pytest.mark.parametrize("name", ALL)
def test_gradcheck_float64_with_exact_zero_logits(name):
    s = make(name, d=4)  # gradcheck_inputs: head width 4
    q, k = gradcheck_inputs(s)
    q.requires_grad_(True)
    k.requires_grad_(True)
    mask = causal(5)
    assert torch.autograd.gradcheck(lambda a, c: s.weights(a, c, mask), (q, k))


@pytest.mark.parametrize("name", ALL)
def test_gradcheck_tolerant_of_float32_internals_with_exact_zero_logits(name):
    """gradcheck with a coarser step and tolerance; still catches a wrong derivative at x = 0, e.g. a
    sign/abs form whose gradient there is 0."""
    s = make(name, d=4)  # gradcheck_inputs: head width 4
    q, k = gradcheck_inputs(s)
    q.requires_grad_(True)
    k.requires_grad_(True)
    mask = causal(5)
    assert torch.autograd.gradcheck(
        lambda a, c: s.weights(a, c, mask), (q, k), eps=1e-4, atol=1e-3, rtol=1e-2
    )


@pytest.mark.parametrize("name", ALL)
def test_learnable_parameters_get_nonzero_gradients(name):
    s = make(name)
    params = dict(s.named_parameters())
    if not params:
        pytest.skip(f"{name} has no learnable parameters")
    g = torch.Generator().manual_seed(4)
    t = 6
    q = torch.randn(2, H, t, 8, generator=g)
    k = torch.randn(2, H, t, 8, generator=g)
    w = s.weights(q, k, causal(t))
    # the output after the scorer's own step on it (gated attention's gate reads the layer input x)
    y = s.output(w @ torch.randn(2, H, t, 8, generator=g), torch.randn(2, t, 8 * H, generator=g))
    (y * torch.randn(y.shape, generator=g)).sum().backward()
    for pname, p in params.items():
        assert p.grad is not None, pname
        assert (p.grad != 0).all(), f"{pname} has zero gradient entries: {p.grad}"


@pytest.mark.parametrize("name", ALL)
def test_attend_need_weights_returns_weights_used_and_fast_path_matches(name):
    g = torch.Generator().manual_seed(5)
    t, d = 9, 8
    q, k, v = (torch.randn(2, H, t, d, generator=g) for _ in range(3))
    s = make(name)
    mask = causal(t)
    out_w, w = s.attend(q, k, v, mask, is_causal=True, need_weights=True)
    assert w is not None and w.shape == (2, H, t, t)
    # the output is the scorer's combination of exactly these weights: w @ v (diff: normalised per head)
    torch.testing.assert_close(out_w, s.combine(w, v), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(w, s.weights(q, k, mask), atol=1e-7, rtol=0)
    # the fast path (softmax: SDPA with is_causal / attn_mask) computes the same thing
    out_fast, none = s.attend(q, k, v, mask, is_causal=True, need_weights=False)
    assert none is None
    torch.testing.assert_close(out_fast, out_w, atol=1e-5, rtol=1e-5)
    out_mask, _ = s.attend(q, k, v, mask, is_causal=False, need_weights=False)
    torch.testing.assert_close(out_mask, out_w, atol=1e-5, rtol=1e-5)
    # no mask at all
    out_full, w_full = s.attend(q, k, v, None, is_causal=False, need_weights=True)
    torch.testing.assert_close(out_full, s.combine(w_full, v), atol=1e-6, rtol=1e-6)
    out_full_fast, _ = s.attend(q, k, v, None, is_causal=False, need_weights=False)
    torch.testing.assert_close(out_full_fast, out_full, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- softmax
def test_softmax_matches_numpy_reference_and_is_shift_invariant():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, H, 6, 6, generator=g) * 3
    mask = causal(6)
    s = make("softmax")
    w = s(x, mask)
    np.testing.assert_allclose(w.numpy(), softmax_np(x.numpy(), mask.numpy()), atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(s(x + 7.5, mask), w, atol=1e-6, rtol=1e-6)


# ----------------------------------------------------------------------------- SSA
def test_ssa_parametrisation_b_exp_beta_n_one_plus_softplus_nu():
    s = make("ssa")
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        s.beta.copy_(torch.randn(H, generator=g))
        s.nu.copy_(torch.randn(H, generator=g) * 2)
    beta, nu = s.beta.detach().double().numpy(), s.nu.detach().double().numpy()
    np.testing.assert_allclose(s.b.detach().numpy(), np.exp(beta), rtol=1e-6)
    np.testing.assert_allclose(s.n.detach().numpy(), 1.0 + np.log1p(np.exp(nu)), rtol=1e-6)


@pytest.mark.parametrize("per_head", [True, False])
def test_ssa_matches_literal_ratio_formula(per_head):
    s = make("ssa", per_head=per_head)
    if per_head:
        b, n = [0.5, 1.0, math.e], [1.2, 1.5, 3.0]
    else:
        b, n = [0.8], [1.5]
    set_ssa(s, b, n)
    assert s.beta.shape == (H if per_head else 1,)
    np.testing.assert_allclose(s.b.detach().numpy(), b, rtol=1e-6)
    np.testing.assert_allclose(s.n.detach().numpy(), n, rtol=1e-6)

    g = torch.Generator().manual_seed(8)
    t = 7
    x = torch.randn(2, H, t, t, generator=g) * 3
    x[0, 0, 3, :2] = 0.0  # exact zeros among visible logits
    mask = causal(t)
    ref = ssa_literal_np(x.numpy(), np.broadcast_to(b, (H,)), np.broadcast_to(n, (H,)), mask.numpy())
    w = s(x, mask)
    np.testing.assert_allclose(w.detach().double().numpy(), ref, atol=1e-6, rtol=1e-5)

    # the same transform in float64, with a float64 masked softmax, matches to float64 precision
    b64 = torch.tensor(np.broadcast_to(b, (H,)).copy()).view(-1, 1, 1)
    n64 = torch.tensor(np.broadcast_to(n, (H,)).copy()).view(-1, 1, 1)
    w64 = ref_masked_softmax64(ssa_transform(x.double(), b64, n64), mask)
    np.testing.assert_allclose(w64.numpy(), ref, atol=1e-13, rtol=1e-12)


@pytest.mark.parametrize(
    "b,n", [(1.0, 1.0), (math.e, 1.5), (0.8, 2.0), (3.0, 7.0), (0.3, math.exp(0.4)), (1e-3, 20.0)]
)
def test_ssa_transform_derivative(b, n):
    bt = torch.tensor(b, dtype=torch.float64)
    nt = torch.tensor(n, dtype=torch.float64)
    pts = [0.0, -0.0, 1e-9, -1e-9, 1e-3, -1e-3, 0.5, -2.0, 7.0, -40.0, 1e4]
    x = torch.tensor(pts, dtype=torch.float64, requires_grad=True)
    t = ssa_transform(x, bt, nt)
    (grad,) = torch.autograd.grad(t.sum(), x)
    # exactly n·b at x = 0 (and at -0.0)
    assert grad[0].item() == b * n and grad[1].item() == b * n
    # analytic t'(x) = n·b / (1 + b|x|) everywhere
    xs = np.array(pts)
    np.testing.assert_allclose(grad.numpy(), n * b / (1.0 + b * np.abs(xs)), rtol=1e-13, atol=0)
    # t itself is n·sgn(x)·log1p(b|x|), and odd
    np.testing.assert_allclose(
        t.detach().numpy(), n * np.sign(xs) * np.log1p(b * np.abs(xs)), rtol=1e-14, atol=0
    )
    xx = x.detach()[2:]
    assert torch.equal(ssa_transform(-xx, bt, nt), -ssa_transform(xx, bt, nt))
    # central finite difference at 0: n·log1p(b·h)/h = n·b·(1 - b·h/2 + ...)
    h = 1e-6
    fd = (
        ssa_transform(torch.tensor(h, dtype=torch.float64), bt, nt)
        - ssa_transform(torch.tensor(-h, dtype=torch.float64), bt, nt)
    ) / (2 * h)
    assert fd.item() == pytest.approx(n * b, rel=max(1e-8, b * h))


def test_ssa_module_gradient_at_all_zero_logits():
    """S visible zero logits: w = 1/S each, dw_0/dx_0 = t'(0)·w_0·(1 - w_0) = n·b·(1/S)(1 - 1/S)."""
    s = make("ssa")
    b, n = [0.5, 1.0, math.e], [1.2, 1.5, 3.0]
    set_ssa(s, b, n)
    S = 5
    x = torch.zeros(1, H, 1, S, requires_grad=True)
    w = s(x, None)
    (grad,) = torch.autograd.grad(w[0, :, 0, 0].sum(), x)
    expect = np.array(n) * np.array(b) * (1 / S) * (1 - 1 / S)
    np.testing.assert_allclose(grad[0, :, 0, 0].numpy(), expect, rtol=1e-5)
    np.testing.assert_allclose(grad[0, :, 0, 1].numpy(), -np.array(n) * np.array(b) / S**2, rtol=1e-5)


def test_ssa_gradcheck_wrt_logits_b_and_n():
    """Functional SSA (ssa_transform + a float64 masked softmax), gradcheck w.r.t. x, b and n."""
    g = torch.Generator().manual_seed(9)
    t = 5
    x = torch.randn(1, H, t, t, generator=g, dtype=torch.float64) * 2
    x[0, :, 2, :2] = 0.0
    x[0, :, 4, 1] = 0.0
    x.requires_grad_(True)
    b = torch.tensor([0.5, 1.0, math.e], dtype=torch.float64, requires_grad=True)
    n = torch.tensor([1.2, 1.5, 3.0], dtype=torch.float64, requires_grad=True)
    mask = causal(t)

    def f(x, b, n):
        return ref_masked_softmax64(ssa_transform(x, b.view(-1, 1, 1), n.view(-1, 1, 1)), mask)

    assert torch.autograd.gradcheck(f, (x, b, n))


@pytest.mark.parametrize("per_head", [True, False])
def test_ssa_module_parameter_gradients_match_float64_literal(per_head):
    """Gradients of the module's beta, nu equal autograd through the literal power formula in float64."""
    s = make("ssa", per_head=per_head)
    g = torch.Generator().manual_seed(10)
    with torch.no_grad():
        s.beta.copy_(torch.randn(s.beta.shape, generator=g) * 0.5)
        s.nu.copy_(torch.randn(s.nu.shape, generator=g))
    t = 6
    x = torch.randn(2, H, t, t, generator=g) * 2
    x[1, :, 3, 1] = 0.0
    r = torch.randn(2, H, t, t, generator=g)
    mask = causal(t)
    (s(x, mask) * r).sum().backward()

    beta = s.beta.detach().double().requires_grad_(True)
    nu = s.nu.detach().double().requires_grad_(True)
    b = beta.exp().view(-1, 1, 1)
    n = (1.0 + torch.log1p(nu.exp())).view(-1, 1, 1)
    x64 = x.double()
    p = torch.pow(1.0 + b * x64.abs(), torch.sign(x64) * n)
    p = torch.where(mask, p, torch.zeros_like(p))
    w = p / p.sum(-1, keepdim=True)
    (w * r.double()).sum().backward()
    torch.testing.assert_close(s.beta.grad.double(), beta.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(s.nu.grad.double(), nu.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("b_init,n_init", [(1.0, 1.5), (0.8, 1.5), (math.e, math.exp(0.4)), (0.05, 20.0)])
@pytest.mark.parametrize("per_head", [True, False])
def test_ssa_init_values(b_init, n_init, per_head):
    s = make("ssa", b_init=b_init, n_init=n_init, per_head=per_head)
    size = H if per_head else 1
    assert s.b.shape == (size,) and s.n.shape == (size,)
    np.testing.assert_allclose(s.b.detach().double().numpy(), np.full(size, b_init), rtol=1e-6)
    np.testing.assert_allclose(s.n.detach().double().numpy(), np.full(size, n_init), rtol=1e-6)
    st = s.stats()
    np.testing.assert_allclose(st["b"].numpy(), np.full(size, b_init), rtol=1e-6)
    np.testing.assert_allclose(st["n"].numpy(), np.full(size, n_init), rtol=1e-6)


def test_ssa_n_init_one_fixed_is_exactly_one():
    s = make("ssa", n_init=1.0, learn_n=False)
    assert torch.equal(s.n, torch.ones(H))


@pytest.mark.parametrize("learn_b,learn_n", [(False, True), (True, False), (False, False), (True, True)])
def test_ssa_fixed_parameters_are_buffers(learn_b, learn_n):
    s = make("ssa", learn_b=learn_b, learn_n=learn_n, b_init=0.8, n_init=2.0)
    params = dict(s.named_parameters())
    buffers = dict(s.named_buffers())
    state = s.state_dict()
    for pname, learn in (("beta", learn_b), ("nu", learn_n)):
        assert pname in state, f"{pname} must be saved in checkpoints"
        assert (pname in params) == learn
        assert (pname in buffers) == (not learn)
    assert sum(p.numel() for p in s.parameters()) == H * (learn_b + learn_n)
    # a fresh module with other inits gets the saved values back
    other = make("ssa", learn_b=learn_b, learn_n=learn_n, b_init=3.0, n_init=5.0)
    other.load_state_dict(state)
    np.testing.assert_allclose(other.b.detach().numpy(), np.full(H, 0.8), rtol=1e-6)
    np.testing.assert_allclose(other.n.detach().numpy(), np.full(H, 2.0), rtol=1e-6)


@pytest.mark.parametrize(
    "row,b,n",
    [
        ([60.0, 10.0, 0.0, -60.0], 1.0, 25.0),
        ([60.0, 3.0, -1.0, 0.5], math.e, 20.0),
        ([1e4, 1.0, -1e4, 0.0], 1.0, 20.0),
    ],
)
def test_ssa_no_overflow_where_literal_power_overflows_float32(row, b, n):
    x = torch.tensor(row).view(1, 1, 1, -1)
    literal32 = torch.pow(1 + b * x.abs(), torch.sign(x) * n)
    literal32 = literal32 / literal32.sum(-1, keepdim=True)
    assert not torch.isfinite(literal32).all(), "premise: the literal power overflows in float32"
    s = make("ssa", n_head=1, b_init=b, n_init=n)
    w = s(x, None)
    assert torch.isfinite(w).all()
    ref = ssa_literal_np(x.numpy(), [b], [n], np.ones(x.shape, dtype=bool))
    assert np.isfinite(ref).all()
    np.testing.assert_allclose(w.detach().double().numpy(), ref, atol=1e-6, rtol=1e-5)


def test_ssa_not_shift_invariant_softmax_is():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(1, H, 6, 6, generator=g)
    mask = causal(6)
    ssa, sm = make("ssa"), make("softmax")
    for c in (0.5, 3.0, -2.0):
        torch.testing.assert_close(sm(x + c, mask), sm(x, mask), atol=1e-6, rtol=1e-6)
        diff = (ssa(x + c, mask) - ssa(x, mask)).abs().max().item()
        assert diff > 1e-2, f"SSA weights unchanged by shift {c} (max diff {diff})"
        # and the shifted SSA weights follow the literal formula
        ref = ssa_literal_np((x + c).numpy(), np.ones(H), np.full(H, 1.5), mask.numpy())
        np.testing.assert_allclose(ssa(x + c, mask).detach().double().numpy(), ref, atol=1e-6, rtol=1e-5)


# scorers.md: weight on one key with logit g among N-1 zeros
SATURATION = [
    # (scorer, b, n, [(N, g, expected)])
    ("ssa", math.e, math.exp(0.4), [(16, 5, 0.784), (16, 10, 0.907), (16, 20, 0.964), (80, 20, 0.835)]),
    ("ssa", 0.8, 1.5, [(16, 5, 0.427), (16, 10, 0.643), (16, 20, 0.824), (80, 20, 0.470)]),
    ("softmax", None, None, [(16, 5, 0.908), (16, 10, 0.999), (16, 20, 1.000), (80, 20, 1.000)]),
]


@pytest.mark.parametrize("scorer,b,n,rows", SATURATION)
def test_saturation_table(scorer, b, n, rows):
    s = make(scorer, n_head=1)
    if scorer == "ssa":
        set_ssa(s, [b], [n])
    for N, gap, expected in rows:
        x = torch.zeros(1, 1, 1, N)
        x[..., 0] = gap
        w0 = s(x, None)[0, 0, 0, 0].item()
        assert round(w0, 3) == pytest.approx(expected, abs=1e-9), (scorer, b, n, N, gap, w0)
        # closed form from protocols.md
        closed = (1 + b * gap) ** n if scorer == "ssa" else math.exp(gap)
        assert w0 == pytest.approx(closed / (closed + N - 1), abs=1e-6)


# ----------------------------------------------------------------------------- SSA check_config
@pytest.mark.parametrize(
    "overrides,keys",
    [
        (dict(b_init=0.0), ["b_init"]),
        (dict(b_init=-1.0), ["b_init"]),
        (dict(n_init=0.5), ["n_init"]),
        (dict(n_init=-2.0), ["n_init"]),
        (dict(n_init=1.0, learn_n=True), ["n_init", "learn_n"]),
        (dict(b_init=0.0, n_init=0.9), ["b_init", "n_init"]),
    ],
)
def test_ssa_check_config_rejects(overrides, keys):
    problems = SSA.check_config(scorer_cfg("ssa", **overrides), H)
    assert problems, overrides
    text = " ".join(problems)
    for key in keys:
        assert key in text, (key, problems)
    if "b_init" in overrides and "n_init" in overrides:
        assert len(problems) == 2


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(n_init=1.0, learn_n=False),
        dict(b_init=1e-3, n_init=1.0001),
        dict(b_init=0.8, n_init=20.0),
    ],
)
def test_ssa_check_config_accepts(overrides):
    assert SSA.check_config(scorer_cfg("ssa", **overrides), H) == []
    assert SSA.check_config(SSAConfig(**overrides), H) == []


@pytest.mark.parametrize("name", ALL)
def test_default_config_passes_check(name):
    assert SCORERS.get(name).check_config(scorer_cfg(name), H) == []


# ----------------------------------------------------------------------------- the recent scorers
@pytest.mark.parametrize("name", RECENT)
def test_schema_default_builds_and_yaml_composes(name):
    cfg = OmegaConf.structured(SCORERS.schemas[name])
    assert cfg.name == name and type(build_scorer(cfg, H)) is SCORERS.get(name)
    full = make_cfg(f"scorer={name}")
    assert full.scorer.name == name and full.scorer.label == name
    assert SCORERS.get(name).check_config(full.scorer, full.model.n_head) == []
    assert type(build_scorer(full.scorer, full.model.n_head)) is SCORERS.get(name)


def test_softmax_one_preset_is_softmax_sink_with_s_fixed_at_zero():
    cfg = make_cfg("scorer=softmax_one")
    assert cfg.scorer.name == "softmax_sink" and cfg.scorer.label == "softmax_one"
    s = build_scorer(cfg.scorer, cfg.model.n_head)
    assert "s" in s.state_dict() and list(s.parameters()) == []
    assert torch.equal(s.s, torch.zeros(cfg.model.n_head))
    assert s.stats() == {}  # a constant is not logged as a parameter...
    learnt = build_scorer(make_cfg("scorer=softmax_sink").scorer, cfg.model.n_head)
    assert set(learnt.stats()) == {"s"}  # ...a learnable sink is


def test_layer_index_reaches_every_scorer():
    for name in ("ssa", "softmax", "diff"):  # __init__(cfg, n_head), no __init__, __init__(..., layer)
        assert make(name, layer=2).layer == 2
    model = build_model(make_cfg("model.n_layer=3").model, scorer_cfg("ssa"))
    assert [b.attn.scorer.layer for b in model.blocks] == [0, 1, 2]


def test_flags():
    get = SCORERS.get
    assert [n for n in SCORERS.names() if get(n).causal_only] == ["stickbreaking"]
    assert {n for n in SCORERS.names() if get(n).signed} == {"cog", "diff"}
    assert not any(get(n).rows_sum_to_one for n in RECENT)
    # none is softmax(f(x)) of one logit, so none is a FlexAttention score_mod (model.attn_impl=flex refuses)
    assert all(get(n).score_mod is Scorer.score_mod for n in RECENT)


# ----------------------------------------------------------------------------- sigmoid
def sigmoid_np(x, mask, b=0.0, log_n=True):
    x = np_(x)
    m = visible(mask, x.shape)
    n = m.sum(-1, keepdims=True)
    beta = np.asarray(b, dtype=np.float64).reshape(-1, 1, 1) - (np.log(n) if log_n else 0.0)
    return np.where(m, sigm(x + beta), 0.0)


def test_sigmoid_causal_key_counts_by_hand():
    x = randn(2, H, 7, 7, seed=1, scale=2.0)
    n = np.arange(1, 8)[:, None]  # n_i = i + 1 under the causal mask
    close(make("sigmoid").double()(x, causal(7)), np.tril(sigm(np_(x) - np.log(n))))


def test_sigmoid_row_sums_with_minus_log_n_bias():
    s = make("sigmoid", n_head=1).double()
    # all-zero logits: n·sigmoid(−log n) = n/(n + 1)
    for n in (1, 2, 16, 80):
        close(s(torch.zeros(1, 1, 1, n, dtype=torch.float64), None).sum(), n / (n + 1.0))
    # many keys: sigmoid(x − log n) = e^x/(n + e^x), so the row sum is close to the mean of e^x
    x = randn(1, 1, 4, 4000, seed=2)
    sums = np_(s(x, None)).sum(-1)
    mean_exp = np.exp(np_(x)).mean(-1)
    close(sums, mean_exp, rtol=2e-3, atol=0)
    assert np.all(sums < mean_exp)  # e^x/(n + e^x) < e^x/n


def test_sigmoid_fixed_scalar_bias_and_learnable_per_head_offset():
    x = randn(2, H, 6, 6, seed=3, scale=2.0)
    mask = causal(6)
    fixed = make("sigmoid", log_n=False, bias=-9.0).double()  # the public code's −ln 8192
    assert list(fixed.parameters()) == []
    close(fixed(x, mask), sigmoid_np(x, mask, b=-9.0, log_n=False))
    learn = make("sigmoid", learn_bias=True)
    assert isinstance(learn.b, torch.nn.Parameter) and torch.equal(learn.b, torch.zeros(H))
    close(learn.double()(x, mask), sigmoid_np(x, mask))  # starts at the −log n_i default
    b = [-1.0, 0.0, 2.5]
    set_param(learn.b, b)
    close(learn(x, mask), sigmoid_np(x, mask, b=b))
    close(learn.stats()["bias"], b)
    (learn(x, mask) * randn(2, H, 6, 6, seed=4)).sum().backward()
    assert (learn.b.grad != 0).all()


# ----------------------------------------------------------------------------- softpick
def softpick_literal_np(x, mask, eps=0.0):
    """relu(e^x − 1) / (Σ_visible |e^x − 1| + eps), literally (overflows for large x)."""
    x = np_(x)
    m = visible(mask, x.shape)
    e = np.where(m, np.expm1(x), 0.0)
    return np.maximum(e, 0.0) / (np.abs(e).sum(-1, keepdims=True) + eps)


def softpick_reference_form_np(x, mask, eps=1e-8):
    """The reference's stable form: shift by the row max m, ε added to the shifted denominator."""
    x = np_(x)
    vis = visible(mask, x.shape)
    m = np.where(vis, x, -np.inf).max(-1, keepdims=True)
    d = np.where(vis, np.exp(x - m) - np.exp(-m), 0.0)
    return np.maximum(d, 0.0) / (np.abs(d).sum(-1, keepdims=True) + eps)


def test_softpick_properties():
    s = make("softpick").double()
    x = randn(2, H, 9, 9, seed=6, scale=2.0)
    x[0, 0, 5, :3] = 0.0  # exact zeros
    mask = causal(9)
    w = np_(s(x, mask))
    xn = np_(x)
    assert np.all(w[(xn <= 0) | ~mask.numpy()] == 0)  # exact 0 for logits <= 0 and for masked keys
    assert np.all(w[(xn > 0) & mask.numpy()] > 0)
    sums = w.sum(-1)
    assert np.all(sums <= 1 + 1e-15) and np.any(sums < 1 - 1e-3)
    # a row whose visible logits are all <= 0 is all zeros (the first query with a negative logit)
    x[1, 2, 0, 0] = -0.3
    assert (s(x, mask)[1, 2, 0] == 0).all()
    # one positive key among zero logits takes everything: zeros add |e^0 − 1| = 0 to the denominator
    row = torch.zeros(1, 1, 1, 16, dtype=torch.float64)
    row[..., 3] = 0.5
    # (e^g − 1) / (e^g − 1 + ε·e^g): the reference's ε sits in the max-shifted denominator
    expect = 1.0 / (1.0 + 1e-8 * math.exp(0.5) / math.expm1(0.5))
    close(make("softpick", n_head=1).double()(row, None)[0, 0, 0, 3], expect, atol=1e-15)


def test_softpick_masked_keys_do_not_count():
    s = make("softpick").double()
    x = randn(1, H, 6, 6, seed=7, scale=2.0)
    mask = causal(6)
    w = s(x, mask)
    for fill in (1e4, -1e4, 0.0):
        x2 = x.masked_fill(~mask, fill)
        torch.testing.assert_close(s(x2, mask), w, rtol=0, atol=0)


def test_softpick_finite_where_the_literal_form_overflows():
    s = make("softpick", n_head=1)
    x = torch.tensor([[[[1e4, 50.0, 0.0, -3.0], [-1e4, -2e3, -1e4, -100.0], [200.0, 200.0, -1.0, 1.0]]]])
    x.requires_grad_(True)
    w = s(x, None)  # float32
    assert torch.isfinite(w).all()
    close(w[0, 0, 0], [1.0, 0.0, 0.0, 0.0], atol=1e-7)
    # row max −100: the reference's e^{−m} = e^{100} is inf in float32 (weights 0, gradients NaN)
    assert (w[0, 0, 1] == 0).all()
    (w * torch.arange(12.0).view(1, 1, 3, 4)).sum().backward()
    assert torch.isfinite(x.grad).all()
    close(w[0, 0, 2], [0.5, 0.5, 0.0, 0.0], atol=1e-7)
    x64 = x.detach().double()[:, :, [0, 2]]  # rows with a positive max: the reference's form is finite there
    close(make("softpick", n_head=1).double()(x64, None), softpick_reference_form_np(x64, None), atol=1e-15)


# ----------------------------------------------------------------------------- stick-breaking
def stickbreaking_np(x, mask=None, attend_current=False):
    """A_ij = σ(x_ij)·Π_{j<k<i, k visible}(1 − σ(x_ik)) for visible j < i (j <= i with attend_current),
    by loops, nearest key first."""
    x = np_(x)
    m = visible(mask, x.shape)
    out = np.zeros_like(x)
    t, s = x.shape[-2:]
    for idx in np.ndindex(*x.shape[:-2]):
        for i in range(t):
            qi = i + s - t
            keys = [j for j in range(s) if (j <= qi if attend_current else j < qi) and m[idx][i, j]]
            stick = 1.0
            for j in sorted(keys, reverse=True):  # nearest first
                out[idx][i, j] = sigm(x[idx][i, j]) * stick
                stick *= 1.0 - sigm(x[idx][i, j])
    return out


def test_stickbreaking_closed_forms_for_two_and_three_keys():
    x = randn(1, 1, 3, 3, seed=9, scale=2.0)
    b = sigm(np_(x)[0, 0])  # β_ij
    w = np_(make("stickbreaking", n_head=1).double()(x, causal(3)))[0, 0]
    expect = np.zeros((3, 3))
    expect[1, 0] = b[1, 0]  # query 1: one key before it
    expect[2, 1] = b[2, 1]  # query 2: nearest key first ...
    expect[2, 0] = b[2, 0] * (1 - b[2, 1])  # ... then what is left
    close(w, expect, atol=1e-15)
    assert (w[0] == 0).all()  # the first query has no key before it
    w = np_(make("stickbreaking", n_head=1, attend_current=True).double()(x, causal(3)))[0, 0]
    expect = np.zeros((3, 3))
    expect[0, 0] = b[0, 0]
    expect[1, 1], expect[1, 0] = b[1, 1], b[1, 0] * (1 - b[1, 1])
    expect[2, 2] = b[2, 2]
    expect[2, 1] = b[2, 1] * (1 - b[2, 2])
    expect[2, 0] = b[2, 0] * (1 - b[2, 1]) * (1 - b[2, 2])
    close(w, expect, atol=1e-15)


def test_stickbreaking_row_sums_and_reference_log_space_form():
    x = randn(2, H, 8, 8, seed=10, scale=2.0)
    w = np_(make("stickbreaking").double()(x, causal(8)))
    b = sigm(np_(x))
    strictly_before = np.tril(np.ones((8, 8), dtype=bool), -1)
    rest = np.where(strictly_before, 1 - b, 1.0).prod(-1)
    close(w.sum(-1), 1 - rest, atol=1e-15)  # rows sum to 1 − Π(1 − β) <= 1
    # the reference's structure: log A = logσ(x) + (logσ(−x) masked) @ cum_weight, cum_weight = tril(−1)
    log_beta = np.where(strictly_before, np.log(b), -np.inf)
    log_om = np.where(strictly_before, np.log1p(-b), 0.0)
    close(w, np.exp(log_beta + log_om @ np.tril(np.ones((8, 8)), -1)), atol=1e-15, rtol=1e-12)


def test_stickbreaking_huge_logits_and_key_query_alignment():
    s = make("stickbreaking", n_head=1)
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 3] = torch.tensor([1e4, -1e4, 1e4, 0.0])  # key 2 (nearest) takes everything
    w = s(x, causal(4))
    assert torch.isfinite(w).all()
    close(w[0, 0, 3], [0.0, 0.0, 1.0, 0.0], atol=0)
    # one query row over S = 5 keys (T < S): it is the last position, keys 0..3 are before it
    row = randn(1, 1, 1, 5, seed=11)
    close(make("stickbreaking", n_head=1).double()(row, None), stickbreaking_np(row), atol=1e-15)
    assert make("stickbreaking", n_head=1).double()(row, None)[..., 4].item() == 0.0


# ----------------------------------------------------------------------------- cog
def cog_np(x, mask):
    x = np_(x)
    m = visible(mask, x.shape)
    e = np.where(m, np.exp(np.abs(x)), 0.0)
    return np.sign(x) * e / e.sum(-1, keepdims=True)


def test_cog_signs_and_magnitudes():
    s = make("cog").double()
    x = randn(2, H, 8, 8, seed=13, scale=2.0)
    mask = causal(8)
    w = s(x, mask)
    wn = np_(w)
    assert (wn < 0).any() and np.array_equal(np.sign(wn), np.sign(np_(x)) * mask.numpy())
    close(np.abs(wn).sum(-1), np.ones((2, H, 8)), atol=1e-15)  # no exact-zero logits here
    assert np.all(np.abs(wn.sum(-1)) <= 1 + 1e-15)
    close(s(-x, mask), -wn, atol=0)  # odd in x
    # a logit of exactly 0 gets weight 0 (sgn 0 = 0, as torch.sign in the reference) but counts below
    x[0, 0, 4, 2] = 0.0
    w = np_(s(x, mask))
    assert w[0, 0, 4, 2] == 0 and abs(np.abs(w[0, 0, 4]).sum() - 1) > 1e-3
    # one large logit of either sign takes (almost) all the magnitude
    row = torch.zeros(1, 2, 1, 16, dtype=torch.float64)
    row[0, 0, 0, 0], row[0, 1, 0, 0] = 10.0, -10.0
    w = make("cog", n_head=2).double()(row, None)
    close(w[0, :, 0, 0], [math.exp(10) / (math.exp(10) + 15), -math.exp(10) / (math.exp(10) + 15)])


# ----------------------------------------------------------------------------- softmax_sink
def sink_np(x, mask, s_heads):
    x = np_(x)
    m = visible(mask, x.shape)
    e = np.where(m, np.exp(x), 0.0)
    return e / (np.exp(np.asarray(s_heads, dtype=np.float64)).reshape(-1, 1, 1) + e.sum(-1, keepdims=True))


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_softmax_sink_at_s_zero_rows_sum_below_one(mask_kind):
    x = randn(2, H, 7, 7, seed=14, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    w = make("softmax_sink").double()(x, mask)
    e = np.where(visible(mask, x.shape), np.exp(np_(x)), 0.0)
    close(w.sum(-1), 1.0 - 1.0 / (1.0 + e.sum(-1)), atol=1e-15)
    assert (np_(w).sum(-1) < 1).all()


def test_softmax_sink_per_head_s_and_its_gradient():
    s = make("softmax_sink").double()
    s_heads = [-2.0, 0.5, 3.0]
    set_param(s.s, s_heads)
    x = randn(2, H, 6, 6, seed=15, scale=2.0)
    mask = causal(6)
    close(s(x, mask), sink_np(x, mask, s_heads), atol=1e-15, rtol=1e-12)
    close(s.stats()["s"], s_heads)
    # ∂/∂s_h of Σ r·w by central differences, float64
    r = randn(2, H, 6, 6, seed=16)
    (s(x, mask) * r).sum().backward()
    h = 1e-6
    for head in range(H):
        f = []
        for sign in (1, -1):
            shifted = list(s_heads)
            shifted[head] += sign * h
            f.append((sink_np(x, mask, shifted) * np_(r)).sum())
        assert s.s.grad[head].item() == pytest.approx((f[0] - f[1]) / (2 * h), rel=1e-6, abs=1e-9)


def test_softmax_sink_limits_and_large_logits():
    x = randn(1, 1, 5, 5, seed=17, scale=2.0)
    mask = causal(5)
    s = make("softmax_sink", n_head=1).double()
    set_param(s.s, [-40.0])  # a negligible sink: softmax
    e = np.where(mask.numpy(), np.exp(np_(x)), 0.0)
    close(s(x, mask), e / e.sum(-1, keepdims=True), atol=1e-15)
    big = torch.tensor([[[[1e4, 0.0, -1e4]]]])  # float32: the literal e^x overflows
    w = make("softmax_sink", n_head=1)(big, None)
    assert torch.isfinite(w).all()
    close(w, [[[[1.0, 0.0, 0.0]]]], atol=1e-7)


# ----------------------------------------------------------------------------- relu_len
def relu_len_np(x, mask):
    m = visible(mask, x.shape)
    return np.where(m, np.maximum(np_(x), 0.0) / m.sum(-1, keepdims=True), 0.0)


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_relu_len_rows_are_the_mean_relu_and_hybrids_relu_head(mask_kind):
    x = randn(2, H, 7, 7, seed=18, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    m = visible(mask, x.shape)
    w = make("relu_len").double()(x, mask)
    # rows sum to the mean relu over the visible keys; the same function as hybrid's relu head
    close(np_(w).sum(-1), (np.maximum(np_(x), 0) * m).sum(-1) / m.sum(-1), atol=1e-15)
    close(w, make("hybrid", heads=["relu"]).double()(x, mask), atol=0)


def test_relu_len_exceeds_one_and_zero_rows():
    row = torch.zeros(1, 1, 2, 4, dtype=torch.float64)
    row[0, 0, 0] = torch.tensor([8.0, 0.0, 0.0, 0.0])
    row[0, 0, 1] = torch.tensor([-1.0, -2.0, 0.0, -0.5])
    w = make("relu_len", n_head=1).double()(row, None)
    assert w[0, 0, 0].sum().item() == 2.0  # 8 / 4: not normalised
    assert (w[0, 0, 1] == 0).all()


# ----------------------------------------------------------------------------- each against its reference
def softmax_one_np(x, mask):
    """e^x / (1 + Σ_visible e^x), literally: softmax_sink at its default s = 0."""
    e = np.where(visible(mask, x.shape), np.exp(np_(x)), 0.0)
    return e / (1.0 + e.sum(-1, keepdims=True))


# (scorer, config overrides, float64 reference, atol, rtol, logits seed)
REFERENCES = [
    pytest.param("sigmoid", {}, sigmoid_np, 1e-12, 1e-12, 1, id="sigmoid"),
    pytest.param("softpick", {"eps": 0.0}, softpick_literal_np, 1e-15, 1e-12, 5, id="softpick-eps0-paper"),
    # with the default ε, as the reference computes it (rows here have a positive max)
    pytest.param("softpick", {}, softpick_reference_form_np, 1e-15, 1e-12, 5, id="softpick-reference-form"),
    pytest.param("stickbreaking", {}, stickbreaking_np, 1e-15, 1e-12, 8, id="stickbreaking"),
    pytest.param(
        "stickbreaking",
        {"attend_current": True},
        lambda x, mask: stickbreaking_np(x, mask, attend_current=True),
        1e-15,
        1e-12,
        8,
        id="stickbreaking-attend_current",
    ),
    pytest.param("cog", {}, cog_np, 1e-15, 1e-12, 12, id="cog"),
    pytest.param("softmax_sink", {}, softmax_one_np, 1e-15, 1e-12, 14, id="softmax_sink-s0"),
    pytest.param("relu_len", {}, relu_len_np, 0, 1e-15, 18, id="relu_len"),
]


@pytest.mark.parametrize("mask_kind", list(MASKS))
@pytest.mark.parametrize("name,overrides,reference,atol,rtol,seed", REFERENCES)
def test_recent_scorer_matches_float64_reference(name, overrides, reference, atol, rtol, seed, mask_kind):
    x = randn(2, H, 7, 7, seed=seed, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    close(make(name, **overrides).double()(x, mask), reference(x, mask), atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- diff
# 0.8 − 0.6·e^{−0.3(l−1)} for l = 1..4, evaluated by hand (e^{−0.3} = 0.74081822, e^{−0.6} = 0.54881164, ...)
LAMBDA_INIT = {1: 0.2, 2: 0.3555090676, 3: 0.4707130183, 4: 0.5560582042}


def test_diff_lambda_init_schedule_for_layers_one_to_four():
    for layer_1based, value in LAMBDA_INIT.items():
        assert make("diff", layer=layer_1based - 1).lambda_init == pytest.approx(value, abs=1e-10)
    # through the model: block l (0-based) gets layer l
    cfg = make_cfg("scorer=diff", "model.n_layer=4", "model.n_head=2", "model.n_embd=16")
    model = build_model(cfg.model, cfg.scorer)
    got = [b.attn.scorer.lambda_init for b in model.blocks]
    np.testing.assert_allclose(got, list(LAMBDA_INIT.values()), atol=1e-10)


def lambda_np(q1, k1, q2, k2, lam_init):
    return math.exp(float(np.dot(q1, k1))) - math.exp(float(np.dot(q2, k2))) + lam_init


def diff_np(q, k, lam, mask):
    q, k = np_(q), np_(k)
    h = q.shape[-1] // 2
    m = visible(mask, q.shape[:-1] + (k.shape[-2],))

    def softmax(a):
        a = np.where(m, a, -np.inf)
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    a1 = softmax(np.einsum("bhid,bhjd->bhij", q[..., :h], k[..., :h]) / math.sqrt(h))
    a2 = softmax(np.einsum("bhid,bhjd->bhij", q[..., h:], k[..., h:]) / math.sqrt(h))
    return a1 - lam * a2


def set_lambdas(s, seed):
    g = np.random.default_rng(seed)
    vecs = {
        n: g.normal(0, 0.3, s.cfg.lambda_dim) for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
    }
    for n, v in vecs.items():
        set_param(getattr(s, n), v)
    return lambda_np(
        vecs["lambda_q1"], vecs["lambda_k1"], vecs["lambda_q2"], vecs["lambda_k2"], s.lambda_init
    )


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_diff_weights_lambda_and_output_match_reference(mask_kind):
    s = make("diff", layer=2).double()
    lam = set_lambdas(s, seed=19)
    close(s.lam, lam, atol=1e-15)
    close(s.stats()["lambda"], [lam], atol=1e-15)
    q, k, v = (randn(2, H, 7, 8, seed=20 + i, scale=1.5) for i in range(3))
    mask = MASKS[mask_kind](2, 7)
    w = s.weights(q, k, mask)
    ref_w = diff_np(q, k, lam, mask)
    close(w, ref_w, atol=1e-15, rtol=1e-12)
    close(np_(w).sum(-1), np.full((2, H, 7), 1.0 - lam), atol=1e-14)  # rows sum to 1 − λ
    # the output: (1 − λ_init)·RMSNorm(w v), RMS over each head's d, ε = 1e-5, no gain
    y = ref_w @ np_(v)
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * 2)  # layer index 2 = the third layer
    ref_out = (1 - lam_init) * y / np.sqrt((y**2).mean(-1, keepdims=True) + 1e-5)
    out, maps = s.attend(q, k, v, mask, is_causal=mask_kind == "causal", need_weights=True)
    close(out, ref_out, atol=1e-14, rtol=1e-12)
    close(maps, ref_w, atol=1e-15, rtol=1e-12)


def test_diff_parameters_train_and_model_paths_agree():
    s = make("diff")
    assert {n for n, _ in s.named_parameters()} == {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"}
    assert all(p.shape == (8,) for p in s.parameters())  # lambda_dim
    # eager (Scorer.attend, also through combine) and auto paths are the same model
    cfg = make_cfg("scorer=diff", "model.n_layer=2", "model.n_head=2", "model.n_embd=16")
    torch.manual_seed(0)
    auto = build_model(cfg.model, cfg.scorer)
    cfg.model.attn_impl = "eager"
    eager = build_model(cfg.model, cfg.scorer)
    eager.load_state_dict(auto.state_dict())
    tokens = torch.randn(3, 10, 1)
    torch.testing.assert_close(auto(tokens), eager(tokens))
    auto(tokens).square().mean().backward()
    for b in auto.blocks:
        for p in b.attn.scorer.parameters():
            assert p.grad is not None and (p.grad != 0).all()


def test_diff_errors():
    s = make("diff")
    with pytest.raises(ValueError, match="odd"):
        s.weights(torch.randn(1, H, 4, 5), torch.randn(1, H, 4, 5), causal(4))
    with pytest.raises(TypeError):
        s(torch.zeros(1, H, 2, 2), None)
    assert SCORERS.get("diff").check_config(scorer_cfg("diff", lambda_dim=0), H)
