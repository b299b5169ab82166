"""The grid evaluation against hand-computed cases; the results store (cells accumulate, are reused,
recomputed only when asked, survive an interrupted evaluation); presets; bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.evaluation import runner
from ssa_repro.evaluation.grid import GridConfig, GridEvaluation, scale
from ssa_repro.evaluation.loading import RunFolderError, load_run
from ssa_repro.evaluation.presets import DefaultConfig, QuickConfig
from ssa_repro.evaluation.progress import Progress
from ssa_repro.evaluation.runner import evaluate
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.evaluation.store import stored
from ssa_repro.models import build_model
from ssa_repro.tasks import build_task
from ssa_repro.training.trainer import train
from tests.conftest import ROOT, make_cfg, run_script

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


class FakeRun:
    """What an evaluator's compute needs of a loaded run."""

    def __init__(self, model, task, cfg):
        self.model, self.task, self.cfg, self.device = model, task, cfg, CPU
        self.labels = {"task": cfg.task.name, "scorer": "stub", "model": "stub", "seed": 0, "step": 1}


class Counter:
    def update(self, n=1):
        pass


def grid_rows(model, cfg, **kw) -> pd.DataFrame:
    """Every cell of a grid evaluation of ``model`` on the task of ``cfg``, as one frame."""
    task = build_task(cfg.task)
    ev = GridEvaluation(OmegaConf.merge(OmegaConf.structured(GridConfig), kw), cfg, task)
    ev.resolve()
    assert ev.problems() == []
    frames = list(ev.compute(FakeRun(model, task, cfg), ev.cells(), Counter()))
    return pd.concat([f["results"] for f in frames], ignore_index=True)


def test_linear_grid_errors_are_exact_for_known_predictions():
    cfg = make_cfg()
    task = build_task(cfg.task)
    rows = grid_rows(
        Peek(offset=0.5),
        cfg,
        sigmas=[2.0],
        sigmas_f=[1.0, 3.0],
        lengths=[8],
        n_samples=3,
        batch_size=8,
        seed=5,
    )
    model = rows[rows.predictor == "model"]
    assert len(model) == 2 and (model["n_samples"] == 24).all()
    torch.testing.assert_close(
        torch.tensor(model["value"].values), torch.full((2,), 0.25, dtype=torch.float64)
    )
    assert (rows[rows.predictor == "least_squares"]["value"] < 1e-8).all()
    # the zero predictor's MSE is the mean of y² over the same prompts, drawn here again independently
    g = cell_generator(5, 3.0, 2.0, 8)
    ys = torch.cat([task.sample(8, 8, g, "cpu", {"sigma_f": 3.0, "sigma_x": 2.0}).targets for _ in range(3)])
    zero = rows[(rows.predictor == "zero") & (rows.sigma_f == 3.0)]["value"].item()
    assert zero == pytest.approx(ys[:, 3:].square().mean().item(), rel=1e-6)
    # intervals respect the metric: positive, around the mean
    assert (rows.ci_low[rows.value > 0] > 0).all() and (rows.ci_low <= rows.value + 1e-12).all()


@pytest.mark.parametrize("labels_in_context", [True, False])
def test_quantifier_grid_errors_are_exact_for_known_predictions(labels_in_context):
    cfg = make_cfg("task=every", f"task.labels_in_context={labels_in_context}")
    task = build_task(cfg.task)
    kw = dict(sigmas=[1.0, 4.0], lengths=[6], n_samples=3, batch_size=16, skip_first=2, seed=9)
    # always "false": a sequence is wrong iff some label from index 2 on is true (brute force below)
    rows = grid_rows(Peek(sign_only=True), cfg, **kw)
    for s in (1.0, 4.0):
        g = cell_generator(9, s, 6)
        bs = [task.sample(16, 6, g, "cpu", {"sigma_x": s}) for _ in range(3)]
        wrong = torch.cat([(b.targets[:, 2:] > 0).any(1).float() for b in bs])
        got = rows[(rows.sigma_x == s) & (rows.metric == "sequence_error")]
        assert got["value"].item() == pytest.approx(wrong.mean().item())
        assert 0 <= got["ci_low"].item() <= got["value"].item() <= got["ci_high"].item() <= 1
    if labels_in_context:  # peeking at the label token is always right
        perfect = grid_rows(Peek(), cfg, **kw)
        assert (perfect["value"] == 0).all() and (perfect["ci_low"] == 0).all()


