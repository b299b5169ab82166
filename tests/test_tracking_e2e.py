"""W&B through the real commands (offline): one training job (its end-of-run evaluation logged into its
own run) and two evaluate.py calls give exactly one training run and two eval runs in its group, and
the training run's summary answers the question (headline numbers of training and evaluation)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from ssa_repro.cli import evaluate_app
from ssa_repro.jobs.train_job import run_job
from tests.conftest import CONF, make_cfg
from tests.test_tracking import inspect, offline_runs, run_id_of, run_record


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")


def _evaluate(run, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "evaluate",
            overrides=[f"run_dir={run}", "eval=grid", "eval.lengths=[5]", "eval.n_samples=1", *overrides],
        )
    return evaluate_app.main(cfg)


@pytest.mark.slow
def test_one_training_run_and_one_eval_run_per_evaluation(tmp_path, offline):
    run = tmp_path / "run"
    summary = run_job(make_cfg("scorer=ssa", "logger.mode=offline"), run)
    first = _evaluate(run, "eval.sigmas=[1]")
    second = _evaluate(run, "eval.sigmas=[1]", "eval.seed=7")  # another protocol: computed, logged
    again = _evaluate(run, "eval.sigmas=[1]")  # nothing computed: nothing logged
    assert first["cells_computed"] == second["cells_computed"] == 1 and again["cells_computed"] == 0
    train_id = (run / "wandb_id.txt").read_text().strip()
    runs = {run_id_of(f): run_record(f) for f in offline_runs(run)}
    assert len(runs) == 3 and train_id in runs
    train = runs.pop(train_id)
    assert train["job_type"] == "train"
    for r in runs.values():
        assert r["job_type"] == "eval" and r["run_group"] == train["run_group"]
        assert r["config"]["update"]["train_run"]["id"] == train_id
    (folder,) = [f for f in offline_runs(run) if run_id_of(f) == train_id]
    numbers = inspect(folder)["summary"]
    assert numbers["model/parameters"] == summary["parameters"]
    assert numbers["train/final_loss"] == pytest.approx(summary["final_loss"])
    assert numbers["eval/quick/in_dist"] == pytest.approx(
        summary["evaluations"]["quick"]["in_distribution"]["model"]
    )
    assert {"eval/quick/grid_mean", "eval/quick/grid_worst", "scorer/b_mean/L0", "scorer/n_mean/L0"} <= set(
        numbers
    )
