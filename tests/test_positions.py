"""Position schemes (model.pos) against independent computations: RoPE's relative property and a float64
complex rotation, ALiBi's slopes and bias from the paper's closed form, the sinusoidal table from its
formula, T5's buckets against HF transformers' own function, NoPE's causal model telling positions
apart; every scheme × scorer through the model, fused equal to plain, and lengths past the table."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from transformers.models.t5.modeling_t5 import T5Attention

from ssa_repro.config import ModelConfig
from ssa_repro.evaluation import runner
from ssa_repro.evaluation.grid import GridConfig
from ssa_repro.evaluation.inference import MAX_ACTIVATION_ELEMENTS, chunk_size
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.store import stored
from ssa_repro.models import build_model
from ssa_repro.models.positions import POSITIONS
from ssa_repro.models.positions.alibi import alibi_bias, alibi_slopes
from ssa_repro.models.positions.base import rotate_half_pairs
from ssa_repro.models.positions.rope import rope_angles
from ssa_repro.models.positions.sinusoidal import sinusoidal_table
from ssa_repro.models.positions.t5 import MAX_DISTANCE, NUM_BUCKETS, relative_bucket
from ssa_repro.scorers import SCORERS, build_scorer, flex
from ssa_repro.scorers.base import Scorer
from ssa_repro.tasks import TASKS
from ssa_repro.training.trainer import train
from ssa_repro.training.validate import problems
from tests.conftest import make_cfg

SCHEMES = ["learned", "none", "sinusoidal", "rope", "alibi", "t5"]


def model_cfg(pos: str, **kw):
    base = dict(n_layer=1, n_head=2, n_embd=16, max_positions=16, n_in=1, pos=pos)
    return OmegaConf.structured(ModelConfig(**{**base, **kw}))


def scorer_cfg(name: str):
    return OmegaConf.structured(SCORERS.schemas[name])


# ------------------------------------------------------------------ RoPE
def test_rope_matches_a_float64_complex_rotation():
    t, d, base = 11, 8, 500.0
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, t, d, generator=g, dtype=torch.float64)
    cos, sin = rope_angles(t, d, base)
    ours = rotate_half_pairs(x, cos.double(), sin.double()).numpy()
    # reference: pair (x_i, x_{i+d/2}) as the complex number x_i + i·x_{i+d/2}, times e^{i·m·base^(−2i/d)}
    xn = x.numpy()
    z = xn[..., : d // 2] + 1j * xn[..., d // 2 :]
    theta = np.array([base ** (-2.0 * i / d) for i in range(d // 2)])
    m = np.arange(t)[:, None]
    zr = z * np.exp(1j * m * theta)
    ref = np.concatenate([zr.real, zr.imag], axis=-1)
    np.testing.assert_allclose(ours, ref, atol=1e-6)  # the angles are float32: m·θ to ~1e-7 relative


def test_rope_scores_depend_on_the_offset_only():
    d = 16
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(d, generator=g), torch.randn(d, generator=g)
    t = 64
    cos, sin = rope_angles(t, d, 10000.0)
    qs = rotate_half_pairs(q.expand(t, d), cos, sin)  # q at every position m
    ks = rotate_half_pairs(k.expand(t, d), cos, sin)
    s = qs @ ks.T  # [m, n] = q_m·k_n
    for off in (0, 1, 5, 30):
        diag = torch.diagonal(s, offset=-off)  # m − n = off
        assert (diag - diag[0]).abs().max() < 1e-4, off
    assert (s[10, 5] - s[10, 6]).abs() > 1e-3  # and it does depend on the offset


# ------------------------------------------------------------------ ALiBi
@pytest.mark.parametrize(
    "n,expected",
    [
        (8, [2.0 ** -(h + 1) for h in range(8)]),  # the paper: 1/2, 1/4, ..., 1/256
        (16, [2.0 ** -(0.5 * (h + 1)) for h in range(16)]),  # 1/2^0.5, 1/2, ..., 1/2^8
        (4, [2.0 ** -(2 * (h + 1)) for h in range(4)]),
        # not a power of two: the 4 slopes of 4 heads, then the odd-indexed slopes of 8 heads
        (6, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]),
        (12, [2.0 ** -(h + 1) for h in range(8)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]),
        (1, [2.0**-8]),
    ],
)
def test_alibi_slopes_closed_form(n, expected):
    np.testing.assert_allclose(alibi_slopes(n), expected, rtol=1e-15)


def test_alibi_bias_matrix():
    slopes = torch.tensor(alibi_slopes(3), dtype=torch.float64)
    b = alibi_bias(slopes, 5, 5)
    for h in range(3):
        for i in range(5):
            for j in range(5):
                assert b[h, i, j].item() == pytest.approx(-slopes[h].item() * abs(i - j), abs=1e-15)


def test_alibi_rows_shift_invariantly_under_softmax():
    """Causal softmax with ALiBi: key j's weight relative to key 0 is exp(m·j) times the plain one, i.e.
    the bias is exactly m_h·(j − i) up to a per-row constant."""
    cfg = model_cfg("alibi")
    m = build_model(cfg, scorer_cfg("softmax"))
    ctx = m.position_scheme.context(6, "cpu")
    row = ctx.bias[1, 5]  # query 5 of head 1
    slope = alibi_slopes(2)[1]
    np.testing.assert_allclose((row - row[0]).numpy(), slope * np.arange(6), rtol=1e-6)


# ------------------------------------------------------------------ sinusoidal
def test_sinusoidal_closed_form():
    t, c = 9, 6
    pe = sinusoidal_table(t, c).double().numpy()
    for pos in range(t):
        for i in range(c // 2):
            w = 1.0 / 10000 ** (2 * i / c)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(pos * w), abs=1e-6)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(pos * w), abs=1e-6)


# ------------------------------------------------------------------ T5 buckets
@pytest.mark.parametrize("causal", [True, False])
def test_t5_buckets_match_transformers(causal):
    rel = torch.arange(-400, 401)
    ours = relative_bucket(rel, causal)
    ref = T5Attention._relative_position_bucket(
        rel, bidirectional=not causal, num_buckets=NUM_BUCKETS, max_distance=MAX_DISTANCE
    )
    assert torch.equal(ours, ref)


def test_t5_bias_beyond_max_distance_is_the_last_bucket():
    m = build_model(model_cfg("t5"), scorer_cfg("softmax"))
    with torch.no_grad():
        m.position_scheme.bias_table.weight.copy_(torch.randn(NUM_BUCKETS, 2))
    bias = m.position_scheme.context(400, "cpu").bias  # [H, T, T]
    w = m.position_scheme.bias_table.weight
    rel = torch.arange(400)[None, :] - torch.arange(400)[:, None]
    ref = w[relative_bucket(rel, True)].permute(2, 0, 1)
    assert torch.equal(bias, ref)


# ------------------------------------------------------------------ NoPE
def test_nope_causal_model_tells_positions_apart_bidirectional_does_not():
    torch.manual_seed(0)
    x = torch.full((1, 8, 1), 0.7)  # the same token everywhere: only position could tell them apart
    causal = build_model(model_cfg("none"), scorer_cfg("softmax"))
    with torch.no_grad():
        y = causal(torch.cat([x, torch.randn(1, 8, 1)], 1))[0, :8]  # a prefix of constant tokens
        z = causal(torch.cat([torch.randn(1, 1, 1), x], 1))[0]  # a different first token, then constants
    # with all-equal tokens each output is the same; after a distinct first token, the constant tokens'
    # outputs depend on how many keys they average over: position is recoverable under the causal mask
    assert (y - y[0]).abs().max() < 1e-6
    assert (z[1:] - z[1]).abs().max() > 1e-4
    enc = build_model(model_cfg("none", causal=False), scorer_cfg("softmax"))
    with torch.no_grad():
        xs = torch.randn(1, 8, 1)
        perm = torch.randperm(8)
        assert torch.allclose(
            enc(xs)[0, perm], enc(xs[:, perm])[0], atol=1e-6
        )  # a set: permutation-equivariant


# ------------------------------------------------------------------ the model
def test_learned_is_the_default_and_keeps_wpe():
    cfg = make_cfg()
    assert cfg.model.pos == "learned"
    m = build_model(cfg.model, cfg.scorer)
    assert "wpe.weight" in m.state_dict() and not hasattr(m, "positions")
    with pytest.raises(ValueError, match="exceeds model.max_positions"):
        m(torch.randn(1, cfg.model.max_positions + 1, 1))


def test_registered_schemes():
    assert set(POSITIONS.names()) == set(SCHEMES)


@pytest.mark.parametrize("pos", ["none", "rope", "alibi", "sinusoidal", "t5"])
def test_schemes_without_a_table_evaluate_at_4x_max_positions(pos):
    cfg = make_cfg(f"model.pos={pos}", "scorer=ssa")
    m = build_model(cfg.model, cfg.scorer).eval()
    t = 4 * cfg.model.max_positions
    with torch.no_grad(), flex.inference_path("plain"):
        y = m(torch.randn(2, t, 1))
    assert y.shape == (2, t) and torch.isfinite(y).all()


@pytest.mark.parametrize("pos", ["none", "rope", "alibi"])
def test_a_run_without_a_position_table_evaluates_a_grid_at_4x_max_positions(tmp_path, pos):
    # the whole path: a trained tiny run folder, evaluate's runner (check, compute, store); the linear
    # task interleaves (x, y), 2 tokens an example, so 2·P examples are 4·P tokens
    cfg = make_cfg(f"model.pos={pos}", "evaluation.enabled=false")
    train(cfg, tmp_path)
    run = load_run(tmp_path, torch.device("cpu"))
    n = 2 * cfg.model.max_positions
    assert run.task.n_tokens(n) == 4 * cfg.model.max_positions
    ev = OmegaConf.merge(
        OmegaConf.structured(GridConfig), dict(sigmas=[1.0], lengths=[n], n_samples=1, batch_size=2)
    )
    assert runner.check(run.cfg, ev) == []
    summary = runner.evaluate(run, ev)
    assert summary["cells_computed"] == 1
    (store,) = stored(tmp_path, "grid")
    rows = store.read()
    assert set(rows["length"]) == {n} and np.isfinite(rows["value"]).all()


def test_learned_positions_refuse_a_grid_past_max_positions():
    cfg = make_cfg("model.pos=learned")
    p = cfg.model.max_positions
    ev = OmegaConf.merge(OmegaConf.structured(GridConfig), dict(sigmas=[1.0], lengths=[p // 2, 2 * p]))
    assert runner.check(cfg, ev) == [
        f"eval.lengths [{2 * p}] need up to {4 * p} tokens, more than model.max_positions={p} (the table of "
        "model.pos=learned); raise model.max_positions or use a scheme without a table "
        "(model.pos=alibi|none|rope|sinusoidal|t5)"
    ]
    # training is limited the same way: by the table only
    too_long = f"curriculum.end={p}"
    assert any("model.max_positions" in q for q in problems(make_cfg(too_long, "curriculum.start=3")))
    assert not any("model.max_positions" in q for q in problems(make_cfg(too_long, "model.pos=alibi")))


@pytest.mark.parametrize(
    "name, key", [("attention", "length"), ("deviant", "length"), ("boundary", "n_points")]
)
def test_the_other_evaluations_limit_the_length_only_for_learned_positions(name, key):
    # 2·P examples of the linear task are 4·P tokens: refused against learned's table only
    for pos, refused in (("learned", True), ("none", False), ("rope", False), ("alibi", False)):
        cfg = make_cfg(f"model.pos={pos}")
        n = 2 * cfg.model.max_positions
        ev = OmegaConf.merge(OmegaConf.structured(runner.EVALUATORS.schemas[name]), {key: n})
        found = [q for q in runner.check(cfg, ev) if "model.max_positions" in q]
        assert found == (
            [
                f"eval.{key}={n} needs {4 * cfg.model.max_positions} tokens, more than "
                f"model.max_positions={cfg.model.max_positions}"
            ]
            if refused
            else []
        ), (name, pos)


@pytest.mark.parametrize("pos", ["learned", "none", "rope", "alibi"])
def test_evaluation_batches_are_sized_by_the_model_width_whatever_the_scheme(pos):
    # the MLP's hidden layer of a chunk, chunk·T·4·C elements, stays within the bound, and the chunk is
    # the largest that does (the attention bound is looser here: 2²⁷ / (2·128²) = 4096 prompts)
    m = build_model(model_cfg(pos, n_embd=512, max_positions=128), scorer_cfg("softmax"))
    t = 128
    chunk = chunk_size(m, t)
    assert chunk * t * 4 * 512 <= MAX_ACTIVATION_ELEMENTS < (chunk + 1) * t * 4 * 512
    assert chunk == 512  # 2²⁷ / (128·4·512)


# every registered scorer × every scheme: one training step through the model (the plain path) on the
# quantifier task `every` (scalar tokens) and on mqar (a token table)
def _one_step(pos: str, name: str, task_name: str) -> None:
    torch.manual_seed(0)
    task_cfg = OmegaConf.structured(TASKS.schemas[task_name])
    task = TASKS.get(task_name)(task_cfg)
    vocab = task.vocab_size() if task_name == "mqar" else 0
    m = build_model(model_cfg(pos, n_embd=8, vocab_size=vocab), scorer_cfg(name))
    batch = task.sample(4, 4, torch.Generator().manual_seed(1), "cpu")
    before = {k: v.clone() for k, v in m.named_parameters()}
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    loss = task.training_loss(m, batch)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss), (pos, name, task_name)
    changed = {k for k, v in m.named_parameters() if not torch.equal(v, before[k])}
    # (q and k for smooth scorers: relu-type ones under ALiBi can start with every logit below 0)
    assert "blocks.0.attn.qkv.weight" in changed or not SCORERS.get(name).smooth, (pos, name, task_name)
    if pos == "t5":
        assert "positions.bias_table.weight" in changed  # the bias is learned through every scorer


@pytest.mark.parametrize("pos", SCHEMES)
def test_every_scorer_trains_with_every_scheme(pos):
    for name in SCORERS.names():
        for task_name in ("every", "mqar"):
            _one_step(pos, name, task_name)


# ------------------------------------------------------------------ fused = plain
FUSIBLE = [n for n in SCORERS.names() if SCORERS.get(n).score_mod is not Scorer.score_mod]


@pytest.mark.parametrize("pos", ["alibi", "t5"])
def test_biased_score_mod_equals_plain_path_for_every_fusible_scorer(pos):
    """flex_attention's eager reference (uncompiled) with score_mod(x + β) against scorer.attend(bias=β)."""
    t, h, d = 10, 2, 8
    g = torch.Generator().manual_seed(3)
    cfg = model_cfg(pos)
    scheme = build_model(cfg, scorer_cfg("softmax")).position_scheme
    if pos == "t5":
        with torch.no_grad():
            scheme.bias_table.weight.copy_(torch.randn(NUM_BUCKETS, h, generator=g))
    ctx = scheme.context(t, "cpu")
    q, k, v = (torch.randn(2, h, t, d, generator=g) for _ in range(3))
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for name in FUSIBLE:
        s = build_scorer(scorer_cfg(name), h, n_embd=h * d)
        mod = s.score_mod()
        if mod is None:  # a config without one (hybrid with non-softmax heads)
            continue
        plain, _ = Scorer.attend(s, q, k, v, mask, is_causal=True, bias=ctx.bias)
        with torch.no_grad():  # inference (the fused path's use on CPU)
            fused = flex.flex_attend(q, k, v, flex.with_bias(mod, ctx.term), causal=True, compiled=False)
        torch.testing.assert_close(fused, plain, atol=2e-5, rtol=2e-5, msg=name)
        # and the scorer's own fast attend (SDPA with a float mask, SSA's folded form) agrees
        own, _ = s.attend(q, k, v, mask, is_causal=True, bias=ctx.bias)
        torch.testing.assert_close(own, plain, atol=2e-5, rtol=2e-5, msg=name)