@pytest.mark.parametrize(
    "overrides",
    [
        ["task=every", "task.labels_in_context=true"],
        ["task=every", "task.labels_in_context=false", "task.supervise=last", "task.balance=false"],
        ["task=linear"],
    ],
)
def test_nested_and_independent_cells_agree_on_identical_prompts(overrides):
    """The two protocols give identical numbers on identical prompts: a causal model's predictions on
    the first L examples of a prompt are its predictions for the L-example prompt."""
    cfg = make_cfg(*overrides, "model.n_layer=2")
    task = build_task(cfg.task)
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.scorer).eval()
    kw = dict(sigmas=[1.0, 3.0], lengths=[4, 7, 12], n_samples=2, batch_size=8, skip_first=2, seed=4)
    nested = grid_rows(model, cfg, nested=True, **kw)
    ev = GridEvaluation(OmegaConf.merge(OmegaConf.structured(GridConfig), {**kw, "nested": False}), cfg, task)
    ev.resolve()
    drawn = ev._prompts

    def prefixes(shift, n):  # the independent protocol fed the nested protocol's prompts
        return [task.build(type(b.prompts)(b.xs[:, :n], b.params)) for b in drawn(shift, 12)]

    ev._prompts = prefixes
    independent = pd.concat(
        [f["results"] for f in ev.compute(FakeRun(model, task, cfg), ev.cells(), Counter())],
        ignore_index=True,
    )
    keys = [c for c in ("sigma_f", "sigma_x", "length", "predictor", "metric") if c in nested]
    a = nested.sort_values(keys).reset_index(drop=True)
    b = independent.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[keys], b[keys])
    torch.testing.assert_close(
        torch.tensor(a.value.values), torch.tensor(b.value.values), atol=1e-6, rtol=1e-5
    )


def test_reuse_draws_scales_the_same_prompts():
    task = build_task(make_cfg("task=some").task)
    p1 = task.draw(4, 5, cell_generator(3, 0.0, 5), "cpu")
    p2 = scale(task.draw(4, 5, cell_generator(3, 0.0, 5), "cpu"), {"sigma_x": 7.0})
    b1, b2 = task.build(p1), task.build(p2)
    torch.testing.assert_close(b2.xs, b1.xs * 7)
    torch.testing.assert_close(b2.targets, b1.targets)  # labels untouched: only signs matter
    torch.testing.assert_close(b2.tokens[:, 1::2], b1.tokens[:, 1::2])


# ------------------------------------------------------------------ the store, through real runs
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


def grid(**kw):
    return OmegaConf.merge(OmegaConf.structured(GridConfig), kw)


