"""End-to-end training: every task × model × scorer, the run folder, resume, failures, W&B offline."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from ssa_repro.core import checkpoint
from ssa_repro.core.checkpoint import CheckpointError
from ssa_repro.core.rundir import config_mismatches, plain
from ssa_repro.evaluation.store import stored
from ssa_repro.jobs.train_job import run_job
from ssa_repro.models import build_model
from ssa_repro.training.checkpointer import TrainingDiverged
from ssa_repro.training.metrics_log import read_metrics
from ssa_repro.training.trainer import train
from ssa_repro.training.validate import ConfigError
from tests.conftest import CONF, ROOT, TINY, make_cfg, run_script

COMBOS = [
    (t, m, s)
    for t in ("linear", "every", "some")
    for m in ("gpt2", "attn_only", "ff_only")
    for s in ("softmax", "ssa")
]


@pytest.mark.parametrize(("task", "model", "scorer"), COMBOS, ids=["-".join(c) for c in COMBOS])
def test_every_combination_trains(tmp_path, task, model, scorer):
    extra = (
        ["task.labels_in_context=false", "task.supervise=last"] if (task, model) == ("some", "gpt2") else []
    )
    summary = run_job(make_cfg(f"task={task}", f"model={model}", f"scorer={scorer}", *extra), tmp_path)
    assert summary["steps"] == 6 and torch.isfinite(torch.tensor(summary["final_loss"]))
    (quick,) = stored(tmp_path, "grid")  # the end-of-run evaluation
    grid = quick.read()
    assert len(grid) > 0 and grid["value"].notna().all()
    assert summary["evaluations"]["quick"]["protocol_id"] == quick.id


SCORER_OPTIONS = sorted(p.stem for p in (CONF / "scorer").glob("*.yaml"))


@pytest.mark.parametrize("task", ["linear", "every", "some"])
@pytest.mark.parametrize("scorer", SCORER_OPTIONS)
def test_every_scorer_option_trains_on_every_task(tmp_path, task, scorer):
    """A few steps of every scorer option (presets included) on every task; attention-only for
    'some' (the scorer is the only mixing there). Weights must change and stay finite."""
    model = "attn_only" if task == "some" else "gpt2"
    cfg = make_cfg(
        f"task={task}",
        f"scorer={scorer}",
        f"model={model}",
        "model.n_head=4",
        "model.n_embd=16",
        "train.steps=3",
        "evaluation.enabled=false",
    )
    summary = train(cfg, tmp_path)
    assert torch.isfinite(torch.tensor(summary["final_loss"]))
    state = checkpoint.load(tmp_path / "checkpoints" / "last.pt")["model"]
    assert all(torch.isfinite(v).all() for v in state.values())
    torch.manual_seed(cfg.seed)
    init = build_model(cfg.model, cfg.scorer).state_dict()
    moved = [k for k in init if not torch.equal(init[k], state[k])]
    assert any(".attn.qkv." in k for k in moved), "attention weights did not train"


def test_run_folder_contents(tmp_path):
    run_job(
        make_cfg("scorer=ssa", "train.keep_every=3", "evaluation.figures=true"), tmp_path
    )  # its figures too
    names = {p.name for p in tmp_path.iterdir()}
    assert {
        "config.yaml",
        "provenance.json",
        "train.log",
        "metrics.jsonl",
        "checkpoints",
        "eval",
        "summary.json",
    } <= names
    assert {p.name for p in (tmp_path / "checkpoints").iterdir()} == {
        "last.pt",
        "step_0000003.pt",
        "step_0000006.pt",
    }
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6]
    assert [r["n_points"] for r in rows] == [3, 4, 5]  # curriculum 3 -> 5, +1 every 2 steps
    for r in rows:
        assert {"loss", "lr", "steps_per_sec", "examples_per_sec"} <= set(r)
        assert len(r["scorer"]["b"]) == 1 and len(r["scorer"]["b"][0]) == 2  # [layers][heads]
        assert r["scorer"]["n"][0][0] > 1.0
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov[0]["packages"]["torch"].startswith("2.13") and "git_commit" in prov[0]
    assert "step 6/6" in (tmp_path / "train.log").read_text()
    (quick,) = stored(tmp_path, "grid")
    grid = pd.read_csv(quick.dir / "results.csv")
    assert {
        "task",
        "scorer",
        "model",
        "predictor",
        "sigma_f",
        "sigma_x",
        "length",
        "metric",
        "value",
        "n_samples",
        "ci_low",
        "ci_high",
    } <= set(grid.columns)
    assert set(grid.predictor) == {"model", "least_squares", "averaging", "knn3", "zero"}
    assert (quick.dir / "mse_grid.png").stat().st_size > 0
    # least squares fits a noise-free line exactly from 2 examples on
    assert grid[grid.predictor == "least_squares"]["value"].max() < 1e-8
    assert json.loads((tmp_path / "summary.json").read_text())["parameters"] > 0


def _weights(path):
    return checkpoint.load(path)["model"]


def test_resume_equals_uninterrupted(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    train(make_cfg("scorer=ssa", "train.steps=8", "train.ckpt_interval=2"), full)
    train(make_cfg("scorer=ssa", "train.steps=4", "train.ckpt_interval=2"), split)  # stops at 4
    train(make_cfg("scorer=ssa", "train.steps=8", "train.ckpt_interval=2"), split)  # resumes from 4
    a, b = _weights(full / "checkpoints" / "last.pt"), _weights(split / "checkpoints" / "last.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = lambda d: [json.loads(x)["loss"] for x in (d / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert rows(full) == rows(split)
    assert json.loads((split / "provenance.json").read_text())[1]["resumed_from_step"] == 4


def test_crash_off_the_log_grid_then_resume_keeps_metrics_identical(tmp_path, monkeypatch):
    """Checkpoints every 3 steps, rows every 2; the run dies right after the row of step 4 (last
    checkpoint: 3) leaving a half-written line. The resumed run drops the extra rows and its rows
    average exactly the same steps as an uninterrupted run's."""
    from ssa_repro.training.metrics_log import MetricsLog

    args = ["train.steps=8", "train.ckpt_interval=3", "train.log_interval=2", "evaluation.enabled=false"]
    full, crashed = tmp_path / "full", tmp_path / "crashed"
    train(make_cfg(*args), full)
    real = MetricsLog.append

    def dying(self, row):
        real(self, row)
        if row["step"] == 4:
            with self.path.open("a") as f:
                f.write('{"step": 5, "lo')
            raise RuntimeError("killed")

    monkeypatch.setattr(MetricsLog, "append", dying)
    with pytest.raises(RuntimeError, match="killed"):
        train(make_cfg(*args), crashed)
    monkeypatch.setattr(MetricsLog, "append", real)
    assert checkpoint.load(crashed / "checkpoints" / "last.pt")["step"] == 3
    train(make_cfg(*args), crashed)
    rows = lambda d: [(r["step"], r["loss"]) for r in read_metrics(d / "metrics.jsonl")]  # noqa: E731
    assert rows(full) == rows(crashed)
    assert [s for s, _ in rows(full)] == [2, 4, 6, 8]


