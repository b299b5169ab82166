"""Attention scorers checked against independent references (numpy / float64 literal formulas).

The generic tests run over ``SCORERS.names()``, so a newly registered scorer is tested automatically;
its config is built from its registered schema dataclass. They go through ``Scorer.weights(q, k, mask)``
(the entry point the attention module uses through ``attend``), so scorers that need q and k are covered
as well as those that transform logits. SSA-specific tests follow.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.scorers import SCORERS, build_scorer
from ssa_repro.scorers.ssa import SSA, SSAConfig, ssa_transform

H = 3  # heads in most tests


# ----------------------------------------------------------------------------- helpers
def scorer_cfg(name: str, **overrides):
    cfg = OmegaConf.structured(SCORERS.schemas[name])
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def make(name: str, n_head: int = H, **overrides):
    # n_embd: the layer width for scorers that read the layer input (gated: head width 8, as below)
    return build_scorer(scorer_cfg(name, **overrides), n_head, n_embd=8 * n_head)


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
    s = make(name)
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
    s = make(name)
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
    s = make(name)
    w = s.weights(q, k, causal(t))
    assert w.dtype == torch.bfloat16
    assert torch.isfinite(w).all()
    assert (w[..., torch.ones(t, t, dtype=torch.bool).triu(1)] == 0).all()
    assert_rows_normalised(s, w, 2e-2)


@pytest.mark.parametrize("name", ALL)
def test_gradcheck_float64_with_exact_zero_logits(name):
    s = make(name)
    q, k = gradcheck_inputs(s)
    q.requires_grad_(True)
    k.requires_grad_(True)
    mask = causal(5)
    assert torch.autograd.gradcheck(lambda a, c: s.weights(a, c, mask), (q, k))


@pytest.mark.parametrize("name", ALL)
def test_gradcheck_tolerant_of_float32_internals_with_exact_zero_logits(name):
    """gradcheck with a coarser step and tolerance; still catches a wrong derivative at x = 0, e.g. a
    sign/abs form whose gradient there is 0."""
    s = make(name)
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
