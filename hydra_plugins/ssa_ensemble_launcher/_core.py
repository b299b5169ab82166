"""What ``hydra/launcher=ensemble`` does with a multirun's jobs.

1. Compose each job's config as Hydra's launchers do (``load_sweep_config``, job id and number), with
   the W&B group and tags ``train_app.main`` gives a multirun job.
2. Group the jobs whose configs differ only in ``seed`` (and ``logger``: ``ensemble.group_key``);
   split a group into ensembles of at most ``max_seeds`` and of as many seeds as fit in
   ``memory_share`` of the device's free memory (``ensemble.seeds_that_fit``). A job alone in its
   group (or left alone by the split) trains as under the basic launcher.
3. Refuse, before any work, a group that cannot be stacked (naming the scorer and the fallback).
4. Train each ensemble in this process (``ensemble.train_ensemble``): jobs already finished, or whose
   folder cannot be continued (a refused checkpoint, a lock), are left to the job itself (5.).
5. Run every job through Hydra's ``run_job`` with the application's task function, in job order: its
   job folder, ``.hydra/``, job log and ``JobReturn`` are those of the basic launcher. The task function
   finds the run trained (``skipped (finished)``) and runs the end-of-run evaluation; a seed that
   diverged in the ensemble gets ``failed.txt`` as a failed job of ``train_app.main`` does.
"""

from __future__ import annotations

import copy
import logging
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, open_dict, read_write

from ssa_repro.core.atomic import write_text
from ssa_repro.core.rundir import RunDir
from ssa_repro.jobs import train_job
from ssa_repro.training import ensemble, run_state, validate

log = logging.getLogger(__name__)


@dataclass
class Job:
    idx: int
    overrides: list[str]
    sweep_config: DictConfig  # with its hydra node, as run_job takes it
    cfg: DictConfig  # the task config (no hydra node), as the task function receives it
    run_dir: Path


def _job(launcher, idx: int, overrides: Sequence[str]) -> Job:
    sweep_config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    HydraConfig.instance().set_config(sweep_config)
    run_dir = Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)
    cfg = copy.deepcopy(sweep_config)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    # as train_app.main names a multirun job: one W&B group per sweep, overrides as tags
    train_job.name_sweep_job(cfg, sweep_config.hydra.sweep.dir, sweep_config.hydra.overrides.task)
    return Job(idx, list(overrides), sweep_config, cfg, run_dir)


def ensembles(jobs: list[Job], max_seeds: int, memory_share: float) -> list[list[Job]]:
    """The jobs grouped by everything but the seed (first appearance order), each group split into
    ensembles of at most ``max_seeds`` and of what fits in memory."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(ensemble.group_key(job.cfg), []).append(job)
    out = []
    for group in groups.values():
        size = max(1, min(max_seeds, ensemble.seeds_that_fit(group[0].cfg, share=memory_share)))
        out += [group[i : i + size] for i in range(0, len(group), size)]
    return out


def _trainable(job: Job) -> bool:
    """Whether the ensemble trains this job: not when it is finished or its folder cannot be continued
    (the job itself then skips it, or records why, as under the basic launcher)."""
    try:
        validate.check(job.cfg)
        return run_state.prepare(job.cfg, job.run_dir).finished is None
    except Exception:  # noqa: BLE001  (the job reports it when it runs)
        return False


def _failed_job(error: BaseException):
    """A task function that records ``error`` as ``train_app.main`` records a failed multirun job:
    ``<job>/failed.txt`` (type and first line, the message, the traceback), one log line, and the
    ``{"failed": ...}`` return value."""

    def task(cfg: DictConfig) -> dict:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        first = (str(error).splitlines() or [""])[0]
        trace = "".join(traceback.format_exception(error))
        write_text(RunDir(run_dir).failed_file, f"{type(error).__name__}: {first}\n\n{error}\n\n{trace}")
        log.error("job %s failed: %s (the other jobs go on)", run_dir, first)
        return {"failed": f"{type(error).__name__}: {first}"}

    return task


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    jobs = [_job(launcher, initial_job_idx + i, o) for i, o in enumerate(job_overrides)]
    todo = [j for j in jobs if _trainable(j)]
    # an ensemble of one seed gains nothing: that job trains alone, as under the basic launcher
    planned = [g for g in ensembles(todo, launcher.max_seeds, launcher.memory_share) if len(g) > 1]
    for group in planned:  # every refusal before any training
        try:
            ensemble.check([j.cfg for j in group], [j.run_dir for j in group])
        except ensemble.EnsembleRefused as e:
            raise SystemExit(f"Error: {e}") from None
    log.info(
        "Ensemble launcher: %d jobs, %d to train in %d seed ensembles (max_seeds=%d), into %s",
        len(jobs),
        sum(len(g) for g in planned),
        len(planned),
        launcher.max_seeds,
        launcher.config.hydra.sweep.dir,
    )
    outcome: dict[int, object] = {}
    for n, group in enumerate(planned, 1):
        log.info("ensemble %d/%d: %d seeds", n, len(planned), len(group))
        for job in group:
            log.info("\t#%d : %s", job.idx, " ".join(filter_overrides(job.overrides)))
        try:
            results = ensemble.train_ensemble([j.cfg for j in group], [j.run_dir for j in group])
        except Exception as e:  # noqa: BLE001  (every seed of this ensemble fails with it; the others go on)
            results = [e] * len(group)
        outcome.update({j.idx: r for j, r in zip(group, results)})
    returns = []
    for job in jobs:  # each job as the basic launcher runs it: its folder, .hydra/, log, JobReturn
        HydraConfig.instance().set_config(job.sweep_config)
        result = outcome.get(job.idx)
        task = _failed_job(result) if isinstance(result, BaseException) else launcher.task_function
        returns.append(
            run_job(
                hydra_context=launcher.hydra_context,
                config=job.sweep_config,
                task_function=task,
                job_dir_key="hydra.sweep.dir",
                job_subdir_key="hydra.sweep.subdir",
            )
        )
    return returns
