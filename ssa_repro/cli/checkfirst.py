"""Check, then run: the one hand-off of ``train.py`` and ``evaluate.py`` from Hydra's callback to the job.

A :class:`CheckFirst` callback prepares the job in ``on_run_start``, before Hydra creates the run
folder or writes its ``.hydra/`` (a bad value never creates or touches a folder), and keeps what it
prepared under the job's ``hydra.run.dir``; the job's main function takes it back with :meth:`take`
(Hydra's ``HydraConfig`` names the job's folder) or, where nothing was kept, builds it with the same
constructor (``CheckFirst.take() or PreparedRun(cfg, run_dir)``), so the config is checked and the
folder read once per command. A multirun's jobs are each checked in ``on_multirun_start`` before the first starts, and
prepared by the job itself (:meth:`take` finds nothing kept for them).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

from ssa_repro.cli import sweeps


def job_config(config: DictConfig) -> DictConfig:
    """The config a job's main function receives: Hydra's, without its ``hydra`` node (as Hydra's
    ``run_job`` makes the task's config)."""
    cfg = copy.deepcopy(config)
    with read_write(cfg), open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


class CheckFirst(Callback):
    """A Hydra callback that prepares a job before Hydra writes anything. Subclasses give
    :meth:`prepare` (the job's config and Hydra's whole config, with its ``hydra`` node -> what the job
    goes on with; a refusal is a SystemExit) and :meth:`problems` (a sweep job's config -> what is wrong with it)."""

    _kept: ClassVar[dict[str, Any]] = {}  # hydra.run.dir -> what on_run_start prepared for that job

    def prepare(self, cfg: DictConfig, config: DictConfig) -> Any:
        raise NotImplementedError

    def problems(self, cfg: DictConfig) -> list[str]:
        raise NotImplementedError

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        CheckFirst._kept.clear()  # one run per process: what a failed one left is not kept
        run_dir = str(config.hydra.run.dir)
        CheckFirst._kept[run_dir] = self.prepare(job_config(config), config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        CheckFirst._kept.clear()  # the job took it, or failed before
        lock = getattr(self, "lock", None)
        if lock is not None:  # (the process ending would release it too; this also removes its record)
            lock.release()

    def check_sweep(self, config: DictConfig) -> list[tuple[list[str], DictConfig]] | None:
        """Every job of a basic sweep checked before the first starts: each job's overrides and config
        (None for other sweepers, which choose jobs as they go: each job is checked when it starts)."""
        if "basic" not in str(config.hydra.sweeper.get("_target_", "")).lower():
            return None
        loader = GlobalHydra.instance().config_loader()
        jobs = []
        for overrides in sweeps.sweep_jobs(config, loader):
            job = loader.load_sweep_config(config, overrides)
            found = self.problems(job)
            if found:
                raise SystemExit(f"Error in sweep job {' '.join(overrides)}:\n  - " + "\n  - ".join(found))
            jobs.append((overrides, job))
        return jobs

    @staticmethod
    def take() -> Any | None:
        """What the callback prepared for this job, or None where it prepared nothing (a sweep's job, a
        test calling main): the job then prepares its config itself, with the same constructor."""
        if not CheckFirst._kept:  # nothing prepared: HydraConfig may hold an earlier in-process app's
            return None  # config (its hydra.run.dir need not even resolve), so it is not read
        key = str(HydraConfig.get().run.dir) if HydraConfig.initialized() else None
        return CheckFirst._kept.pop(key, None) if key is not None else None
