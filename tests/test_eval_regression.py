"""The redesigned evaluations give the numbers the old ones gave on the same prompts (fixed seeds).

``tests/data/regression_05dc147.csv`` holds what the evaluators of commit 05dc147 (before the redesign)
computed for fixed models and settings (see tests/data/README.md). The same models are built here from
the same seeds, evaluated through today's evaluators, and every value compared: the prompts must be
drawn in the same order from the same generators, labelled, encoded and scored the same way. Linear
deviant prompts now keep each prompt's function instead of recovering it by least squares, so their
relabelled answers agree to float32 rounding (rtol 1e-4 there); everything else to 1e-5.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.evaluation import boundary as B
from ssa_repro.evaluation.deviant_cells import deviant_rows
from ssa_repro.evaluation.grid import GridConfig, GridEvaluation
from ssa_repro.models import build_model
from ssa_repro.tasks import build_task
from tests.conftest import ROOT, NoProgress, evaluation_run, make_cfg
from tests.lockdrift import says_what_moved

FIXTURE = pd.read_csv(ROOT / "tests" / "data" / "regression_05dc147.csv")
CPU = torch.device("cpu")
CASES = {
    "every_lic_softmax": (["task=every", "scorer=softmax"], 1),
    "every_lic_ssa": (["task=every", "scorer=ssa"], 2),
    "some_nolabels_ssa": (["task=some", "task.labels_in_context=false", "scorer=ssa"], 3),
    "every_last_softmax": (["task=every", "task.labels_in_context=false", "task.supervise=last"], 4),
    "linear": (["task=linear"], 5),
}


def model_for(case: str):
    overrides, seed = CASES[case]
    cfg = make_cfg(*overrides, "model.n_layer=2", "model.n_embd=32", "model.max_positions=128")
    torch.manual_seed(seed)
    model = build_model(cfg.model, cfg.scorer)
    with torch.no_grad():
        model.read_out.weight.mul_(30.0)
    return cfg, model.eval(), build_task(cfg.task)


def grid(cfg, model, task, **kw) -> pd.DataFrame:
    ev = GridEvaluation(OmegaConf.merge(OmegaConf.structured(GridConfig), kw), cfg, task)
    ev.resolve()
    return pd.concat(
        [t["results"] for t in ev.compute(evaluation_run(model, task, cfg), ev.cells(), NoProgress())]
    )


def compare(new: pd.DataFrame, old: pd.DataFrame, keys: list[str], rtol: float = 1e-5) -> None:
    with says_what_moved("torch", "numpy", "scipy", "statsmodels", "pandas"):
        _compare(new, old, keys, rtol)


def _compare(new: pd.DataFrame, old: pd.DataFrame, keys: list[str], rtol: float) -> None:
    a = new.sort_values(keys).reset_index(drop=True)
    b = old.sort_values(keys).reset_index(drop=True)
    assert len(a) == len(b) and len(a) > 0
    for k in keys:
        numeric = pd.api.types.is_numeric_dtype(b[k])
        cast = (lambda c: c.astype(float).tolist()) if numeric else (lambda c: c.astype(str).tolist())
        assert cast(a[k]) == cast(b[k]), k
    np.testing.assert_allclose(a["value"].to_numpy(float), b["value"].to_numpy(float), rtol=rtol, atol=1e-9)
    np.testing.assert_array_equal(a["n_samples"].to_numpy(int), b["n_samples"].to_numpy(int))


@pytest.mark.parametrize(
    "case", ["every_lic_softmax", "every_lic_ssa", "some_nolabels_ssa", "every_last_softmax"]
)
@pytest.mark.parametrize("reuse", [False, True])
def test_quantifier_grid_as_before(case, reuse):
    cfg, model, task = model_for(case)
    new = grid(
        cfg,
        model,
        task,
        sigmas=[1.0, 3.0, 10.0],
        lengths=[5, 12, 20],
        n_samples=2,
        batch_size=16,
        skip_first=3,
        seed=1234,
        reuse_draws=reuse,
        nested=False,  # the pre-redesign protocol drew every length on its own
    )
    old = FIXTURE[
        (FIXTURE.case == case) & (FIXTURE["eval"] == "grid") & (FIXTURE.reuse_draws.astype(str) == str(reuse))
    ]
    compare(new.assign(length=new.length.astype(float)), old, ["sigma_x", "length", "metric"])


def test_linear_grid_and_baselines_as_before():
    cfg, model, task = model_for("linear")
    new = grid(
        cfg,
        model,
        task,
        sigmas=[1.0, 2.0, 8.0],
        sigmas_f=[1.0, 4.0],
        lengths=[11],
        n_samples=3,
        batch_size=16,
        skip_first=3,
        seed=1234,
    )
    old = FIXTURE[(FIXTURE.case == "linear") & (FIXTURE["eval"] == "grid")]
    compare(new, old, ["sigma_f", "sigma_x", "predictor"])


@pytest.mark.parametrize("case", [*CASES])
def test_deviant_as_before(case):
    cfg, model, task = model_for(case)
    signs = ["positive", "random"] if case == "linear" else ["positive"]
    for sign in signs:
        kw = dict(
            sign=sign,
            length=11 if case == "linear" else 12,
            n_samples=2,
            batch_size=16,
            skip_first=3,
            seed=1234,
            device=CPU,
        )
        ms, ks = ([1.0, 10.0], [1, 3]) if case == "linear" else ([1.0, 10.0, 100.0], [1, 2])
        new = pd.DataFrame(
            [r for k in ks for m in ms for r in deviant_rows(model, task, {"M": m, "k": k}, **kw)]
        )
        name = f"deviant_{sign}" if case == "linear" else "deviant"
        old = FIXTURE[(FIXTURE.case == case) & (FIXTURE["eval"] == name)]
        compare(new, old, ["M", "k", "predictor", "metric"], rtol=1e-4 if case == "linear" else 1e-5)


def test_boundary_prompts_and_predictions_as_before():
    cfg, model, task = model_for("linear")
    bcfg = OmegaConf.structured(
        B.BoundaryConfig(
            n_functions=10, n_query=9, x_max=10.0, n_scaled=50, sigmas_f=[1.0, 5.0], min_count=5, n_bins=5
        )
    )
    sets = [("query_sweep", math.nan), ("scaled_f", 1.0), ("scaled_f", 5.0)]
    new = pd.concat([B.collect_set(model, task, bcfg, 11, CPU, v, s) for v, s in sets], ignore_index=True)
    old = FIXTURE[(FIXTURE.case == "linear") & (FIXTURE["eval"] == "boundary_predictions")]
    for metric in ("y_true", "pred_model", "pred_least_squares"):
        want = old[old.metric == metric]["value"].to_numpy(float)
        with says_what_moved("torch", "numpy", "scipy"):
            np.testing.assert_allclose(new[metric].to_numpy(float), want, rtol=1e-5, atol=1e-5)
