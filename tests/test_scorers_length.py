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
