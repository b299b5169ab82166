"""The length-aware scorers against float64 references: the Llama-4 and Qwen log-n query temperatures
(scorers/logn.py) and gated attention's sigmoid output gate (scorers/gated.py). The shared contract
(tests/test_scorers.py) covers them as registered scorers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.models.attention import SelfAttention
from ssa_repro.scorers import SCORERS, build_scorer


def cfg(name: str, **kw):
    c = OmegaConf.structured(SCORERS.schemas[name])
    for k, v in kw.items():
        c[k] = v
    return c


def softmax64(z, mask):
    z = np.where(mask, z, -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("rule,beta,length", [("llama4", 0.1, 4), ("llama4", 0.5, 3), ("qwen", 0.0, 4)])
def test_logn_matches_float64_formula(rule, beta, length):
    s = build_scorer(cfg("logn", rule=rule, beta=beta, length=length), 2)
    t = 20
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, t, t, generator=g, dtype=torch.float64) * 3
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    ours = s(x, mask).numpy()
    for i in range(t):
        if rule == "llama4":
            scale = 1 + beta * math.log(math.floor((i + 1) / length) + 1)
        else:
            scale = max(1.0, math.log(i + 1) / math.log(length))
        ref = softmax64(scale * x[0, :, i].numpy(), mask[i].numpy())
        np.testing.assert_allclose(ours[0, :, i], ref, atol=1e-12)
    if rule == "llama4":  # the first L₀ positions are plain softmax
        np.testing.assert_allclose(
            ours[0, :, : length - 1],
            softmax64(x[0, :, : length - 1].numpy(), mask[: length - 1].numpy()),
            atol=1e-12,
        )


def test_logn_score_mod_is_the_same_scale():
    s = build_scorer(cfg("logn", rule="qwen", length=4), 2)
    mod = s.score_mod()
    x = torch.tensor(1.5)
    for i in (0, 3, 10, 99):
        want = max(1.0, math.log(i + 1) / math.log(4)) * 1.5
        assert mod(x, 0, 0, torch.tensor(i), torch.tensor(0)).item() == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_gated_output_is_softmax_attention_times_sigmoid_gate_float64(gate):
    torch.manual_seed(0)
    h, c, t = 2, 8, 5
    attn = SelfAttention(c, h, cfg("gated", gate=gate)).double()
    x = torch.randn(3, t, c, dtype=torch.float64)
    out, _ = attn(x)
    # reference: per head softmax(q kᵀ/√d) v, times sigmoid(x W_g + b_g) (per channel or per head), then proj
    d = c // h
    qkv = x.numpy() @ attn.qkv.weight.detach().numpy().T + attn.qkv.bias.detach().numpy()
    q, k, v = np.split(qkv, 3, axis=-1)
    gl = x.numpy() @ attn.scorer.gate.weight.detach().numpy().T + attn.scorer.gate.bias.detach().numpy()
    gs = 1 / (1 + np.exp(-gl))
    mask = np.tril(np.ones((t, t), dtype=bool))
    y = np.zeros((3, t, c))
    for head in range(h):
        sl = slice(head * d, (head + 1) * d)
        w = softmax64(q[..., sl] @ k[..., sl].transpose(0, 2, 1) / math.sqrt(d), mask)
        yh = w @ v[..., sl]
        y[..., sl] = yh * (gs[..., sl] if gate == "elementwise" else gs[..., head : head + 1])
    ref = y @ attn.proj.weight.detach().numpy().T + attn.proj.bias.detach().numpy()
    np.testing.assert_allclose(out.detach().numpy(), ref, atol=1e-12)


# ----------------------------------------------------------------------------- ASEntmax
def entmax64(z: np.ndarray, alpha: float) -> np.ndarray:
    """α-entmax of one row by bisection on τ, in float64 (independent of the entmax package):
    p_j = [(α − 1) z_j − τ]_+^{1/(α−1)} with Σ p = 1; −inf entries get 0."""
    y = (alpha - 1) * z[np.isfinite(z)]
    lo, hi = y.max() - 1.0, y.max()  # Σp ≥ 1 at lo (the max entry alone gives 1), 0 at hi
    for _ in range(200):
        tau = (lo + hi) / 2
        if (np.clip(y - tau, 0, None) ** (1 / (alpha - 1))).sum() >= 1:
            lo = tau
        else:
            hi = tau
    p = np.zeros_like(z)
    p[np.isfinite(z)] = np.clip(y - lo, 0, None) ** (1 / (alpha - 1))
    return p / p.sum()


@pytest.mark.parametrize("alpha", [1.5, 1.3])
@pytest.mark.parametrize("with_bias", [False, True])
def test_asentmax_matches_float64_formula(alpha, with_bias):
    h, d, t = 2, 4, 9
    s = build_scorer(cfg("asentmax", alpha=alpha), h, n_embd=h * d).double()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # parameters away from init, so β, γ vary by query and head
        for p in s.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.7)
    q = torch.randn(2, h, t, d, generator=g, dtype=torch.float64) * 2
    k = torch.randn(2, h, t, d, generator=g, dtype=torch.float64) * 2
    bias = torch.randn(h, t, t, generator=g, dtype=torch.float64) if with_bias else None
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    ours = s.weights(q, k, mask, bias).detach().numpy()
    qn, kn = q.numpy(), k.numpy()
    wa, ba, wg, bg = (p.detach().numpy() for p in (s.w_a, s.b_a, s.w_g, s.b_g))
    for b in range(2):
        for hd in range(h):
            for i in range(t):
                beta = math.log1p(math.exp(wa[hd] @ qn[b, hd, i] + ba[hd]))
                gamma = 2.0 * math.tanh(wg[hd] @ qn[b, hd, i] + bg[hd])
                scale = 1.0 + beta * math.log(i + 2) ** gamma  # n_i = i + 1 visible keys
                z = scale * (kn[b, hd] @ qn[b, hd, i]) / math.sqrt(d)
                if with_bias:
                    z = z + bias[hd, i].numpy()
                z = np.where(mask[i].numpy(), z, -np.inf)
                np.testing.assert_allclose(ours[b, hd, i], entmax64(z, alpha), atol=1e-7)
    assert (ours == 0).any()  # sparse: some visible keys get exactly 0


def test_asentmax_refuses_bad_config_and_logits_alone():
    c = cfg("asentmax", alpha=1.0, delta=-1.0, gamma_range=-0.5, n_iter=0)
    problems = SCORERS.get("asentmax").check_config(c, 2)
    for key in ("scorer.alpha=1.0", "scorer.delta=-1.0", "scorer.gamma_range=-0.5", "scorer.n_iter=0"):
        assert any(key in p for p in problems), (key, problems)
    s = build_scorer(cfg("asentmax"), 2, n_embd=8)
    with pytest.raises(TypeError, match="weights\\(q, k, mask\\)"):
        s(torch.zeros(1, 2, 3, 3), None)
