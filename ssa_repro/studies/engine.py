"""Running a study: every selected job trained (or skipped: finished earlier) and evaluated, in parallel
processes, with its index rows stored as each finishes (studies/index.py); and the dry run that says
what a run would do (:func:`plan`).

Before any work every job's config is checked (:func:`ssa_repro.studies.study.problems`); then the study
holds ``<root>`` with core/runlock.py's lock (a second study process on the same folder is refused,
naming the holder). A job that fails does not stop the others; the study exits non-zero naming each.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
from joblib import Parallel, delayed
from omegaconf import DictConfig

from ssa_repro.config import CONF_DIR
from ssa_repro.core.atomic import storage_advice, write_text
from ssa_repro.core.rundir import RunDir, resolve_device
from ssa_repro.core.runlock import RunLock, RunLocked
from ssa_repro.evaluation import runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.jobs.devices import job_device
from ssa_repro.jobs.train_job import run_job
from ssa_repro.studies.ensembles import train_ensembles
from ssa_repro.studies.index import DONE_KEY, done_key, finished_rows, job_rows_path, store_rows, write_index
from ssa_repro.studies.progress import Progress, wall_clock, workers_stop_on_sigterm
from ssa_repro.studies.study import (
    Job,
    compose,
    default_root,
    eval_steps,
    evaluations,
    jobs,
    load,
    problems,
    ranges,
    select_groups,
)

log = logging.getLogger("ssa_repro.study")

INDEX_EVERY_S = 20.0  # while a study runs, its index.csv (and wall time) is rewritten at most this often
WALL_EVERY_S = 60.0  # and its wall time at least this often (a study killed mid-job keeps its time so far)
ENSEMBLE_MODES = ("auto", "on", "off")  # --ensembles: seed ensembles on CUDA only, always, never


def run(
    name: str,
    root: Path | None = None,
    n_jobs: int = 2,
    extra: tuple[str, ...] = (),
    groups: tuple[str, ...] | None = None,
    tasks: tuple[str, ...] | None = None,
    conf_dir: Path = CONF_DIR,
    ensembles: str = "auto",
    skip: frozenset | set = frozenset(),
    seeds: tuple[int, ...] | None = None,
) -> Path:
    """Run (or resume) every job of study ``name``; returns the study folder (with ``index.csv``). The
    study file and every job's config are checked first: a problem stops the study before anything is
    written. The folder is held for this process (:func:`lock_root`). A job that fails does not stop the
    others: the study runs them all, writes the index of every finished job (:func:`write_index`) and
    ``failures.txt``, and exits non-zero naming each failed job (rerun to retry them). ``groups``: only
    those groups' jobs, ``tasks`` only those tasks', ``seeds`` only those seeds' (the index holds every
    finished job's rows).
    ``ensembles``: train the jobs that differ only in the seed as seed ensembles first
    (:func:`train_ensembles`): ``auto`` (on CUDA), ``on``, ``off``. ``skip``: jobs as (group, task,
    scorer, arch, train_sigma, seed) not to train (a published report holds them: ``--continue-from``)."""
    if ensembles not in ENSEMBLE_MODES:
        raise SystemExit(
            f"Error: --ensembles {ensembles!r} is not allowed; allowed: {', '.join(ENSEMBLE_MODES)}"
        )
    study = load(name, conf_dir)
    root = Path(root or default_root(study.name))
    every, todo = _selected(study, extra, groups, tasks, seeds, skip)
    lock = lock_root(root, study.name)
    try:
        with storage_advice("--root <another folder>"):
            if ensembles == "on" or (ensembles == "auto" and _on_cuda(todo)):
                train_ensembles(study.name, root, todo, n_jobs)
            _run(study, root, todo, every, n_jobs)
    finally:
        lock.release()
    return root


def _selected(study, extra, groups, tasks, seeds, skip) -> tuple[list[Job], list[Job]]:
    """(every job of the study, the jobs to run): ``groups``/``tasks``/``seeds`` selected, the published
    ones (``skip``) left out, every config checked (a problem stops here, before anything is written)."""
    every = jobs(study, tuple(extra))
    todo = select_groups(every, groups, study, tasks, seeds)
    if skip:  # --continue-from: the jobs a published report already holds are not trained again
        n = len(todo)
        todo = [j for j in todo if (j.group, j.task, j.scorer, j.arch, j.train_sigma, j.seed) not in skip]
        log.info(
            "study %s: %d jobs published already (--continue-from): not trained again",
            study.name,
            n - len(todo),
        )
    found = problems(study, todo)
    if found:
        raise SystemExit(f"Error: study {study.name}: invalid job configs:\n  - " + "\n  - ".join(found))
    return every, todo


def plan(
    name: str,
    root: Path | None = None,
    extra: tuple[str, ...] = (),
    groups: tuple[str, ...] | None = None,
    tasks: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    conf_dir: Path = CONF_DIR,
    skip: frozenset | set = frozenset(),
) -> str:
    """What :func:`run` would do with the same arguments (``ssa-study --dry-run``), as a table: per
    setting (group, task, scorer, arch, σ) its seeds and how many of its jobs are finished in ``root``
    (their stored rows reused), trained with evaluations still due (``summary.json``), stopped while
    training (a checkpoint: they resume), or still to train. The same
    selection and checks as :func:`run`; nothing is written (no lock, no folder)."""
    study = load(name, conf_dir)
    root = Path(root or default_root(study.name))
    _, todo = _selected(study, extra, groups, tasks, seeds, skip)
    rows = []
    for job in todo:
        run_dir = root / "runs" / job.group / job.name
        cfg = compose(job)
        key = done_key(cfg, study, evaluations(study, str(cfg.task.name), job.group), run_dir)
        record = job_rows_path(root, job.group, job.name).with_suffix(".key")
        if key is not None and record.is_file() and record.read_text().strip() == key:
            state = "finished"
        elif RunDir(run_dir).summary_file.is_file():  # training ended (summary.json)
            state = "evaluate"
        elif RunDir(run_dir).last_checkpoint.is_file():  # stopped mid-training: resumes from here
            state = "resume"
        else:
            state = "train"
        rows.append({**asdict(job), "state": state})
    head = f"study {study.name}: {len(todo)} jobs in {root}"
    if not rows:
        return head + ": nothing to run (dry run: nothing written)"
    df = pd.DataFrame(rows)
    keys = ["group", "task", "scorer", "arch", "train_sigma"]
    table = (
        df.groupby(keys, sort=False)
        .agg(
            seeds=("seed", lambda x: ranges(sorted(x))),
            jobs=("seed", "size"),
            finished=("state", lambda x: int((x == "finished").sum())),
            evaluate=("state", lambda x: int((x == "evaluate").sum())),
            resume=("state", lambda x: int((x == "resume").sum())),
            train=("state", lambda x: int((x == "train").sum())),
        )
        .reset_index()
    )
    counts = df.state.value_counts()
    return "\n".join(
        [
            head + f": {counts.get('train', 0)} to train, {counts.get('resume', 0)} to resume training, "
            f"{counts.get('evaluate', 0)} trained with evaluations due, {counts.get('finished', 0)} finished "
            "(their rows reused)",
            table.to_string(index=False),
            "dry run: nothing written",
        ]
    )


def _run(study: DictConfig, root: Path, todo: list[Job], every: list[Job], n_jobs: int) -> None:
    log.info("study %s: %d jobs in %s, %d at a time", study.name, len(todo), root, n_jobs)
    t0 = time.perf_counter()
    write_index(root, every)  # an index.csv of before index.d: its rows split into index.d
    wall = root / "wall_seconds.txt"  # one line per invocation (a resumed study adds one)
    walls = wall.read_text() if wall.exists() else ""

    def write_wall() -> None:
        """This invocation's wall time so far: its line is rewritten each time."""
        write_text(wall, walls + f"{time.perf_counter() - t0:.0f}\n")

    failed: list[str] = []
    last_write = time.monotonic()
    progress = Progress(study.name, len(todo))
    try:
        with workers_stop_on_sigterm(), wall_clock(write_wall, WALL_EVERY_S):
            # "generator": results in job order as they come, so the index grows while the study runs
            results = Parallel(n_jobs=n_jobs, backend="loky", verbose=0, return_as="generator")(
                delayed(run_one_or_fail)(job, study, root, i, n_jobs) for i, job in enumerate(todo)
            )
            for job, (rows, why) in zip(todo, results):
                store_rows(root, job, rows)
                progress.done(job, why)
                if why:
                    failed.append(why)
                if time.monotonic() - last_write > INDEX_EVERY_S and rows:
                    write_index(root, every)
                    write_wall()
                    last_write = time.monotonic()
    finally:  # finished, failed or stopped: index what finished, so the report can use it
        progress.close()
        write_index(root, every)
        write_wall()
    write_text(root / "failures.txt", "".join(f"{why}\n" for why in failed))  # empty: none this time
    if failed:
        raise SystemExit(
            f"Error: study {study.name}: {len(failed)} of {len(todo)} jobs failed (the others finished; "
            f"rerun the same command to retry them; listed in {root / 'failures.txt'}):\n  - "
            + "\n  - ".join(failed)
        )


