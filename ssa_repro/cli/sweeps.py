"""Sweeps (Hydra multiruns): job folder names, the list of jobs, and where job logs go.

Each training job's folder is ``<hydra.sweep.dir>/<overridden keys>,seed=<seed>`` (``job_dir``, the
``ssa_job_dir`` resolver), so no two jobs share a folder and a re-run of the same sweep finds the same
folders: finished jobs are skipped, interrupted ones resume. Before the first job starts the sweep
writes its job list, ``<sweep dir>/jobs.yaml`` (one list of overrides per job, in launch order), which
``scripts/compare.py`` reads to name the jobs that have not started.

An evaluation multirun (``python evaluate.py -m run_dir=A,B eval.sigmas=[1],[2]``) puts its job logs in
the run folder (``<run_dir>/eval/sweeps/<time>``) when every job evaluates one run, else in a folder
``eval_sweeps/<time>`` beside the runs (their common parent): never in the working directory.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from ssa_repro.core.atomic import write_text
from ssa_repro.reports.runs import JOBS_FILE

MAX_DIR = 200  # characters of a job folder name before the rest is replaced by a hash
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
    return f"{body},{tail}" if body else tail


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
    path = Path(sweep_dir) / JOBS_FILE
    write_text(path, yaml.safe_dump([list(j) for j in jobs], sort_keys=False))
    return path


def eval_sweep_dir(task_overrides, stamp: str) -> str:
    """Where an evaluation multirun's job logs go: ``<run>/eval/sweeps/<stamp>`` for one run,
    ``<common parent>/eval_sweeps/<stamp>`` for several (``run_dir`` values of the overrides)."""
    runs: list[str] = []
    for override in OverridesParser.create().parse_overrides([str(o) for o in task_overrides or []]):
        if override.key_or_group == "run_dir":
            runs = (
                list(override.sweep_string_iterator())
                if override.is_sweep_override()
                else [override.get_value_element_as_str()]
            )
    if not runs:
        return str(Path("eval_sweeps") / stamp)
    paths = [Path(r.strip("'\"")).expanduser().absolute() for r in runs]
    if len(set(paths)) == 1:
        return str(paths[0] / "eval" / "sweeps" / stamp)
    return str(Path(os.path.commonpath(paths)) / "eval_sweeps" / stamp)


OmegaConf.register_new_resolver("ssa_job_dir", job_dir, replace=True)
OmegaConf.register_new_resolver("ssa_eval_sweep_dir", eval_sweep_dir, replace=True)