class CountingModel(torch.nn.Module):
    """Wraps a model and counts its forward calls (reuse means no call)."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.calls = model, 0

    @property
    def blocks(self):
        return self.inner.blocks

    @property
    def wpe(self):
        return self.inner.wpe

    def forward(self, *a, **k):
        self.calls += 1
        return self.inner(*a, **k)


def counted(run_dir):
    run = load_run(run_dir, CPU)
    run.model = CountingModel(run.model)
    return run


def test_cells_accumulate_and_are_reused(every_run):
    base = dict(lengths=[5, 10], n_samples=2, batch_size=8)
    first = evaluate(counted(every_run), grid(sigmas=[1.0, 2.0], **base))
    run = counted(every_run)
    second = evaluate(run, grid(sigmas=[2.0, 5.0], **base))
    assert second["protocol_id"] == first["protocol_id"]
    assert (second["cells_reused"], second["cells_computed"]) == (2, 2)  # σ = 2 was there
    folder = every_run / "eval" / "grid" / first["protocol_id"]
    results = pd.read_csv(folder / "results.csv")
    assert sorted(results.sigma_x.unique()) == [1.0, 2.0, 5.0]  # the derived table holds both calls
    assert COLUMNS | {"sigma_x", "length", "eval", "protocol", "preset"} <= set(results.columns)
    assert second["cells"] == 6 and (folder / "sequence_error_grid.png").stat().st_size > 0
    calls = run.model.calls
    run = counted(every_run)
    again = evaluate(run, grid(sigmas=[1.0, 2.0, 5.0], **base))
    assert again["cells_computed"] == 0 and run.model.calls == 0  # identical protocol: no model call
    assert calls > 0
    forced = evaluate(counted(every_run), grid(sigmas=[1.0], force=True, **base))
    assert forced["cells_computed"] == 2
    parts = sorted((folder / "parts").glob("results-*.csv"))
    assert len(parts) >= 4  # nothing rewritten: the forced cells are new parts, the old ones stay
    # another setting is another protocol, stored beside
    other = evaluate(counted(every_run), grid(sigmas=[1.0], seed=7, **base))
    assert other["protocol_id"] != first["protocol_id"]
    assert {s.id for s in stored(every_run, "grid")} >= {first["protocol_id"], other["protocol_id"]}


def test_an_interrupted_evaluation_keeps_its_finished_cells(linear_run, monkeypatch):
    cfg = grid(sigmas=[1.0, 3.0], lengths=[5, 6], n_samples=1, batch_size=4, seed=42)
    real = GridEvaluation.compute

    def dies_after_one(self, run, cells, progress):
        gen = real(self, run, cells, progress)
        yield next(gen)
        raise KeyboardInterrupt  # killed after the first length's cells were stored

    monkeypatch.setattr(GridEvaluation, "compute", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        evaluate(load_run(linear_run, CPU), cfg)
    monkeypatch.undo()
    resumed = evaluate(load_run(linear_run, CPU), cfg)
    assert resumed["cells_reused"] == 4 and resumed["cells_computed"] == 4  # 2 σ_F × 2 σ × 2 lengths
    folder = linear_run / "eval" / "grid" / resumed["protocol_id"]
    assert not list(folder.rglob(".*.tmp*"))  # no half-written file anywhere


def test_a_failed_write_leaves_no_part_behind(linear_run, monkeypatch):
    cfg = grid(sigmas=[2.0], lengths=[5], n_samples=1, batch_size=4, seed=43)

    def full_disk(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    with pytest.raises(OSError):
        evaluate(load_run(linear_run, CPU), cfg)
    monkeypatch.undo()
    (folder,) = [s.dir for s in stored(linear_run, "grid") if s.protocol["seed"] == 43]
    assert not list((folder / "parts").iterdir())  # nothing counted as a finished cell
    assert evaluate(load_run(linear_run, CPU), cfg)["cells_computed"] == 1  # σ_F = σ = 2, length 5


def test_a_new_checkpoint_step_is_computed_again(linear_run):
    cfg = grid(sigmas=[1.0], lengths=[5], n_samples=1, batch_size=4, seed=99)
    evaluate(load_run(linear_run, CPU), cfg)
    run = load_run(linear_run, CPU)
    run.step = 7  # as if trained further
    again = evaluate(run, cfg)
    assert again["cells_computed"] == 1 and again["step"] == 7 and again["steps"] == [6, 7]


def test_presets_resolve_to_the_tasks_declared_evaluations(every_run, linear_run):
    every_cfg = load_run(every_run, CPU).cfg
    ev, found = runner.build(OmegaConf.structured(DefaultConfig), every_cfg)
    assert ev.name == "grid" and ev.preset == "default"
    assert found and "more than model.max_positions=64" in found[0]  # the tiny model is too short for it
    assert ev.cfg.sigmas == [float(s) for s in range(1, 30)] and ev.cfg.lengths == list(range(10, 201, 10))
    lin, found = runner.build(OmegaConf.structured(DefaultConfig), load_run(linear_run, CPU).cfg)
    assert (
        found == []
        and lin.cfg.lengths == [5]
        and lin.cfg.sigmas_f == lin.cfg.sigmas
        and lin.cfg.batch_size == 100
    )
    quick, _ = runner.build(OmegaConf.structured(QuickConfig), every_cfg)
    assert quick.cfg.n_samples == 10 and quick.cfg.lengths == [10, 20, 40, 80]
    # the grid keys of eval=default apply directly (no need to name the grid)
    keyed, found = runner.build(
        OmegaConf.merge(OmegaConf.structured(DefaultConfig), {"sigmas": [1, 5]}), every_cfg
    )
    assert keyed.cfg.sigmas == [1, 5] and keyed.cfg.lengths == list(range(10, 201, 10))
    assert any("more than model.max_positions" in p for p in found)


def test_check_names_keys_values_and_the_task(linear_run, every_run):
    lin = load_run(linear_run, CPU).cfg
    assert any(
        "eval.sigmas_f applies to tasks that draw a function" in p
        for p in runner.check(load_run(every_run, CPU).cfg, grid(sigmas_f=[1.0]))
    )
    problems = runner.check(lin, grid(sigmas=[0.0], lengths=[100], n_samples=0))
    text = "\n".join(problems)
    assert "eval.sigmas=[0.0] must be a non-empty list of values > 0" in text
    assert "more than model.max_positions=64" in text and "eval.n_samples=0 must be >= 1" in text
    zorro = OmegaConf.structured(runner.EVALUATORS.schemas["zorro"])
    assert runner.check(lin, zorro) == [
        "eval=zorro does not apply to task=linear; this task supports: attention, boundary, deviant, grid, scale"
    ]


def test_load_run_rejects_incomplete_or_inconsistent_folders(tmp_path, linear_run):
    with pytest.raises(RunFolderError, match="is not a folder"):
        load_run(tmp_path / "nope", CPU)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(RunFolderError, match="no checkpoints/last.pt"):
        load_run(tmp_path / "half", CPU)
    other = tmp_path / "other"
    train(make_cfg("model.n_embd=32", "evaluation.enabled=false"), other)
    (other / "config.yaml").write_text((linear_run / "config.yaml").read_text())
    with pytest.raises(RunFolderError, match="model.n_embd: checkpoint has 32, config has 16"):
        load_run(other, CPU)
    (other / "config.yaml").write_text("task: [unclosed\n")
    with pytest.raises(RunFolderError, match="config.yaml is not a readable config"):
        load_run(other, CPU)


def test_progress_logs_every_tenth_off_a_terminal(caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="ssa_repro.evaluate"), Progress(20, "grid") as bar:
        for _ in range(20):
            bar.update(1)
    lines = [r.getMessage() for r in caplog.records if "cells" in r.getMessage()]
    assert len(lines) == 10 and lines[0].startswith("grid: 2/20 cells (10%)")
    assert "20/20 cells (100%)" in lines[-1] and "left" in lines[-1]


# ------------------------------------------------------------------ the command line
def _cli(*args, cwd=ROOT, real=False):
    """``python evaluate.py ARGS``: in this process (conftest.run_script), or as a real command line."""
    if not real:
        return run_script("evaluate.py", *args, cwd=cwd)
    return subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_errors_before_any_work(tmp_path, linear_run):
    before = sorted(p.relative_to(linear_run) for p in linear_run.rglob("*"))
    proc = _cli(f"run_dir={tmp_path / 'missing'}")
    assert proc.returncode != 0 and "is not a folder" in proc.stderr
    assert not (tmp_path / "missing").exists()  # Hydra created nothing
    proc = _cli(f"run_dir={linear_run}", "eval=zorro")
    assert proc.returncode != 0 and "does not apply to task=linear" in proc.stderr
    proc = _cli(f"run_dir={linear_run}", "eval.lengths=[100]")
    assert proc.returncode != 0 and "more than model.max_positions=64" in proc.stderr
    proc = _cli(f"run_dir={linear_run}", "eval=nope")
    assert proc.returncode != 0 and "deviant" in proc.stderr  # the options are listed
    proc = _cli(f"run_dir={linear_run}", "eval.sigma=[1]")  # a typo: the valid keys, and a guess
    assert proc.returncode != 0 and "valid keys:" in proc.stderr and "did you mean sigmas?" in proc.stderr
    proc = _cli("eval=grid")
    assert proc.returncode != 0 and "give the run to evaluate: python evaluate.py run_dir=" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.relative_to(linear_run) for p in linear_run.rglob("*")) == before


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_sigma_multirun_keeps_every_jobs_cells(tmp_path, launcher):
    run = tmp_path / "run"
    train(make_cfg("task=every", "evaluation.enabled=false"), run)
    extra = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    proc = _cli(
        "-m",
        f"run_dir={run}",
        "eval.sigmas=[1],[2],[5]",
        "eval.lengths=[5,10]",
        "eval.n_samples=1",
        "eval.batch_size=4",
        *extra,
        cwd=tmp_path,
        real=launcher == "joblib",  # the one real `python evaluate.py` command line of the suite
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (store,) = stored(run, "grid")
    cells = store.read()
    assert sorted(cells.sigma_x.unique()) == [1.0, 2.0, 5.0] and sorted(cells.length.unique()) == [5, 10]
    summary = json.loads((store.dir / "summary.json").read_text())
    assert summary["cells"] == 6  # the last job's figures and summary hold every job's cells
    assert not (tmp_path / "multirun").exists() and not (tmp_path / "outputs").exists()
    logs = list((run / "eval" / "sweeps").rglob("*.log"))
    assert len(logs) == 3  # job logs inside the run folder


def test_check_refuses_grid_values_the_tasks_sampler_would_refuse():
    """`python evaluate.py` on an MQAR or flip-flop run: the task's limits (keys per prompt, flip-flop's
    σ) are refused when the evaluation is checked, before any prompt is drawn (they were found only
    while drawing)."""
    mqar = make_cfg("task=mqar", "task.n_keys=8")
    assert not [p for p in runner.check(mqar, grid(sigmas=[1.0], lengths=[8])) if "draws prompts" in p]
    (found,) = [p for p in runner.check(mqar, grid(sigmas=[1.0], lengths=[4, 16])) if "draws prompts" in p]
    assert found.startswith("eval.lengths=[4, 16] draws prompts of up to 16 pairs, more than task.n_keys=8")
    ff = make_cfg("task=flip_flop", "task.p_ignore=0.8")
    assert any(p.startswith("eval.sigmas=[0.1] has [0.1]") for p in runner.check(ff, grid(sigmas=[0.1])))


def test_figures_off_builds_no_figure_and_a_later_call_draws_them(tmp_path, linear_run, monkeypatch):
    """eval.figures=false: tables and summary only, and no heat map is even built (building them was most
    of a small evaluation's time); the same protocol evaluated later with figures on draws them from the
    stored cells."""
    import shutil

    from ssa_repro.core import plotting

    run = tmp_path / "run"
    shutil.copytree(linear_run, run)
    built = []
    real = plotting.sns.heatmap
    monkeypatch.setattr(plotting.sns, "heatmap", lambda *a, **kw: built.append(1) or real(*a, **kw))
    cfg = dict(sigmas=[1.0], lengths=[5], n_samples=1, batch_size=8)
    off = evaluate(load_run(run, CPU), grid(**cfg, figures=False))
    folder = run / "eval" / "grid" / off["protocol_id"]
    assert off["figures"] == [] and built == [] and not list(folder.glob("*.png"))
    on = evaluate(load_run(run, CPU), grid(**cfg))
    assert on["protocol_id"] == off["protocol_id"] and built and on["figures"]
    assert all((folder / f).is_file() for f in on["figures"])
