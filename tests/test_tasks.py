"""In-context tasks checked against independent definitions (brute-force loops, closed-form moments)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.core import distributions as D
from ssa_repro.core.distributions import DistConfig, DistKind
from ssa_repro.tasks import TASKS, build_task


# ----------------------------------------------------------------------------- helpers
def task_cfg(name: str, **overrides):
    cfg = OmegaConf.structured(TASKS.schemas[name])
    cfg.name = name
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def make(name: str, **overrides):
    return build_task(task_cfg(name, **overrides))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def brute_force_labels(xs: torch.Tensor, every: bool) -> torch.Tensor:
    """Label at i: +1 iff x_1..x_i are all > 0 (every) / any of them is > 0 (some), else -1."""
    rows = []
    for row in xs.tolist():
        acc = every
        labels = []
        for x in row:
            acc = (acc and x > 0) if every else (acc or x > 0)
            labels.append(1.0 if acc else -1.0)
        rows.append(labels)
    return torch.tensor(rows)


def recover_line(xs: torch.Tensor, ys: torch.Tensor):
    """a, b per prompt (float64) from the two examples with the widest x separation."""
    x64, y64 = xs.double(), ys.double()
    i, j = x64.argmin(1, keepdim=True), x64.argmax(1, keepdim=True)
    xi, xj = x64.gather(1, i), x64.gather(1, j)
    yi, yj = y64.gather(1, i), y64.gather(1, j)
    a = (yj - yi) / (xj - xi)
    return a, yi - a * xi


# ----------------------------------------------------------------------------- linear
def test_linear_prompts_are_lines_interleaved():
    task = make("linear")
    bsz, n = 512, 12
    batch = task.sample(bsz, n, gen(0), "cpu")
    assert task.n_tokens(n) == 2 * n
    assert batch.tokens.shape == (bsz, 2 * n, 1) and batch.tokens.dtype == torch.float32
    assert batch.targets.shape == (bsz, n) and batch.xs.shape == (bsz, n)
    assert torch.equal(batch.tokens[:, 0::2, 0], batch.xs)
    assert torch.equal(batch.tokens[:, 1::2, 0], batch.targets)
    assert batch.pred_idx.tolist() == list(range(0, 2 * n, 2))
    # the token at each prediction position is that example's x (the model sees x_i, not y_i)
    assert torch.equal(batch.tokens[:, batch.pred_idx, 0], batch.xs)
    # y = a·x + b for every example, with a, b recovered from two examples of the same prompt
    a, b = recover_line(batch.xs, batch.targets)
    pred = a * batch.xs.double() + b
    scale = 1 + a.abs() * batch.xs.double().abs() + b.abs()
    assert ((pred - batch.targets.double()).abs() <= 1e-5 * scale).all()
    # different prompts have different functions
    assert a.std() > 0.5 and b.std() > 0.5


@pytest.mark.parametrize("sig_a,sig_b,sig_x", [(1.0, 1.0, 1.0), (3.0, 0.5, 2.0), (10.0, 5.0, 0.25)])
def test_linear_moments_follow_the_config(sig_a, sig_b, sig_x):
    dists = dict(a_dist=D.normal(sig_a), b_dist=D.normal(sig_b), x_dist=D.normal(sig_x))
    task = make("linear", **({} if (sig_a, sig_b, sig_x) == (1.0, 1.0, 1.0) else dists))
    batch = task.sample(20000, 8, gen(1), "cpu")
    a, b = recover_line(batch.xs, batch.targets)
    for values, sig in ((a, sig_a), (b, sig_b), (batch.xs.double(), sig_x)):
        assert abs(values.mean().item()) < 0.05 * sig
        assert values.std().item() == pytest.approx(sig, rel=0.03)
    torch.testing.assert_close(batch.params["a"], a.float(), rtol=1e-3, atol=1e-3)  # the function drawn


@pytest.mark.parametrize("sig_f,sig_x", [(3.0, 2.0), (10.0, 0.25)])
def test_linear_shift_scales_the_function_and_the_inputs(sig_f, sig_x):
    """The grid's shifts: a, b ~ N(0, σ_F) and x ~ N(0, σ) whatever the config; the config unchanged."""
    task = make("linear", a_dist=D.normal(7.0))
    batch = task.sample(20000, 8, gen(1), "cpu", {"sigma_f": sig_f, "sigma_x": sig_x})
    a, b = recover_line(batch.xs, batch.targets)
    for values, sig in ((a, sig_f), (b, sig_f), (batch.xs.double(), sig_x)):
        assert values.std().item() == pytest.approx(sig, rel=0.03)
    assert float(task.cfg.a_dist.std) == 7.0


