"""Train, then evaluate: the one place a training job runs, for ``python train.py`` (one run or a
sweep's job), the study engine and the tests.

:func:`run` takes a :class:`~ssa_repro.jobs.prepared.PreparedRun`: it holds the run folder (one
writer), trains (``training.trainer.train_run``, which resumes or skips a finished run with the state
read by ``PreparedRun``), then runs the end-of-run evaluations on the saved run, loaded as ``evaluate.py``
loads it and stored like its results (``<run_dir>/eval/<evaluation>/<protocol>/``); their headline
numbers go into ``summary.json``. Each evaluation is logged to the job's W&B run, or to its own when a
finished run is evaluated anew. :func:`run_job` prepares a config under the folder's hold and runs it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig, open_dict

from ssa_repro import tracking
from ssa_repro.core.atomic import ConfigFileError, StorageError, write_json
from ssa_repro.core.checkpoint import CheckpointError
from ssa_repro.core.rundir import RunDir
from ssa_repro.core.runlock import RunLock, RunLocked
from ssa_repro.data.paths import CorpusError
from ssa_repro.evaluation import runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.store import StoreError
from ssa_repro.jobs.prepared import PreparedRun
from ssa_repro.training import distributed
from ssa_repro.training.trainer import train_run
from ssa_repro.training.validate import ConfigError

log = logging.getLogger("ssa_repro.train")

# what a job refuses with one line (train.py: "Error: <message>", exit 1; no traceback)
FAILURES = (
    ConfigError,
    CheckpointError,
    runner.EvaluationError,
    RunLocked,
    StorageError,
    CorpusError,
    ConfigFileError,
    StoreError,
    tracking.TrackingError,
)


def log_evaluation(tracker, summary: dict, name: str) -> None:
    """An evaluation's stored tables and figures, and its headline, to a W&B run."""
    if not tracker.active:
        return
    import pandas as pd  # here: a training process that logs no evaluation does not import it (~0.5 s)

    folder = Path(summary["dir"])
    tables = {t: pd.read_csv(folder / f"{t}.csv") for t in summary.get("tables", [])}
    grid = (
        {**summary["heatmap"], "table": "results", "predictor": "model"} if summary.get("heatmap") else None
    )
    in_dist = (summary.get("in_distribution") or {}).get("model")
    tracker.log_evaluation(
        name, tables, [folder / f for f in summary.get("figures", [])], grid=grid, in_distribution=in_dist
    )


def evaluate_after_training(job: PreparedRun, summary: dict, tracker=None, guard=None) -> dict:
    """The job's end-of-run evaluations on the trained run, logged to the job's W&B run; their headline
    numbers are added to ``summary`` and ``summary.json`` (left untouched when a finished, evaluated run
    is run again)."""
    if not job.evaluations:
        return summary
    run = load_run(job.run_dir, job.device)
    results = {}
    for e in job.evaluations:
        result = runner.evaluate(run, e, between=guard.check if guard is not None else None)
        results[e.name] = {k: result.get(k) for k in ("evaluation", "protocol_id", "dir", "figures")}
        results[e.name].update(
            {k: result[k] for k in ("metric", "in_distribution", "mean", "worst") if k in result}
        )
        log.info("evaluation %s: %s", e.name, json.dumps(result.get("in_distribution")))
        pngs = [f for f in result.get("figures") or [] if str(f).endswith(".png")]
        if pngs:  # where to look first (make demo's heat map)
            log.info("figures: %s", ", ".join(str(Path(result["dir"]) / f) for f in pngs))
        if tracker is not None and tracker.active:
            log_evaluation(tracker, result, e.name)
        elif result.get("cells_computed"):  # a finished run evaluated anew: its own eval run
            with tracking.Tracker.for_evaluation(job.run_dir, job.config, result["protocol"], e.name) as ev:
                log_evaluation(ev, result, e.name)
    updated = {**summary, "evaluations": results}
    if updated != summary:
        write_json(RunDir(job.run_dir).summary_file, updated)
    return updated


def run(job: PreparedRun) -> dict:
    """The prepared job: hold the run folder (one writer; a hold the caller has is shared), train,
    evaluate, log; signals stop it at safe points."""
    main = distributed.rank() == 0
    lock = RunLock(job.run_dir, "train").acquire() if main else None
    tracker = tracking.Tracker.off()
    exit_code = 1
    with distributed.PreemptionGuard() as guard:
        try:
            if main and job.state.finished is None:
                tracker = tracking.Tracker.for_training(job.cfg.logger, job.run_dir, job.config, job.name)
            summary = train_run(job, tracker=tracker, guard=guard)
            if main:
                guard.check()  # a signal that came as training ended: do not start the evaluation
                lock.downgrade("train+evaluate")
                summary = evaluate_after_training(job, summary, tracker, guard)
            exit_code = 0
            return summary
        finally:
            tracker.finish(exit_code)
            if lock is not None:
                lock.release()


def name_sweep_job(cfg: DictConfig, sweep_dir: str | Path, overrides) -> None:
    """A sweep's job in W&B: one group per sweep (the sweep folder's name, unless ``logger.group``
    names one), the job's overrides (``logger.*`` aside) as tags. Set on ``cfg`` before it is
    prepared (``train.py``'s multirun jobs and the seed ensemble's)."""
    with open_dict(cfg):
        if cfg.logger.group is None:
            cfg.logger.group = Path(str(sweep_dir)).name
        tags = [str(o)[: tracking.TAG_LEN] for o in overrides if not str(o).startswith("logger.")]
        cfg.logger.tags = list(dict.fromkeys([*cfg.logger.tags, *tags]))


def run_job(cfg: DictConfig, run_dir: str | Path) -> dict:
    """Prepare ``cfg`` for ``run_dir`` (the folder read under its hold, once checked) and :func:`run`
    it."""
    lock = RunLock(Path(run_dir), "train") if distributed.rank() == 0 else None
    try:
        job = PreparedRun(cfg, run_dir, hold=lock.acquire if lock is not None else None)
        return run(job)
    finally:
        if lock is not None:
            lock.release()
