"""Data-parallel training with 2 CPU processes (torchrun, gloo) against an exactly comparable
single-process computation, one set of outputs, resume; and the launcher that fixes the run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from ssa_repro.core import checkpoint
from ssa_repro.evaluation.store import stored
from ssa_repro.launch import command
from ssa_repro.models import build_model
from ssa_repro.tasks import Stage, build_task, curriculum
from ssa_repro.training.metrics_log import read_metrics
from ssa_repro.training.optim import build_optimizer, lr_at, set_lr
from ssa_repro.training.setup import rank_data_seed
from ssa_repro.training.trainer import train
from tests.conftest import ROOT, TINY, make_cfg

ARGS = [a for a in TINY if not a.startswith(("train.steps", "train.log_interval", "logger."))]
ARGS += ["train.log_interval=1", "logger.mode=offline"]


def _reference(steps: int, world: int = 2):
    """What 2-process DDP must compute, in one process: every step, rank r's batch comes from its own
    generator (seed data_seed(seed) + r) and the gradient is the mean of the ranks' gradients = the
    gradient of the mean of their losses (equal batch sizes). Returns (loss per step, weights,
    rank 0's loss per step)."""
    cfg = make_cfg(*ARGS, f"train.steps={steps}")
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model = build_model(cfg.model, cfg.scorer)
    opt = build_optimizer(model, cfg.train)
    gens = [torch.Generator().manual_seed(rank_data_seed(cfg.seed, r)) for r in range(world)]
    losses, rank0 = [], []
    for step in range(steps):
        n = curriculum.n_points(cfg.curriculum, step)
        set_lr(opt, lr_at(cfg.train, step))
        per_rank = [
            task.training_loss(model, task.train_batch(step, cfg.train.batch_size, Stage(n), g, "cpu"))
            for g in gens
        ]
        loss = sum(per_rank) / world
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        rank0.append(per_rank[0].item())
    return losses, model.state_dict(), rank0


def _torchrun(run_dir, *extra):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "train.py",
            *ARGS,
            *extra,
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
def test_two_process_gloo_matches_single_process_and_writes_once(tmp_path):
    run = tmp_path / "ddp"
    proc = _torchrun(run, "train.steps=2")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    losses, weights, rank0 = _reference(2)
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]  # one writer: no duplicated rows
    assert rows[0]["loss"] == pytest.approx(losses[0], rel=1e-5, abs=1e-7)
    assert rows[1]["loss"] == pytest.approx(losses[1], rel=1e-5, abs=1e-6)
    # the single-process run draws rank 0's prompts: its step-1 loss is rank 0's share of the DDP loss
    single = tmp_path / "single"
    train(make_cfg(*ARGS, "train.steps=1", "logger.mode=disabled", "evaluation.enabled=false"), single)
    assert read_metrics(single / "metrics.jsonl")[0]["loss"] == pytest.approx(rank0[0], rel=1e-6)

    state = checkpoint.load(run / "checkpoints" / "last.pt")
    assert state["step"] == 2 and len(state["rng"]["data_ranks"]) == 2
    for k, v in weights.items():  # DDP's averaged gradients = the mean-loss gradient
        torch.testing.assert_close(state["model"][k], v, rtol=1e-5, atol=1e-6)

    # one set of outputs, from rank 0
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1
    assert (run / "train.log").read_text().count("step 2/2") == 1
    assert json.loads((run / "summary.json").read_text())["processes"] == 2
    assert [r["processes"] for r in json.loads((run / "provenance.json").read_text())] == [2]
    (quick,) = stored(run, "grid")  # the end-of-run evaluation, by rank 0 only
    assert len(quick.parts("results")) == 2  # one part per length, written once
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.pt"]

    # resumed with more steps, every rank continues its own prompt stream (its end-of-run evaluation
    # and W&B off: the first launch's are what is checked; W&B's start is seconds of the test)
    proc = _torchrun(run, "train.steps=4", "evaluation.enabled=false", "logger.mode=disabled")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    losses4, weights4, _ = _reference(4)
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["loss"] for r in rows] == pytest.approx(losses4, rel=1e-5, abs=1e-6)
    state = checkpoint.load(run / "checkpoints" / "last.pt")
    for k, v in weights4.items():
        torch.testing.assert_close(state["model"][k], v, rtol=1e-5, atol=1e-6)
    provenance = json.loads((run / "provenance.json").read_text())
    assert [r["resumed_from_step"] for r in provenance] == [None, 2]

    # a single process refuses the 2-process checkpoint (its rank 1 stream could not continue)
    with pytest.raises(Exception, match="written by 2"):
        train(make_cfg(*ARGS, "train.steps=6", "logger.mode=disabled"), run)


def test_torchrun_without_a_fixed_run_folder_is_refused(tmp_path):
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "train.py", *ARGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode != 0 and "need one run folder fixed before they start" in proc.stderr


def test_launcher_fixes_the_run_folder_once():
    cmd = command(2, ["task=every", "scorer=ssa"], [], "train.py")
    assert cmd[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"]
    folder = cmd[-1].removeprefix("hydra.run.dir=")
    assert folder.startswith("outputs/") and folder.endswith("_every_ssa_gpt2") and "${" not in folder
    given = command(4, ["hydra.run.dir=/x/y", "seed=1"], ["--nnodes=2"], "train.py")
    assert given[-2:] == ["seed=1", "hydra.run.dir=/x/y"] and "--standalone" not in given
