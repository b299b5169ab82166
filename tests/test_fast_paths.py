"""Fast paths against plain paths: SSA's fused autograd node, SDPA, FlexAttention score_mods and the
whole model with ``model.attn_impl=auto|eager``. Outputs and gradients must agree to float32 rounding;
the SSA node's backward is also checked by finite differences (gradcheck, float64)."""

from __future__ import annotations

import warnings

import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.models import build_model
from ssa_repro.scorers import SCORERS, build_scorer
from ssa_repro.scorers import ssa as ssa_module
from ssa_repro.scorers.base import Scorer
from ssa_repro.scorers.ssa import SSAFoldedWeights, SSAWeights, blocked_inference
from ssa_repro.training import validate
from tests.conftest import make_cfg

FAST = [n for n in SCORERS.names() if SCORERS.get(n).attend is not Scorer.attend]
# Every scorer whose weights are a softmax of a score_mod, with the configurations worth telling apart
# (SSA per head and per layer and its parametrisations, a hybrid of softmax and average heads).
WITH_SCORE_MOD = [
    ("softmax", {}),
    ("ssa", {}),
    ("ssa", {"per_head": False}),
    ("ssa", {"param": "raw", "b_init": 0.8}),
    ("temperature", {}),
    ("ssmax", {}),
    ("softplus", {"scale": 1.3, "power": 2.0}),
    ("hybrid", {"heads": ["softmax", "average"]}),
    ("gated", {}),
    ("logn", {}),
]


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
    s = build_scorer(cfg, n_head, n_embd=8 * n_head)  # head width 8, as the tensors below
    torch.manual_seed(1)
    with torch.no_grad():  # move off the initial values, so per-head parameters differ
        for p in list(s.parameters()) + [b for b in s.buffers() if b.is_floating_point()]:
            p.add_(0.2 * torch.randn_like(p))
    return s