def test_resume_refuses_another_device_type(tmp_path):
    train(make_cfg(), tmp_path)
    ckpt = tmp_path / "checkpoints" / "last.pt"
    state = checkpoint.load(ckpt)
    state.pop("format")
    state["device_type"] = "cuda"
    checkpoint.save(ckpt, state)
    with pytest.raises(ConfigError, match="checkpoint was written on cuda, this run would be on cpu"):
        train(make_cfg("device=cpu"), tmp_path)


@pytest.mark.slow
def test_sigkill_and_resume_match_uninterrupted(tmp_path):
    """A run killed with SIGKILL mid-training and resumed ends with the same loss and weights."""
    args = (
        [a for a in TINY if not a.startswith("train.steps")]
        + [
            "model.n_embd=32",
            "train.steps=600",  # the kill comes right after the first checkpoint (step 50)
            "train.compile=false",  # (train.compile=auto would compile a run this long; exactness is the point here)
            "train.ckpt_interval=50",
            "train.log_interval=50",
            "evaluation.enabled=false",
        ]
    )
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    cmd = [sys.executable, "train.py", *args]
    # the killed run computes with this process's thread count, as the in-process resume and reference do
    threads = str(torch.get_num_threads())
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    proc = subprocess.Popen(
        [*cmd, f"hydra.run.dir={killed}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpt = killed / "checkpoints" / "last.pt"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = checkpoint.load(ckpt)["step"]
    assert 0 < killed_at < 600, "the run was not interrupted mid-way"
    logs = {}
    for d in (killed, ref):  # the resume and the uninterrupted reference: in this process
        done = run_script("train.py", *args, f"hydra.run.dir={d}")
        assert done.returncode == 0, done.stderr[-2000:]
        logs[d.name] = done.stderr[-3000:]
    a, b = checkpoint.load(ref / "checkpoints" / "last.pt"), checkpoint.load(ckpt)
    assert a["step"] == b["step"] == 600
    differ = {k: float((a["model"][k] - b["model"][k]).abs().max()) for k in a["model"]}
    differ = {k: v for k, v in differ.items() if v or not torch.equal(a["model"][k], b["model"][k])}
    assert not differ, f"killed at step {killed_at}; weights differ (max |Δ|): {differ}; logs: {logs}"
    last = lambda d: json.loads((d / "metrics.jsonl").read_text().splitlines()[-1])["loss"]  # noqa: E731
    assert last(ref) == last(killed)
    steps = [json.loads(x)["step"] for x in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)), "rows logged after the checkpoint were not dropped on resume"


def test_resume_refuses_a_different_config(tmp_path):
    train(make_cfg(), tmp_path)
    before = (tmp_path / "config.yaml").read_text()
    with pytest.raises(ConfigError, match="model.n_embd: checkpoint has 16, config has 32"):
        train(make_cfg("model.n_embd=32"), tmp_path)
    with pytest.raises(ConfigError, match="train.resume=false"):
        train(make_cfg("train.resume=false"), tmp_path)
    assert (tmp_path / "config.yaml").read_text() == before


def test_a_retired_key_in_an_old_checkpoint_does_not_block_resuming():
    """task.lowercase_zorro was never read and left the schema; checkpoints written before still hold it."""
    saved = {"task": {"name": "mlm", "mask_prob": 0.15, "lowercase_zorro": True}}
    assert config_mismatches(saved, {"task": {"name": "mlm", "mask_prob": 0.15}}) == []
    assert config_mismatches(saved, {"task": {"name": "mlm", "mask_prob": 0.2}}) == [
        "task.mask_prob: checkpoint has 0.15, config has 0.2"
    ]


def test_a_checkpoint_written_before_a_model_key_existed_resumes():
    """Checkpoints from before model.emb_ln/final_ln/pos/rope_base held none of them: they resume under
    the defaults every earlier model had, compared as plain() spells them (True, not 'True')."""
    current = plain(make_cfg())
    saved = copy.deepcopy(current)
    for key in ("emb_ln", "final_ln", "pos", "rope_base"):
        del saved["model"][key]
    assert config_mismatches(saved, current) == []
    assert config_mismatches(saved, plain(make_cfg("model.final_ln=false", "model.rope_base=500"))) == [
        "model.final_ln: checkpoint has True, config has False",
        "model.rope_base: checkpoint has 10000.0, config has 500.0",
    ]


def test_unreadable_checkpoints_give_clear_errors(tmp_path):
    train(make_cfg(), tmp_path)
    ckpt = tmp_path / "checkpoints" / "last.pt"
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or not a torch checkpoint"):
        train(make_cfg(), tmp_path)
    torch.save({"state_dict": {"w": torch.zeros(2)}}, ckpt)
    with pytest.raises(CheckpointError, match="not an ssa_repro checkpoint"):
        train(make_cfg(), tmp_path)
    ckpt.write_text("hello")
    with pytest.raises(CheckpointError, match=str(ckpt)):
        checkpoint.load(ckpt)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    checkpoint.save(path, {"step": 1})

    def broken(obj, f, *a, **k):
        open(f, "wb").write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError):
        checkpoint.save(path, {"step": 2})
    assert checkpoint.load(path)["step"] == 1  # the old checkpoint is intact


