"""The recent scorers (sigmoid, softpick, stickbreaking, cog, softmax_sink, relu_len, diff), each checked
against an independent float64 numpy reference written from its paper's formula (loops or plain
numpy, never the package's helpers), with a causal mask, a padding mask and no mask, and the
properties each definition implies. tests/test_scorers.py checks the generic contract for them.

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
from tests.conftest import make_cfg

H = 3
RECENT = ["sigmoid", "softpick", "stickbreaking", "cog", "softmax_sink", "relu_len", "diff"]


# ----------------------------------------------------------------------------- helpers
def scorer_cfg(name: str, **overrides):
    cfg = OmegaConf.structured(SCORERS.schemas[name])
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def make(name: str, n_head: int = H, layer: int = 0, **overrides):
    return build_scorer(scorer_cfg(name, **overrides), n_head, layer=layer)


def causal(t: int) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()


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


# ----------------------------------------------------------------------------- all of them
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


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_sigmoid_matches_reference(mask_kind):
    x = randn(2, H, 7, 7, seed=1, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    close(make("sigmoid").double()(x, mask), sigmoid_np(x, mask))
    # n_i = i + 1 under the causal mask, by hand
    if mask_kind == "causal":
        n = np.arange(1, 8)[:, None]
        close(make("sigmoid").double()(x, mask), np.tril(sigm(np_(x) - np.log(n))))


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


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_softpick_matches_paper_formula(mask_kind):
    x = randn(2, H, 7, 7, seed=5, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    close(make("softpick", eps=0.0).double()(x, mask), softpick_literal_np(x, mask), atol=1e-15, rtol=1e-12)
    # with the default ε, as the reference computes it (rows here have a positive max)
    close(make("softpick").double()(x, mask), softpick_reference_form_np(x, mask), atol=1e-15, rtol=1e-12)


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


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_stickbreaking_matches_reference(mask_kind, attend_current):
    x = randn(2, H, 7, 7, seed=8, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    s = make("stickbreaking", attend_current=attend_current).double()
    close(s(x, mask), stickbreaking_np(x, mask, attend_current), atol=1e-15, rtol=1e-12)


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


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_cog_matches_reference(mask_kind):
    x = randn(2, H, 7, 7, seed=12, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    close(make("cog").double()(x, mask), cog_np(x, mask), atol=1e-15, rtol=1e-12)


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
def test_softmax_sink_at_s_zero_is_softmax_one(mask_kind):
    x = randn(2, H, 7, 7, seed=14, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    w = make("softmax_sink").double()(x, mask)
    m = visible(mask, x.shape)
    e = np.where(m, np.exp(np_(x)), 0.0)
    close(w, e / (1.0 + e.sum(-1, keepdims=True)), atol=1e-15, rtol=1e-12)  # e^x / (1 + Σ e^x)
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
@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_relu_len_matches_reference(mask_kind):
    x = randn(2, H, 7, 7, seed=18, scale=2.0)
    mask = MASKS[mask_kind](2, 7)
    m = visible(mask, x.shape)
    ref = np.where(m, np.maximum(np_(x), 0.0) / m.sum(-1, keepdims=True), 0.0)
    w = make("relu_len").double()(x, mask)
    close(w, ref, atol=0, rtol=1e-15)
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
