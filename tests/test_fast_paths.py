"""Fast paths against plain paths: SSA's fused autograd node, SDPA, FlexAttention score_mods and the
whole model with ``model.attn_impl=auto|eager``. Outputs and gradients must agree to float32 rounding;
the SSA node's backward is also checked by finite differences (gradcheck, float64)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.models import build_model
from ssa_repro.scorers import SCORERS, build_scorer
from ssa_repro.scorers.base import Scorer
from ssa_repro.scorers.ssa import SSAWeights
from ssa_repro.training import validate
from tests.conftest import make_cfg

FAST = [n for n in SCORERS.names() if SCORERS.get(n).attend is not Scorer.attend]
SSA_VARIANTS = [
    {},
    {"per_head": False},
    {"param": "exp", "b_init": 2.0, "n_init": 0.8},
    {"param": "raw", "b_init": 0.8, "n_init": 1.5},
    {"learn_b": False},
    {"learn_n": False, "n_init": 2.0},
]


def scorer(name, n_head=4, **kw):
    cfg = OmegaConf.structured(SCORERS.schemas[name])
    for k, v in kw.items():
        cfg[k] = v
    s = build_scorer(cfg, n_head)
    torch.manual_seed(1)
    with torch.no_grad():  # move off the initial values, so per-head parameters differ
        for p in list(s.parameters()) + [b for b in s.buffers() if b.is_floating_point()]:
            p.add_(0.2 * torch.randn_like(p))
    return s


def run(attend, s, q, k, v, mask, causal, go):
    for t in (q, k, v, *s.parameters()):
        t.grad = None
    y, _ = attend(q, k, v, mask, is_causal=causal)
    y.backward(go)
    return [y.detach()] + [t.grad.clone() for t in (q, k, v, *s.parameters())]


def assert_close(fast, plain):
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "name,kw", [(n, {}) for n in FAST if n != "ssa"] + [("ssa", kw) for kw in SSA_VARIANTS]
)
def test_fast_attend_equals_plain_path(name, kw, causal):
    s = scorer(name, **kw)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, 9, 8, generator=g, requires_grad=True) for _ in range(3))
    go = torch.randn(3, 4, 9, 8, generator=g)
    mask = torch.ones(9, 9, dtype=torch.bool).tril() if causal else None
    fast = run(s.attend, s, q, k, v, mask, causal, go)
    plain = run(Scorer.attend.__get__(s), s, q, k, v, mask, causal, go)
    assert_close(fast, plain)


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("shape", [(3, 1, 1), (1, 1, 1)])
def test_ssa_node_gradcheck(masked, shape):
    g = torch.Generator().manual_seed(0)
    x = (2 * torch.randn(1, 3, 4, 4, generator=g, dtype=torch.float64)).requires_grad_()
    with torch.no_grad():
        x[0, 0, 2, 1] = 0.0  # t'(0) = n·b exactly
    b = (0.3 + torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    n = (1 + torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    mask = torch.ones(4, 4, dtype=torch.bool).tril() if masked else None
    assert torch.autograd.gradcheck(lambda x, b, n: SSAWeights.apply(x, b, n, mask), (x, b, n))
    # and without gradients for b and n (fixed parameters): only x's gradient is computed
    b2, n2 = b.detach(), n.detach()
    assert torch.autograd.gradcheck(lambda x: SSAWeights.apply(x, b2, n2, mask), (x,))


def test_ssa_node_equals_float64_formula():
    """w = softmax(n·sgn(x)·log1p(b|x|)) over visible keys, from an independent float64 expression."""
    g = torch.Generator().manual_seed(3)
    x = 5 * torch.randn(2, 3, 6, 6, generator=g)
    b, n = torch.tensor([0.5, 1.0, 2.0]).view(3, 1, 1), torch.tensor([1.0, 1.5, 3.0]).view(3, 1, 1)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    x64 = x.double()
    p = (1 + b.double() * x64.abs()) ** (torch.sign(x64) * n.double())
    p = p * mask
    ref = p / p.sum(-1, keepdim=True)
    torch.testing.assert_close(SSAWeights.apply(x, b, n, mask).double(), ref, rtol=1e-5, atol=1e-7)
    assert (SSAWeights.apply(x, b, n, mask)[..., ~mask] == 0).all()


def test_ssa_node_is_float32_under_bf16_autocast():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 5, generator=g)
    b, n = torch.ones(3, 1, 1), torch.full((3, 1, 1), 1.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        w = SSAWeights.apply(x, b, n, None)
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, SSAWeights.apply(x, b, n, None))


@pytest.mark.parametrize("name", ["softmax", "ssa", "ssa_nanogpt"])
def test_model_auto_and_eager_agree(name):
    cfg = make_cfg(f"scorer={name}", "model.n_layer=2", "model.n_head=4", "model.n_embd=32")
    torch.manual_seed(0)
    fast = build_model(cfg.model, cfg.scorer)
    cfg.model.attn_impl = "eager"
    plain = build_model(cfg.model, cfg.scorer)
    plain.load_state_dict(fast.state_dict())
    tokens = torch.randn(4, 12, 1)
    results = []
    for m in (fast, plain):
        out = m(tokens)
        out.square().mean().backward()
        results.append([out.detach()] + [p.grad for p in m.parameters()])
    assert_close(*results)


@pytest.mark.parametrize("kw", [{}, {"per_head": False}, {"param": "raw", "b_init": 0.8}])
@pytest.mark.parametrize("name", ["softmax", "ssa"])
def test_flex_score_mod_equals_plain_path(name, kw):
    """FlexAttention's forward runs on CPU (its backward needs CUDA): the score_mod gives the plain
    path's output. Uncompiled, i.e. PyTorch's reference implementation of the same semantics."""
    from ssa_repro.scorers.flex import flex_attend

    if name == "softmax" and kw:
        pytest.skip("softmax has no options")
    s = scorer(name, **kw)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g) for _ in range(3))
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = flex_attend(q, k, v, s.score_mod(), causal=True, compiled=False)
        ref, _ = Scorer.attend(s, q, k, v, mask)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)


def test_flex_is_refused_where_it_cannot_run():
    problems = "\n".join(
        validate.problems(make_cfg("model.attn_impl=flex", "scorer=sparsemax", "device=cpu"))
    )
    assert "model.attn_impl=flex needs CUDA" in problems
    assert "scorer.name='sparsemax' is not (allowed: " in problems and "ssa" in problems


def test_bf16_training_runs_on_cpu(tmp_path):
    from ssa_repro.training.metrics_log import read_metrics
    from ssa_repro.training.trainer import train

    train(make_cfg("scorer=ssa", "train.precision=bf16", "evaluation.enabled=false"), tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows and all(math.isfinite(r["loss"]) for r in rows)


@pytest.mark.slow
def test_compiled_training_matches_eager(tmp_path):
    """train.compile=true changes speed, not the numbers (to float32 rounding, over a few steps)."""
    from ssa_repro.training.metrics_log import read_metrics
    from ssa_repro.training.trainer import train

    base = ("scorer=ssa", "evaluation.enabled=false", "train.steps=4")
    train(make_cfg(*base), tmp_path / "eager")
    train(make_cfg(*base, "train.compile=true"), tmp_path / "compiled")
    a = read_metrics(tmp_path / "eager" / "metrics.jsonl")
    b = read_metrics(tmp_path / "compiled" / "metrics.jsonl")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4)


def test_evaluation_in_one_pass_equals_batch_by_batch():
    """predict_batches (many grid cells per forward pass, chunked by memory) gives each batch's own
    predictions, so vectorising the grids changes no number."""
    from ssa_repro.evaluation import inference as common
    from ssa_repro.tasks import build_task

    cfg = make_cfg("scorer=ssa", "task=every")
    model = build_model(cfg.model, cfg.scorer).eval()
    task = build_task(cfg.task)
    g = torch.Generator().manual_seed(0)
    batches = [task.sample(5, 7, g, "cpu") for _ in range(3)]
    joined = common.predict_batches(model, batches)
    old = common.MAX_ACTIVATION_ELEMENTS
    try:
        common.MAX_ACTIVATION_ELEMENTS = 4 * model.wpe.weight.shape[1] * 14 * 2  # 2 prompts per chunk
        chunked = common.predict_batches(model, batches)
    finally:
        common.MAX_ACTIVATION_ELEMENTS = old
    for b, p, c in zip(batches, joined, chunked, strict=True):
        torch.testing.assert_close(p, common.predict(model, b), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(c, p, rtol=1e-5, atol=1e-6)
