"""Glue between Hydra and the plain functions: the run folder, and checks before Hydra writes.

Multirun (sweeps): each job's folder is ``<hydra.sweep.dir>/<overridden keys>,seed=<seed>`` (the
``ssa_job_dir`` resolver below, from ``hydra.job.override_dirname`` minus the keys excluded in
``conf/train.yaml``), so no two jobs share a folder and a re-run of the same sweep finds the same
folders: finished jobs are skipped, interrupted ones resume from their checkpoints. A job that fails
is recorded in ``<job>/failed.txt`` and logged; the other jobs go on (Hydra reports the failure and
exits non-zero at the end). Each job is its own W&B run, grouped by the sweep folder's name and tagged
with the job's overrides.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from ssa_repro import config as _config  # noqa: F401  (stores the schemas)
from ssa_repro.training.checkpoint import CheckpointError
from ssa_repro.validate import ConfigError

log = logging.getLogger("ssa_repro.train")
FAILURES = (ConfigError, CheckpointError)
MAX_DIR = 200  # characters of a job folder name before the rest is replaced by a hash
TAG_LEN = 64  # W&B's limit for one tag


SWEEP_KEYS_ENV = "SSA_SWEEP_KEYS"  # the keys that vary across the sweep's jobs (set before jobs start)


def job_dir(overrides, exclude, seed) -> str:
    """A sweep job's folder name from its overrides (``hydra.overrides.task``): ``key=value`` joined by
    ``,`` without the keys in ``exclude``; the keys that vary across the sweep first (so they survive a
    cut), then the others, then ``seed=<seed>`` always (seeds never share a folder). Characters that
    would nest folders or need quoting become ``_``; past MAX_DIR characters the overrides are cut and
    ended with a hash of them all (the seed stays), so names stay unique. The same command gives the
    same names."""
    varying = [k for k in os.environ.get(SWEEP_KEYS_ENV, "").split(",") if k]
    items = []
    for o in overrides or []:
        key = str(o).split("=", 1)[0].lstrip("+~")
        if key not in set(exclude or []):  # sweep/size=3L2AH is shown as size=3L2AH
            items.append((key not in varying, str(o).lstrip("+~").removeprefix("sweep/")))
    clean = lambda text: re.sub(r"[/\\\s'\"*?]", "_", text)  # noqa: E731
    body, tail = clean(",".join(o for _, o in sorted(items))), clean(f"seed={seed}")
    if len(body) + len(tail) + 1 > MAX_DIR:  # cut the overrides, keep the seed
        digest = hashlib.sha1(body.encode()).hexdigest()[:10]
        body = body[: MAX_DIR - len(tail) - 12] + "~" + digest
    name = f"{body},{tail}" if body else tail
    return name


OmegaConf.register_new_resolver("ssa_job_dir", job_dir, replace=True)


class JobFailed(RuntimeError):
    """A multirun job that stopped with an error (the other jobs go on)."""


def _sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The override list of every job a basic-sweeper multirun will launch."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = list(config.hydra.overrides.task)
    params = config.hydra.sweeper.get("params") or {}
    args += [f"{k}={v}" for k, v in params.items()]
    parsed = OverridesParser.create().parse_overrides(args)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


class ValidateFirst(Callback):
    """Check the config, and that the run folder (if it exists) holds a run this config may continue,
    before Hydra creates the folder or rewrites its ``.hydra/``: a bad value never touches a run. In a
    multirun every job's config is checked before the first job starts."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ssa_repro.training.distributed import world_size
        from ssa_repro.training.trainer import preflight

        if world_size() > 1 and not any(
            str(o).startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra
        ):
            raise SystemExit(
                f"Error: {world_size()} processes (torchrun) need one run folder fixed before they start: "
                "add hydra.run.dir=<folder>, or start with `python -m ssa_repro.launch --nproc N ...`, "
                "which does (Hydra resolves ${now:...} in each process separately)"
            )
        try:
            preflight(config, Path(str(config.hydra.run.dir)))
        except FAILURES as e:
            raise SystemExit(f"Error: {e}") from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.global_hydra import GlobalHydra

        from ssa_repro.training.distributed import world_size
        from ssa_repro.validate import check

        if world_size() > 1:
            raise SystemExit(
                "Error: a multirun cannot run under torchrun; start each data-parallel run on its own "
                "(python -m ssa_repro.launch --nproc N ...) or sweep with single-process jobs"
            )
        if "basic" not in str(config.hydra.sweeper.get("_target_", "")).lower():
            return  # other sweepers choose jobs as they go; each job is still checked when it starts
        loader = GlobalHydra.instance().config_loader()
        jobs = _sweep_jobs(config)
        values: dict[str, set[str]] = {}
        for overrides in jobs:
            for o in overrides:
                key, _, value = o.lstrip("+~").partition("=")
                values.setdefault(key, set()).add(value)
        varying = sorted(k for k, v in values.items() if len(v) > 1 or len(jobs) == 1)
        os.environ[SWEEP_KEYS_ENV] = ",".join(k for k in varying if k != "seed")  # first in job folders
        folders: dict[str, list[str]] = {}
        for overrides in jobs:
            job = loader.load_sweep_config(config, overrides)
            try:
                check(job)
            except ConfigError as e:
                raise SystemExit(f"Error in sweep job {' '.join(overrides)}: {e}") from None
            folders.setdefault(str(job.hydra.sweep.subdir), []).append(" ".join(overrides))
        shared = {d: jobs for d, jobs in folders.items() if len(jobs) > 1}
        if shared:
            raise SystemExit(
                "Error: sweep jobs would share a folder (their differing keys are excluded from "
                "hydra.job.config.override_dirname.exclude_keys):\n  - "
                + "\n  - ".join(f"{d}: {' | '.join(jobs)}" for d, jobs in shared.items())
            )
        log.info("sweep: %d jobs into %s", len(jobs), config.hydra.sweep.dir)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        if getattr(job_return, "status", None) == JobStatus.FAILED and config.hydra.mode == RunMode.MULTIRUN:
            log.error(
                "job %s failed: %s (the other jobs go on)",
                config.hydra.runtime.output_dir,
                str(job_return._return_value).splitlines()[0] if job_return._return_value else "",
            )