def test_linear_uniform_respects_low_high():
    lo, hi = 2.0, 5.0
    uni = DistConfig(kind=DistKind.uniform, low=lo, high=hi)
    task = make("linear", x_dist=uni, a_dist=uni)
    batch = task.sample(10000, 10, gen(2), "cpu")
    xs = batch.xs
    assert (xs >= lo).all() and (xs <= hi).all()
    assert xs.mean().item() == pytest.approx((lo + hi) / 2, abs=0.02)
    assert xs.var().item() == pytest.approx((hi - lo) ** 2 / 12, rel=0.03)
    a, _ = recover_line(batch.xs, batch.targets)
    assert (a >= lo - 1e-4).all() and (a <= hi + 1e-4).all()


@pytest.mark.parametrize("name", ["linear", "every", "some"])
def test_generator_determinism(name):
    task = make(name)
    b1 = task.sample(64, 10, gen(123), "cpu")
    b2 = task.sample(64, 10, gen(123), "cpu")
    b3 = task.sample(64, 10, gen(124), "cpu")
    for field in ("tokens", "targets", "pred_idx", "xs"):
        assert torch.equal(getattr(b1, field), getattr(b2, field)), field
    assert not torch.equal(b1.xs, b3.xs)
    assert not torch.equal(b1.tokens, b3.tokens)


def test_linear_loss_and_error_are_squared_error():
    task = make("linear")
    g = gen(3)
    pred, y = torch.randn(16, 9, generator=g), torch.randn(16, 9, generator=g)
    p, t = pred.double().tolist(), y.double().tolist()
    sq = [[(pi - ti) ** 2 for pi, ti in zip(pr, tr)] for pr, tr in zip(p, t)]
    mse = sum(map(sum, sq)) / (16 * 9)
    assert task.loss(pred, y).item() == pytest.approx(mse, rel=1e-5)
    torch.testing.assert_close(
        task.error(pred, y).double(), torch.tensor(sq, dtype=torch.float64), rtol=1e-5, atol=1e-7
    )


# ----------------------------------------------------------------------------- every / some
@pytest.mark.parametrize("name", ["every", "some"])
@pytest.mark.parametrize("labels_in_context", [True, False])
@pytest.mark.parametrize("supervise", ["all", "last"])
@pytest.mark.parametrize("balance", [None, True, False])
def test_quantifier_labels_layout_and_positions(name, labels_in_context, supervise, balance):
    task = make(name, labels_in_context=labels_in_context, supervise=supervise, balance=balance)
    bsz, n = 256, 9
    batch = task.sample(bsz, n, gen(4), "cpu")
    labels = brute_force_labels(batch.xs, every=(name == "every"))
    stride = 2 if labels_in_context else 1
    assert task.n_tokens(n) == stride * n
    assert batch.tokens.shape == (bsz, stride * n, 1)
    assert torch.equal(batch.tokens[:, 0::stride, 0], batch.xs)
    if labels_in_context:
        assert torch.equal(batch.tokens[:, 1::2, 0], labels)
    if supervise == "all":
        assert batch.targets.shape == (bsz, n)
        assert batch.pred_idx.tolist() == list(range(0, stride * n, stride))
        assert torch.equal(batch.targets, labels)
    else:
        assert batch.targets.shape == (bsz, 1)
        assert batch.pred_idx.tolist() == [stride * (n - 1)]
        assert torch.equal(batch.targets, labels[:, -1:])
    # predictions are read at the x tokens
    assert torch.equal(batch.tokens[:, batch.pred_idx, 0], batch.xs[:, -len(batch.pred_idx) :])
    assert set(batch.targets.unique().tolist()) <= {-1.0, 1.0}


@pytest.mark.parametrize("name", ["every", "some"])
def test_quantifier_labels_method_matches_brute_force(name):
    task = make(name)
    xs = torch.randn(300, 15, generator=gen(5))
    xs[::7, 3] = 0.0  # x = 0 is not > 0
    assert torch.equal(task.labels(xs), brute_force_labels(xs, every=(name == "every")))


@pytest.mark.parametrize("name", ["every", "some"])
@pytest.mark.parametrize(
    "labels_in_context,balance",
    [(True, True), (False, None), (False, True)],
    ids=["ctx-balance", "noctx-default", "noctx-balance"],
)
@pytest.mark.parametrize("supervise", ["all", "last"])
def test_quantifier_balanced_sampling(name, labels_in_context, balance, supervise):
    sigma = 2.0
    task = make(
        name,
        labels_in_context=labels_in_context,
        balance=balance,
        supervise=supervise,
        x_dist=D.normal(sigma),
    )
    assert task.balanced
    bsz, n = 8000, 10
    batch = task.sample(bsz, n, gen(6), "cpu")
    labels = brute_force_labels(batch.xs, every=(name == "every"))
    if supervise == "all":
        assert torch.equal(batch.targets, labels)
        share = (labels > 0).double().mean().item()
        assert share == pytest.approx(0.5, abs=0.03)
        # the run length K ~ Uniform{0..n}: the number of labels equal to the initial one
        initial = 1.0 if name == "every" else -1.0
        k = (labels == initial).sum(1)
        freq = torch.bincount(k, minlength=n + 1).double() / bsz
        assert freq.shape == (n + 1,)
        assert torch.allclose(freq, torch.full((n + 1,), 1 / (n + 1), dtype=torch.float64), atol=0.02)
    else:
        assert torch.equal(batch.targets, labels[:, -1:])
        share = (batch.targets > 0).double().mean().item()
        assert share == pytest.approx(0.5, abs=0.03)
    # magnitudes keep their distribution: E|x| = sqrt(2/pi)·sigma, E x^2 = sigma^2
    absx = batch.xs.abs().double()
    assert absx.mean().item() == pytest.approx(math.sqrt(2 / math.pi) * sigma, rel=0.02)
    assert absx.square().mean().item() == pytest.approx(sigma**2, rel=0.03)
    # ... exactly: only signs of the raw draws are changed (same seed, no balancing)
    raw = task.build(task.draw(bsz, n, gen(6), "cpu", balance=False))
    assert torch.equal(batch.xs.abs(), raw.xs.abs())


