"""Adding an evaluator is two files, its module and its config: this module defines one (its dataclass
config, where it applies, cells, computation and heat map layout) and stores its config option, as
``ssa_repro/evaluation/<name>.py`` and ``conf/eval/<name>.yaml`` do; it then runs on a trained run,
stores its cells, refuses a task it does not apply to, and compares across runs with no other file
(no task, no list) knowing its name."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
import torch
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from ssa_repro import config
from ssa_repro.evaluation.inference import predict
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator, applicable
from ssa_repro.evaluation.runner import check, evaluate
from ssa_repro.reports import compare
from ssa_repro.stats.intervals import summarize
from ssa_repro.tasks import TASKS
from ssa_repro.tasks.base import Prompts
from ssa_repro.training.trainer import train
from tests.conftest import forget_component, make_cfg

CPU = torch.device("cpu")


# ------------------------------------------------------------------ the evaluator's file
@dataclass
class OutputScaleConfig(EvalConfig):
    name: str = "output_scale"
    scales: list[float] = field(default_factory=lambda: [1.0, 4.0])  # x multiplied by each
    lengths: list[int] | None = None  # examples per prompt; null: [the run's curriculum.end]
    batch_size: int = 16
    seed: int = 7


class OutputScale(Evaluator):
    """How large the model's predictions get when the inputs are scaled: mean |ŷ| per prompt."""

    name = "output_scale"
    axes = ("scales", "lengths")
    coords = ("scale", "length")
    fills_length = "lengths"

    @classmethod
    def applies_to(cls, task) -> bool:
        """In-context tasks of numeric inputs (a grid, no token vocabulary): x can be scaled."""
        return task.evaluation is not None and task.evaluation.grid is not None and not task.tokens

    def check(self) -> list[str]:
        bad = [s for s in self.cfg.scales if s <= 0]
        return [f"eval.scales has {bad}: each must be > 0"] if bad else []

    def cells(self) -> list[dict]:
        return [{"scale": float(s), "length": int(n)} for s in self.cfg.scales for n in self.cfg.lengths]

    def prompts(self, task, cell):
        g = torch.Generator().manual_seed(self.cfg.seed)
        drawn = task.draw(self.cfg.batch_size, cell["length"], g, "cpu")
        return task.build(Prompts(drawn.xs * cell["scale"], drawn.params))

    def compute(self, run, cells, progress):
        for cell in cells:
            pred = predict(run.model, self.prompts(run.task, cell).to(run.device))  # [B, P]
            value = pred.abs().mean(1).double().numpy()
            row = {**run.labels, "predictor": "model", **cell, "metric": "abs_output"}
            yield {"results": pd.DataFrame([{**row, **summarize(value, "positive")}])}
            progress.update(1)

    def heatmap(self) -> dict:
        return {"rows": "scale", "cols": "length", "metric": "abs_output"}


@pytest.fixture(scope="module", autouse=True)
def registered():
    """The evaluator's registration and its config option (its file and conf/eval/output_scale.yaml)."""
    assert "output_scale" not in EVALUATORS
    EVALUATORS.register("output_scale", schema=OutputScaleConfig)(OutputScale)
    config.register_configs()  # stores schema/eval/output_scale
    ConfigStore.instance().store(
        group="eval",
        name="output_scale",
        node={"defaults": ["/schema/eval/output_scale@_here_", "_self_"]},
    )
    yield
    forget_component(EVALUATORS, "eval", "output_scale")


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("linear")
    train(make_cfg(), d)
    return d


def test_the_new_evaluator_runs_stores_and_compares(linear_run, tmp_path):
    cfg = OmegaConf.structured(OutputScaleConfig)
    run = load_run(linear_run, CPU)
    # where it applies is its own declaration: the token tasks are refused, naming what applies to them
    assert check(make_cfg("task=mqar"), cfg) == [
        "eval=output_scale does not apply to task=mqar; this task supports: grid, recall"
    ]
    assert "output_scale" in applicable(TASKS.get("linear")) and not (
        set(applicable(TASKS.get("lm"))) - {"lm"}
    )
    assert check(run.cfg, OmegaConf.merge(cfg, {"scales": [0.0]})) == [
        "eval.scales has [0.0]: each must be > 0"
    ]
    summary = evaluate(load_run(linear_run, CPU), cfg)
    end = int(run.cfg.curriculum.end)
    assert summary["cells_computed"] == 2 and summary["heatmap"]["rows"] == "scale"
    res = pd.read_csv(linear_run / "eval" / "output_scale" / summary["protocol_id"] / "results.csv")
    assert sorted(zip(res.scale, res.length)) == [(1.0, end), (4.0, end)]  # lengths: the run's curriculum.end
    # the stored value is the mean |ŷ| of the cell's prompts, recomputed here from the model's forward
    ev = OutputScale(OmegaConf.merge(cfg, {"lengths": [end]}), run.cfg, run.task)
    for scale in (1.0, 4.0):
        batch = ev.prompts(run.task, {"scale": scale, "length": end})
        with torch.no_grad():
            want = run.model(batch.tokens)[:, batch.pred_idx].double().abs().mean(1).mean().item()
        got = float(res[res.scale == scale].value.iloc[0])
        assert got == pytest.approx(want, rel=1e-5)
    # compare reads the layout it stored: two runs 0.5 apart, cell by cell
    other = shutil.copytree(linear_run, tmp_path / "other")
    (other / "run_id.txt").write_text("r-another-run\n")  # (a plain copy is refused as one run twice)
    for part in (other / "eval" / "output_scale").rglob("parts/results-*.csv"):
        frame = pd.read_csv(part)
        frame["value"] = frame["value"] + 0.5
        frame.to_csv(part, index=False)
    comp = compare.collect([linear_run, other], eval="output_scale")
    assert (comp.rows, comp.cols, comp.metric, comp.kind) == ("scale", "length", "abs_output", "positive")
    diff = comp.grid(comp.labels[1]).to_numpy() - comp.grid(comp.labels[0]).to_numpy()
    assert np.allclose(diff, 0.5)