class EvaluateAfterTraining(Callback):
    """Run ``evaluate.py``'s evaluations on each job's run folder when its training succeeded, in the
    job's own process, so a sweep's full grids exist without a second pass:
    ``hydra.callbacks.evaluate.evals=[default]`` (the task's paper grid; or ``linear_grid``,
    ``quantifier_grid``, ``deviant``, ...), ``hydra.callbacks.evaluate.overrides=[eval.n_samples=10]``
    for every one of them. Off by default (``evals: []``): the end-of-run ``evaluation`` grid
    (``eval/quick/``) is always there. A finished evaluation is cached (re-runs are cheap); one that
    fails is logged and leaves the training results as they are."""

    def __init__(self, evals=(), overrides=()):
        self.evals, self.overrides = list(evals or []), list(overrides or [])

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.utils import JobStatus

        if not self.evals or getattr(job_return, "status", None) != JobStatus.COMPLETED:
            return
        from ssa_repro.evaluation import app

        run_dir = Path(config.hydra.runtime.output_dir)
        loader = GlobalHydra.instance().config_loader()
        for name in self.evals:
            try:
                cfg = loader.load_configuration(
                    "evaluate",
                    overrides=[
                        f"run_dir='{run_dir}'",
                        f"eval={name}",
                        *self.overrides,
                    ],  # quoted: = and , in names
                    run_mode=RunMode.RUN,
                )
                with open_dict(cfg):
                    del cfg["hydra"]
                log.info("evaluating %s: eval=%s", run_dir, name)
                app.main(cfg)
            except (Exception, SystemExit) as e:  # noqa: BLE001  (the job's training results stay)
                log.error("evaluation %s of %s failed: %s", name, run_dir, e)


def main(cfg: DictConfig) -> dict:
    from ssa_repro.training.trainer import TrainingDiverged, train

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode != RunMode.MULTIRUN:
        try:
            return train(cfg, run_dir)
        except FAILURES as e:
            raise SystemExit(f"Error: {e}") from None
        except TrainingDiverged as e:
            log.error("%s", e)
            raise SystemExit(f"Error: {e}") from None

    with open_dict(cfg):
        if cfg.logger.group is None:  # one W&B group per sweep
            cfg.logger.group = Path(hc.sweep.dir).name
        tags = [str(o)[:TAG_LEN] for o in hc.overrides.task if not str(o).startswith("logger.")]
        cfg.logger.tags = list(dict.fromkeys([*cfg.logger.tags, *tags]))
    failed = run_dir / "failed.txt"
    try:
        summary = train(cfg, run_dir)
    except Exception as e:
        # a normal exception (not SystemExit): Hydra records it and the sweep goes on with the next job
        if run_dir.is_dir():
            failed.write_text(f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}")
        if isinstance(e, (*FAILURES, TrainingDiverged)):
            raise JobFailed(f"{run_dir}: {e}") from None
        raise
    failed.unlink(missing_ok=True)
    return summary
