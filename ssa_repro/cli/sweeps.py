"""Sweeps (Hydra multiruns): job folder names, the list of jobs, and where job logs go.

Each training job's folder is ``<hydra.sweep.dir>/<overridden keys>,seed=<seed>`` (``job_dir``, the
``ssa_job_dir`` resolver), so no two jobs share a folder and a re-run of the same sweep finds the same
folders: finished jobs are skipped, interrupted ones resume. Before the first job starts the sweep
writes its job list, ``<sweep dir>/jobs.yaml`` (one list of overrides per job, in launch order), which
``scripts/compare.py`` reads to name the jobs that have not started.

A job that fails leaves ``<job>/failed.txt`` (the error and its traceback) and the other jobs go on;
at the end the sweep says which jobs failed, one line each (:func:`failures`), and exits 1 without a
traceback.

An evaluation multirun (``python evaluate.py -m run_dir=A,B eval.sigmas=[1],[2]``) puts its job logs in
the run folder (``<run_dir>/eval/sweeps/<time>``) when every job evaluates one run, else in a folder
``eval_sweeps/<time>`` beside the runs (their common parent): never in the working directory.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from ssa_repro.core.atomic import write_text
from ssa_repro.core.rundir import FAILED, JOBS, RunDir
from ssa_repro.reports.runs import job_dirs
from ssa_repro.resolvers import MAX_DIR, SWEEP_KEYS_ENV, eval_sweep_dir, job_dir  # noqa: F401


def sweep_jobs(config, loader=None) -> list[list[str]]:
    """The override list of every job a basic-sweeper multirun launches: the cartesian product of the
    command line's and ``hydra.sweeper.params``' sweep values (Hydra's public override parser)."""
    args = list(config.hydra.overrides.task)
    params = config.hydra.sweeper.get("params") or {}
    args += [f"{k}={v}" for k, v in params.items()]
    choices = {}
    for override in OverridesParser.create().parse_overrides(args):
        key = override.get_key_element()
        if override.is_sweep_override():
            override.config_loader = loader  # glob(...) over config groups needs it
            choices[key] = [f"{key}={v}" for v in override.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*choices.values())]


def write_jobs(sweep_dir: str | Path, jobs: list[list[str]]) -> Path:
    """``<sweep dir>/jobs.yaml``: every job's overrides (atomic; the same sweep writes the same list)."""
    path = Path(sweep_dir) / JOBS
    write_text(path, yaml.safe_dump([list(j) for j in jobs], sort_keys=False))
    return path


def failures(sweep_dir: str | Path, since: float) -> list[str]:
    """``<job folder>: <why>`` for every job of the sweep whose ``failed.txt`` was written at or after
    ``since`` (a time.time(): this invocation's failures, not a failure an earlier run left behind)."""
    out = []
    for job in job_dirs(Path(sweep_dir)):
        path = RunDir(job).failed_file
        try:
            if path.stat().st_mtime < since:
                continue
            first = (path.read_text(errors="replace").splitlines() or ["(no reason recorded)"])[0]
        except FileNotFoundError:
            continue
        out.append(f"{job}: {first}")
    return out


def failure_message(lines: list[str], n_jobs: int | None) -> str:
    """The sweep's last words when jobs failed: how many, then one line per failed job."""
    of = f" of {n_jobs}" if n_jobs else ""
    jobs = "jobs" if (n_jobs or len(lines)) != 1 else "job"
    return (
        f"Error: {len(lines)}{of} sweep {jobs} failed (the others went on; each job's {FAILED} holds the "
        "traceback; run the sweep again to retry them):\n  - " + "\n  - ".join(lines)
    )