def run(attend, s, q, k, v, mask, causal, go):
    # parameters acting on the attention output (gated's gate) take no part in attend
    params = [p for n, p in s.named_parameters() if n not in s.output_params]
    for t in (q, k, v, *params):
        t.grad = None
    y, _ = attend(q, k, v, mask, is_causal=causal)
    y.backward(go)
    return [y.detach()] + [t.grad.clone() for t in (q, k, v, *params)]


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


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("shape", [(3, 1, 1), (1, 1, 1)])
def test_ssa_folded_node_gradcheck(masked, shape):
    """The node for b > 0 (b folded into the logits z = b·x): gradients of z and n by finite differences,
    through b·x so that b's gradient (autograd's, through the product) is checked too."""
    g = torch.Generator().manual_seed(0)
    x = (2 * torch.randn(1, 3, 4, 4, generator=g, dtype=torch.float64)).requires_grad_()
    with torch.no_grad():
        x[0, 0, 2, 1] = 0.0  # t'(0) = n·b exactly
    b = (0.3 + torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    n = (1 + torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    mask = torch.ones(4, 4, dtype=torch.bool).tril() if masked else None
    assert torch.autograd.gradcheck(lambda x, b, n: SSAFoldedWeights.apply(b * x, n, mask), (x, b, n))
    n2 = n.detach()  # n fixed: no gradient for it, and t is not kept
    assert torch.autograd.gradcheck(lambda x, b: SSAFoldedWeights.apply(b * x, n2, mask), (x, b))
    ref = SSAWeights.apply(x, b, n, mask)
    torch.testing.assert_close(SSAFoldedWeights.apply(b * x, n, mask), ref)
    if masked:
        assert (SSAFoldedWeights.apply(b * x, n, mask)[..., ~mask] == 0).all()


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


def literal_ssa_attention(q, k, v, b, n, mask):
    """Σ_j w_ij v_j with w ∝ (1 + b|x|)^(sgn(x)·n) over the visible keys, x = q·k, in float64 (the power
    form, independent of the log1p/softmax form the paths use)."""
    x = q.double() @ k.double().transpose(-2, -1)
    p = (1 + b.double() * x.abs()) ** (torch.sign(x) * n.double())
    if mask is not None:
        p = p * mask
    return (p / p.sum(-1, keepdim=True)) @ v.double()


# Shapes around the blocks (64 query rows; 2^20-element blocks of batch entries): one row, a partial
# first block, exactly one block, one more row, several blocks with a partial last one, and blocks of
# one batch entry (B·H·64·S above 2^20 elements: 12·4·64·400 > 2^20).
BLOCKED_SHAPES = [
    (1, 1, 1, 4),
    (3, 4, 9, 8),
    (2, 4, 64, 16),
    (5, 4, 65, 16),
    (2, 2, 130, 8),
    (12, 4, 400, 16),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", BLOCKED_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_blocked_inference_equals_the_power_formula(shape, threads, monkeypatch):
    """SSA's CPU inference path, causal (keys past the block skipped), with a general mask (every 4-D
    form, rows kept non-empty) and with none, on one thread and on two worker threads."""
    real = torch.get_num_threads()
    # the workers blocked_inference starts; it sets the threads it read back when done, so the real count
    # is restored below (left at 2, later in-process training in this worker computed differently)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    try:
        _check_blocked(shape)
    finally:
        torch.set_num_threads(real)


def _check_blocked(shape):
    bsz, h, t, d = shape
    g = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(bsz, h, t, d, generator=g) for _ in range(3))
    b = (0.2 + torch.rand(h, 1, 1, generator=g)) / d**0.5
    n = 1 + 2 * torch.rand(h, 1, 1, generator=g)
    tril = torch.ones(t, t, dtype=torch.bool).tril()
    random = (torch.rand(bsz, 1, t, t, generator=g) > 0.4) | torch.eye(t, dtype=torch.bool)
    for mask, causal in [(tril, True), (tril, False), (random, False), (None, False)]:
        with torch.inference_mode():
            y = blocked_inference(q, k, v, b, n, mask, causal)
        ref = literal_ssa_attention(q, k, v, b, n, mask)
        assert y.dtype == torch.float32 and not y.isnan().any()
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("kw", SSA_VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
def test_ssa_inference_takes_the_blocked_path_and_equals_the_node(kw, causal, monkeypatch):
    """Under no_grad SSA.attend runs blocked_inference (b, n > 0), with the numbers of its training node;
    param=raw with a negative b keeps the node (the fold of b into q needs b > 0)."""
    s = scorer("ssa", **kw)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, 70, 8, generator=g) for _ in range(3))
    mask = torch.ones(70, 70, dtype=torch.bool).tril() if causal else None
    calls = []
    monkeypatch.setattr(
        ssa_module, "blocked_inference", lambda *a, **k: calls.append(1) or blocked_inference(*a, **k)
    )
    with torch.no_grad():
        y, _ = s.attend(q, k, v, mask, is_causal=causal)
    assert calls == [1]
    with torch.enable_grad():
        ref, _ = s.attend(q, k, v.requires_grad_(), mask, is_causal=causal)  # a gradient: the node
    assert calls == [1]
    torch.testing.assert_close(y, ref.detach(), rtol=1e-5, atol=1e-6)
    if kw.get("param") == "raw":
        with torch.no_grad():
            s.beta.fill_(-0.5)  # b < 0: the node, whatever the sign does
            s.attend(q, k, v, mask, is_causal=causal)
        assert calls == [1]


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


@pytest.mark.parametrize("name,kw", WITH_SCORE_MOD)
def test_flex_score_mod_equals_plain_path(name, kw):
    """FlexAttention's forward runs on CPU (its backward needs CUDA): the score_mod gives the plain
    path's output. Uncompiled, i.e. PyTorch's reference implementation of the same semantics."""
    from ssa_repro.scorers.flex import flex_attend

    s = scorer(name, **kw)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g) for _ in range(3))
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = flex_attend(q, k, v, s.score_mod(), causal=True, compiled=False)
        ref, _ = Scorer.attend(s, q, k, v, mask)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)


def test_scorers_without_a_softmax_form_have_no_score_mod():
    """Sparse normalisers inherit Temperature but are not a softmax: no score_mod (validate.py compares
    the method with the base's); hybrids with tanh/relu/sigmoid heads return None."""
    for name in ("sparsemax", "entmax15", "entmax_alpha", "sa_softmax", "cosformer"):
        assert SCORERS.get(name).score_mod is Scorer.score_mod
    assert scorer("hybrid", heads=["softmax", "tanh"]).score_mod() is None
    with pytest.raises(ValueError, match="no FlexAttention score_mod"):
        from ssa_repro.scorers.flex import flex_attend

        flex_attend(*(torch.zeros(1, 4, 3, 8) for _ in range(3)), None, causal=True)


