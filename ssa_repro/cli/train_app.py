"""``python train.py``: one training job = train, then the end-of-run evaluations, in the run folder.

Checks first (:class:`ValidateFirst`, a Hydra callback that runs before Hydra creates or writes the
run folder): keys the schemas do not know, every config value, the end-of-run evaluations against the
config, and whether the folder holds a run this config may continue. In a multirun every job is
checked before the first one starts, the job list is written to ``<sweep dir>/jobs.yaml`` and jobs that
would share a folder are refused (``ssa_repro/cli/sweeps.py``).

The job (:func:`main`): ``training.trainer.train`` (which resumes, or skips a finished run), then
``evaluation.quick`` with the ``evaluation`` keys and each evaluation of ``evaluation.also``, stored
like ``python evaluate.py``'s (``<run_dir>/eval/<evaluation>/<protocol>/``); their headline numbers go
into ``summary.json``. In a multirun a job that fails is recorded in ``<job>/failed.txt`` and the
other jobs go on; the sweep ends with one line per failed job and exits 1 (no traceback); each job is
its own W&B run, grouped by the sweep folder's name and tagged with the job's overrides.
"""

from __future__ import annotations

import json
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
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from ssa_repro.cli import sweeps
from ssa_repro.cli.keys import explain_argv, unknown_keys
from ssa_repro.config import CONF_DIR
from ssa_repro.core import tracking
from ssa_repro.core.atomic import ConfigFileError, StorageError, write_json, write_text
from ssa_repro.core.checkpoint import CheckpointError
from ssa_repro.core.rundir import RunDir, plain, resolve_device
from ssa_repro.core.runlock import RunLock, RunLocked
from ssa_repro.data.paths import CorpusError
from ssa_repro.evaluation import EVALUATORS, runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import QuickConfig
from ssa_repro.evaluation.store import StoreError
from ssa_repro.training import distributed, memory, run_state, validate
from ssa_repro.training.checkpointer import TrainingDiverged
from ssa_repro.training.trainer import run_name, train
from ssa_repro.training.validate import ConfigError

log = logging.getLogger("ssa_repro.train")
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


def check(cfg: DictConfig, run_dir: str | Path) -> run_state.RunState:
    """:func:`problems` as a ConfigError, then the run folder's state (``run_state.prepare``)."""
    found = problems(cfg)
    if found:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(found))
    return run_state.prepare(cfg, run_dir)


