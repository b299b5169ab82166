"""``python train.py``: one training job = train, then the end-of-run evaluations, in the run folder.

Checks first (:class:`ValidateFirst`, a :class:`~ssa_repro.cli.checkfirst.CheckFirst` callback that
runs before Hydra creates or writes the run folder): the job is prepared once
(:class:`ssa_repro.jobs.prepared.PreparedRun`: unknown keys, every config value, the end-of-run evaluations
against the config, and whether the folder holds a run this config may continue) under the folder's
hold, and the job goes on with what was prepared. In a multirun every job is checked before the first
one starts, the job list is written to ``<sweep dir>/jobs.yaml`` and jobs that would share a folder are
refused (``ssa_repro/cli/sweeps.py``).

The job (:func:`main`): :func:`ssa_repro.jobs.train_job.run` (train, then evaluate). In a multirun a job
that fails is recorded in ``<job>/failed.txt`` and the other jobs go on; the sweep ends with one line
per failed job and exits 1 (no traceback); each job is its own W&B run, grouped by the sweep folder's
name and tagged with the job's overrides.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from ssa_repro.cli import sweeps
from ssa_repro.cli.checkfirst import CheckFirst
from ssa_repro.config import CONF_DIR
from ssa_repro.core.atomic import write_text
from ssa_repro.core.rundir import RunDir
from ssa_repro.core.runlock import RunLock
from ssa_repro.jobs import prepared, train_job
from ssa_repro.jobs.keys import explain_argv
from ssa_repro.jobs.train_job import FAILURES
from ssa_repro.training import distributed
from ssa_repro.training.checkpointer import TrainingDiverged

log = logging.getLogger("ssa_repro.train")


class ValidateFirst(CheckFirst):
    """Prepare the job (checks, then what the folder holds, read under the folder's hold) before Hydra
    creates the folder or rewrites its ``.hydra/``: a bad value never touches a run. In a multirun
    every job's config is checked before the first job starts."""

    def problems(self, cfg: DictConfig) -> list[str]:
        return prepared.problems(cfg)

    def prepare(self, cfg: DictConfig, config: DictConfig) -> prepared.PreparedRun:
        if distributed.world_size() > 1 and not any(
            str(o).startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra
        ):
            raise SystemExit(
                f"Error: {distributed.world_size()} processes (torchrun) need one run folder fixed before "
                "they start: add hydra.run.dir=<folder>, or start with `python -m ssa_repro.launch --nproc "
                "N ...`, which does (Hydra resolves ${now:...} in each process separately)"
            )
        try:  # the folder's name first: a value it cannot hold is refused naming its key (resolvers.run_name)
            run_dir = Path(os.path.abspath(str(config.hydra.run.dir)))  # as Hydra's runtime.output_dir
        except Exception as e:  # noqa: BLE001  (Hydra would only warn and run the job: stop here)
            raise SystemExit(f"Error: {type(e).__name__}: {e}") from None
        lock = RunLock(run_dir, "train")

        def hold() -> None:  # one writer from here on, before Hydra writes .hydra/ into the folder
            if distributed.rank() == 0:
                self.lock = lock.acquire()

        try:
            return prepared.PreparedRun(cfg, run_dir, hold=hold)
        except Exception as e:  # noqa: BLE001  (FAILURES, and any other: Hydra would only warn)
            self.on_run_end(cfg)  # refused: leave the folder as it was (no holder record)
            raise SystemExit(
                f"Error: {type(e).__name__}: {e}" if not isinstance(e, FAILURES) else f"Error: {e}"
            ) from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_started, self.sweep_size = time.time(), None  # (failed.txt written since: this sweep's)
        if distributed.world_size() > 1:
            raise SystemExit(
                "Error: a multirun cannot run under torchrun; start each data-parallel run on its own "
                "(python -m ssa_repro.launch --nproc N ...) or sweep with single-process jobs"
            )
        if "basic" not in str(config.hydra.sweeper.get("_target_", "")).lower():
            return
        jobs = sweeps.sweep_jobs(config, GlobalHydra.instance().config_loader())
        values: dict[str, set[str]] = {}
        for overrides in jobs:
            for o in overrides:
                key, _, value = o.lstrip("+~").partition("=")
                values.setdefault(key, set()).add(value)
        varying = sorted(k for k, v in values.items() if len(v) > 1 or len(jobs) == 1)
        os.environ[sweeps.SWEEP_KEYS_ENV] = ",".join(k for k in varying if k != "seed")  # first in names
        folders: dict[str, list[str]] = {}
        for overrides, job in self.check_sweep(config):  # (folder names read the keys set above)
            folders.setdefault(str(job.hydra.sweep.subdir), []).append(" ".join(overrides))
        shared = {d: js for d, js in folders.items() if len(js) > 1}
        if shared:
            raise SystemExit(
                "Error: sweep jobs would share a folder (their differing keys are excluded from "
                "hydra.job.config.override_dirname.exclude_keys):\n  - "
                + "\n  - ".join(f"{d}: {' | '.join(js)}" for d, js in shared.items())
            )
        sweeps.write_jobs(config.hydra.sweep.dir, jobs)
        self.sweep_size = len(jobs)
        log.info("sweep: %d jobs into %s", len(jobs), config.hydra.sweep.dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        failed = sweeps.failures(config.hydra.sweep.dir, getattr(self, "sweep_started", 0.0) - 1.0)
        if failed:
            raise SystemExit(sweeps.failure_message(failed, getattr(self, "sweep_size", None)))


def main(cfg: DictConfig) -> dict:
    """The job: one run (prepared by :class:`ValidateFirst`), or a sweep's job (prepared here, its
    failure recorded and the sweep going on)."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode != RunMode.MULTIRUN:
        try:
            with distributed.exit_quietly_on_interrupt():
                job = CheckFirst.take() or prepared.PreparedRun(cfg, run_dir)
                return train_job.run(job)
        except (*train_job.FAILURES, TrainingDiverged) as e:
            log.error("%s", e)
            raise SystemExit(f"Error: {e}") from None

    train_job.name_sweep_job(cfg, hc.sweep.dir, hc.overrides.task)
    failed = RunDir(run_dir).failed_file
    try:
        summary = train_job.run_job(cfg, run_dir)
    except Exception as e:
        # recorded; the sweep goes on with the next job and names every failed one at its end
        # (ValidateFirst.on_multirun_end), without a traceback: that is in failed.txt
        first = (str(e).splitlines() or [""])[0]
        try:
            write_text(failed, f"{type(e).__name__}: {first}\n\n{e}\n\n{traceback.format_exc()}")
        except OSError as why:  # (a read-only job folder: the log line below still names the failure)
            log.error("could not record the failure in %s: %s", failed, why)
        log.error("job %s failed: %s (the other jobs go on)", run_dir, first)
        return {"failed": f"{type(e).__name__}: {first}"}
    failed.unlink(missing_ok=True)
    return summary


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def _app(cfg: DictConfig) -> None:
    main(cfg)


def with_job_name(argv: list[str], name: str) -> list[str]:
    """``argv`` with ``hydra.job.name=<name>`` unless it names one: Hydra names a job after the file of
    its main function (here ``train_app``), while its log file and the trainer's must share one name."""
    if any(a.lstrip("+").startswith("hydra.job.name=") for a in argv):
        return argv
    return [*argv, f"hydra.job.name={name}"]


def cli(argv: list[str] | None = None) -> None:
    """``ssa-train`` and ``python train.py``: an unknown key is said with the valid ones (before Hydra,
    whose own message lists none), then the Hydra app over conf/train.yaml."""
    argv = sys.argv[1:] if argv is None else list(argv)
    message = explain_argv(CONF_DIR, "train", argv)
    if message:
        sys.exit(f"Error: {message}")
    sys.argv = [sys.argv[0], *with_job_name(argv, "train")]
    _app()
