"""Garg et al.'s function classes (ssa_repro/tasks/functions.py) and the vector baselines: labels against
float64 numpy recomputations from the drawn parameters (the tree walked by hand, Chebyshev sums by
numpy), Garg's token layout, the dimension curriculum, baselines against numpy's least squares, the
ridge closed form and brute-force neighbours, and a run trained and evaluated end to end."""

from __future__ import annotations

import glob
import math

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.tasks import TASKS, Stage, build_task, curriculum
from ssa_repro.tasks import baselines as B
from tests.conftest import TINY, make_cfg, run_script

GARG = [
    "linear_regression",
    "sparse_linear",
    "noisy_linear",
    "quadratic",
    "relu_2nn",
    "decision_tree",
    "polynomial",
]


def task(name, **kw):
    cfg = OmegaConf.structured(TASKS.schemas[name])
    for k, v in kw.items():
        cfg[k] = v
    return build_task(cfg)


def draw(t, bsz=5, n=7, seed=0, shift=None):
    g = torch.Generator().manual_seed(seed)
    return t.draw(bsz, n, g, "cpu", shift)


def np64(x):
    return x.double().numpy()


@pytest.mark.parametrize("name", ["linear_regression", "sparse_linear", "quadratic"])
def test_linear_family_labels(name):
    t = task(name, n_dims=6)
    p = draw(t)
    x, w = np64(p.xs), np64(p.params["w"])
    feats = x**2 / math.sqrt(3) if name == "quadratic" else x
    want = np.einsum("bnd,bd->bn", feats, w)
    np.testing.assert_allclose(t.label(p).double().numpy(), want, rtol=1e-5, atol=1e-5)
    if name == "sparse_linear":
        assert ((w != 0).sum(1) == 3).all()  # exactly `sparsity` non-zero weights per prompt


def test_noisy_linear_adds_its_own_noise():
    t = task("noisy_linear", n_dims=4, noise_std=0.5)
    p = draw(t, bsz=400, n=50)
    clean = np.einsum("bnd,bd->bn", np64(p.xs), np64(p.params["w"]))
    noise = t.label(p).double().numpy() - clean
    np.testing.assert_allclose(noise, np64(p.params["noise"]), atol=1e-5)
    assert abs(noise.std() - 0.5) < 0.01  # 20,000 draws: the std's standard error is 0.0025


def test_relu_2nn_labels():
    t = task("relu_2nn", n_dims=5, hidden=7)
    p = draw(t)
    x, w1, w2 = np64(p.xs), np64(p.params["w1"]), np64(p.params["w2"])
    want = np.einsum("bnh,bh->bn", np.maximum(np.einsum("bnd,bdh->bnh", x, w1), 0), w2) * math.sqrt(2 / 7)
    np.testing.assert_allclose(t.label(p).double().numpy(), want, rtol=1e-5, atol=1e-5)


def test_decision_tree_labels_walk_the_tree_by_hand():
    t = task("decision_tree", n_dims=5, depth=3)
    p = draw(t, bsz=4, n=9)
    coords, values = p.params["coords"].tolist(), p.params["values"].tolist()
    got = t.label(p)
    for b in range(4):
        for i in range(9):
            node = 0
            for _ in range(3):  # heap order: children of k are 2k+1 (x[c] <= 0) and 2k+2 (x[c] > 0)
                node = 2 * node + (2 if p.xs[b, i, coords[b][node]] > 0 else 1)
            assert got[b, i].item() == pytest.approx(values[b][node])


def test_polynomial_labels_are_chebyshev_sums():
    t = task("polynomial", degree=4)
    p = draw(t, n=20)
    x, c = np64(p.xs)[..., 0], np64(p.params["c"])
    want = np.stack([np.polynomial.chebyshev.chebval(x[b], c[b]) for b in range(len(c))]) / math.sqrt(5)
    np.testing.assert_allclose(t.label(p).double().numpy(), want, rtol=1e-5, atol=1e-5)
    assert (np.abs(x) <= 1).all()  # U(-1, 1) by default
    wide = draw(t, n=2000, shift={"sigma_x": 2.0}).xs
    assert wide.abs().max() <= 2 and wide.abs().max() > 1.9  # the grid widens the interval to U(-σ, σ)


