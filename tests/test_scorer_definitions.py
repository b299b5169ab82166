"""The added scorers' definitions, each checked against an independent float64 numpy reference.

tests/test_scorers.py holds the generic properties every registered scorer must have (masked
weights zero, rows summing to one, finite in bf16, gradchecks, ...). This file checks that each
scorer computes the formula in shared/reference/scorers.md (and in its module docstring): the
references below are written from those definitions in numpy/float64, never with package helpers.
Where a module holds float32 parameters the tests either cast it to float64 (``.double()``) and set
the parameters exactly, or compare at float32 tolerances.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.core.enums import value_of
from ssa_repro.scorers import SCORERS, build_scorer
from tests.conftest import make_cfg

H = 3


# ----------------------------------------------------------------------------- helpers
def scorer_cfg(name: str, **overrides):
    """The registered schema with ``overrides``. ``name`` is set explicitly: sparsemax and entmax15 share
    one schema, whose default name is "sparsemax" (see test_schema_default_name_builds_its_scorer)."""
    cfg = OmegaConf.structured(SCORERS.schemas[name])
    cfg.name = name
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def make(name: str, n_head: int = H, **overrides):
    return build_scorer(scorer_cfg(name, **overrides), n_head)


def set_param(tensor: torch.Tensor, values) -> None:
    """Copy float64 ``values`` into a parameter or buffer (in its own dtype)."""
    with torch.no_grad():
        tensor.copy_(torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=tensor.dtype))


def causal(t: int, s: int | None = None) -> torch.Tensor:
    s = t if s is None else s
    return torch.ones(t, s, dtype=torch.bool).tril()


def padding_mask(b: int, t: int, s: int, seed: int) -> torch.Tensor:
    """A random [B, 1, T, S] mask with key 0 always visible, so rows differ in their visible counts."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(b, 1, t, s, generator=g) < 0.6
    m[..., 0] = True
    return m


def randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def np_(t) -> np.ndarray:
    return t.detach().double().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, dtype=np.float64)


def full_mask(mask, shape) -> np.ndarray:
    """Boolean numpy mask broadcast to ``shape`` (None = all visible)."""
    return np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask), shape)


def counts(mask, shape) -> np.ndarray:
    """n_i: visible keys per row, broadcast as [..., T, 1]."""
    return full_mask(mask, shape).sum(-1, keepdims=True).astype(np.float64)


