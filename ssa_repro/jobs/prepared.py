"""A training job prepared once: :func:`prepare` checks the config and reads the run folder, and its
:class:`PreparedRun` is what every later step of the job goes on with.

``python train.py`` (its Hydra callback, before Hydra creates the folder), a sweep, the study engine
and the tests prepare a job through :func:`prepare` and hand the result to
:func:`ssa_repro.jobs.train_job.run_job`, which trains (``training.trainer.train`` with the folder's
state read here) and then runs the end-of-run evaluations listed here: nothing is checked, composed or
read from the folder twice. A seed ensemble (``training.ensemble``) reads each member's folder with the
same ``run_state.prepare``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ssa_repro import tracking
from ssa_repro.core.rundir import resolve_device
from ssa_repro.evaluation import EVALUATORS, runner
from ssa_repro.evaluation.runner import QuickConfig
from ssa_repro.jobs.keys import unknown_keys
from ssa_repro.training import distributed, memory, run_state, validate
from ssa_repro.training.validate import ConfigError

__all__ = ["ConfigError", "PreparedRun", "end_of_run_evals", "prepare", "problems"]


@dataclass(frozen=True)
class PreparedRun:
    """One training job, checked: its config (read-only from here on), run folder, device, what the
    folder holds (new, resume, finished) and the end-of-run evaluation configs."""

    cfg: DictConfig
    run_dir: Path
    device: torch.device
    state: run_state.RunState
    evaluations: tuple[DictConfig, ...]


def end_of_run_evals(cfg: DictConfig) -> list[DictConfig]:
    """The evaluation configs the job runs after training: quick (with the ``evaluation`` keys), then
    each of ``evaluation.also`` with its schema's defaults."""
    e = cfg.evaluation
    if not e.enabled:
        return []
    quick_keys = [k for k in QuickConfig.__dataclass_fields__ if k != "name"]
    out = [OmegaConf.merge(OmegaConf.structured(QuickConfig), {k: e[k] for k in quick_keys})]
    for name in e.also:
        if name in EVALUATORS.schemas:
            out.append(OmegaConf.structured(EVALUATORS.schemas[name]))
    return out


def problems(cfg: DictConfig) -> list[str]:
    """Everything wrong with a training config, before any work: unknown keys, values, evaluations."""
    found = unknown_keys(cfg) + validate.problems(cfg)
    if found:
        return found
    found += tracking.check(cfg.logger) + memory.problems(cfg, processes=max(1, distributed.world_size()))
    bad = [n for n in cfg.evaluation.also if n not in EVALUATORS.schemas or n == "quick"]
    if bad:
        allowed = [n for n in EVALUATORS.names() if n != "quick"]
        found.append(f"evaluation.also has {bad}; allowed: {', '.join(allowed)}")
    for e in end_of_run_evals(cfg):
        for p in runner.check(cfg, e):
            found.append(p.replace("eval.", "evaluation.") if e.name == "quick" else p)
    return found


def prepare(cfg: DictConfig, run_dir: str | Path, hold: Callable[[], object] | None = None) -> PreparedRun:
    """:func:`problems` as one ConfigError naming them all, then ``hold()`` (where the caller takes the
    folder's lock: a bad config never creates a folder), then the run folder's state
    (``run_state.prepare``: writes nothing). The config is made read-only: what was checked is what
    runs."""
    found = problems(cfg)
    if found:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(found))
    if hold is not None:
        hold()
    state = run_state.prepare(cfg, run_dir)
    evaluations = tuple(end_of_run_evals(cfg))
    OmegaConf.set_readonly(cfg, True)
    return PreparedRun(cfg, Path(run_dir), resolve_device(cfg.device), state, evaluations)