class ValidateFirst(Callback):
    """Check the config, and that the run folder (if it exists) holds a run this config may continue,
    before Hydra creates the folder or rewrites its ``.hydra/``: a bad value never touches a run. In a
    multirun every job's config is checked before the first job starts."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if distributed.world_size() > 1 and not any(
            str(o).startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra
        ):
            raise SystemExit(
                f"Error: {distributed.world_size()} processes (torchrun) need one run folder fixed before "
                "they start: add hydra.run.dir=<folder>, or start with `python -m ssa_repro.launch --nproc "
                "N ...`, which does (Hydra resolves ${now:...} in each process separately)"
            )
        try:  # the folder's name first: a value it cannot hold is refused naming its key (resolvers.run_name)
            run_dir = Path(str(config.hydra.run.dir))
            found = problems(config)
        except Exception as e:  # noqa: BLE001  (Hydra would only warn and run the job: stop here)
            raise SystemExit(f"Error: {type(e).__name__}: {e}") from None
        if found:
            raise SystemExit("Error: invalid config:\n  - " + "\n  - ".join(found))
        try:
            if distributed.rank() == 0:  # one writer from here on, before Hydra writes .hydra/ into it
                self.lock = RunLock(run_dir, "train").acquire()
            run_state.prepare(config, run_dir)  # what the folder holds (read under the lock)
        except Exception as e:  # noqa: BLE001  (FAILURES, and any other: Hydra would only warn)
            self.on_run_end(config)  # refused: leave the folder as it was (no holder record)
            raise SystemExit(f"Error: {e}") from None

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        lock = getattr(self, "lock", None)
        if lock is not None:  # (the process ending would release it too; this also removes its record)
            lock.release()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_started, self.sweep_size = time.time(), None  # (failed.txt written since: this sweep's)
        if distributed.world_size() > 1:
            raise SystemExit(
                "Error: a multirun cannot run under torchrun; start each data-parallel run on its own "
                "(python -m ssa_repro.launch --nproc N ...) or sweep with single-process jobs"
            )
        if "basic" not in str(config.hydra.sweeper.get("_target_", "")).lower():
            return  # other sweepers choose jobs as they go; each job is still checked when it starts
        loader = GlobalHydra.instance().config_loader()
        jobs = sweeps.sweep_jobs(config, loader)
        values: dict[str, set[str]] = {}
        for overrides in jobs:
            for o in overrides:
                key, _, value = o.lstrip("+~").partition("=")
                values.setdefault(key, set()).add(value)
        varying = sorted(k for k, v in values.items() if len(v) > 1 or len(jobs) == 1)
        os.environ[sweeps.SWEEP_KEYS_ENV] = ",".join(k for k in varying if k != "seed")  # first in names
        folders: dict[str, list[str]] = {}
        for overrides in jobs:
            job = loader.load_sweep_config(config, overrides)
            found = problems(job)
            if found:
                raise SystemExit(f"Error in sweep job {' '.join(overrides)}:\n  - " + "\n  - ".join(found))
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


def evaluate_after_training(cfg: DictConfig, run_dir: Path, summary: dict, tracker=None, guard=None) -> dict:
    """The end-of-run evaluations on the trained run (loaded from its folder, as ``evaluate.py``
    would), logged to the job's W&B run; their headline numbers are added to ``summary`` and
    ``summary.json`` (left untouched when a finished, evaluated run is run again)."""
    evals = end_of_run_evals(cfg)
    if not evals:
        return summary
    run = load_run(run_dir, resolve_device(cfg.device))
    results = {}
    for e in evals:
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
            with tracking.Tracker.for_evaluation(run_dir, plain(cfg), result["protocol"], e.name) as ev:
                log_evaluation(ev, result, e.name)
    updated = {**summary, "evaluations": results}
    if updated != summary:
        write_json(RunDir(run_dir).summary_file, updated)
    return updated


def run_job(cfg: DictConfig, run_dir: str | Path) -> dict:
    """The job: hold the run folder (one writer), train, evaluate, log; signals stop it at safe points."""
    run_dir = Path(run_dir)
    main = distributed.rank() == 0
    lock = RunLock(run_dir, "train").acquire() if main else None
    tracker = tracking.Tracker.off()
    exit_code = 1
    with distributed.PreemptionGuard() as guard:
        try:
            prepared = run_state.prepare(cfg, run_dir)  # read once, under the lock
            if main and prepared.finished is None:
                tracker = tracking.Tracker.for_training(cfg.logger, run_dir, plain(cfg), run_name(cfg))
            summary = train(cfg, run_dir, tracker=tracker, guard=guard, prepared=prepared)
            if main:
                guard.check()  # a signal that came as training ended: do not start the evaluation
                lock.downgrade("train+evaluate")
                summary = evaluate_after_training(cfg, run_dir, summary, tracker, guard)
            exit_code = 0
            return summary
        finally:
            tracker.finish(exit_code)
            if lock is not None:
                lock.release()


def main(cfg: DictConfig) -> dict:
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode != RunMode.MULTIRUN:
        try:
            with distributed.exit_quietly_on_interrupt():
                return run_job(cfg, run_dir)
        except (*FAILURES, TrainingDiverged) as e:
            log.error("%s", e)
            raise SystemExit(f"Error: {e}") from None

    with open_dict(cfg):
        if cfg.logger.group is None:  # one W&B group per sweep
            cfg.logger.group = Path(hc.sweep.dir).name
        tags = [str(o)[: tracking.TAG_LEN] for o in hc.overrides.task if not str(o).startswith("logger.")]
        cfg.logger.tags = list(dict.fromkeys([*cfg.logger.tags, *tags]))
    failed = RunDir(run_dir).failed_file
    try:
        summary = run_job(cfg, run_dir)
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
