"""Sweeps: Hydra multirun with the basic, joblib and submitit-local launchers into a temp sweep dir; job
folders named by their overrides; one W&B run per job; a failing job leaves the others intact and is
reported; a re-run skips finished jobs; presets compose; SIGTERM saves a checkpoint; compare.py reads
the sweep."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ssa_repro.cli import commands
from ssa_repro.cli.sweeps import MAX_DIR, SWEEP_KEYS_ENV, job_dir
from ssa_repro.evaluation.store import stored
from ssa_repro.reports import compare
from ssa_repro.training.validate import check
from tests.conftest import CONF, TINY, run_script

# The tiny run of conftest, logging to W&B offline (the point of some checks here).
ARGS = [a for a in TINY if not a.startswith("logger.")] + ["logger.mode=offline"]
PAPER_SIZES = [
    "1L1AH",
    "1L2AH",
    "1L4AH",
    "2L1AH",
    "2L2AH",
    "2L4AH",
    "3L1AH",
    "3L2AH",
    "3L4AH",
    "6L4AH",
    "12L8AH",
    "18L8AH",
]


def _train_here(*args):
    """``python train.py ARGS`` in this process (conftest.run_script): the basic launcher runs its jobs in
    the process anyway, so only the interpreter's start and imports are saved."""
    return run_script("train.py", *args, env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})


def _jobs(sweep: Path) -> dict[str, Path]:
    """Job folders of a sweep by their seed (from the job's own config.yaml)."""
    out = {}
    for cfg in sweep.glob("*/config.yaml"):
        out[f"seed={OmegaConf.load(cfg).seed}"] = cfg.parent
    return out


def _wandb_runs(job: Path) -> list[Path]:
    return [p for p in (job / "wandb").glob("offline-run-*") if p.is_dir()]


def _check_two_jobs(sweep: Path, proc) -> dict[str, Path]:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    jobs = _jobs(sweep)
    assert set(jobs) == {"seed=0", "seed=1"}
    assert jobs["seed=0"] != jobs["seed=1"] and all(p.name.endswith(s) for s, p in jobs.items())
    ids = set()
    for seed, job in jobs.items():
        (quick,) = stored(job, "grid")  # the end-of-run evaluation, stored like evaluate.py's
        assert quick.parts() and (quick.dir / "summary.json").stat().st_size > 0
        assert json.loads((job / "summary.json").read_text())["steps"] == 6
        cfg = OmegaConf.load(job / "config.yaml")
        assert cfg.logger.group == sweep.name  # one W&B group per sweep
        assert seed in cfg.logger.tags  # tagged with the job's overridden keys
        runs = _wandb_runs(job)  # evaluations after training add offline folders of the same run
        assert len({p.name.rsplit("-", 1)[1] for p in runs}) == 1, runs  # one W&B run per job
        data = b"".join(p.read_bytes() for p in sorted(runs)[0].glob("*.wandb"))
        assert seed.encode() in data and sweep.name.encode() in data  # tag and group recorded
        ids.add((job / "wandb_id.txt").read_text().strip())
    assert len(ids) == 2  # not every job logging into one run
    return jobs


# ------------------------------------------------------------------------------------------- names


def test_job_folder_names(monkeypatch):
    monkeypatch.delenv(SWEEP_KEYS_ENV, raising=False)  # no sweep: no key varies (an in-process sweep sets it)
    ov = ["scorer=ssa", "+sweep/size=1L1AH", "logger.mode=offline", "data.root=/a/b c"]
    ex = ["seed", "logger.mode"]
    assert job_dir(ov, ex, 3) == "data.root=_a_b_c,scorer=ssa,size=1L1AH,seed=3"
    assert job_dir([], ex, 0) == "seed=0"  # the seed is always in the name
    long = [f"key{i}=value{i}" for i in range(40)]
    a, b = job_dir(long, [], 0), job_dir([*long[:-1], "key39=other"], [], 0)
    assert len(a) <= MAX_DIR and a != b and re.search(r"~[0-9a-f]{10},seed=0$", a)  # cut, hashed


def test_swept_keys_come_first(monkeypatch):
    monkeypatch.setenv("SSA_SWEEP_KEYS", "scorer")
    assert job_dir(["a.b=1", "scorer=ssa"], [], 0) == "scorer=ssa,a.b=1,seed=0"


# ----------------------------------------------------------------------------------------- presets


def _compose_hydra(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF / "sweep").glob("*.yaml")))
def test_sweep_presets_compose_as_multiruns(preset):
    cfg = _compose_hydra(f"sweep={preset}")
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert cfg.hydra.sweeper.params and "scorer" in cfg.hydra.sweeper.params
    assert "${now:" not in OmegaConf.to_container(cfg.hydra.sweep)["dir"]  # a re-run finds its folders
    check(cfg)


def test_paper_ablation_lists_the_papers_sizes():
    cfg = _compose_hydra("sweep=paper_ablation")
    assert cfg.hydra.sweeper.params["+sweep/size"].split(",") == PAPER_SIZES
    assert sorted(p.stem for p in (CONF / "sweep" / "size").glob("*.yaml")) == sorted(PAPER_SIZES)
    for size in PAPER_SIZES:
        for extra in ([], ["experiment=paper_linear"]):
            job = _compose_hydra("sweep=paper_ablation", f"+sweep/size={size}", *extra)
            layers, heads = size[:-2].split("L")
            assert (job.model.n_layer, job.model.n_head) == (int(layers), int(heads))
            check(job)