def softmax_np(z, mask=None) -> np.ndarray:
    z = np_(z)
    m = full_mask(mask, z.shape)
    z = np.where(m, z, -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sparsemax_row(z: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the simplex, sort-based closed form (Martins & Astudillo 2016)."""
    zs = np.sort(z)[::-1]
    cs = np.cumsum(zs)
    k = np.arange(1, z.size + 1)
    kz = k[1 + k * zs > cs][-1]
    tau = (cs[kz - 1] - 1.0) / kz
    return np.maximum(z - tau, 0.0)


def entmax_row(z: np.ndarray, alpha: float, iters: int = 200) -> np.ndarray:
    """α-entmax of one row: p_i = max(0, (α−1)z_i − τ)^(1/(α−1)) with Σp = 1, τ by float64 bisection
    (α = 2 uses the sparsemax closed form)."""
    if alpha == 2.0:
        return sparsemax_row(z)
    x = (alpha - 1.0) * z
    lo, hi = x.max() - 1.0, x.max()  # sum(p(lo)) >= 1 (the top entry alone gives 1), sum(p(hi)) = 0

    def p(t):
        return np.maximum(x - t, 0.0) ** (1.0 / (alpha - 1.0))

    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if p(mid).sum() >= 1.0:
            lo = mid
        else:
            hi = mid
    out = p(lo)
    return out / out.sum()


def entmax_np(x, alphas, mask=None, taus=None) -> np.ndarray:
    """α-entmax per head of z = x/τ_h over the visible keys of each row of x [B, H, T, S]; masked = 0."""
    x = np_(x)
    m = full_mask(mask, x.shape)
    taus = np.ones(x.shape[1]) if taus is None else np.asarray(taus, dtype=np.float64)
    alphas = np.broadcast_to(np.asarray(alphas, dtype=np.float64), (x.shape[1],))
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        for h in range(x.shape[1]):
            for i in range(x.shape[2]):
                vis = m[b, h, i]
                out[b, h, i, vis] = entmax_row(x[b, h, i, vis] / taus[h], float(alphas[h]))
    return out


def close(actual, expected, atol=1e-12, rtol=1e-12, msg=""):
    np.testing.assert_allclose(np_(actual), np_(expected), atol=atol, rtol=rtol, err_msg=msg)


# ----------------------------------------------------------------------------- configs
NEW = [
    "temperature",
    "sparsemax",
    "entmax15",
    "entmax_alpha",
    "ssmax",
    "sa_softmax",
    "cosformer",
    "hybrid",
    "softplus",
]


@pytest.mark.parametrize("name", NEW)
def test_schema_default_name_builds_its_scorer(name):
    cfg = OmegaConf.structured(SCORERS.schemas[name])  # no name override, as tests/test_scorers.py does
    assert cfg.name == name and cfg.label == name
    assert type(build_scorer(cfg, H)) is SCORERS.get(name)


@pytest.mark.parametrize("name", NEW + ["hybrid_4fn"])
def test_yaml_options_compose_and_build(name):
    # hybrid_4fn's four entries need at least four heads (the tiny test model has 2)
    cfg = make_cfg(f"scorer={name}", *(["model.n_head=8"] if name == "hybrid_4fn" else []))
    registered = "hybrid" if name == "hybrid_4fn" else name
    assert cfg.scorer.name == registered and cfg.scorer.label == name
    n_head = cfg.model.n_head
    assert SCORERS.get(registered).check_config(cfg.scorer, n_head) == []
    s = build_scorer(cfg.scorer, n_head)
    assert type(s) is SCORERS.get(registered)
    if name == "cosformer":
        assert cfg.scorer.m == cfg.model.max_positions
    if name == "hybrid_4fn":
        assert s.per_head == ["tanh"] * 2 + ["average"] * 2 + ["relu"] * 2 + ["softmax"] * 2


# ----------------------------------------------------------------------------- temperature
def test_temperature_is_softmax_of_x_over_tau_per_head():
    taus = np.array([0.3, 1.0, 2.5])
    s = make("temperature").double()
    set_param(s.temperature.log_tau, np.log(taus))
    x = randn(2, H, 6, 6, seed=1, scale=2.0)
    mask = causal(6)
    ref = softmax_np(np_(x) / taus.reshape(-1, 1, 1), mask)
    close(s(x, mask), ref)
    close(s(x, None), softmax_np(np_(x) / taus.reshape(-1, 1, 1)))
    close(s.stats()["tau"], taus)


def test_temperature_config_tau_float32_module():
    s = make("temperature", tau=0.5)
    assert isinstance(s.temperature.log_tau, torch.nn.Parameter)
    close(s.temperature.log_tau.exp(), np.full(H, 0.5), rtol=1e-6)
    x = randn(1, H, 5, 5, seed=2).float()
    close(s(x, causal(5)), softmax_np(np_(x) / 0.5, causal(5)), atol=1e-6, rtol=1e-5)


def test_temperature_fixed_tau_is_a_buffer():
    s = make("temperature", tau=2.0, learn_tau=False)
    assert "temperature.log_tau" in s.state_dict()
    assert "temperature.log_tau" not in dict(s.named_parameters())
    assert list(s.parameters()) == []
    close(s.state_dict()["temperature.log_tau"], np.full(H, math.log(2.0)), rtol=1e-6)
    learnable = make("temperature", tau=2.0, learn_tau=True)
    assert "temperature.log_tau" in dict(learnable.named_parameters())


@pytest.mark.parametrize("tau", [0.0, -1.0])
def test_temperature_check_config_rejects_nonpositive_tau(tau):
    problems = SCORERS.get("temperature").check_config(scorer_cfg("temperature", tau=tau), H)
    assert problems and "scorer.tau" in " ".join(problems), problems
    assert SCORERS.get("temperature").check_config(scorer_cfg("temperature", tau=0.1), H) == []


# ----------------------------------------------------------------------------- sparsemax / entmax
SPARSE_ALPHA = {"sparsemax": 2.0, "entmax15": 1.5, "entmax_alpha": 1.5}


@pytest.mark.parametrize("name", list(SPARSE_ALPHA))
@pytest.mark.parametrize("tau", [1.0, 0.5, 3.0])
def test_sparse_matches_numpy_entmax_on_masked_rows(name, tau):
    s = make(name, tau=tau).double()
    close(s.temperature.log_tau.exp(), np.full(H, tau), rtol=1e-6)  # the config's τ reached the module
    set_param(s.temperature.log_tau, np.full(H, np.log(tau)))  # exact in float64
    x = randn(2, H, 7, 7, seed=3, scale=1.5)
    mask = causal(7) & padding_mask(2, 7, 7, seed=4)
    w = s(x, mask)
    ref = entmax_np(x, SPARSE_ALPHA[name], mask, taus=np.full(H, tau))
    close(w, ref, atol=1e-10, rtol=1e-9)
    assert (w[~torch.broadcast_to(mask, w.shape)] == 0).all()
    if tau != 1.0:  # z = x/τ, so the temperature changes the weights
        plain = entmax_np(x, SPARSE_ALPHA[name], mask)
        assert np.abs(np_(w) - plain).max() > 1e-2


@pytest.mark.parametrize("name", list(SPARSE_ALPHA))
def test_sparse_float32_module_matches_reference(name):
    s = make(name)
    x = randn(2, H, 6, 6, seed=5, scale=1.5).float()
    close(s(x, causal(6)), entmax_np(x, SPARSE_ALPHA[name], causal(6)), atol=2e-6, rtol=1e-5)


def test_sparse_per_head_temperature():
    taus = np.array([0.25, 1.0, 4.0])
    for name in SPARSE_ALPHA:
        s = make(name, learn_tau=True).double()
        assert isinstance(s.temperature.log_tau, torch.nn.Parameter)
        set_param(s.temperature.log_tau, np.log(taus))
        x = randn(1, H, 6, 6, seed=6, scale=1.5)
        close(s(x, causal(6)), entmax_np(x, SPARSE_ALPHA[name], causal(6), taus=taus), atol=1e-10, rtol=1e-9)


def test_entmax_alpha_parameterisation_and_default():
    s = make("entmax_alpha")
    assert isinstance(s.alpha_logit, torch.nn.Parameter)
    assert torch.equal(s.alpha, torch.full((H,), 1.5))  # default: a = 0, α = 1 + sigmoid(0)
    fixed = make("entmax_alpha", learn_alpha=False, alpha=1.25)
    assert "alpha_logit" in fixed.state_dict() and "alpha_logit" not in dict(fixed.named_parameters())
    close(fixed.alpha, np.full(H, 1.25), rtol=1e-6)

    a = np.array([-2.0, 0.0, 1.5])
    alphas = 1.0 + 1.0 / (1.0 + np.exp(-a))
    s = s.double()
    set_param(s.alpha_logit, a)
    close(s.alpha, alphas)
    x = randn(2, H, 6, 6, seed=7, scale=2.0)
    mask = causal(6)
    close(s(x, mask), entmax_np(x, alphas, mask), atol=1e-10, rtol=1e-9)


def test_entmax_alpha_at_one_point_five_equals_entmax15():
    x = randn(2, H, 8, 8, seed=8, scale=2.0)
    mask = causal(8)
    # float64: bisection (>= 60 iterations) against the exact sort-based 1.5-entmax
    close(make("entmax_alpha").double()(x, mask), make("entmax15").double()(x, mask), atol=1e-10, rtol=0)
    # float32 with the configured 24 iterations: the bisection tolerance
    xf = x.float()
    close(make("entmax_alpha")(xf, mask), make("entmax15")(xf, mask), atol=2e-6, rtol=0)


@pytest.mark.parametrize("name", list(SPARSE_ALPHA))
def test_sparse_shift_invariant(name):
    s = make(name).double()
    x = randn(2, H, 6, 6, seed=9, scale=1.5)
    mask = causal(6)
    w = s(x, mask)
    for c in (-3.0, 0.5, 7.0):
        close(s(x + c, mask), w, atol=1e-10, rtol=0, msg=f"shift {c}")


@pytest.mark.parametrize("name", list(SPARSE_ALPHA))
def test_sparse_exact_zeros(name):
    s = make(name)
    # a large gap: one-hot, the others exactly 0
    x = torch.zeros(1, H, 1, 8)
    x[..., 3] = 5.0
    x[..., 5] = -2.0
    w = s(x, None)
    assert (w[..., 3] - 1).abs().max() <= 1e-6, w
    others = torch.cat([w[..., :3], w[..., 4:]], -1)
    assert (others == 0).all(), w
    # spread-out logits: the support is exactly the reference's (zeros are exact zeros)
    xr = randn(2, H, 8, 8, seed=10, scale=3.0)
    w = s.double()(xr, causal(8))
    ref = entmax_np(xr, SPARSE_ALPHA[name], causal(8))
    assert ((ref == 0) & causal(8).numpy()).sum() > 10, "expected sparse rows at these logit scales"
    np.testing.assert_array_equal(np_(w) == 0, ref == 0)


# ----------------------------------------------------------------------------- SSMax
def ssmax_np(x, s_heads, mask) -> np.ndarray:
    x = np_(x)
    n = counts(mask, x.shape)
    return softmax_np(np.asarray(s_heads).reshape(-1, 1, 1) * np.log(n) * x, mask)


S_HEADS = np.array([0.43, 1.0, 2.0])


def test_ssmax_causal_uses_per_row_count():
    s = make("ssmax").double()
    set_param(s.s, S_HEADS)
    x = randn(2, H, 7, 7, seed=11, scale=1.5)
    mask = causal(7)
    w = s(x, mask)
    # float32 log(n_i) inside the module: ~1e-7 relative
    close(w, ssmax_np(x, S_HEADS, mask), atol=1e-7, rtol=1e-6)
    assert (w[..., 0, 0] == 1).all()  # row 0: n = 1, log 1 = 0, one key
    # n_i = i + 1, explicitly
    n = np.arange(1, 8, dtype=np.float64)[:, None]
    close(w, softmax_np(S_HEADS.reshape(-1, 1, 1) * np.log(n) * np_(x), mask), atol=1e-7, rtol=1e-6)
    # and not T for every row (one public version's mistake)
    wrong = softmax_np(S_HEADS.reshape(-1, 1, 1) * np.log(7.0) * np_(x), mask)
    assert np.abs(np_(w) - wrong).max() > 1e-2


def test_ssmax_no_mask_uses_number_of_keys_and_padding_counts():
    s = make("ssmax").double()
    set_param(s.s, S_HEADS)
    x = randn(2, H, 4, 9, seed=12, scale=1.5)  # T = 4 queries, S = 9 keys: n = S
    close(s(x, None), softmax_np(S_HEADS.reshape(-1, 1, 1) * np.log(9.0) * np_(x)), atol=1e-7, rtol=1e-6)
    mask = padding_mask(2, 4, 9, seed=13)
    close(s(x, mask), ssmax_np(x, S_HEADS, mask), atol=1e-7, rtol=1e-6)


def test_ssmax_default_s_float32():
    s = make("ssmax")
    assert isinstance(s.s, torch.nn.Parameter)
    close(s.s, np.full(H, 0.43), rtol=1e-7)
    x = randn(1, H, 6, 6, seed=14).float()
    close(s(x, causal(6)), ssmax_np(x, np.full(H, 0.43), causal(6)), atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- SA-Softmax
def sa_softmax_np(x, mask=None) -> np.ndarray:
    x = np_(x)
    m = full_mask(mask, x.shape)
    lo = np.minimum(np.where(m, x, np.inf).min(-1, keepdims=True), 0.0)
    hi = np.maximum(np.where(m, x, -np.inf).max(-1, keepdims=True), 0.0)
    w = softmax_np(x, m) * (x - lo) / (hi - lo)
    return np.where(m, w, 0.0)


def test_sa_softmax_matches_reference_without_renormalisation():
    s = make("sa_softmax")
    x = randn(2, H, 7, 7, seed=15, scale=1.5)
    for mask in (causal(7), causal(7) & padding_mask(2, 7, 7, seed=16), None):
        w = s(x, mask)
        ref = sa_softmax_np(x, mask)
        close(w, ref, atol=1e-12, rtol=1e-10)
        sums = np_(w).sum(-1)
        assert (sums <= 1 + 1e-12).all() and (np_(w) >= 0).all()
        assert (sums[..., 1:] < 1 - 1e-6).any()  # not renormalised


def test_sa_softmax_first_query():
    s = make("sa_softmax")
    x = torch.zeros(1, 2, 3, 3, dtype=torch.float64)
    x[0, 0, 0, 0] = 0.7
    x[0, 1, 0, 0] = -0.7
    w = s(x, causal(3))
    assert w[0, 0, 0, 0].item() == pytest.approx(1.0, abs=1e-15)
    assert w[0, 1, 0, 0].item() == 0.0  # exactly: this query reads nothing


def test_sa_softmax_mean_row_sum_at_standard_normal_logits():
    x = randn(1, 1, 4000, 16, seed=17)
    w = make("sa_softmax", n_head=1)(x, None)
    close(w, sa_softmax_np(x), atol=1e-12, rtol=1e-10)
    mean = np_(w).sum(-1).mean()
    # measured 0.741 (seed 17); scorers.md quotes "about 0.7"
    assert 0.68 < mean < 0.80, f"SA-Softmax mean row sum at N(0,1) logits, 16 keys: {mean:.4f}"


def test_sa_softmax_all_zero_row_gives_zeros():
    x = randn(1, 1, 4, 4, seed=18)
    x[0, 0, 2] = 0.0
    w = make("sa_softmax", n_head=1)(x, None)
    assert torch.isfinite(w).all()
    assert (w[0, 0, 2] == 0).all()


# ----------------------------------------------------------------------------- CosFormer
M = 16


def cosformer_np(q, k, mask, m) -> np.ndarray:
    q, k = np.maximum(np_(q), 0), np.maximum(np_(k), 0)
    t, s = q.shape[-2], k.shape[-2]
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    a = np.einsum("bhid,bhjd->bhij", q, k) * np.cos(np.pi / 2 * (i - j) / m)
    a = np.where(full_mask(mask, a.shape), a, 0.0)
    den = a.sum(-1, keepdims=True)
    return np.divide(a, den, out=np.zeros_like(a), where=den > 0)


def qkv(t, seed, d=4):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, H, t, d, generator=g, dtype=torch.float64) for _ in range(3))
    q[0, 1, 3] = -q[0, 1, 3].abs()  # relu(q) = 0: this query attends to nothing
    return q, k, v


def test_cosformer_weights_match_reference():
    s = make("cosformer", m=M)
    q, k, _ = qkv(7, seed=19)
    w = s.weights(q, k, causal(7))
    ref = cosformer_np(q, k, causal(7), M)
    close(w, ref, atol=1e-13, rtol=1e-11)
    assert (w[0, 1, 3] == 0).all()
    # each row sums to 1, or is all zeros where relu(q_i)·relu(k_j) = 0 on every visible key
    sums = np_(w).sum(-1)
    assert np.all((np.abs(sums - 1) < 1e-13) | (sums == 0)), sums
    assert (sums == 0).sum() < 6


def test_cosformer_linear_form_equals_quadratic(monkeypatch):
    q, k, v = qkv(9, seed=20)
    mask = causal(9)
    quad = make("cosformer", m=M)
    lin = make("cosformer", m=M, form="linear")
    ref_w = cosformer_np(q, k, mask, M)
    ref_out = ref_w @ np_(v)

    out_w, w = lin.attend(q, k, v, mask, is_causal=True, need_weights=True)
    close(w, ref_w, atol=1e-13, rtol=1e-11)
    close(out_w, ref_out, atol=1e-13, rtol=1e-11)
    out_q, none = quad.attend(q, k, v, mask, is_causal=True)
    assert none is None
    close(out_q, ref_out, atol=1e-13, rtol=1e-11)

    def no_quadratic(*args, **kwargs):
        raise AssertionError("form=linear with is_causal=True must not build the T×T weights")

    monkeypatch.setattr(lin, "weights", no_quadratic)
    out_l, none = lin.attend(q, k, v, mask, is_causal=True)
    assert none is None
    close(out_l, ref_out, atol=1e-12, rtol=1e-10)
    close(out_l, out_q, atol=1e-12, rtol=1e-10)
    assert (out_l[0, 1, 3] == 0).all()  # the zero-relu(q) query reads nothing here too


def test_cosformer_weights_do_not_depend_on_total_length():
    t = 6
    q, k, v = qkv(t + 3, seed=21)
    for form in ("quadratic", "linear"):
        s = make("cosformer", m=M, form=form)
        short = s.weights(q[..., :t, :], k[..., :t, :], causal(t))
        long = s.weights(q, k, causal(t + 3))
        close(long[..., :t, :t], short, atol=1e-15, rtol=1e-13)
        assert (long[..., :t, t:] == 0).all()
        out_short, _ = s.attend(q[..., :t, :], k[..., :t, :], v[..., :t, :], causal(t), is_causal=True)
        out_long, _ = s.attend(q, k, v, causal(t + 3), is_causal=True)
        close(out_long[..., :t, :], out_short, atol=1e-13, rtol=1e-11)
    # with M tied to the length (the official code) they would: the cos term is active
    w_m9 = make("cosformer", m=t + 3).weights(q, k, causal(t + 3))[..., :t, :t]
    w_m6 = make("cosformer", m=t).weights(q[..., :t, :], k[..., :t, :], causal(t))
    assert (w_m9 - w_m6).abs().max() > 1e-3


def test_cosformer_zero_relu_query_row_is_all_zero():
    s = make("cosformer", m=M)
    q, k, _ = qkv(5, seed=22)
    q[1, 2, 4] = -torch.rand(4, dtype=torch.float64) - 0.1
    w = s.weights(q, k, causal(5))
    assert (w[1, 2, 4] == 0).all() and torch.isfinite(w).all()


def test_cosformer_errors():
    q, k, v = qkv(M + 1, seed=23)
    for form in ("quadratic", "linear"):
        s = make("cosformer", m=M, form=form)
        with pytest.raises(ValueError, match="scorer.m"):
            s.weights(q, k, causal(M + 1))
        with pytest.raises(ValueError, match="scorer.m"):
            s.attend(q, k, v, causal(M + 1), is_causal=True)
    with pytest.raises(TypeError):
        make("cosformer", m=M)(torch.zeros(1, H, 2, 2), None)


# ----------------------------------------------------------------------------- hybrid
@pytest.mark.parametrize(
    "heads,n_head,expected",
    [
        (["softmax", "average"], 4, ["softmax", "softmax", "average", "average"]),
        (["softmax", "average"], 3, ["softmax", "softmax", "average"]),
        (["softmax", "average"], 2, ["softmax", "average"]),
        (
            ["tanh", "average", "relu", "softmax"],
            8,
            ["tanh"] * 2 + ["average"] * 2 + ["relu"] * 2 + ["softmax"] * 2,
        ),
        (["tanh", "average", "relu", "softmax"], 6, ["tanh", "tanh", "average", "relu", "relu", "softmax"]),
        (["average"], 3, ["average"] * 3),
    ],
)
def test_hybrid_head_assignment(heads, n_head, expected):
    from ssa_repro.scorers.hybrid import assign

    rule = [heads[math.floor(h * len(heads) / n_head)] for h in range(n_head)]
    assert rule == expected
    assert assign(heads, n_head) == expected
    assert make("hybrid", n_head, heads=heads).per_head == expected


ELEMENTWISE = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("mask_kind", ["causal", "padding", "per_head", "none"])
def test_hybrid_each_function_matches_definition(mask_kind):
    names = ["softmax", "average", "tanh", "relu", "sigmoid"]
    nh = len(names)
    s = make("hybrid", nh, heads=names)
    x = randn(2, nh, 6, 6, seed=24, scale=2.0)
    mask = {
        "causal": causal(6),
        "padding": causal(6) & padding_mask(2, 6, 6, seed=25),
        "per_head": causal(6) & (torch.rand(2, nh, 6, 6, generator=torch.Generator().manual_seed(26)) < 0.7),
        "none": None,
    }[mask_kind]
    if mask is not None:
        mask[..., 0] = True
    w = np_(s(x, mask))
    xn = np_(x)
    m = full_mask(mask, xn.shape)
    n = counts(mask, xn.shape)
    for h, name in enumerate(names):
        if name == "softmax":
            ref = softmax_np(xn[:, h], m[:, h])
            close(w[:, h], ref, atol=1e-14, rtol=1e-12, msg=name)
        elif name == "average":
            ref = np.where(m[:, h], 1.0 / n[:, h], 0.0)
            np.testing.assert_array_equal(w[:, h], ref)  # exactly 1/n_i
        else:
            ref = np.where(m[:, h], ELEMENTWISE[name](xn[:, h]) / n[:, h], 0.0)
            close(w[:, h], ref, atol=1e-15, rtol=1e-13, msg=name)


@pytest.mark.parametrize(
    "heads,n_head,expected",
    [
        (["softmax", "average"], 4, True),
        (["average"], 2, True),
        (["softmax"], 2, True),
        (["softmax", "tanh"], 2, False),
        (["relu", "average"], 4, False),
        (["sigmoid"], 1, False),
        (["tanh", "average", "relu", "softmax"], 8, False),
    ],
)
def test_hybrid_rows_sum_to_one_flag(heads, n_head, expected):
    s = make("hybrid", n_head, heads=heads)
    assert s.rows_sum_to_one is expected
    if expected:
        w = s(randn(1, n_head, 5, 5, seed=27), causal(5))
        close(w.sum(-1), np.ones((1, n_head, 5)), atol=1e-14)


def test_hybrid_check_config():
    check = SCORERS.get("hybrid").check_config
    problems = check(scorer_cfg("hybrid", heads=["softmax", "gelu"]), 4)
    text = " ".join(problems)
    assert "gelu" in text and all(f in text for f in ("softmax", "average", "tanh", "relu", "sigmoid")), (
        problems
    )
    problems = check(scorer_cfg("hybrid", heads=["softmax", "average", "tanh"]), 2)
    assert problems and "model.n_head=2" in " ".join(problems), problems
    assert check(scorer_cfg("hybrid", heads=[]), 2)
    assert check(scorer_cfg("hybrid", heads=["tanh", "average", "relu", "softmax"]), 4) == []


# ----------------------------------------------------------------------------- softplus (approximate)
def softplus_np(x, mask, c, p) -> np.ndarray:
    x = np_(x)
    m = full_mask(mask, x.shape)
    z = c * np.log(counts(mask, x.shape)) * x
    sp = np.where(m, np.logaddexp(0.0, z), 0.0)  # softplus(z) = log(1 + e^z)
    w = sp / sp.sum(-1, keepdims=True)
    wp = w**p
    return wp / wp.sum(-1, keepdims=True)


@pytest.mark.parametrize("c", [1.0, 0.5])
@pytest.mark.parametrize("p", [1.0, 3.0])
def test_softplus_matches_reference(c, p):
    s = make("softplus", scale=c, power=p)
    x = randn(2, H, 7, 7, seed=28, scale=2.0)
    for mask in (causal(7), causal(7) & padding_mask(2, 7, 7, seed=29), None):
        w = s(x, mask)
        close(w, softplus_np(x, mask, c, p), atol=1e-7, rtol=1e-6)  # float32 log(n_i) inside
    assert (s(x, causal(7))[..., 0, 0] == 1).all()


@pytest.mark.parametrize("c", [1.0, 0.5])
@pytest.mark.parametrize("p", [1.0, 3.0])
def test_softplus_underflowing_rows_take_the_limit(c, p):
    assert torch.nn.functional.softplus(torch.tensor(-1e4)).item() == 0.0  # the premise, in float32
    t = 6
    offsets = randn(1, H, t, t, seed=30)
    x = -1e4 + offsets
    mask = causal(t)
    limit = softmax_np(p * c * np.log(counts(mask, x.shape)) * np_(x), mask)
    w = make("softplus", scale=c, power=p)(x, mask)
    close(w, limit, atol=1e-7, rtol=1e-6)
    wf = make("softplus", scale=c, power=p)(x.float(), mask)
    assert torch.isfinite(wf).all()
    close(wf.sum(-1), np.ones((1, H, t)), atol=1e-5)
    limit32 = softmax_np(p * c * np.log(counts(mask, x.shape)) * np_(x.float()), mask)
    close(wf, limit32, atol=1e-3, rtol=0)  # float32 products of size ~1e4: measured max error 4e-4


@pytest.mark.parametrize(
    "overrides,key",
    [
        (dict(power=0.5), "scorer.power"),
        (dict(scale=0.0), "scorer.scale"),
        (dict(scale=-1.0), "scorer.scale"),
    ],
)
def test_softplus_check_config(overrides, key):
    check = SCORERS.get("softplus").check_config
    problems = check(scorer_cfg("softplus", **overrides), H)
    assert problems and key in " ".join(problems), problems
    assert check(scorer_cfg("softplus", power=1.0, scale=0.5), H) == []


# ----------------------------------------------------------------------------- SSA parameterisations and presets
def ssa_literal_np(x, b, n, mask) -> np.ndarray:
    x = np_(x)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 1, 1)
    n = np.asarray(n, dtype=np.float64).reshape(-1, 1, 1)
    p = np.power(1.0 + b * np.abs(x), np.sign(x) * n)
    p = np.where(full_mask(mask, x.shape), p, 0.0)
    return p / p.sum(-1, keepdims=True)


@pytest.mark.parametrize("b_init,n_init", [(0.8, 1.5), (math.e, math.exp(0.4)), (0.5, 1.0)])
@pytest.mark.parametrize("param", ["exp", "raw"])
def test_ssa_public_parameterisations_init(param, b_init, n_init):
    assert (
        SCORERS.get("ssa").check_config(scorer_cfg("ssa", param=param, b_init=b_init, n_init=n_init), H) == []
    )
    s = make("ssa", param=param, b_init=b_init, n_init=n_init)
    close(s.b, np.full(H, b_init), rtol=1e-6)
    close(s.n, np.full(H, n_init), rtol=1e-6)
    stored = (np.log(b_init), np.log(n_init)) if param == "exp" else (b_init, n_init)
    close(s.beta, np.full(H, stored[0]), rtol=1e-6, atol=1e-7)
    close(s.nu, np.full(H, stored[1]), rtol=1e-6, atol=1e-7)


def test_ssa_exp_and_raw_build_with_n_init_below_one():
    for param in ("exp", "raw"):
        cfg = scorer_cfg("ssa", param=param, n_init=0.7)
        assert SCORERS.get("ssa").check_config(cfg, H) == []
        close(build_scorer(cfg, H).n, np.full(H, 0.7), rtol=1e-6)


@pytest.mark.parametrize(
    "param,beta,nu",
    [
        ("exp", [-0.5, 0.2, 1.0], [-0.3, 0.4, 1.2]),  # n = exp(-0.3) < 1 is allowed here
        ("raw", [0.3, 0.8, 2.0], [0.7, 1.5, 3.0]),
    ],
)
def test_ssa_public_parameterisations_weights(param, beta, nu):
    s = make("ssa", param=param).double()
    set_param(s.beta, beta)
    set_param(s.nu, nu)
    b, n = (np.exp(beta), np.exp(nu)) if param == "exp" else (np.array(beta), np.array(nu))
    close(s.b, b)
    close(s.n, n)
    x = randn(2, H, 6, 6, seed=31, scale=2.0)
    mask = causal(6)
    close(s(x, mask), ssa_literal_np(x, b, n, mask), atol=1e-13, rtol=1e-11)


PRESETS = {
    # preset: (label, per_head, param, b, n, learn_b, learn_n)
    "ssa": ("ssa", True, "constrained", 1.0, 1.5, True, True),
    "ssa_n1.5": ("ssa_n1.5", True, "constrained", 1.0, 1.5, True, False),
    "ssa_n2": ("ssa_n2", True, "constrained", 1.0, 2.0, True, False),
    "ssa_nanogpt": ("ssa_nanogpt", False, "exp", math.e, math.exp(0.4), True, True),
    "ssa_triton": ("ssa_triton", False, "raw", 0.8, 1.5, False, True),
}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_ssa_yaml_presets_compose_and_build(preset):
    label, per_head, param, b, n, learn_b, learn_n = PRESETS[preset]
    cfg = make_cfg(f"scorer={preset}")
    sc = cfg.scorer
    assert sc.name == "ssa" and sc.label == label
    assert sc.per_head is per_head and value_of(sc.param) == param
    assert sc.b_init == pytest.approx(b, rel=1e-15) and sc.n_init == pytest.approx(n, rel=1e-15)
    assert (sc.learn_b, sc.learn_n) == (learn_b, learn_n)
    n_head = cfg.model.n_head
    assert SCORERS.get("ssa").check_config(sc, n_head) == []
    s = build_scorer(sc, n_head)
    size = n_head if per_head else 1
    assert s.b.shape == (size,) and s.n.shape == (size,)
    close(s.b, np.full(size, b), rtol=1e-6)
    close(s.n, np.full(size, n), rtol=1e-6)
    params = dict(s.named_parameters())
    assert ("beta" in params, "nu" in params) == (learn_b, learn_n)
    assert {"beta", "nu"} <= set(s.state_dict())
    x = randn(1, n_head, 5, 5, seed=32).float()
    close(
        s(x, causal(5)),
        ssa_literal_np(x, np.full(n_head, b), np.full(n_head, n), causal(5)),
        atol=2e-6,
        rtol=1e-5,
    )


# ----------------------------------------------------------------------------- saturation (scorers.md)
GAPS = [(16, 5), (16, 10), (16, 20), (80, 20)]


def one_above(n: int, gap: float) -> torch.Tensor:
    x = torch.zeros(1, 1, 1, n)
    x[..., 0] = gap
    return x


@pytest.mark.parametrize("name", ["sparsemax", "entmax15"])
def test_saturation_sparse_one_hot(name):
    s = make(name, n_head=1)
    for n, gap in GAPS:
        w = s(one_above(n, gap), None)[0, 0, 0]
        assert round(w[0].item(), 3) == 1.0, (name, n, gap, w[0].item())
        assert (w[1:] == 0).all(), (name, n, gap)


def test_saturation_ssmax():
    s = make("ssmax", n_head=1)  # s = 0.43 by default; no mask, so n_i = N
    expected = [0.963, 1.000, 1.000, 1.000]
    for (n, gap), e in zip(GAPS, expected):
        w0 = s(one_above(n, gap), None)[0, 0, 0, 0].item()
        assert round(w0, 3) == pytest.approx(e, abs=1e-9), (n, gap, w0)
        big = n ** (0.43 * gap)  # e^(s·log N·g)
        assert w0 == pytest.approx(big / (big + n - 1), abs=1e-6)


def test_saturation_hybrid_all_average():
    s = make("hybrid", n_head=2, heads=["average"])
    for n, gap in GAPS:
        w = s(one_above(n, gap).expand(1, 2, 1, n), None)
        assert (w == 1.0 / n).all(), (n, gap)