@pytest.mark.parametrize("name", ["every", "some"])
@pytest.mark.parametrize("labels_in_context,balance", [(True, None), (True, False), (False, False)])
def test_quantifier_unbalanced_probabilities(name, labels_in_context, balance):
    """Under N(0, 1) and no balancing: P(every true at i) = 2^-i, P(some true at i) = 1 - 2^-i."""
    task = make(name, labels_in_context=labels_in_context, balance=balance)
    assert not task.balanced
    batch = task.sample(20000, 6, gen(7), "cpu")
    p_true = (batch.targets > 0).double().mean(0)
    i = torch.arange(1, 7, dtype=torch.float64)
    expect = 2.0**-i if name == "every" else 1 - 2.0**-i
    torch.testing.assert_close(p_true, expect, atol=0.015, rtol=0)
    assert torch.equal(batch.targets, brute_force_labels(batch.xs, every=(name == "every")))


@pytest.mark.parametrize("name", ["every", "some"])
def test_quantifier_loss_is_bce_on_pm1_labels(name):
    task = make(name)
    g = gen(8)
    z = torch.randn(32, 7, generator=g) * 4
    y = torch.where(torch.rand(32, 7, generator=g) < 0.5, -1.0, 1.0)
    # -mean(log sigma(z·y)), hand-written in float64
    zy = (z.double() * y.double()).flatten().tolist()
    hand = -sum(math.log(1.0 / (1.0 + math.exp(-v))) for v in zy) / len(zy)
    assert task.loss(z, y).item() == pytest.approx(hand, rel=1e-5)


@pytest.mark.parametrize("name", ["every", "some"])
def test_quantifier_error_is_sign_disagreement(name):
    task = make(name)
    g = gen(9)
    pred = torch.randn(20, 5, generator=g)
    pred[0, :3] = torch.tensor([0.0, -0.0, 1e-30])
    y = torch.where(torch.rand(20, 5, generator=g) < 0.5, -1.0, 1.0)
    y[0, :3] = torch.tensor([1.0, -1.0, 1.0])
    hand = torch.tensor(
        [[float((p > 0) != (t > 0)) for p, t in zip(pr, tr)] for pr, tr in zip(pred.tolist(), y.tolist())]
    )
    assert torch.equal(task.error(pred, y), hand)
    assert task.error(pred, y)[0, :3].tolist() == [1.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- distributions
@pytest.mark.parametrize(
    "dist,field",
    [
        (dict(kind="normal", std=0.0), "std"),
        (dict(kind="normal", std=-1.5), "std"),
        (dict(kind="uniform", low=1.0, high=1.0), "low"),
        (dict(kind="uniform", low=2.0, high=-1.0), "high"),
    ],
)
def test_distribution_check_rejects(dist, field):
    for cfg in (OmegaConf.merge(OmegaConf.structured(DistConfig), dist), DistConfig(**dist)):
        problems = D.check(cfg, "task.x_dist")
        assert len(problems) == 1, problems
        assert "task.x_dist" in problems[0] and field in problems[0], problems


@pytest.mark.parametrize(
    "dist", [dict(), dict(kind="normal", std=1e-3, mean=-4.0), dict(kind="uniform", low=-1.0, high=-0.5)]
)
def test_distribution_check_accepts(dist):
    assert D.check(DistConfig(**dist), "task.x_dist") == []


def test_distribution_sample_moments():
    x = D.sample(D.normal(2.0, mean=3.0), (50000,), gen(10), "cpu")
    assert x.dtype == torch.float32 and x.shape == (50000,)
    assert x.mean().item() == pytest.approx(3.0, abs=0.05)
    assert x.std().item() == pytest.approx(2.0, rel=0.02)
    u = D.sample(DistConfig(kind=DistKind.uniform, low=-3.0, high=-1.0), (50000,), gen(11), "cpu")
    assert (u >= -3.0).all() and (u <= -1.0).all()
    np.testing.assert_allclose(u.mean().item(), -2.0, atol=0.02)
