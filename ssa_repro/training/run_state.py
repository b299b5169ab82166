"""What the run folder holds, and what this config may do with it: start, resume, or skip as finished;
:class:`TrainingRun`, a run checked and read once, is what the trainer takes.

:func:`prepare` reads the folder (it writes nothing) after checking the config's values:

- no ``checkpoints/last.pt``: a new run;
- no checkpoint but results of a trained model (``summary.json``, stored evaluations): refused, as it
  cannot be resumed and a new model would sit beside the old one's results; ``train.discard_old_results
  =true`` trains again with the old results moved to ``discarded/<time>/``;
- a checkpoint and ``train.resume=false``: refused (another ``hydra.run.dir`` starts a new run);
- a checkpoint whose config differs in the keys that must match to continue it (``rundir.RESUME_KEYS``: task,
  model, scorer, seed, curriculum, the optimiser's settings), or that was written on another device
  type or by another number of data-parallel processes: refused, every difference listed;
- a checkpoint beyond ``train.steps`` (a finished 3,000-step run given ``train.steps=100``): refused,
  not silently "finished" with a rewritten config;
- a finished run (``summary.json`` at ``train.steps`` and the same config, W&B and evaluation settings
  aside): :attr:`RunState.finished` holds its summary, and the trainer skips it;
- else: resume from the checkpoint. A checkpoint written with another number of CPU threads resumes
  with a warning (results depend on it, up to ~4e-3 in the weights).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ssa_repro.core import checkpoint
from ssa_repro.core.rundir import RunDir, config_mismatches, plain, resolve_device
from ssa_repro.training import distributed, validate

log = logging.getLogger("ssa_repro.train")

FREE_WHEN_FINISHED = ("logger", "evaluation")  # a finished run re-run with other ones is still finished


@dataclass
class RunState:
    checkpoint: dict | None = None  # the state to resume from
    finished: dict | None = None  # the summary of a run that already finished this config
    discard: bool = False  # move the old results aside before training (train.discard_old_results)


def _checkpoint_problems(cfg: DictConfig, current: dict, state: dict) -> list[str]:
    """``current``: ``cfg`` as plain Python (converted once by :func:`prepare`)."""
    bad = config_mismatches(state["config"], current)
    here, there = resolve_device(cfg.device).type, state.get("device_type", "cpu")
    if here != there:  # kernels differ by device type (and older checkpoints hold a CUDA prompt generator)
        bad.append(
            f"device: checkpoint was written on {there}, this run would be on {here} (set device={there})"
        )
    saved_world = len(state["rng"].get("data_ranks") or [None])
    if saved_world != distributed.world_size():
        bad.append(
            f"processes: checkpoint was written by {saved_world} (data-parallel ranks), this run has "
            f"{distributed.world_size()}; resume with the same number of processes"
        )
    if int(state["step"]) > int(cfg.train.steps):
        bad.append(
            f"train.steps={cfg.train.steps} is fewer than the {int(state['step'])} steps the checkpoint holds; "
            f"use train.steps>={int(state['step'])} to continue or evaluate it"
        )
    return bad


def _finished(cfg: DictConfig, current: dict, run: RunDir, state: dict) -> dict | None:
    if not cfg.train.resume or not run.summary_file.exists() or not run.config_file.exists():
        return None
    try:
        summary = run.summary()
        saved = OmegaConf.to_container(run.raw_config())
    except Exception:  # noqa: BLE001  (a damaged file: do the work again)
        return None
    if summary is None:
        return None
    steps = cfg.train.steps
    if summary.get("steps") != steps or int(state["step"]) != steps:
        return None
    current = {**current, "train": dict(current.get("train", {}))}  # (the caller's stays whole)
    for c in (saved, current):
        c.get("train", {}).pop("discard_old_results", None)  # (says what to do without a checkpoint)
    same = {k: v for k, v in saved.items() if k not in FREE_WHEN_FINISHED} == {
        k: v for k, v in current.items() if k not in FREE_WHEN_FINISHED
    }
    return summary if same else None


def run_name(cfg: DictConfig) -> str:
    """A run's name in logs, W&B and summary.json: task, scorer, model and seed."""
    return f"{cfg.task.name}-{cfg.scorer.label}-{cfg.model.name}-s{cfg.seed}"


def prepare(cfg: DictConfig, run_dir: str | Path) -> RunState:
    """What the folder holds and whether this config (its values checked: ``validate.check``) may
    start, resume or skip it; every refusal before work starts, and nothing written."""
    run = RunDir(run_dir)
    ckpt_path = run.last_checkpoint
    if not ckpt_path.exists():
        held = run.results()
        if held and not cfg.train.discard_old_results:
            raise validate.ConfigError(
                f"{run.path} holds the results of a trained model ({', '.join(p.name for p in held)}) but no "
                f"checkpoint ({ckpt_path.relative_to(run.path)} is gone), so it cannot be resumed, and training "
                "again here would put a new model beside the old model's results. Start a new run in another "
                "folder (hydra.run.dir=<another folder>), or set train.discard_old_results=true to train here "
                f"again with the old results moved to {run.discarded_dir}/<time>/ (nothing is deleted)"
            )
        return RunState(discard=bool(held))
    if not cfg.train.resume:
        raise validate.ConfigError(
            f"{run.path} already holds a run ({ckpt_path.relative_to(run.path)}) and train.resume=false; "
            "use train.resume=true to continue it, or another hydra.run.dir for a new run"
        )
    state = run.load_checkpoint()
    current = plain(cfg)  # converted once, for both comparisons with what the folder holds
    bad = _checkpoint_problems(cfg, current, state)
    if bad:
        raise validate.ConfigError(
            f"cannot resume {ckpt_path}: the config differs from the checkpoint's in\n  - "
            + "\n  - ".join(bad)
            + "\nuse another hydra.run.dir for a new run"
        )
    finished = _finished(cfg, current, run, state)
    if finished is None:
        warning = checkpoint.thread_mismatch(state, resolve_device(cfg.device).type)
        if warning:
            log.warning("%s", warning)
    return RunState(checkpoint=None if finished else state, finished=finished)


@dataclass(frozen=True, init=False)
class TrainingRun:
    """A training run checked and read once, what the trainer and the seed ensemble take:
    ``TrainingRun(cfg, run_dir)`` checks the config's values (``validate.check``; ``checked=True``:
    the caller did) and reads the folder (:func:`prepare`), and holds the config, its plain values
    (``rundir.plain``, converted once: config.yaml, checkpoints, W&B), the run's name, folder and
    device, and what the folder holds (new, resume, finished). A job's
    :class:`~ssa_repro.jobs.prepared.PreparedRun` is one, with the job's own checks and end-of-run
    evaluations."""

    cfg: DictConfig
    config: dict
    name: str
    run_dir: Path
    device: torch.device
    state: RunState

    def __init__(self, cfg: DictConfig, run_dir: str | Path, checked: bool = False):
        if not checked:  # every bad value reported before anything is read or written
            validate.check(cfg)
        state = prepare(cfg, run_dir)
        fields = {
            "cfg": cfg,
            "config": plain(cfg),
            "name": run_name(cfg),
            "run_dir": Path(run_dir),
            "device": resolve_device(cfg.device),
            "state": state,
        }
        for key, value in fields.items():  # (a frozen dataclass sets its fields so)
            object.__setattr__(self, key, value)