def run_one(job: Job, study: DictConfig, root: Path, index: int, n_jobs: int) -> list[dict]:
    """Train (or skip) job number ``index`` of ``n_jobs`` at once, then its evaluations; rows of the
    index (one per evaluation). The job takes its own GPU and its share of the cores (jobs/devices.py).
    A job finished by an earlier call whose record still holds (:func:`done_key`) returns its stored
    rows without loading its run: a resumed study skips its finished jobs in milliseconds each."""
    run_dir = root / "runs" / job.group / job.name
    cfg = compose(job)
    chosen = evaluations(study, str(cfg.task.name), job.group)
    rows = finished_rows(root, job, done_key(cfg, study, chosen, run_dir))
    if rows is not None:
        return rows
    with job_device(index, n_jobs, cfg.device):
        rows = _train_and_evaluate(job, study, cfg, run_dir)
    key = done_key(cfg, study, chosen, run_dir)  # of the run as the evaluations left it
    return [{**r, DONE_KEY: key} for r in rows]


def run_one_or_fail(
    job: Job, study: DictConfig, root: Path, index: int, n_jobs: int
) -> tuple[list[dict], str]:
    """``run_one``, with a job's failure returned as one line instead of raised, so that one bad job
    (a damaged checkpoint, a diverged run) does not stop the others; an interrupt still stops all."""
    try:
        return run_one(job, study, root, index, n_jobs), ""
    except Exception as e:  # noqa: BLE001  (reported with the job's name, and the study exits non-zero)
        log.error("study job %s/%s failed: %s: %s", job.group, job.name, type(e).__name__, e)
        return [], f"{job.group}/{job.name}: {type(e).__name__}: {e}"


