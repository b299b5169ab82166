"""Loading a trained run folder (:class:`ssa_repro.core.rundir.RunDir`) for evaluation: its model,
task and config, with clear errors before any work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from ssa_repro.core.rundir import RunDir, RunFolderError, config_mismatches, plain, typed
from ssa_repro.models import Transformer, build_model
from ssa_repro.tasks import Task, build_task

__all__ = ["LoadedRun", "RunFolderError", "load_run"]


@dataclass
class LoadedRun:
    run_dir: Path
    cfg: DictConfig  # the run's config, read over the schema (RunDir.config)
    model: Transformer
    task: Task
    step: int  # training steps behind the checkpoint
    device: torch.device
    run_id: str | None = None  # the model's identity (None: a run of older code); in stored cells

    @property
    def labels(self) -> dict:
        """Columns identifying the run in every table row."""
        return {
            "task": self.cfg.task.name,
            "scorer": self.cfg.scorer.label,
            "model": self.cfg.model.name,
            "seed": self.cfg.seed,
            "step": self.step,
        }

    @property
    def title(self) -> str:
        """task · scorer · model · seed (figure titles add the step of the cells they show)."""
        return (
            f"{self.cfg.task.name} · {self.labels['scorer']} · {self.cfg.model.name} · seed {self.cfg.seed}"
        )


def load_run(
    run_dir: str | Path | RunDir,
    device: torch.device,
    step: int | None = None,
    *,
    cfg: DictConfig | None = None,
    task: Task | None = None,
) -> LoadedRun:
    """The run's model (weights of ``RunDir.last_checkpoint``, or of the checkpoint kept at ``step``:
    ``train.keep_at``) on ``device``, its task and its config read over the schema; a RunFolderError
    before any work when the folder is incomplete, holds no checkpoint of ``step`` or its checkpoint
    does not belong to its config. Evaluations store their cells under the checkpoint's step, so one
    run evaluated at several steps gives a learning curve. ``cfg`` (``RunDir.config()``) and ``task``:
    what a caller's checks read and built already (evaluate.py), else read and built here."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    found = run.problems()
    if found:
        raise RunFolderError("; ".join(found))
    cfg = run.config() if cfg is None else cfg
    state = run.load_checkpoint(step=step)
    bad = config_mismatches(plain(typed(state["config"])), plain(cfg))  # both over the schema
    if bad:
        raise RunFolderError(
            f"{run.path}: {run.checkpoint_at(step).relative_to(run.path)} does not belong to "
            f"{run.config_file.name}:\n  - " + "\n  - ".join(bad)
        )
    model = build_model(cfg.model, cfg.scorer)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise RunFolderError(
            f"{run.path}: the checkpoint does not fit the model in {run.config_file.name}: {e}"
        ) from None
    model.to(device).eval()
    run_id = state.get("run_id") or run.identity()
    task = build_task(cfg.task) if task is None else task
    return LoadedRun(run.path, cfg, model, task, int(state["step"]), device, run_id)