def test_flex_is_refused_where_it_cannot_run():
    problems = "\n".join(
        validate.problems(make_cfg("model.attn_impl=flex", "scorer=sparsemax", "device=cpu"))
    )
    assert "model.attn_impl=flex needs CUDA" in problems
    assert "scorer.name='sparsemax' is not (allowed: " in problems and "ssa" in problems


def test_bf16_training_is_float32_training_to_bf16_rounding(tmp_path):
    """train.precision=bf16 autocasts forward and loss only: the first step's loss (initial weights, the
    same prompts) equals float32's to bf16 rounding but not exactly (autocast really ran), and the
    weights and optimizer state in the checkpoint stay float32."""
    from ssa_repro.training.metrics_log import read_metrics
    from ssa_repro.training.trainer import train

    base = ("scorer=ssa", "train.steps=2", "train.log_interval=1", "evaluation.enabled=false")
    train(make_cfg(*base), tmp_path / "fp32")
    train(make_cfg(*base, "train.precision=bf16"), tmp_path / "bf16")
    fp32 = read_metrics(tmp_path / "fp32" / "metrics.jsonl")
    bf16 = read_metrics(tmp_path / "bf16" / "metrics.jsonl")
    assert bf16[0]["loss"] == pytest.approx(fp32[0]["loss"], rel=2e-2)  # bf16: 8 bits of mantissa
    assert bf16[0]["loss"] != fp32[0]["loss"]
    state = torch.load(tmp_path / "bf16" / "checkpoints" / "last.pt", weights_only=False)
    assert all(t.dtype == torch.float32 for t in state["model"].values() if t.is_floating_point())


@pytest.mark.slow
def test_compiled_training_matches_eager(tmp_path):
    """train.compile=true changes speed, not the numbers (to float32 rounding, over a few steps)."""
    from ssa_repro.training.metrics_log import read_metrics
    from ssa_repro.training.trainer import train

    # one prompt length (curriculum.start = end): one compiled graph, not a recompile per curriculum stage
    base = (
        "scorer=ssa",
        "evaluation.enabled=false",
        "train.steps=4",
        "curriculum.start=4",
        "curriculum.end=4",
    )
    train(make_cfg(*base), tmp_path / "eager")
    train(make_cfg(*base, "train.compile=true"), tmp_path / "compiled")
    a = read_metrics(tmp_path / "eager" / "metrics.jsonl")
    b = read_metrics(tmp_path / "compiled" / "metrics.jsonl")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4)


@pytest.mark.parametrize("setting, mode", [("true", None), ("reduce-overhead", "reduce-overhead")])
def test_train_compile_passes_its_mode_to_torch_compile(setting, mode, tmp_path, monkeypatch):
    """train.compile=reduce-overhead reaches torch.compile as its mode (CUDA graphs on a GPU; the values
    are checked there by tests/test_cuda.py, and on a CPU the mode compiles as true does, whose values
    test_compiled_training_matches_eager checks); the spy returns the module uncompiled."""
    from ssa_repro.training.trainer import train

    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or fn)
    train(make_cfg("train.steps=1", "evaluation.enabled=false", f"train.compile={setting}"), tmp_path / "r")
    assert calls == [{"mode": mode}]


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


# ----------------------------------------------------------------------------- fused inference
# FlexAttention compiled for inference (model.attn_impl=auto, gradients off; ssa_repro/scorers/flex.py).
# Each score_mod costs a compile per shape family (T <= flex.CPU_BLOCK, T > it, bidirectional), a few
# seconds each: the tests use the TINY models' head shape (2 heads of 8), shared with the rest of the
# suite, and both causal families for SSA only.
FUSED_LENGTHS = {"ssa": (5, 64, 65, 100)}  # both sides of the block size: the two causal graphs


def model_qkv(bsz, t, g, n_head=2, d=8):
    """q, k, v [B, H, T, D] laid out as SelfAttention makes them (views of one [B, T, 3C] projection):
    strides are part of the compiled graph's guards, so these share the model's graphs."""
    qkv = torch.randn(bsz, t, 3 * n_head * d, generator=g)
    return (z.view(bsz, t, n_head, d).transpose(1, 2) for z in qkv.split(n_head * d, dim=2))


