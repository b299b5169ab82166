"""eval=boundary: the estimators on known clips, the prompts, an end-to-end run, check() and the YAML."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from matplotlib.image import imread
from omegaconf import OmegaConf

from ssa_repro.evaluation import boundary as B
from ssa_repro.evaluation import boundary_estimators as BE
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import check as runner_check
from ssa_repro.evaluation.runner import evaluate
from ssa_repro.tasks import build_task
from ssa_repro.tasks.baselines import least_squares
from ssa_repro.training.trainer import train
from tests.conftest import CONF, make_cfg

CPU = torch.device("cpu")
LABELS = ["task", "scorer", "model", "seed", "step", "n_points"]


def small(**kw):
    return OmegaConf.merge(OmegaConf.structured(B.BoundaryConfig), kw)


class ClipNext(torch.nn.Module):
    """A stub 'model' that outputs the NEXT token clipped to [lo, hi]: at an x token that is its own true
    label, so it is a perfect predictor with known boundaries lo and hi."""

    blocks: list = []

    def __init__(self, lo: float, hi: float):
        super().__init__()
        self.lo, self.hi = lo, hi

    def forward(self, tokens):
        nxt = torch.cat([tokens[:, 1:, 0], torch.zeros_like(tokens[:, :1, 0])], dim=1)
        return nxt.clamp(self.lo, self.hi)


# ---------------------------------------------------------------- estimators


def clipped(n=20_000, lo=-7.0, hi=9.0, noise=1e-3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.uniform(-20, 20, n)
    return y, np.clip(y, lo, hi) + noise * rng.standard_normal(n)


def test_boundaries_recover_a_known_clip():
    y, y_hat = clipped()
    lo, hi = BE.boundaries(y_hat, 0.995)
    # 35% of y_true lies below -7 and 27.5% above 9: both quantiles sit on the clip (± the noise)
    assert lo == pytest.approx(-7.0, abs=0.01)
    assert hi == pytest.approx(9.0, abs=0.01)
    lo, hi = BE.boundaries(y, 0.995)  # unclipped: 0.5% / 99.5% of U(-20, 20) = ±19.8
    assert (lo, hi) == pytest.approx((-19.8, 19.8), abs=0.1)


@pytest.mark.parametrize(
    ("rel_tol", "abs_tol"),
    [(0.1, 0.0), (0.2, 0.0), (0.1, 0.5)],
)
def test_saturation_points_of_a_known_clip(rel_tol, abs_tol):
    # past the clip |y - c| > rel_tol·|y| + abs_tol  <=>  |y| > (|c| + abs_tol) / (1 - rel_tol):
    # e.g. 9 / 0.9 = 10 and 7 / 0.9 = 7.78 for rel_tol = 0.1
    y, y_hat = clipped()
    neg, pos = BE.saturation_points(y, y_hat, rel_tol=rel_tol, abs_tol=abs_tol, n_bins=40, min_count=20)
    assert neg == pytest.approx(-(7 + abs_tol) / (1 - rel_tol), abs=0.1)
    assert pos == pytest.approx((9 + abs_tol) / (1 - rel_tol), abs=0.1)


def test_saturation_points_are_robust_and_report_none_or_everywhere():
    y, y_hat = clipped()
    # isolated failures near 0 (a relative tolerance is tiny there) and 0.3% wild outliers change nothing
    y_hat = np.where(np.abs(y) < 1, y + 0.5, y_hat)
    y_hat[::300] = 100.0
    neg, pos = BE.saturation_points(y, y_hat, rel_tol=0.1, abs_tol=0.0)
    assert (neg, pos) == pytest.approx((-7 / 0.9, 10.0), abs=0.1)
    assert BE.boundaries(y_hat, 0.995) == pytest.approx((-7.0, 9.0), abs=0.01)
    # a perfect predictor never saturates: NaN; one that fails at every magnitude: 0 (not -0.0)
    assert all(math.isnan(v) for v in BE.saturation_points(y, y))
    neg, pos = BE.saturation_points(y, -y)
    assert (neg, pos) == (0.0, 0.0) and math.copysign(1, neg) == 1
    # a side with too few prompts: NaN
    assert math.isnan(BE.saturation_points(np.abs(y), np.clip(np.abs(y), 0, 9))[0])


def test_median_stat_by_hand():
    s = BE.median_stat([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["value"] == 3.0 and s["n_samples"] == 5
    assert (s["q25"], s["q75"]) == (2.0, 4.0)
    # n = 5: ranks floor(2.5 - 1.96·√5/2) = 0 and ceil(2.5 + 2.19) - 1 = 4: the whole sample
    assert (s["ci_low"], s["ci_high"]) == (1.0, 5.0)


# ---------------------------------------------------------------- prompts


def test_query_prompts_set_exactly_the_query_and_stay_linear():
    task = build_task(make_cfg().task)
    g = torch.Generator().manual_seed(0)
    prompts = task.draw(3, 6, g, "cpu")
    a, b, xs = prompts.params["a"], prompts.params["b"], prompts.xs
    q = [-20.0, -0.5, 0.0, 7.25, 20.0]
    queried, xq = B.with_query(prompts, q)
    a2, b2, xs2 = queried.params["a"], queried.params["b"], queried.xs
    assert xs2.shape == (15, 6) and a2.shape == b2.shape == (15, 1)
    # function-major: prompt f·5 + j is function f at query q[j], its context untouched
    for f in range(3):
        for j, v in enumerate(q):
            i = f * 5 + j
            assert xs2[i, -1].item() == v and xq[i].item() == v
            torch.testing.assert_close(xs2[i, :-1], xs[f, :-1], rtol=0, atol=0)
            assert (a2[i], b2[i]) == (a[f], b[f])
    batch = task.build(queried)
    torch.testing.assert_close(batch.targets, a2 * xs2 + b2)  # y = a·x + b for every example
    torch.testing.assert_close(batch.tokens[:, 0::2, 0], xs2)
    torch.testing.assert_close(batch.tokens[:, 1::2, 0], batch.targets)
    assert batch.pred_idx.tolist() == [0, 2, 4, 6, 8, 10]  # the x tokens; the query is read at token 10
    # least squares on the 5 context examples predicts every query exactly
    ls = least_squares(batch.xs.double(), batch.targets.double())[:, -1]
    torch.testing.assert_close(ls, (a2 * xs2 + b2)[:, -1].double(), rtol=1e-6, atol=1e-6)


def test_collect_and_boundaries_through_a_clipping_stub():
    cfg = small(n_functions=40, n_query=41, x_max=20.0, sigmas_f=[1.0, 10.0], n_scaled=200, min_count=10)
    task = build_task(make_cfg().task)
    sets = [("query_sweep", math.nan)] + [("scaled_f", s) for s in cfg.sigmas_f]
    frame = pd.concat([B.collect_set(ClipNext(-7.0, 9.0), task, cfg, 6, CPU, v, s) for v, s in sets])
    assert len(frame) == 40 * 41 + 2 * 200
    sweep = frame[frame.variant == "query_sweep"]
    assert sorted(sweep.query_x.unique()) == pytest.approx(list(np.linspace(-20, 20, 41)))
    np.testing.assert_allclose(sweep.y_true, sweep.a * sweep.query_x + sweep.b, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(frame.pred_model, frame.y_true.clip(-7, 9), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(frame.pred_least_squares, frame.y_true, rtol=1e-4, atol=1e-3)
    train = BE.training_range(make_cfg().task, 200_000, 0.995, 0)
    # y = a·x + b with a, b, x ~ N(0, 1): var 2, heavier tails than N(0, 2); 99.5% quantile ≈ 4.1-4.2
    assert 3.9 < train["train_high"] < 4.4 and train["train_low"] == pytest.approx(
        -train["train_high"], abs=0.15
    )
    assert train["x_train_high"] == pytest.approx(2.576, abs=0.03)  # the N(0, 1) 99.5% quantile
    rows = pd.DataFrame(BE.boundary_rows(frame, cfg, train, {}))
    assert set(rows.prompts) == {"all", "query_sweep", "sigma_f=1", "sigma_f=10"}
    m = rows[(rows.predictor == "model") & (rows.prompts == "all")].iloc[0]
    assert (m.lower, m.upper) == pytest.approx((-7.0, 9.0), abs=1e-4)
    # the rows carry the estimator (checked against its closed form in test_saturation_points_of_a_known_clip)
    # applied to every prompt with the config's tolerances and bins: exactly, not only near (c + 0.1)/0.9
    expected = BE.saturation_points(
        frame.y_true, frame.pred_model, cfg.rel_tol, cfg.abs_tol, cfg.n_bins, cfg.min_count
    )
    assert (m.saturation_neg, m.saturation_pos) == expected
    assert expected == pytest.approx((-7.1 / 0.9, 9.1 / 0.9), abs=0.6)  # bins of ~1.5 at 400 + 1,640 prompts
    ls = rows[(rows.predictor == "least_squares") & (rows.prompts == "all")].iloc[0]
    assert math.isnan(ls.saturation_neg) and math.isnan(ls.saturation_pos)
    assert ls.upper == pytest.approx(ls.y_true_high, rel=1e-4)


# ---------------------------------------------------------------- end to end, check, YAML


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("boundary_run")
    train(make_cfg(), d)
    return d


def test_evaluate_writes_tables_and_figures(linear_run):
    cfg = small(n_functions=6, n_query=9, x_max=10.0, sigmas_f=[1.0, 5.0], n_scaled=60, n_bins=6, min_count=3)
    assert runner_check(OmegaConf.load(linear_run / "config.yaml"), cfg) == []
    summary = evaluate(load_run(linear_run, CPU), cfg)
    out = Path(summary["dir"])
    results = pd.read_csv(out / "binned.csv")
    assert set(LABELS + ["predictor", "variant", "sigma_f", "y_bin_low", "y_bin_high", "y_true"]) <= set(
        results
    )
    assert {"metric", "value", "n_samples", "ci_low", "ci_high", "q25", "q75"} <= set(results)
    assert set(results.predictor) == {"model", "least_squares"}
    assert set(results.metric) == {"prediction", "abs_error"}
    assert set(results.variant) == {"query_sweep", "scaled_f"}
    assert (results.n_points == 5).all()  # the run's curriculum.end
    ls = results[(results.predictor == "least_squares") & (results.metric == "abs_error")]
    assert ls.value.abs().max() < 1e-3
    by_x = pd.read_csv(out / "by_query_x.csv")
    assert sorted(by_x.query_x.unique()) == pytest.approx(list(np.linspace(-10, 10, 9)))
    bound = pd.read_csv(out / "boundary.csv")
    cols = ["lower", "upper", "saturation_neg", "saturation_pos", "y_true_low", "y_true_high"]
    assert set(LABELS + ["predictor", "prompts", "train_low", "train_high", "n_samples", *cols]) <= set(bound)
    assert len(bound) == 2 * 4  # (all, query_sweep, σ_F 1, σ_F 5) × 2 predictors
    assert (bound.lower <= bound.upper).all()
    preds = pd.read_csv(out / "predictions.csv")
    assert len(preds) == 6 * 9 + 2 * 60
    assert {"query_x", "a", "b", "y_true", "pred_model", "pred_least_squares"} <= set(preds)
    assert summary["figures"] == ["boundary.png", "boundary.pdf", "functions.png", "functions.pdf"]
    for name in ("boundary.png", "functions.png"):
        img = imread(out / name)
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 300
    m = summary["boundary"]["model"]
    assert m["lower"] <= m["upper"] and summary["n_prompts"] == len(preds)
    assert summary["train_range"] == pytest.approx([bound.train_low[0], bound.train_high[0]])
    assert summary["boundary"]["least_squares"]["saturation_pos"] is None  # never saturates: null in JSON
    assert "NaN" not in (out / "summary.json").read_text()


@pytest.mark.parametrize(
    ("overrides", "eval_kw", "expected"),
    [
        (["task=every"], {}, "eval=boundary does not apply to task=every"),
        ([], {"n_points": 40}, "eval.n_points=40 needs 80 tokens, more than model.max_positions=64"),
        ([], {"n_points": 2}, "eval.n_points=2 must be >= 3"),
        ([], {"x_max": 0.0}, "eval.x_max=0.0 must be > 0"),
        ([], {"n_query": 1}, "eval.n_query=1 must be >= 2"),
        ([], {"query_x": []}, "eval.query_x=[] must be null or a non-empty list"),
        ([], {"sigmas_f": [1.0, -5.0]}, "eval.sigmas_f=[1.0, -5.0] must hold values > 0"),
        ([], {"quantile": 0.4}, "eval.quantile=0.4 must be in (0.5, 1)"),
        ([], {"rel_tol": 0.0}, "eval.rel_tol=0.0 must be > 0"),
        ([], {"abs_tol": -1.0}, "eval.abs_tol=-1.0 must be >= 0"),
        ([], {"n_functions": 0}, "eval.n_functions=0 must be >= 1"),
        ([], {"n_scaled": -1}, "eval.n_scaled=-1 must be >= 0"),
        ([], {"n_bins": 1}, "eval.n_bins=1 must be >= 2"),
        ([], {"n_train_samples": 10}, "eval.n_train_samples=10 must be >= 1000"),
    ],
)
def test_check_names_the_key(overrides, eval_kw, expected):
    found = runner_check(make_cfg(*overrides), small(**eval_kw))
    assert any(expected in msg for msg in found), found


def test_check_accepts_defaults_and_explicit_queries():
    assert runner_check(make_cfg(), small()) == []
    assert runner_check(make_cfg(), small(query_x=[-3.0, 0.0, 50.0], x_max=0.0)) == []  # x_max unused
    assert B.query_grid(small(query_x=[-3.0, 50.0])) == [-3.0, 50.0]
    assert B.query_grid(small()) == pytest.approx(list(np.linspace(-20, 20, 81)))


def test_yaml_option_composes_with_the_schema_defaults():
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=["run_dir=x", "eval=boundary"])
        for typo in ("eval.x_maxx=3", "eval.x_max=abc"):  # unknown key, wrong type: refused by the schema
            with pytest.raises(ConfigCompositionException):
                compose("evaluate", overrides=["run_dir=x", "eval=boundary", typo])
    schema = OmegaConf.to_container(OmegaConf.structured(B.BoundaryConfig))
    assert OmegaConf.to_container(cfg.eval) == schema  # the YAML states the schema's defaults
    assert cfg.eval.name == "boundary" and cfg.eval.x_max == 20.0 and cfg.eval.n_query == 81
    assert runner_check(make_cfg(), cfg.eval) == []
