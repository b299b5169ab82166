"""``python evaluate.py`` goes through the run once: its config is read once (over the schema), its task
and the evaluator are built once, by the checks, and the evaluation goes on with what they built; the
cells it stores are those ``runner.evaluate`` stores for the same run and settings."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir

from ssa_repro import tasks
from ssa_repro.cli import evaluate_app
from ssa_repro.core.rundir import RunDir
from ssa_repro.evaluation import EVALUATORS, runner
from ssa_repro.evaluation.grid import GridConfig
from ssa_repro.evaluation.loading import load_run
from ssa_repro.training.trainer import train
from tests.conftest import CONF, make_cfg, run_script

SETTINGS = ["eval=grid", "eval.sigmas=[1,2]", "eval.lengths=[5]", "eval.n_samples=1", "eval.figures=false"]


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("one_pass")
    train(make_cfg("evaluation.enabled=false"), d)
    return d


def counting(monkeypatch, owner, name: str) -> list:
    """Count the calls of ``owner.name`` (a function or method), each still done."""
    calls, real = [], getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_evaluate_reads_the_config_and_builds_task_and_evaluator_once(linear_run, monkeypatch, tmp_path):
    run = tmp_path / "run"  # a copy without stored cells, whatever the other tests stored (any order)
    shutil.copytree(linear_run, run, ignore=shutil.ignore_patterns("eval"))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"run_dir={run}", *SETTINGS])
    reads = counting(monkeypatch, RunDir, "config")
    raw_reads = counting(monkeypatch, RunDir, "raw_config")
    # build_task is looked up where it is used (runner, loading): count it in the registry's class instead
    linear = tasks.TASKS.get("linear")
    built_tasks = counting(monkeypatch, linear, "__init__")
    built_evaluators = counting(monkeypatch, EVALUATORS.get("grid"), "__init__")

    summary = evaluate_app.main(cfg)

    assert (len(reads), len(raw_reads), len(built_tasks), len(built_evaluators)) == (1, 1, 1, 1)
    assert summary["cells_computed"] == 4 and summary["evaluation"] == "grid"


def test_the_command_reads_the_config_once_with_its_pre_check(linear_run, monkeypatch, tmp_path):
    """The whole command (Hydra's CheckRunFirst callback checks before the job starts, then the job):
    the run's config is still read once and the evaluator built once; the job takes the callback's."""
    run = tmp_path / "run"  # a copy: the module's run stays without stored cells for the other tests
    shutil.copytree(linear_run, run, ignore=shutil.ignore_patterns("eval"))
    reads = counting(monkeypatch, RunDir, "config")
    built_evaluators = counting(monkeypatch, EVALUATORS.get("grid"), "__init__")
    out = run_script("evaluate.py", f"run_dir={run}", *SETTINGS)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (len(reads), len(built_evaluators)) == (1, 1)
    assert evaluate_app.CheckFirst._kept == {}  # taken by the job, nothing left for another


def test_the_one_pass_stores_what_the_runner_stores(linear_run, tmp_path):
    """The values ``evaluate.py`` stores equal those of ``runner.evaluate`` (load, build, evaluate: the
    path every other caller takes) on a copy of the run with no stored cells, value for value."""
    copy = tmp_path / "copy"
    shutil.copytree(linear_run, copy, ignore=shutil.ignore_patterns("eval"))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"run_dir={linear_run}", *SETTINGS])
    app = evaluate_app.main(cfg)
    grid = GridConfig(sigmas=[1.0, 2.0], lengths=[5], n_samples=1, figures=False)
    direct = runner.evaluate(load_run(copy, torch.device("cpu")), grid)
    assert direct["protocol_id"] == app["protocol_id"] and direct["cells_computed"] == 4
    key = ["sigma_x", "length", "predictor", "metric"]
    a, b = (
        pd.read_csv(run / "eval" / "grid" / app["protocol_id"] / "results.csv").sort_values(key)
        for run in (linear_run, copy)
    )
    assert len(a) and a["value"].tolist() == b["value"].tolist() and a[key].equals(b[key])
