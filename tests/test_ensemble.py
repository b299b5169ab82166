"""Seed ensembles (ssa_repro/training/ensemble.py, hydra/launcher=ensemble) against separate runs.

The reference is ``trainer.train`` run once per seed: the ensemble must draw exactly the same prompts,
store exactly the same prompt-generator and RNG states, and reach the same losses, weights and Adam
moments up to float rounding (the stacked forward sums matmuls in another order; SSA trains through
its plain path, the same function)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from ssa_repro.core.rundir import RunDir
from ssa_repro.jobs import train_job
from ssa_repro.jobs.prepared import PreparedRun
from ssa_repro.training import ensemble, run_state, trainer
from ssa_repro.training.checkpointer import TrainingDiverged
from ssa_repro.training.metrics_log import read_metrics
from ssa_repro.training.setup import rank_data_seed
from tests.conftest import ROOT, TINY, make_cfg, run_script

SEEDS = (0, 1, 2)
# tiny (conf/debug/tiny.yaml): 6 steps, log every 2, checkpoint every 3, curriculum 3 -> 5 examples
BASE = ("evaluation.enabled=false", "train.grad_clip=0.5")  # clipping on: per seed, as each run clips
ATOL = 1e-6  # weights after 6 steps: the differences measured are below 1e-7


def cfgs(*overrides: str, seeds=SEEDS):
    return [make_cfg(*BASE, *overrides, f"seed={s}") for s in seeds]


def record_draws(monkeypatch, module) -> list:
    """Every training micro-batch ``module`` draws: (seed of the generator, index, tokens, targets)."""
    seeds = {rank_data_seed(s, 0): s for s in range(10)}
    drawn, real = [], trainer.draw_batch

    def draw(task, index, batch_size, stage, gen, device):
        batch = real(task, index, batch_size, stage, gen, device)
        drawn.append((seeds[gen.initial_seed()], index, batch.tokens.clone(), batch.targets.clone()))
        return batch

    monkeypatch.setattr(module, "draw_batch", draw)
    return drawn


def state(run_dir: Path) -> dict:
    return torch.load(RunDir(run_dir).last_checkpoint, weights_only=False)


def assert_same_run(ens: Path, sep: Path, steps: int = 6) -> None:
    """Same metrics rows (loss to float rounding), same checkpoint format, generator and RNG states
    exactly, weights and Adam moments to float rounding."""
    a, b = read_metrics(RunDir(ens).metrics_file), read_metrics(RunDir(sep).metrics_file)
    assert [r["step"] for r in a] == [r["step"] for r in b] and a[-1]["step"] == steps
    assert [r["n_points"] for r in a] == [r["n_points"] for r in b]
    assert [r["lr"] for r in a] == [r["lr"] for r in b]
    for x, y in zip(a, b):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5, abs=1e-6)
        assert set(x) == set(y)
    sa, sb = state(ens), state(sep)
    assert set(sa) == set(sb) and sa["step"] == sb["step"] == steps
    assert sa["config"] == sb["config"]
    for key in ("data", "torch"):
        assert torch.equal(sa["rng"][key], sb["rng"][key]), key
    torch.testing.assert_close(sa["loss_window"], sb["loss_window"], rtol=1e-5, atol=1e-6)
    assert list(sa["model"]) == list(sb["model"])
    for k, v in sb["model"].items():
        torch.testing.assert_close(sa["model"][k], v, rtol=0, atol=ATOL, msg=k)
    oa, ob = sa["optimizer"], sb["optimizer"]
    assert oa["param_groups"] == ob["param_groups"] and set(oa["state"]) == set(ob["state"])
    for i, st in ob["state"].items():
        assert torch.equal(oa["state"][i]["step"], st["step"])
        for n in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(oa["state"][i][n], st[n], rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize(
    "overrides",
    [
        ("scorer=softmax",),
        ("scorer=ssa",),
        pytest.param(("scorer=softmax", "curriculum.enabled=false"), marks=pytest.mark.slow),
        ("scorer=ssa", "curriculum.enabled=false", "scorer.per_head=true"),
    ],
    ids=["softmax-curriculum", "ssa-curriculum", "softmax-fixed", "ssa-per-head-fixed"],
)
def test_an_ensemble_equals_separate_runs(overrides, tmp_path, monkeypatch):
    ens_draws = record_draws(monkeypatch, ensemble)
    sep_draws = record_draws(monkeypatch, trainer)
    runs = cfgs(*overrides)
    results = ensemble.train_ensemble(runs, [tmp_path / f"ens{s}" for s in SEEDS])
    for cfg, s in zip(runs, SEEDS):
        trainer.train(cfg, tmp_path / f"sep{s}")
    # the prompt streams, exactly: 6 steps × 3 seeds, each seed's batches those of its separate run
    assert len(ens_draws) == len(sep_draws) == 18
    by_seed = lambda drawn, s: [d for d in drawn if d[0] == s]  # noqa: E731
    for s in SEEDS:
        mine, theirs = by_seed(ens_draws, s), by_seed(sep_draws, s)
        assert [d[1] for d in mine] == [d[1] for d in theirs] == list(range(6))
        for x, y in zip(mine, theirs):
            assert torch.equal(x[2], y[2]) and torch.equal(x[3], y[3])
    assert not torch.equal(by_seed(ens_draws, 0)[0][2], by_seed(ens_draws, 1)[0][2])  # seeds differ
    for s, result in zip(SEEDS, results):
        assert_same_run(tmp_path / f"ens{s}", tmp_path / f"sep{s}")
        assert result["ensemble"] == 3 and result["steps"] == 6
        # the ensemble's scorer statistics are each seed's own (SSA: b and n per layer x head)
        rows_a = read_metrics(RunDir(tmp_path / f"ens{s}").metrics_file)
        rows_b = read_metrics(RunDir(tmp_path / f"sep{s}").metrics_file)
        assert ("scorer" in rows_b[-1]) == ("scorer=ssa" in overrides)  # SSA logs its b and n
        if "scorer" in rows_b[-1]:
            for k, v in rows_b[-1]["scorer"].items():
                torch.testing.assert_close(
                    torch.tensor(rows_a[-1]["scorer"][k]), torch.tensor(v), atol=1e-6, rtol=0
                )


@pytest.mark.slow  # two ensembles and two separate runs, each with its end-of-run evaluation
def test_ensemble_folders_evaluate_and_resume_like_separate_runs(tmp_path):
    runs = cfgs("scorer=ssa", "evaluation.enabled=true", seeds=(0, 1))
    ensemble.train_ensemble(runs, [tmp_path / "ens0", tmp_path / "ens1"])
    trainer.train(runs[1], tmp_path / "sep1")
    ens, sep = tmp_path / "ens1", tmp_path / "sep1"
    assert RunDir(ens).problems() == []
    provenance = RunDir(ens).provenance_file.read_text()
    assert '"seeds": [\n        0,\n        1\n      ]' in provenance or '"seeds": [0, 1]' in provenance
    # the separate trainer sees a finished run; the end-of-run evaluation reads it as a separate one
    assert run_state.prepare(runs[1], ens).finished["steps"] == 6
    got = train_job.evaluate_after_training(PreparedRun(runs[1], ens), RunDir(ens).summary())
    want = train_job.evaluate_after_training(PreparedRun(runs[1], sep), RunDir(sep).summary())
    a, b = got["evaluations"]["quick"], want["evaluations"]["quick"]
    assert a["protocol_id"] == b["protocol_id"]
    assert a["in_distribution"] == pytest.approx(b["in_distribution"], rel=1e-4)
    # a separate run continues the ensemble's checkpoint as it continues its own
    longer = make_cfg(*BASE, "scorer=ssa", "evaluation.enabled=true", "seed=1", "train.steps=8")
    trainer.train(longer, ens)
    trainer.train(longer, sep)
    assert_same_run(ens, sep, steps=8)


class Killed(RuntimeError):
    pass


def test_a_killed_ensemble_resumes_each_seed_from_its_checkpoint(tmp_path, monkeypatch):
    runs = cfgs("scorer=ssa", seeds=(0, 2))
    dirs = [tmp_path / "ens0", tmp_path / "ens2"]
    real, calls = trainer.draw_batch, []

    def dies_at_step_5(task, index, *args):
        calls.append(index)
        if index == 4:  # the fifth step, after the checkpoint of step 3 and the log row of step 4
            raise Killed("killed")
        return real(task, index, *args)

    monkeypatch.setattr(ensemble, "draw_batch", dies_at_step_5)
    with pytest.raises(Killed):
        ensemble.train_ensemble(runs, dirs)
    for d in dirs:
        assert state(d)["step"] == 3 and [r["step"] for r in read_metrics(RunDir(d).metrics_file)] == [2, 4]
    monkeypatch.setattr(ensemble, "draw_batch", real)
    ensemble.train_ensemble(runs, dirs)
    for cfg, d in zip(runs, dirs):
        trainer.train(cfg, tmp_path / f"sep{cfg.seed}")
        assert_same_run(d, tmp_path / f"sep{cfg.seed}")
        records = RunDir(d).provenance_file.read_text()
        assert '"resumed_from_step": 3' in records


def test_a_seed_that_diverges_stops_alone(tmp_path, monkeypatch):
    """Seed 1's fourth batch is NaN: its loss is non-finite from step 4, found at the log row of step
    4 as in a separate run (same message); seeds 0 and 2 train on, equal to their separate runs."""
    real = trainer.draw_batch

    def poisoned(task, index, batch_size, stage, gen, device):
        batch = real(task, index, batch_size, stage, gen, device)
        if gen.initial_seed() == rank_data_seed(1, 0) and index == 3:
            batch.tokens[0, 0] = float("nan")
        return batch

    monkeypatch.setattr(ensemble, "draw_batch", poisoned)
    monkeypatch.setattr(trainer, "draw_batch", poisoned)
    runs = cfgs("scorer=softmax")
    results = ensemble.train_ensemble(runs, [tmp_path / f"ens{s}" for s in SEEDS])
    with pytest.raises(TrainingDiverged) as separate:
        trainer.train(runs[1], tmp_path / "sep1")
    assert isinstance(results[1], TrainingDiverged)
    assert str(results[1]).replace("ens1", "sep1") == str(separate.value)
    assert "non-finite loss (nan) at step 4" in str(results[1])
    stopped = tmp_path / "ens1"
    assert state(stopped)["step"] == 3 and not RunDir(stopped).summary_file.exists()
    assert [r["step"] for r in read_metrics(RunDir(stopped).metrics_file)] == [2]
    for s in (0, 2):
        trainer.train(runs[s], tmp_path / f"sep{s}")
        assert_same_run(tmp_path / f"ens{s}", tmp_path / f"sep{s}")
        assert results[s]["steps"] == 6


def test_scorers_that_cannot_be_stacked_are_refused_before_any_work(tmp_path):
    """A scorer whose weights are an autograd.Function without a vmap rule (sparsemax) is refused,
    naming the scorer and the fallback, before a folder is made; SSA's fused autograd.Function is
    skipped by its plain path; softmax stacks through its own path (SDPA)."""
    assert ensemble.stack_problem(make_cfg("scorer=ssa")) == (None, "eager")
    assert ensemble.stack_problem(make_cfg("scorer=softmax")) == (None, "auto")
    runs = cfgs("scorer=sparsemax", seeds=(0, 1))
    with pytest.raises(ensemble.EnsembleRefused, match=r"scorer=sparsemax .*hydra/launcher=basic"):
        ensemble.train_ensemble(runs, [tmp_path / "a", tmp_path / "b"])
    assert not (tmp_path / "a").exists()
    mixed = [make_cfg("scorer=ssa", "seed=0"), make_cfg("scorer=softmax", "seed=1")]
    with pytest.raises(ensemble.EnsembleRefused, match="differ only in seed"):
        ensemble.check(mixed, [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ensemble.EnsembleRefused, match=r"seed: \[1, 1\]"):
        ensemble.check([make_cfg("seed=1")] * 2, [tmp_path / "a", tmp_path / "b"])


@pytest.mark.slow
def test_every_scorer_is_tried_and_only_the_unstackable_ones_are_refused():
    """Each scorer config at tiny size (about 1 s each): the four whose weights come from an
    autograd.Function without a vmap rule are refused, all the others stack."""
    names = sorted(p.stem for p in (ROOT / "conf" / "scorer").glob("*.yaml"))
    refused = {n for n in names if ensemble.stack_problem(make_cfg(f"scorer={n}"))[0]}
    assert refused == {"asentmax", "entmax15", "entmax_alpha", "sparsemax"}
    assert len(names) - len(refused) >= 20


def test_the_launcher_groups_jobs_by_everything_but_the_seed(tmp_path):
    from hydra_plugins.ssa_ensemble_launcher import _core

    def job(i, *overrides):
        return _core.Job(i, list(overrides), None, make_cfg(*overrides), tmp_path / str(i))

    jobs = [job(0, "seed=0"), job(1, "scorer=ssa", "seed=0"), job(2, "seed=1"), job(3, "seed=2")]
    jobs.append(job(4, "seed=3", "logger.tags=[x]"))  # W&B settings do not split an ensemble
    assert [[j.idx for j in g] for g in _core.ensembles(jobs, 64, 0.8)] == [[0, 2, 3, 4], [1]]
    assert [[j.idx for j in g] for g in _core.ensembles(jobs, 3, 0.8)] == [[0, 2, 3], [4], [1]]
    # a key defined from the seed follows it (task=lm: task.shuffle_seed: ${seed}); set apart, it splits
    lm = [make_cfg("task=lm", f"seed={s}") for s in (0, 1)] + [
        make_cfg("task=lm", "seed=2", "task.shuffle_seed=7")
    ]
    assert lm[0].task.shuffle_seed == 0 and lm[1].task.shuffle_seed == 1
    assert ensemble.group_key(lm[0]) == ensemble.group_key(lm[1]) != ensemble.group_key(lm[2])


def test_seeds_that_fit_follow_the_memory_estimate(monkeypatch):
    cfg = make_cfg()
    one = ensemble.memory.estimate(cfg)["total_bytes"]
    monkeypatch.setattr(ensemble.memory, "available", lambda device: 10 * one)
    assert ensemble.seeds_that_fit(cfg, "cpu", share=0.8) == 8
    monkeypatch.setattr(ensemble.memory, "available", lambda device: one // 2)
    assert ensemble.seeds_that_fit(cfg, "cpu") == 1


@pytest.mark.slow
def test_the_command_line_multirun_trains_one_ensemble(tmp_path):
    sweep = tmp_path / "sweep"
    # the launcher trains in its Hydra process: run here (conftest.run_script), the command line as given
    out = run_script(
        "train.py", "-m", "seed=0,1,2", "hydra/launcher=ensemble", *TINY, f"hydra.sweep.dir={sweep}"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "3 to train in 1 seed ensembles" in out.stderr + out.stdout
    for s in SEEDS:
        job = sweep / f"debug=tiny,evaluation.figures=False,seed={s}"
        run = RunDir(job)
        assert (job / ".hydra" / "overrides.yaml").exists() and run.problems() == []
        summary = run.summary()
        assert summary["ensemble"] == 3
        # the job's log says the ensemble trained it (before: "skipped (finished)", as if left out)
        log_text = (job / "train.log").read_text()
        assert "trained in a seed ensemble of 3" in log_text and "skipped" not in log_text
        if s != SEEDS[-1]:  # every seed's equality with its separate run: the in-process tests above;
            continue  # here the command line's, on the last member (an off-by-one in the stacking shows)
        separate = tmp_path / f"sep{s}"
        theirs = train_job.run_job(make_cfg(f"seed={s}"), separate)  # with its end-of-run evaluation
        a, b = read_metrics(run.metrics_file), read_metrics(RunDir(separate).metrics_file)
        assert [r["loss"] for r in a] == pytest.approx([r["loss"] for r in b], rel=1e-5)
        mine = summary["evaluations"]["quick"]["in_distribution"]
        assert mine == pytest.approx(theirs["evaluations"]["quick"]["in_distribution"], rel=1e-4)


STUDY = """
name: ens
seeds: [0, 1, 2]
base: [debug=tiny, train.steps=4, train.log_interval=1, evaluation.enabled=false]
tasks:
  lin: [task=linear]