def test_fused_inference_with_alibi_equals_plain(fused_calls, uncompiled_flex):
    """ALiBi's bias as a score_mod term through the fused path (uncompiled here; compiled on CUDA in
    tests/test_cuda.py) equals the plain path's scorer(x + β)."""
    cfg = make_cfg("model.pos=alibi", "scorer=ssa")
    m = build_model(cfg.model, cfg.scorer).eval()
    x = torch.randn(3, 2 * cfg.model.max_positions, 1)
    with torch.no_grad():
        with flex.inference_path("fused"):
            fused = m(x)
        with flex.inference_path("plain"):
            plain = m(x)
    assert not flex._failed
    assert fused_calls == [True] * len(m.blocks) + [False] * len(m.blocks)  # fused, then plain
    torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)


def test_unfusible_bias_falls_back_with_one_warning(caplog, monkeypatch):
    monkeypatch.setattr(flex, "_unfusible_warned", set())
    s = build_scorer(scorer_cfg("ssa"), 2)
    q = k = v = torch.randn(2, 2, 5, 4)
    with torch.no_grad(), flex.inference_path("fused"):
        for _ in range(2):
            assert flex.fused_inference(s, q, k, v, True, bias=torch.zeros(2, 5, 5), term=None) is None
    assert sum("cannot be fused" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize("pos,key", [("rope", "model.n_embd=15"), ("sinusoidal", "model.n_embd=17")])
def test_scheme_config_problems_are_reported(pos, key):
    cfg = make_cfg(f"model.pos={pos}", key, "model.n_head=1" if pos == "sinusoidal" else "model.n_head=3")
    found = problems(cfg)
    assert any(f"model.pos={pos}" in p for p in found), found
