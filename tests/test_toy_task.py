"""Adding an ICL task is its file and its config: this module defines a task (its prompts, labels,
loss, metrics and declared evaluation) and stores its config option; it is then trained, evaluated,
and compared across scorers with no other file knowing its name."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from hydra.core.config_store import ConfigStore

from ssa_repro import config
from ssa_repro.core import distributions as D
from ssa_repro.core.distributions import DistConfig, normal
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.presets import DefaultConfig
from ssa_repro.evaluation.registry import EVALUATORS, applicable
from ssa_repro.evaluation.runner import check, evaluate
from ssa_repro.jobs.train_job import run_job
from ssa_repro.reports import compare
from ssa_repro.tasks import TASKS
from ssa_repro.tasks.base import Batch, Evaluation, Grid, Metric, Prompts, Task, interleave
from tests.conftest import forget_component, make_cfg


# ------------------------------------------------------------------ the task's file
@dataclass
class RunningSumConfig:
    name: str = "running_sum"
    x_dist: DistConfig = field(default_factory=DistConfig)


class RunningSum(Task):
    """y_i = +1 if x_1 + ... + x_i > 0, else -1; tokens x_1, y_1, ..., read at x_i."""

    metric = "sign_error"
    classification = True
    evaluation = Evaluation(
        default="grid",
        quick=("grid", {"preset": "quick"}),
        grid=Grid(
            axes=("sigma_x",),
            rows="sigma_x",
            cols="length",
            paper={"sigmas": [1.0, 2.0, 4.0], "lengths": [6, 12], "n_samples": 2, "batch_size": 16},
            quick={"sigmas": [1.0, 3.0], "lengths": [6], "n_samples": 1, "batch_size": 16},
            metrics=(Metric("sign_error"),),
            headline="sign_error",
            by_position="sign_error",
        ),
    )

    def n_tokens(self, n_points):
        return 2 * n_points

    def draw(self, batch_size, n_points, generator, device, shift=None):
        dist = normal(shift["sigma_x"]) if shift and "sigma_x" in shift else self.cfg.x_dist
        return Prompts(D.sample(dist, (batch_size, n_points), generator, device))

    def label(self, prompts):
        return torch.where(prompts.xs.cumsum(1) > 0, 1.0, -1.0)

    def encode(self, prompts, ys):
        idx = self.example_tokens(prompts.xs.shape[1], prompts.xs.device)
        return Batch(interleave(prompts.xs, ys), ys, idx, prompts.xs, ys)

    def train_sigmas(self):
        return {"sigma_x": float(self.cfg.x_dist.std)}

    def loss(self, pred, targets):
        return torch.nn.functional.binary_cross_entropy_with_logits(pred, (targets > 0).float())

    def error(self, pred, targets):
        return ((pred > 0) != (targets > 0)).float()

    def prompt_metrics(self, pred, batch, skip_first):
        return {"sign_error": self.error(pred, batch.targets)[:, skip_first:].mean(1)}


@pytest.fixture(scope="module", autouse=True)
def registered():
    """The task's registration and its config option (what its file and conf/task/running_sum.yaml do)."""
    assert "running_sum" not in TASKS
    TASKS.register("running_sum", schema=RunningSumConfig)(RunningSum)
    config.register_configs()  # stores schema/task/running_sum
    ConfigStore.instance().store(
        group="task",
        name="running_sum",
        node={"defaults": ["/schema/task/running_sum@_here_", "_self_"], "name": "running_sum"},
    )
    yield
    forget_component(TASKS, "task", "running_sum")


def test_the_new_task_trains_evaluates_and_compares(tmp_path):
    runs = {}
    for scorer in ("softmax", "ssa"):
        cfg = make_cfg(
            "task=running_sum", f"scorer={scorer}", "evaluation.lengths=null", "evaluation.sigmas=null"
        )
        summary = run_job(cfg, tmp_path / scorer)
        quick = summary["evaluations"]["quick"]
        assert quick["evaluation"] == "grid" and quick["metric"] == "sign_error"  # the task's quick grid
        assert set(quick["in_distribution"]) == {"model"}
        runs[scorer] = tmp_path / scorer
    run = load_run(runs["ssa"], torch.device("cpu"))
    assert check(run.cfg, DefaultConfig()) == []  # its paper grid, from its declaration
    # the evaluations that apply follow from what it is (a grid of scalar inputs): no list names it
    package = [n for n in applicable(RunningSum) if not EVALUATORS.get(n).__module__.startswith("tests")]
    assert package == ["attention", "deviant", "grid", "scale"]
    paper = evaluate(run, DefaultConfig())
    assert paper["cells"] == 3 * 2 and paper["step"] == 6
    comp = compare.collect([runs["softmax"], runs["ssa"]], eval="quick")
    assert (comp.task, comp.metric, comp.rows, comp.cols) == (
        "running_sum",
        "sign_error",
        "sigma_x",
        "length",
    )
    assert comp.labels == ["softmax", "ssa"] and comp.grid("ssa").shape == (2, 1)
    written = compare.write(comp, tmp_path / "compare")
    assert (tmp_path / "compare" / "heatmaps.png").exists() and len(written["summary"]) == 2


def test_a_task_without_a_declared_evaluation_fails_loudly():
    class Undeclared(RunningSum):
        evaluation = None

    TASKS.register("undeclared", schema=RunningSumConfig)(Undeclared)
    try:
        cfg = make_cfg("task=running_sum")
        cfg.task.name = "undeclared"
        found = check(cfg, DefaultConfig())
    finally:
        forget_component(TASKS, "task", "undeclared")
    assert found == [
        "task 'undeclared' declares no evaluation (Task.evaluation), so eval=default has nothing to run"
    ]