def test_train_sigma_values_validate():
    cfg = _compose_hydra("sweep=train_sigma", "task=every")
    for std in str(cfg.hydra.sweeper.params["task.x_dist.std"]).split(","):
        check(_compose_hydra("sweep=train_sigma", "task=every", f"task.x_dist.std={std}"))


# ---------------------------------------------------------------------------------------- launchers


@pytest.mark.slow
def test_basic_multirun_failure_rerun_and_compare(tmp_path, capsys):
    """Two jobs; then one job's checkpoint is broken and the sweep re-run: the finished job is skipped
    and untouched, the broken one fails and is reported (failed.txt, exit code, compare.py); then the
    cause is removed and the third run only does that job."""
    sweep = tmp_path / "sweep"
    cmd = ["-m", "seed=0,1", *ARGS, f"hydra.sweep.dir={sweep}"]
    jobs = _check_two_jobs(sweep, _train_here(*cmd))

    ok, bad = jobs["seed=0"], jobs["seed=1"]
    (bad / "summary.json").unlink()  # as if it had been interrupted ...
    ckpt = bad / "checkpoints" / "last.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # ... while writing a checkpoint (by hand: not atomic)
    before = {p: p.read_bytes() for p in ok.rglob("*") if p.is_file() and ".hydra" not in p.parts}
    proc = _train_here(*cmd)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0  # the sweep reports the failure ...
    assert "skipped (finished)" in out and "failed" in out and "truncated or not a torch checkpoint" in out
    assert "Traceback" not in out and proc.returncode == 1  # the sweep ends with one line per failed job
    assert "Error: 1 of 2 sweep jobs failed" in proc.stderr
    assert f"\n  - {bad}: CheckpointError: cannot read checkpoint" in proc.stderr
    after = {p: p.read_bytes() for p in ok.rglob("*") if p.is_file() and ".hydra" not in p.parts}
    assert after.keys() == before.keys()
    changed = [p.name for p in before if before[p] != after[p]]
    assert changed == ["train.log"], changed  # ... the finished job only logged "skipped (finished)"
    assert "CheckpointError" in (bad / "failed.txt").read_text()

    comp = compare.collect([sweep])  # whatever finished is compared; the failed job is listed
    assert [g.seeds for g in comp.groups] == [[0]]
    assert comp.missing == [(str(bad), comp.missing[0][1])] and comp.missing[0][1].startswith("failed: ")
    assert commands.compare([str(sweep)]) == 0
    assert "failed: " in (sweep / "compare" / "summary.md").read_text()
    capsys.readouterr()

    ckpt.unlink()  # the cause removed: that job starts over (its old evaluation with it, as a run
    shutil.rmtree(bad / "eval")  # folder with results but no checkpoint is refused: tests/test_faults.py)
    proc = _train_here(*cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count("skipped (finished)") == 1
    assert not (bad / "failed.txt").exists() and (bad / "summary.json").exists()
    comp = compare.collect([sweep])
    assert [g.seeds for g in comp.groups] == [[0, 1]] and comp.missing == []


@pytest.mark.slow
def test_joblib_multirun_two_jobs_two_wandb_runs_and_full_grids(tmp_path):
    """joblib workers; each job also runs the task's paper grid at its end (evaluation.also), so
    compare.py picks that protocol for the sweep."""
    sweep = tmp_path / "sweep"
    proc = _train_here(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "seed=0,1",
        *ARGS,
        f"hydra.sweep.dir={sweep}",
        "evaluation.also=[default]",
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "Joblib.Parallel" in proc.stdout + proc.stderr
    for job in _jobs(sweep).values():
        assert len(stored(job, "grid")) == 2  # quick and the paper grid, side by side
    comp = compare.collect([sweep])
    assert comp.eval == "grid" and [g.seeds for g in comp.groups] == [[0, 1]]
    assert comp.grid(comp.labels[0]).shape == (10, 10)  # σ_F × σ 1..10


@pytest.mark.slow
def test_submitit_local_multirun(tmp_path):
    """submitit's local executor stands in for SLURM: same folders and results."""
    sweep = tmp_path / "sweep"
    proc = _train_here(  # submitit starts each job in a process of its own: the outer one can be this
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=5",
        "seed=0,1",
        *ARGS,
        f"hydra.sweep.dir={sweep}",
    )
    _check_two_jobs(sweep, proc)
    assert (sweep / ".submitit").is_dir()


# -------------------------------------------------------------------------------------- preemption


def test_preemption_guard_catches_both_signals_and_hands_them_on():
    from ssa_repro.training.distributed import PreemptionGuard

    seen = []
    previous = signal.signal(signal.SIGUSR2, lambda s, f: seen.append(s))  # e.g. submitit's requeue
    try:
        with PreemptionGuard() as guard:
            for sig in (signal.SIGTERM, signal.SIGUSR2):
                os.kill(os.getpid(), sig)
                time.sleep(0.01)
                assert guard.received == sig  # only noted; the loop saves a checkpoint first
                if sig == signal.SIGTERM:
                    with pytest.raises(SystemExit) as e:  # no handler before: the process ends
                        guard.hand_on()
                    assert e.value.code == 128 + signal.SIGTERM
                else:
                    guard.hand_on()  # the previous Python handler decides
                    assert seen == [signal.SIGUSR2] and guard.received is None
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored
    finally:
        signal.signal(signal.SIGUSR2, previous)