@pytest.mark.parametrize("name", GARG)
def test_tokens_are_garg_layout(name):
    t = task(name)
    b = t.sample(3, 5, torch.Generator().manual_seed(1), "cpu")
    d = t.d
    assert b.tokens.shape == (3, 10, d)
    torch.testing.assert_close(b.tokens[:, 0::2], b.xs)  # x tokens
    torch.testing.assert_close(b.tokens[:, 1::2, 0], b.ys)  # y in the first coordinate
    assert (b.tokens[:, 1::2, 1:] == 0).all()
    assert b.pred_idx.tolist() == [0, 2, 4, 6, 8]


def test_dimension_curriculum():
    cfg = OmegaConf.create({"enabled": True, "dims_start": 5, "dims_inc": 1, "dims_interval": 2000})
    assert [curriculum.n_dims(cfg, s) for s in (0, 1999, 2000, 30000)] == [5, 5, 6, 20]
    assert curriculum.n_dims(OmegaConf.create({"enabled": True, "dims_start": 0}), 10**6) is None
    t = task("linear_regression", n_dims=8)
    b = t.train_batch(0, 4, Stage(6, 3), torch.Generator().manual_seed(0), "cpu")
    assert (b.xs[..., 3:] == 0).all() and (b.xs[..., :3] != 0).all()