def test_non_finite_loss_stops_with_step_and_keeps_last_good(tmp_path, monkeypatch):
    from ssa_repro.tasks.linear import LinearTask

    real, calls = LinearTask.loss, {"n": 0}

    def loss(self, pred, targets):
        calls["n"] += 1
        out = real(self, pred, targets)
        return out * float("nan") if calls["n"] == 5 else out

    monkeypatch.setattr(LinearTask, "loss", loss)
    with pytest.raises(TrainingDiverged, match=r"at step 5;.*last good checkpoint: .*last.pt \(step 3\)"):
        train(make_cfg("train.log_interval=100"), tmp_path)
    state = checkpoint.load(tmp_path / "checkpoints" / "last.pt")
    assert state["step"] == 3 and all(torch.isfinite(v).all() for v in state["model"].values())


def test_wandb_offline_one_run_per_job(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    ids = []
    for i in range(2):  # as two jobs of one multirun process
        run = tmp_path / f"job{i}"
        train(make_cfg("logger.mode=offline"), run)
        assert wandb.run is None  # finished before the next job
        ids.append((run / "wandb_id.txt").read_text().strip())
        offline = list((run / "wandb").glob("offline-run-*"))
        assert len(offline) == 1 and list(offline[0].glob("*.wandb"))
    assert ids[0] != ids[1]


@pytest.mark.slow
def test_mismatched_rerun_into_existing_folder_touches_nothing(tmp_path):
    run = tmp_path / "run"
    base = [a for a in TINY if not a.startswith("logger")] + ["logger.mode=disabled", f"hydra.run.dir={run}"]
    assert run_script("train.py", *base).returncode == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    proc = run_script("train.py", *base, "model.n_embd=32")
    assert proc.returncode != 0 and "cannot resume" in proc.stderr + proc.stdout
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # not even Hydra's .hydra/ record was rewritten


def test_a_tree_is_dirty_for_code_changes_but_not_for_documentation():
    """A study writes its report into docs/results/; that must not mark its later runs dirty."""
    from ssa_repro.core.provenance import changes, dirty

    assert not dirty("")
    assert not dirty("?? docs/results/icl_cpu.md\n?? docs/results/icl_cpu/\n M README.md")
    assert not dirty(" M docs/results/icl_cpu.md\nR  docs/a.md -> docs/b.md")
    assert dirty(" M ssa_repro/scorers/ssa.py")
    assert dirty("?? ssa_repro/scorers/new.py")  # an untracked module can be imported
    assert dirty("?? docs/results/x.md\n M conf/study/icl_cpu.yaml")
    assert dirty("R  docs/old.py -> ssa_repro/new.py")
    # git output stripped of its first line's leading space (" M path" -> "M path")
    assert not dirty("M docs/results/icl_cpu/per_seed_grid.csv\n M docs/results/icl_cpu.md")
    assert dirty("M ssa_repro/a.py")
    # the paths recorded with a start (a report names them): a carried dependency folder is one
    assert changes("?? .site/\n M docs/x.md\n M ssa_repro/a.py") == [".site/", "ssa_repro/a.py"]


def test_a_batch_moves_field_by_field_and_keeps_its_kind():
    """trainer.batch_to: every tensor of a batch (dicts of tensors too) moved, None kept, the dataclass
    the same; the values unchanged (on the CPU the tensors are the same objects: nothing to copy)."""
    from ssa_repro.tasks.base import Batch
    from ssa_repro.tasks.mlm import MLMBatch
    from ssa_repro.training.trainer import batch_to

    g = torch.Generator().manual_seed(0)
    b = Batch(*(torch.randn(2, 3, generator=g) for _ in range(4)), ys=None, params={"a": torch.ones(2, 1)})
    moved = batch_to(b, "cpu")
    assert type(moved) is Batch and moved.ys is None and set(moved.params) == {"a"}
    assert all(getattr(moved, k) is getattr(b, k) for k in ("tokens", "targets", "pred_idx", "xs"))
    assert moved.params["a"] is b.params["a"]
    m = MLMBatch(torch.arange(6).view(2, 3), torch.full((2, 3), -100))
    assert type(batch_to(m, "cpu")) is MLMBatch and torch.equal(batch_to(m, "cpu").targets, m.targets)


def test_to_cuda_a_batch_goes_through_pinned_memory_without_blocking(monkeypatch):
    """The CUDA branch of trainer.host_to, spied on a CPU machine: pin_memory() first, then
    .to(cuda, non_blocking=True) (a pageable copy would synchronise the stream every step); other
    devices take a plain .to."""
    from ssa_repro.training import trainer

    calls = []
    real_to = torch.Tensor.to

    def pin(self):
        calls.append("pin")
        return self

    def to(self, *args, **kw):
        calls.append(("to", str(args[0]), kw.get("non_blocking", False)))
        return self if str(args[0]).startswith("cuda") else real_to(self, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "to", to)
    t = torch.ones(3)
    trainer.host_to(t, "cuda:1")
    assert calls == ["pin", ("to", "cuda:1", True)]
    calls.clear()
    trainer.host_to(t, "meta")
    assert calls == [("to", "meta", False)]