def test_every_scorer_with_a_score_mod_is_covered():
    covered = {n for n, _ in WITH_SCORE_MOD}
    with_mod = {n for n in SCORERS.names() if SCORERS.get(n).score_mod is not Scorer.score_mod}
    assert with_mod <= covered, f"add {sorted(with_mod - covered)} to WITH_SCORE_MOD"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name,kw", WITH_SCORE_MOD)
def test_fused_inference_equals_plain_path(name, kw, causal, uncompiled_flex):
    """The fused path's output (score_mod, block mask, dispatch) equals the plain path (logits -> weights
    -> weights @ v) to float32 rounding, at several lengths and batch sizes; through the uncompiled kernel
    here, the compiled one on CUDA (tests/test_cuda.py)."""
    from ssa_repro.scorers import flex

    s = scorer(name, n_head=2, **kw)
    g = torch.Generator().manual_seed(0)
    for t in FUSED_LENGTHS.get(name, (5, 40)):
        for bsz in (2, 3):  # batch sizes above 1 share a graph (a size of 1 would be specialised)
            mask = torch.ones(t, t, dtype=torch.bool).tril() if causal else None
            with torch.inference_mode(), flex.inference_path("fused"):
                q, k, v = model_qkv(bsz, t, g)  # inference tensors, as in evaluation (their own graphs)
                y = flex.fused_inference(s, q, k, v, causal)
                ref, _ = Scorer.attend(s, q, k, v, mask)
            if not causal and getattr(s.score_mod(), "causal_only", False):
                assert y is None  # counts keys as q_idx + 1: the plain path serves the encoder
                continue
            assert y is not None, flex._failed
            torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


def _auto_and_eager(*overrides):
    """The same weights (scorer parameters moved off their initial values) with model.attn_impl=auto
    and =eager, in eval mode."""
    cfg = make_cfg(*overrides)
    torch.manual_seed(0)
    auto = build_model(cfg.model, cfg.scorer)
    with torch.no_grad():
        for p in auto.parameters():
            p.add_(0.2 * torch.randn_like(p))
    cfg.model.attn_impl = "eager"
    eager = build_model(cfg.model, cfg.scorer)
    eager.load_state_dict(auto.state_dict())
    return cfg, auto.eval(), eager.eval()


@pytest.mark.parametrize("name", ["ssa", "ssa_nanogpt", "temperature"])
def test_fused_model_predictions_equal_eager(name, fused_calls, uncompiled_flex):
    """Whole-model predictions on quantifier prompts at three lengths (both causal shape families):
    equal to model.attn_impl=eager to 1e-5, and the same signs, hence the same sign errors."""
    from ssa_repro.tasks import build_task

    cfg, auto, eager = _auto_and_eager(f"scorer={name}", "task=every", "model.max_positions=256")
    task = build_task(cfg.task)
    g = torch.Generator().manual_seed(0)
    for n in (5, 40, 100):  # numbers; prompts of 2n tokens
        batch = task.sample(16, n, g, "cpu")
        with torch.inference_mode():
            a = auto(batch.tokens)[:, batch.pred_idx]
            e = eager(batch.tokens)[:, batch.pred_idx]
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
        assert torch.equal(a > 0, e > 0)
        assert torch.equal(task.error(a, batch.targets), task.error(e, batch.targets))
    assert fused_calls and all(fused_calls)  # every attention call of `auto` ran fused


def test_fused_encoder_equals_eager(fused_calls, uncompiled_flex):
    """model.causal=false (no mask: one graph for every length)."""
    _, auto, eager = _auto_and_eager("scorer=ssa", "model.causal=false", "model.max_positions=256")
    g = torch.Generator().manual_seed(0)
    for t in (7, 100):
        tokens = torch.randn(3, t, 1, generator=g)
        with torch.inference_mode():
            torch.testing.assert_close(auto(tokens), eager(tokens), rtol=1e-5, atol=1e-5)
    assert fused_calls and all(fused_calls)


