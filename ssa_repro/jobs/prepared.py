"""A training job prepared once: :class:`PreparedRun` checks the config, reads the run folder and is
what every later step of the job goes on with.

``python train.py`` (its Hydra callback, before Hydra creates the folder), a sweep's job, the study
engine, the seed ensemble and the tests build a ``PreparedRun(cfg, run_dir)`` and hand it on:
:func:`ssa_repro.jobs.train_job.run` trains (``training.trainer.train_prepared``) and then runs the
end-of-run evaluations listed here: nothing is checked, composed or read from the folder twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssa_repro import tracking
from ssa_repro.evaluation import EVALUATORS, runner
from ssa_repro.evaluation.runner import QuickConfig
from ssa_repro.jobs.keys import unknown_keys
from ssa_repro.training import distributed, memory, run_state, validate
from ssa_repro.training.validate import ConfigError

__all__ = ["ConfigError", "PreparedRun", "end_of_run_evals", "problems"]


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


@dataclass(frozen=True, init=False)
class PreparedRun(run_state.TrainingRun):
    """One training job, checked once: ``PreparedRun(cfg, run_dir)`` runs :func:`problems` (one
    ConfigError naming them all), then ``hold()`` (where the caller takes the folder's lock: a bad
    config never creates a folder), then reads the run folder (``run_state.TrainingRun``: writes
    nothing), and makes the config read-only: what was checked is what runs. What every later step
    takes: the :class:`~ssa_repro.training.run_state.TrainingRun` the trainer trains (config, plain
    values, name, folder, device, what the folder holds) and the end-of-run evaluation configs."""

    evaluations: tuple[DictConfig, ...]

    def __init__(self, cfg: DictConfig, run_dir: str | Path, hold: Callable[[], object] | None = None):
        found = problems(cfg)
        if found:
            raise ConfigError("invalid config:\n  - " + "\n  - ".join(found))
        if hold is not None:
            hold()
        super().__init__(cfg, run_dir, checked=True)
        object.__setattr__(self, "evaluations", tuple(end_of_run_evals(cfg)))
        OmegaConf.set_readonly(cfg, True)
