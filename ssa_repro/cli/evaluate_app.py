"""``python evaluate.py run_dir=R [eval=<name>] [eval.key=value ...]``: one evaluation of one run.

Checks first (:class:`CheckRunFirst`, before Hydra creates its log folder inside the run): the run
folder, unknown keys and the evaluation against the run's config; in a multirun every job before the
first one starts. Then the evaluation (``evaluation.runner.evaluate``): stored cells are reused, the
missing ones computed and stored, figures and summary redrawn from every stored cell. Job logs go to
``<run_dir>/eval/logs/`` (one run) or the sweep folder ``ssa_repro/cli/sweeps.py`` names (several).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from ssa_repro import tracking
from ssa_repro.cli.checkfirst import CheckFirst
from ssa_repro.cli.train_app import with_job_name
from ssa_repro.config import CONF_DIR
from ssa_repro.core import atomic
from ssa_repro.core.atomic import StorageError
from ssa_repro.core.checkpoint import CheckpointError
from ssa_repro.core.rundir import RunDir, RunFolderError, device_problems, plain, resolve_device
from ssa_repro.core.runlock import RunLock, RunLocked
from ssa_repro.data.paths import CorpusError
from ssa_repro.evaluation import runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.registry import Evaluator
from ssa_repro.evaluation.store import StoreError
from ssa_repro.jobs.keys import explain_argv, unknown_keys
from ssa_repro.jobs.train_job import log_evaluation
from ssa_repro.training import distributed


class Checked:
    """One evaluation, checked before loading the model: ``Checked(cfg)`` reads the run folder, its
    config over the schema, and builds the evaluator (with the run's task); ``problems`` lists what is
    wrong (the folder, keys, device, step, the evaluation for this run). The evaluation goes on with
    these, so nothing is read or built twice, and ``cfg`` is not read again."""

    def __init__(self, cfg: DictConfig):
        self.run = RunDir(cfg.run_dir)
        self.name, self.step, self.device = str(cfg.eval.name), cfg.step, cfg.device
        self.run_cfg: DictConfig | None = None
        self.evaluator: Evaluator | None = None
        self.problems: list[str] = self.run.problems()
        if self.problems:
            return
        try:
            self.run_cfg = self.run.config()
        except RunFolderError as e:
            self.problems = [str(e)]
            return
        self.evaluator, found = runner.build(cfg.eval, self.run_cfg)
        self.problems = (
            device_problems(cfg.device) + unknown_keys(cfg) + step_problems(self.run, cfg.step) + found
        )


def problems(cfg: DictConfig) -> list[str]:
    """:class:`Checked`'s problems (a sweep checks every job before the first starts)."""
    return Checked(cfg).problems


def step_problems(run: RunDir, step: int | None) -> list[str]:
    """``step=N`` names a checkpoint the folder keeps (numbered, or the finished run's last)."""
    if step is None:
        return []
    finished = (run.summary() or {}).get("steps")
    kept = run.kept_steps()
    if step in kept or step == finished:
        return []
    return [
        f"step={step}: {run.path} keeps checkpoints at steps {kept or 'none'}"
        + (f" and its last at {finished}" if finished is not None else "")
        + " (train.keep_at sets them before training); leave step out for the last checkpoint"
    ]


# what evaluate.py can change when its storage fails: it writes into the run folder (hydra.run.dir
# would only move its log folder)
STORAGE_ADVICE = (
    "evaluate.py writes its results into the run folder: make {run_dir} writable, or copy the run "
    "folder somewhere writable and evaluate the copy (run_dir=<the copy>)"
)


def _fail(found: list[str], run_dir) -> SystemExit:
    return SystemExit("Error: " + "\n  - ".join([f"cannot evaluate {run_dir}:", *found]))


def _lock(checked: Checked) -> RunLock:
    """A shared hold on the run folder: evaluations may run side by side, never beside a training."""
    return RunLock(
        checked.run.path,
        f"evaluate:{checked.name}",
        shared=True,
        hint="evaluate it once the training has ended",
    ).acquire()


class CheckRunFirst(CheckFirst):
    """Check before Hydra creates anything (a typo in run_dir must not create folders), then hold
    the run folder before Hydra writes its log folder into it."""

    def problems(self, cfg: DictConfig) -> list[str]:
        return problems(cfg)

    def prepare(self, cfg: DictConfig, config: DictConfig) -> Checked:
        checked = Checked(cfg)
        if checked.problems:
            raise _fail(checked.problems, checked.run.path)
        try:
            with atomic.storage_advice(STORAGE_ADVICE.format(run_dir=checked.run.path)):
                self.lock = _lock(checked)
        except Exception as e:  # noqa: BLE001  (Hydra would only warn and run the job: stop here)
            raise SystemExit(f"Error: cannot evaluate {checked.run.path}: {e}") from None
        return checked

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check_sweep(config)


def main(cfg: DictConfig) -> dict:
    checked = CheckFirst.take() or Checked(cfg)  # checked by CheckRunFirst, or here
    if checked.problems:
        raise _fail(checked.problems, checked.run.path)
    ev = checked.evaluator
    try:
        with (
            _lock(checked),
            atomic.storage_advice(STORAGE_ADVICE.format(run_dir=checked.run.path)),
            distributed.exit_quietly_on_interrupt(),
            distributed.PreemptionGuard() as guard,
        ):
            device = resolve_device(checked.device)
            run = load_run(checked.run, device, checked.step, cfg=checked.run_cfg, task=ev.task)
            summary = runner.run_evaluator(run, ev, between=guard.check)
            if summary.get("cells_computed"):  # its own W&B run, in the training run's group
                with tracking.Tracker.for_evaluation(
                    run.run_dir, plain(run.cfg), summary["protocol"], summary["evaluation"]
                ) as tracker:
                    log_evaluation(tracker, summary, summary["evaluation"])
            return summary
    except (
        RunFolderError,
        CheckpointError,
        runner.EvaluationError,
        RunLocked,
        StorageError,
        StoreError,
        CorpusError,
    ) as e:
        raise SystemExit(f"Error: {e}") from None


HELP_FLAGS = (
    "--help",
    "-h",
    "--hydra-help",
    "--info",
    "--cfg",
    "-c",
    "--resolve",
    "--shell-completion",
    "-sc",
)


def quote_run_dir(argv: list[str]) -> list[str]:
    """``argv`` with a ``run_dir=`` value quoted for Hydra's grammar when it names a folder as a whole,
    or holds ``=`` (which the grammar never takes bare): a sweep's job folder, printed as
    ``.../scorer=ssa,seed=0``, passed back as it was printed would otherwise be read as a sweep over
    ``,`` or refused at ``=``. A value already quoted, or a sweep over folders that exist one by one, is
    left as it is."""
    out = []
    for a in argv:
        key, eq, value = a.partition("=")
        bare = value and value[0] not in "'\"" and ("=" in value or Path(value).is_dir())
        if eq and key.lstrip("+") == "run_dir" and bare:
            quote = "'" if "'" not in value else '"'
            a = f"{key}={quote}{value}{quote}"
        out.append(a)
    return out


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="evaluate")
def _app(cfg: DictConfig) -> None:
    main(cfg)


def cli(argv: list[str] | None = None) -> None:
    """``ssa-evaluate`` and ``python evaluate.py``: the run to evaluate must be named (``run_dir=``) unless
    only help or the config is asked for; an unknown key is said with the valid ones; then the Hydra app
    over conf/evaluate.yaml."""
    argv = quote_run_dir(sys.argv[1:] if argv is None else list(argv))
    names_run = any(a.split("=", 1)[0].lstrip("+") == "run_dir" for a in argv if "=" in a)
    asks_help = any(a.split("=", 1)[0] in HELP_FLAGS for a in argv)
    if not names_run and not asks_help:
        command = "python evaluate.py" if sys.argv[0].endswith(".py") else "ssa-evaluate"
        sys.exit(f"Error: give the run to evaluate: {command} run_dir=<run folder> [eval=<name>]")
    message = explain_argv(CONF_DIR, "evaluate", argv)
    if message:
        sys.exit(f"Error: {message}")
    sys.argv = [sys.argv[0], *with_job_name(argv, "evaluate")]
    _app()
