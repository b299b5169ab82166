"""The shift suite (eval=shift, ssa_repro/evaluation/shift.py): each variant's geometry checked exactly
(subspace ranks, orthogonality, copies, orthants, the skewed spectrum), and the evaluator end to end,
where least squares must answer exactly what linear algebra says it can."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.evaluation import shift as S
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import evaluate
from ssa_repro.reports import compare
from ssa_repro.tasks import TASKS, build_task
from ssa_repro.training.trainer import train
from ssa_repro.training.validate import problems
from tests.conftest import make_cfg

CPU = torch.device("cpu")


def prompts(name="linear_regression", d=6, n=12, bsz=4, seed=0):
    cfg = OmegaConf.structured(TASKS.schemas[name])
    cfg.n_dims = d
    t = build_task(cfg)
    return t, t.draw(bsz, n, torch.Generator().manual_seed(seed), "cpu")


def shifted(variant, p, seed=1, **kw):
    cfg = OmegaConf.merge(OmegaConf.structured(S.ShiftConfig), kw)
    return S.transform(variant, p, cfg, torch.Generator().manual_seed(seed))


def test_half_subspace_has_rank_d_over_2():
    _, p = prompts(d=6, n=12)
    q, _, _ = shifted("half_subspace", p)
    sv = torch.linalg.svdvals(q.xs.double())  # [B, 6]
    assert (sv[:, 3:] < 1e-5 * sv[:, :1]).all() and (sv[:, :3] > 1e-2).all()


def test_orthogonal_subspaces_put_the_query_orthogonal_to_the_context():
    _, p = prompts(d=6, n=12)
    q, _, _ = shifted("orthogonal_subspaces", p)
    context, query = q.xs[:, :-1].double(), q.xs[:, -1:].double()
    assert (context @ query.transpose(1, 2)).abs().max() < 1e-5
    assert query.norm(dim=-1).min() > 1e-2  # the query is not simply zero


def test_overlapping_subspaces_copy_a_context_input():
    _, p = prompts()
    q, _, _ = shifted("overlapping_subspaces", p)
    for b in range(q.xs.shape[0]):
        assert any(torch.equal(q.xs[b, -1], q.xs[b, j]) for j in range(q.xs.shape[1] - 1))
    torch.testing.assert_close(q.xs[:, :-1], p.xs[:, :-1])  # the context is untouched


def test_random_quadrants_put_the_context_in_one_orthant():
    _, p = prompts()
    q, _, _ = shifted("random_quadrants", p)
    signs = torch.sign(q.xs[:, :-1])  # [B, n-1, d]
    assert (signs == signs[:, :1]).all()  # one sign pattern per prompt
    torch.testing.assert_close(q.xs[:, :-1].abs(), p.xs[:, :-1].abs())
    torch.testing.assert_close(q.xs[:, -1], p.xs[:, -1])  # the query as drawn


def test_skewed_covariance_has_the_harmonic_spectrum_and_trace_d():
    a = S.skew(8, torch.Generator().manual_seed(0)).double()
    eig = torch.linalg.eigvalsh(a @ a.T).flip(0)
    want = 1 / torch.arange(1, 9, dtype=torch.float64)
    np.testing.assert_allclose(eig.numpy(), (want * 8 / want.sum()).numpy(), rtol=1e-5)


def test_scales_and_label_noise():
    t, p = prompts()
    q, y_scale, noise = shifted("scale_x", p, x_scale=3.0)
    torch.testing.assert_close(q.xs, 3 * p.xs)
    _, y_scale, _ = shifted("scale_y", p, y_scale=2.5)
    assert y_scale == 2.5
    _, _, noise = shifted("noisy_labels", prompts(n=500, bsz=40)[1], noise_std=0.5)
    assert noise.shape == (40, 500) and abs(noise.std().item() - 0.5) < 0.01  # 20,000 draws


def test_subspace_variants_need_two_dimensions_and_names_are_checked():
    cfg = make_cfg("task=polynomial")
    ev = S.Shift(OmegaConf.merge(OmegaConf.structured(S.ShiftConfig), {"variants": ["half_subspace", "nope"]}),
                 cfg, build_task(cfg.task))  # fmt: skip
    ev.resolve()
    found = " ".join(ev.problems())
    assert "eval.variants has ['nope']; allowed: standard" in found
    assert "['half_subspace'] need task.n_dims >= 2 (task.n_dims=1)" in found
    assert problems(make_cfg("task=linear")) == []  # linear (1-d a·x + b) does not declare shift
    ev = S.Shift(
        OmegaConf.structured(S.ShiftConfig), make_cfg("task=linear"), build_task(make_cfg("task=linear").task)
    )
    assert "does not apply to task=linear" in " ".join(ev.problems())


def test_lengths_past_half_max_positions_are_refused_for_learned_positions_only():
    for pos, refused in (("learned", True), ("none", False), ("rope", False), ("alibi", False)):
        cfg = make_cfg("task=polynomial", "model.max_positions=32", f"model.pos={pos}")
        ev = S.Shift(OmegaConf.merge(OmegaConf.structured(S.ShiftConfig), {"lengths": [4, 64]}),
                     cfg, build_task(cfg.task))  # fmt: skip
        ev.resolve()
        found = [p for p in ev.problems() if "eval.lengths" in p]
        expected = ["eval.lengths=[4, 64] must be values in [2, 16] (model.max_positions/2)"]
        assert found == (expected if refused else []), pos
    cfg = make_cfg("task=polynomial", "model.pos=alibi")
    ev = S.Shift(
        OmegaConf.merge(OmegaConf.structured(S.ShiftConfig), {"lengths": [1, 64]}), cfg, build_task(cfg.task)
    )
    ev.resolve()
    assert "eval.lengths=[1, 64] must be values >= 2" in ev.problems()


@pytest.fixture(scope="module")
def linear_d_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("linear_d")
    train(
        make_cfg("task=linear_regression", "task.n_dims=3", "curriculum.end=9", "model.max_positions=32"), d
    )
    return d


def test_shift_evaluation_end_to_end_with_exact_least_squares(linear_d_run):
    cfg = OmegaConf.merge(
        OmegaConf.structured(S.ShiftConfig), {"n_samples": 1, "batch_size": 16, "lengths": [9]}
    )
    summary = evaluate(load_run(linear_d_run, CPU), cfg)
    folder = linear_d_run / "eval" / "shift" / summary["protocol_id"]
    res = pd.read_csv(folder / "results.csv")
    assert set(res.variant) == set(S.VARIANTS) and set(res.metric) == {"mse", "mse_last"}
    assert set(res.predictor) == {"model", "least_squares_d", "ridge", "knn3", "averaging", "zero"}
    ls = res[(res.predictor == "least_squares_d") & (res.metric == "mse_last")].set_index("variant")["value"]
    # 8 context examples of a noise-free linear function in 3 dimensions: least squares recovers w, so
    # the query is exact whatever the input geometry...
    for v in (
        "standard",
        "scale_x",
        "scale_y",
        "skewed_covariance",
        "random_quadrants",
        "overlapping_subspaces",
    ):
        assert ls[v] < 1e-6, v
    # ...except where the context spans too little: a 1-dimensional half subspace cannot fix w's other
    # components, and the orthogonal query sees none of the context's (minimum norm predicts 0 there)
    assert ls["orthogonal_subspaces"] > 1e-2
    zero = res[(res.predictor == "zero") & (res.metric == "mse_last")].set_index("variant")["value"]
    assert ls["orthogonal_subspaces"] == pytest.approx(zero["orthogonal_subspaces"], rel=1e-4)
    assert (folder / "baselines_shift.png").exists()


def test_shift_results_compare_across_runs(linear_d_run, tmp_path):
    """compare.py reads the shift evaluation's stored layout (variant × length): two runs whose stored
    values differ by a known amount compare cell by cell, with string rows."""
    cfg = OmegaConf.merge(
        OmegaConf.structured(S.ShiftConfig), {"n_samples": 1, "batch_size": 16, "lengths": [9]}
    )
    evaluate(load_run(linear_d_run, CPU), cfg)  # stored already when the test above ran: reused
    runs = {}
    for label, offset in (("a", 0.0), ("b", 0.5)):
        runs[label] = shutil.copytree(linear_d_run, tmp_path / label)
        (runs[label] / "run_id.txt").write_text(f"r-{label}\n")  # (a plain copy is refused as one run twice)
        for part in (runs[label] / "eval" / "shift").rglob("parts/results-*.csv"):
            frame = pd.read_csv(part)
            frame["value"] = frame["value"] + offset
            frame.to_csv(part, index=False)
    comp = compare.collect([runs["a"], runs["b"]], eval="shift")
    assert (comp.rows, comp.cols, comp.metric, comp.kind) == ("variant", "length", "mse_last", "positive")
    a, b = comp.grid(comp.labels[0]), comp.grid(comp.labels[1])
    assert set(a.index) == set(S.VARIANTS) and list(a.columns) == [9]
    assert np.allclose(b.to_numpy() - a.to_numpy(), 0.5)