def _train_and_evaluate(job: Job, study: DictConfig, cfg: DictConfig, run_dir: Path) -> list[dict]:
    t0 = time.perf_counter()
    summary = run_job(cfg, run_dir)
    trained = time.perf_counter() - t0
    # Evaluated where it trained (``device=auto``: the job's GPU when there is one, else the CPU). On a
    # GPU machine each job has one CPU thread (jobs/devices.py), too few for Zorro's PLL or LM-eval.
    device = resolve_device(cfg.device)
    run = load_run(run_dir, device)
    task_name = str(cfg.task.name)
    runs = {None: run}  # by checkpoint step (None: the last)
    rows = []
    for key, ecfg in evaluations(study, task_name, job.group).items():
        t1 = time.perf_counter()
        steps = eval_steps(study, key)
        for step in steps:  # cells are stored per step: one protocol, a learning curve
            if step not in runs:
                runs[step] = load_run(run_dir, device, step)
            result = runner.evaluate(runs[step], ecfg)
        rows.append(
            {
                **asdict(job),
                "job": job.name,
                "run_dir": str(run_dir),
                "evaluation": key,
                "eval": result["evaluation"],
                "protocol_id": result["protocol_id"],
                "steps": " ".join(str(s if s is not None else run.step) for s in steps),
                "final_loss": summary.get("final_loss"),
                "train_seconds": trained,
                "eval_seconds": time.perf_counter() - t1,
            }
        )
    return [{k: v for k, v in r.items() if k != "overrides"} for r in rows]


def lock_root(root: Path, name: str) -> RunLock:
    """Hold ``root`` for this study process (core/runlock.py's lock, role ``study``): a second study
    process on the same folder is refused naming the holder. A folder that cannot be written, or a file
    in its place, stops here in one line."""
    if root.exists() and not root.is_dir():
        raise SystemExit(f"Error: study {name}: --root {root} is a file, not a folder; choose a folder")
    try:
        with storage_advice("--root <another folder>"):
            return RunLock(root, role=f"study {name}", hint="use another --root").acquire()
    except RunLocked as e:
        raise SystemExit(
            f"Error: study {name}: {root} is in use by another study process ({e.who}); wait for it to "
            "finish, stop it, or use another --root"
        ) from None
    except OSError as e:
        raise SystemExit(f"Error: study {name}: cannot write its output folder: {e}") from None


def _on_cuda(todo: list[Job]) -> bool:
    return bool(todo) and resolve_device(compose(todo[0]).device).type == "cuda"