archs:
  small: [model=gpt2]
groups:
  core: {tasks: [lin], scorers: [softmax, ssa], archs: [small], train_sigma: [1]}
evaluations:
  grid_linear: {name: grid, sigmas: [1], lengths: [5], n_samples: 1, figures: false}
"""


@pytest.mark.slow  # two small studies of 6 jobs each
def test_a_study_trains_its_seeds_as_ensembles_and_reports_them_like_separate_runs(tmp_path):
    """`scripts/study.py --ensembles on` (auto: on CUDA): each arm's seeds train as one ensemble before
    the job loop, which then evaluates them (two ensembles side by side with --jobs 2); every job's loss
    curve and evaluation equal those of the same study run one process per job."""
    from ssa_repro.studies import engine
    from ssa_repro.training.metrics_log import read_metrics

    (tmp_path / "ens.yaml").write_text(STUDY)
    path = str(tmp_path / "ens.yaml")
    # "on" trains its two ensembles (softmax's and SSA's seeds) side by side, each in its own process
    roots = {m: engine.run(path, tmp_path / m, n_jobs=n, ensembles=m) for m, n in (("on", 2), ("off", 1))}
    index = {mode: pd.read_csv(root / "index.csv") for mode, root in roots.items()}
    assert len(index["on"]) == len(index["off"]) == 6  # 2 scorers x 3 seeds, one evaluation each
    for job in index["off"].job:
        on, off = (roots[m] / "runs" / "core" / job for m in ("on", "off"))
        assert json.loads((on / "summary.json").read_text())["ensemble"] == 3
        assert "ensemble" not in json.loads((off / "summary.json").read_text())
        a, b = read_metrics(on / "metrics.jsonl"), read_metrics(off / "metrics.jsonl")
        assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
        for ra, rb in zip(a, b):
            assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-5), job
    cells = {m: _grid_values(roots[m]) for m in roots}
    assert cells["on"].keys() == cells["off"].keys() and len(cells["on"]) == 6
    for key, value in cells["off"].items():
        assert cells["on"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def _grid_values(root) -> dict:
    """(job, metric, predictor) -> the stored grid value of each job of a study folder."""
    out = {}
    for part in root.glob("runs/core/*/eval/grid/*/parts/results-*.csv"):
        job = part.parents[4].name
        frame = pd.read_csv(part)
        for row in frame[frame.predictor == "model"].itertuples():
            out[(job, row.metric, row.predictor)] = row.value
    return out