def test_fused_causal_prefix_is_exact(fused_calls, uncompiled_flex):
    """What makes lengths interchangeable for a causal model: outputs on the first T tokens of a longer
    prompt equal those of the T-token prompt (keys and queries past T are masked out of earlier rows), in
    either shape family (T <= flex.CPU_BLOCK and T > it), through the fused path (every call fused)."""
    _, auto, _ = _auto_and_eager("scorer=ssa", "model.max_positions=256")
    tokens = torch.randn(4, 130, 1, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full = auto(tokens)
        for t in (7, 64, 65, 129):
            torch.testing.assert_close(auto(tokens[:, :t]), full[:, :t], rtol=1e-5, atol=1e-5)
    assert len(fused_calls) == 5 * len(auto.blocks) and all(fused_calls)  # 5 forwards, every layer


def test_cpu_auto_takes_the_plain_path(fused_calls):
    """Under attn_impl=auto on CPU no call runs the compiled kernel (flex.CPU_UNTRUSTED)."""
    _, auto, eager = _auto_and_eager("scorer=ssa")
    tokens = torch.randn(2, 9, 1)
    with torch.inference_mode():
        torch.testing.assert_close(auto(tokens), eager(tokens), rtol=1e-6, atol=1e-6)
    assert fused_calls == [False]


def test_fused_path_is_chosen_for_inference_only(fused_calls, uncompiled_flex):
    """Fused: gradients off under attn_impl=auto. Plain: grad enabled (training), need_weights (maps),
    attn_impl=eager, and softmax (SDPA, flex.PLAIN_FIRST)."""
    _, auto, eager = _auto_and_eager("scorer=ssa")
    _, softmax, _ = _auto_and_eager("scorer=softmax")
    tokens = torch.randn(2, 9, 1)
    with torch.no_grad():  # no_grad counts as inference, not only inference_mode
        auto(tokens)
    assert fused_calls == [True]
    fused_calls.clear()
    auto(tokens).sum().backward()  # training: the plain path, gradients flow
    assert fused_calls == [False] and auto.blocks[0].attn.scorer.beta.grad is not None
    fused_calls.clear()
    with torch.inference_mode():
        out, maps = auto(tokens, need_weights=True)
        eager(tokens)
        assert fused_calls == [] and len(maps) == 1
        softmax(tokens)
    assert fused_calls == [False]


def test_fused_inference_falls_back_with_one_warning(monkeypatch, caplog, uncompiled_flex):
    """A failing compile (here simulated) gives the plain path's numbers and one warning, never an error."""
    from ssa_repro.scorers import flex

    def broken(*args, **kw):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(flex, "_compiled_inference", broken)
    monkeypatch.setattr(flex, "_failed", {})
    _, auto, eager = _auto_and_eager("scorer=ssa")
    tokens = torch.randn(2, 9, 1)
    with caplog.at_level("WARNING", logger="ssa_repro.evaluate"), torch.inference_mode():
        for _ in range(2):
            torch.testing.assert_close(auto(tokens), eager(tokens), rtol=1e-5, atol=1e-5)
    warned = [r for r in caplog.records if r.name == "ssa_repro.evaluate" and r.levelname == "WARNING"]
    assert len(warned) == 1 and "no C++ compiler" in warned[0].getMessage()


@pytest.mark.slow
def test_fused_inference_survives_a_missing_compiler(monkeypatch, caplog):
    """The real failure: inductor's C++ compiler is missing (caches off, a score_mod never compiled)."""
    import torch._inductor.config as inductor_config

    from ssa_repro.scorers import flex

    class Halved(Scorer):
        def score_mod(self):
            def halved_mod(x, b, h, q_idx, kv_idx):
                return 0.5 * x

            return halved_mod

    s = Halved(OmegaConf.create({"name": "halved"}), 2)
    monkeypatch.setattr(flex, "_failed", {})
    q, k, v = model_qkv(3, 20, torch.Generator().manual_seed(0))
    broken = {"cpp.cxx": ("/nonexistent/g++",), "force_disable_caches": True}
    with inductor_config.patch(broken), caplog.at_level("WARNING", logger="ssa_repro.evaluate"):
        # "fused": the CPU kernel is off under auto (flex.CPU_UNTRUSTED), so nothing would be compiled
        with torch.inference_mode(), flex.inference_path("fused"):
            assert flex.fused_inference(s, q, k, v, causal=True) is None
            assert flex.fused_inference(s, q, k, v, causal=True) is None
    warned = [r.getMessage() for r in caplog.records if r.name == "ssa_repro.evaluate"]
    assert len(warned) == 1 and "compiler" in warned[0]
