"""evaluate.py: the grids against hand-computed cases, the runner's files and cache, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.evaluation.common import cell_generator, sample_batches
from ssa_repro.evaluation.linear_grid import LinearGridConfig, linear_grid
from ssa_repro.evaluation.quantifier_grid import QuantifierGridConfig, quantifier_grid
from ssa_repro.evaluation.run import RunFolderError, load_run
from ssa_repro.evaluation.runner import evaluate
from ssa_repro.tasks import build_task
from ssa_repro.training.trainer import train
from tests.conftest import ROOT, make_cfg

CPU = torch.device("cpu")
COLUMNS = {
    "task",
    "scorer",
    "model",
    "seed",
    "step",
    "predictor",
    "metric",
    "value",
    "n_samples",
    "ci_low",
    "ci_high",
}


class Peek(torch.nn.Module):
    """A stub 'model' that outputs the NEXT token (+ offset): at an x token that is its own label, so
    its prediction errors are known exactly."""

    blocks: list = []

    def __init__(self, offset: float = 0.0, sign_only: bool = False):
        super().__init__()
        self.offset, self.sign_only = offset, sign_only

    def forward(self, tokens):
        nxt = torch.cat([tokens[:, 1:, 0], torch.zeros_like(tokens[:, :1, 0])], dim=1)
        return (-torch.ones_like(nxt) if self.sign_only else nxt) + self.offset


def test_linear_grid_errors_are_exact_for_known_predictions():
    task = build_task(make_cfg().task)
    kw = dict(
        sigmas_f=[1.0, 3.0],
        sigmas_x=[2.0],
        n_points=8,
        n_functions=20,
        batch_size=8,
        skip_first=3,
        seed=5,
        device=CPU,
    )
    rows, pos_rows, summary = linear_grid(Peek(offset=0.5), task, **kw)
    grid = pd.DataFrame(rows)
    model = grid[grid.predictor == "model"]
    assert len(model) == 2 and (model["n_samples"] == 20).all()
    torch.testing.assert_close(
        torch.tensor(model["value"].values), torch.full((2,), 0.25, dtype=torch.float64)
    )
    assert (grid[grid.predictor == "least_squares"]["value"] < 1e-8).all()
    # the zero predictor's MSE is the mean of y² over the same prompts, recomputed here independently
    g = cell_generator(5, 3.0, 2.0, 8)
    from ssa_repro.core.distributions import normal

    ys = torch.cat(
        [
            b.targets
            for b in sample_batches(
                task, g, 3, 8, 8, CPU, a_dist=normal(3.0), b_dist=normal(3.0), x_dist=normal(2.0)
            )
        ]
    )[:20]
    zero = grid[(grid.predictor == "zero") & (grid.sigma_f == 3.0)]["value"].item()
    assert zero == pytest.approx(ys[:, 3:].square().mean().item(), rel=1e-6)
    assert summary["in_distribution"]["model"] == pytest.approx(0.25)
    assert {r["position"] for r in pos_rows} == set(range(1, 9))


@pytest.mark.parametrize("labels_in_context", [True, False])
def test_quantifier_grid_errors_are_exact_for_known_predictions(labels_in_context):
    task = build_task(make_cfg("task=every", f"task.labels_in_context={labels_in_context}").task)
    kw = dict(sigmas=[1.0, 4.0], lengths=[6], n_samples=3, batch_size=16, skip_first=2, seed=9, device=CPU)
    # always "false": a sequence is wrong iff some label from index 2 on is true (brute force below)
    rows = pd.DataFrame(quantifier_grid(Peek(sign_only=True), task, **kw))
    for s in (1.0, 4.0):
        from ssa_repro.core.distributions import normal

        bs = list(sample_batches(task, cell_generator(9, s, 6), 3, 16, 6, CPU, x_dist=normal(s)))
        wrong = torch.cat([(b.targets[:, 2:] > 0).any(1).float() for b in bs])
        got = rows[(rows.sigma_x == s) & (rows.metric == "sequence_error")]["value"].item()
        assert got == pytest.approx(wrong.mean().item())
    if labels_in_context:  # peeking at the label token is always right
        perfect = pd.DataFrame(quantifier_grid(Peek(), task, **kw))
        assert (perfect["value"] == 0).all()


@pytest.mark.parametrize(
    "overrides",
    [
        ["task.labels_in_context=true"],
        ["task.labels_in_context=false", "task.supervise=last", "task.balance=false"],
    ],
)
def test_nested_lengths_equal_separate_prompts(overrides):
    """Scoring length L on the first L numbers of longer prompts is exact: same predictions as the
    L-number prompts themselves (causal model), hence the same grid values on the same numbers."""
    cfg = make_cfg("task=every", "model.n_layer=2", *overrides)
    task = build_task(cfg.task)
    torch.manual_seed(0)
    from ssa_repro.models import build_model

    model = build_model(cfg.model, cfg.scorer).eval()
    from ssa_repro.evaluation.common import predict
    from ssa_repro.evaluation.quantifier_grid import _all_positions

    long = next(sample_batches(task, cell_generator(1, 1.0, 12), 1, 8, 12, CPU))
    pred_all, labels_all = _all_positions(model, task, long)
    for n in (4, 7, 12):
        stride = 2 if cfg.task.labels_in_context else 1
        short = type(long)(
            tokens=long.tokens[:, : stride * n],
            targets=None,
            xs=long.xs[:, :n],
            pred_idx=torch.arange(0, stride * n, stride),
        )
        torch.testing.assert_close(predict(model, short), pred_all[:, :n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(task.labels(short.xs), labels_all[:, :n])
    kw = dict(sigmas=[1.0, 3.0], lengths=[5, 12], n_samples=2, batch_size=8, skip_first=2, seed=4, device=CPU)
    nested = pd.DataFrame(quantifier_grid(model, task, nested=True, **kw))
    assert len(nested) == 2 * 2 * 2 and nested["value"].between(0, 1).all()


def test_reuse_draws_scales_the_same_prompts():
    task = build_task(make_cfg("task=some").task)
    g1, g2 = cell_generator(3, 0.0, 5), cell_generator(3, 0.0, 5)
    from ssa_repro.evaluation.quantifier_grid import _scaled

    b1 = next(sample_batches(task, g1, 1, 4, 5, CPU))
    b2 = _scaled(task, next(sample_batches(task, g2, 1, 4, 5, CPU)), 7.0)
    torch.testing.assert_close(b2.xs, b1.xs * 7)
    torch.testing.assert_close(b2.targets, b1.targets)
    torch.testing.assert_close(b2.tokens[:, 1::2], b1.tokens[:, 1::2])  # labels untouched


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("linear_run")
    train(make_cfg(), d)
    return d


@pytest.fixture(scope="module")
def every_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("every_run")
    train(make_cfg("task=every", "scorer=ssa"), d)
    return d


def small(schema, **kw):
    return OmegaConf.merge(OmegaConf.structured(schema), kw)


def test_runner_writes_files_and_caches(linear_run, monkeypatch):
    cfg = small(LinearGridConfig, sigmas_f=[1.0, 2.0], sigmas_x=[1.0], n_functions=10, batch_size=10)
    summary = evaluate(load_run(linear_run, CPU), cfg)
    out = linear_run / "eval" / "linear_grid"
    frame = pd.read_csv(out / "results.csv")
    assert COLUMNS | {"sigma_f", "sigma_x", "length"} <= set(frame.columns)
    assert set(frame.predictor) == {"model", "least_squares", "averaging", "knn3", "zero"}
    assert (out / "mse_grid.png").exists() and (out / "mse_grid.pdf").exists()
    assert json.loads((out / "summary.json").read_text())["step"] == summary["step"] == 6
    from ssa_repro.evaluation import linear_grid as module

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(module.LinearGrid, "run", staticmethod(boom))
    assert evaluate(load_run(linear_run, CPU), cfg)["seconds"] == summary["seconds"]  # cache hit
    with pytest.raises(AssertionError, match="recomputed"):
        evaluate(load_run(linear_run, CPU), OmegaConf.merge(cfg, {"force": True}))
    with pytest.raises(AssertionError, match="recomputed"):  # another config is another result
        evaluate(load_run(linear_run, CPU), OmegaConf.merge(cfg, {"seed": 7}))


def test_default_eval_is_the_tasks_grid(every_run):
    cfg = small(QuantifierGridConfig, sigmas=[1.0, 10.0], lengths=[5, 10], n_samples=2, batch_size=8)
    evaluate(load_run(every_run, CPU), cfg)
    frame = pd.read_csv(every_run / "eval" / "quantifier_grid" / "results.csv")
    assert len(frame) == 2 * 2 * 2 and set(frame.metric) == {"sequence_error", "token_error"}
    assert (frame.scorer == "ssa").all() and (frame.n_samples == 16).all()


def test_load_run_rejects_incomplete_or_inconsistent_folders(tmp_path, linear_run):
    with pytest.raises(RunFolderError, match="is not a folder"):
        load_run(tmp_path / "nope", CPU)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(RunFolderError, match="no checkpoints/last.pt"):
        load_run(tmp_path / "half", CPU)
    other = tmp_path / "other"
    train(make_cfg("model.n_embd=32"), other)
    (other / "config.yaml").write_text((linear_run / "config.yaml").read_text())
    with pytest.raises(RunFolderError, match="model.n_embd: checkpoint has 32, config has 16"):
        load_run(other, CPU)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "evaluate.py", *args, "wandb=false"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_errors_before_any_work(tmp_path, linear_run):
    proc = _cli(f"run_dir={tmp_path / 'missing'}")
    assert proc.returncode != 0 and "is not a folder" in proc.stderr + proc.stdout
    assert not (tmp_path / "missing").exists()  # Hydra created nothing
    proc = _cli(f"run_dir={linear_run}", "eval=quantifier_grid")
    assert proc.returncode != 0 and "needs an every/some run, not linear" in proc.stderr + proc.stdout
    proc = _cli(f"run_dir={linear_run}", "eval=linear_grid", "eval.n_points=100")
    assert proc.returncode != 0 and "more than model.max_positions=64" in proc.stderr + proc.stdout
    proc = _cli(f"run_dir={linear_run}", "eval=nope")
    assert proc.returncode != 0 and "linear_grid" in proc.stderr + proc.stdout  # the options are listed


@pytest.mark.slow
def test_cli_end_to_end(every_run):
    proc = _cli(
        f"run_dir={every_run}",
        "eval=quantifier_grid",
        "eval.sigmas=[1,2]",
        "eval.lengths=[5,10]",
        "eval.n_samples=1",
        "eval.batch_size=4",
        "eval.force=true",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    frame = pd.read_csv(every_run / "eval" / "quantifier_grid" / "results.csv")
    assert sorted(frame.sigma_x.unique()) == [1.0, 2.0] and sorted(frame.length.unique()) == [5, 10]
    assert (every_run / "eval" / "evaluate.log").exists()


def test_a_new_checkpoint_invalidates_the_cache(linear_run):
    cfg = small(LinearGridConfig, sigmas_f=[1.0], sigmas_x=[1.0], n_functions=4, batch_size=4, seed=99)
    evaluate(load_run(linear_run, CPU), cfg)
    path = linear_run / "eval" / "linear_grid" / "summary.json"
    summary = json.loads(path.read_text())
    summary["step"] = 999_999  # as if cached for another checkpoint
    path.write_text(json.dumps(summary))
    assert evaluate(load_run(linear_run, CPU), cfg)["step"] == 6
    assert json.loads(path.read_text())["step"] == 6


def test_progress_logs_every_tenth_off_a_terminal(caplog):
    import logging

    from ssa_repro.evaluation.common import Progress

    with caplog.at_level(logging.INFO, logger="ssa_repro.evaluate"), Progress(20, "grid") as bar:
        for _ in range(20):
            bar.update(1)
    lines = [r.getMessage() for r in caplog.records if "cells" in r.getMessage()]
    assert len(lines) == 10 and lines[0].startswith("grid: 2/20 cells (10%)")
    assert "20/20 cells (100%)" in lines[-1] and "left" in lines[-1]


def test_results_are_logged_to_the_runs_own_offline_wandb_run(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    train(make_cfg("logger.mode=offline"), tmp_path)
    (history,) = (tmp_path / "wandb").glob("offline-run-*/*.wandb")
    before = {history: history.stat().st_size}
    cfg = small(LinearGridConfig, sigmas_f=[1.0], sigmas_x=[1.0, 2.0], n_functions=4, batch_size=4)
    evaluate(load_run(tmp_path, CPU), cfg, wandb_log=True)
    assert wandb.run is None  # finished again
    # the same run id, appended to (or, resumed offline in a new second, a new file of that run)
    grown = [
        p
        for p in (tmp_path / "wandb").glob(f"offline-run-*-{history.stem[4:]}/*.wandb")
        if p.stat().st_size > before.get(p, 0)
    ]
    assert grown, "the evaluation's tables and figures did not reach the run's W&B files"