# ------------------------------------------------------------------ baselines
def _prompt(bsz=3, n=9, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(bsz, n, d, generator=g), torch.randn(bsz, n, generator=g)


def test_least_squares_d_is_numpys_min_norm_solution():
    xs, ys = _prompt()
    got = B.least_squares_d(xs, ys).double().numpy()
    for b in range(3):
        assert got[b, 0] == 0
        for i in range(1, 9):
            w = np.linalg.lstsq(np64(xs[b, :i]), np64(ys[b, :i]), rcond=None)[0]
            assert got[b, i] == pytest.approx(np64(xs[b, i]) @ w, rel=1e-4, abs=1e-4)


def test_least_squares_d_recovers_a_linear_function_past_d_examples():
    t = task("linear_regression", n_dims=4)
    b = t.sample(8, 12, torch.Generator().manual_seed(3), "cpu")
    err = (B.least_squares_d(b.xs, b.ys) - b.ys)[:, 5:]  # from 5 > d examples on: exact
    assert err.abs().max() < 1e-4


def test_ridge_is_the_closed_form():
    xs, ys = _prompt()
    got = B.ridge(xs, ys, lam=0.3).double().numpy()
    for b in range(3):
        for i in range(1, 9):
            x, y = np64(xs[b, :i]), np64(ys[b, :i])
            w = np.linalg.solve(x.T @ x + 0.3 * np.eye(4), x.T @ y)
            assert got[b, i] == pytest.approx(np64(xs[b, i]) @ w, rel=1e-4, abs=1e-4)


def test_knn_and_averaging_in_d_dimensions():
    xs, ys = _prompt()
    knn, avg = B.nearest_neighbours(xs, ys).double().numpy(), B.averaging(xs, ys).double().numpy()
    for b in range(3):
        for i in range(1, 9):
            dist = [np.linalg.norm(np64(xs[b, j] - xs[b, i])) for j in range(i)]
            near = sorted(range(i), key=lambda j: dist[j])[: min(3, i)]
            assert knn[b, i] == pytest.approx(np64(ys[b, near]).mean(), rel=1e-5, abs=1e-6)
            w = (np64(xs[b, :i]) * np64(ys[b, :i])[:, None]).mean(0)
            assert avg[b, i] == pytest.approx(np64(xs[b, i]) @ w, rel=1e-4, abs=1e-5)


def test_model_input_width_follows_the_task():
    cfg = make_cfg("task=relu_2nn", "task.n_dims=6")
    from ssa_repro.models import build_model

    assert build_model(cfg.model, cfg.scorer).read_in.in_features == 6


@pytest.mark.slow
def test_a_function_task_trains_and_evaluates_with_its_baselines(tmp_path):
    run = tmp_path / "run"
    proc = run_script(
        "train.py",
        *TINY,
        "task=relu_2nn",
        "task.n_dims=4",
        "curriculum.dims_start=2",
        f"hydra.run.dir={run}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    parts = glob.glob(str(run / "eval" / "grid" / "*" / "parts" / "results-*.csv"))
    frame = pd.concat([pd.read_csv(p) for p in parts])
    assert set(frame.predictor) == {"model", "least_squares_d", "ridge", "knn3", "averaging", "zero"}
    assert (frame[frame.metric == "mse"]["value"] >= 0).all()


def test_lasso_meets_its_optimality_conditions():
    """The Lasso fit of a prefix meets the optimality (KKT) conditions of (1/2i)‖y − Xw‖² + α‖w‖₁:
    X_jᵀr/i = α·sign(w_j) where w_j ≠ 0 and |X_jᵀr/i| ≤ α where w_j = 0; the baseline predicts w·x_i."""
    pytest.importorskip("sklearn")
    from sklearn.linear_model import Lasso

    xs, ys = _prompt(bsz=2, n=12, d=5)
    got = B.lasso(xs, ys, alpha=0.05).double().numpy()
    for b in range(2):
        for i in (3, 8, 11):
            x, y = np64(xs[b, :i]), np64(ys[b, :i])
            w = Lasso(alpha=0.05, fit_intercept=False, max_iter=10_000, tol=1e-10).fit(x, y).coef_
            grad = x.T @ (y - x @ w) / i  # [d]
            active = np.abs(w) > 1e-8
            np.testing.assert_allclose(grad[active], 0.05 * np.sign(w[active]), atol=1e-5)
            assert (np.abs(grad[~active]) <= 0.05 + 1e-5).all()
            assert got[b, i] == pytest.approx(np64(xs[b, i]) @ w, rel=1e-4, abs=1e-5)


def test_baselines_that_need_scikit_learn_say_so(monkeypatch):
    import importlib.util

    assert B.problems(["least_squares_d", "nope"]) == [
        f"eval.baselines has ['nope']; allowed: {', '.join(B.BASELINES)}"
    ]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "sklearn" else real(name))
    assert B.problems(["lasso"]) == [
        "eval.baselines ['lasso'] need scikit-learn, which is not installed: pip install -e '.[garg]'"
    ]


def test_tree_baseline_recovers_a_step_function():
    """y = 1 where x₀ > 0 else −1, ten context examples alternating sides: only x₀ separates them, so
    the tree splits on it between the sides and queries beyond the context's x₀ range are exact."""
    pytest.importorskip("sklearn")
    g = torch.Generator().manual_seed(0)
    ctx = torch.rand(4, 10, 3, generator=g) + 0.1  # |x₀| in [0.1, 1.1]
    ctx[:, ::2, 0] *= -1  # alternate sides: examples 0 and 1 already cover both
    query = torch.tensor([[[2.0, 0.0, 0.0]], [[-2.0, 0.0, 0.0]], [[3.0, 1.0, 1.0]], [[-3.0, -1.0, 1.0]]])
    xs = torch.cat([ctx, query], dim=1)  # [4, 11, 3]
    ys = torch.where(xs[..., 0] > 0, 1.0, -1.0)
    pred = B.tree(xs, ys)
    torch.testing.assert_close(pred[:, -1], ys[:, -1])
