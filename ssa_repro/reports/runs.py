"""Finding runs: run folders, sweep folders and their jobs, and what state each job is in.

A run folder holds ``config.yaml``. A sweep folder holds job folders (each with
``.hydra/overrides.yaml``) and, when it was launched by this project, ``jobs.yaml``: the override list
of every job, written before the first job started (``ssa_repro/cli/sweeps.py``), so jobs that never
started can be named. The file names are :class:`ssa_repro.core.rundir.RunDir`'s. Everything here reads
files; nothing is loaded onto a device.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from ssa_repro.core.identity import same_runs, same_runs_message
from ssa_repro.core.rundir import CONFIG, JOBS, MULTIRUN, OVERRIDES, SUMMARY, RunDir, RunFolderError, plain

log = logging.getLogger("ssa_repro.reports")


class ReportError(ValueError):
    """Inputs a report cannot use: said before any figure or table is made."""


@dataclass
class Run:
    """A run folder, as far as its files tell. ``cfg``: its config read over the schema
    (``RunDir.config``, as plain Python), so every key the schema knows is there."""

    path: Path
    cfg: dict
    overrides: list[str] | None = None  # a sweep job's .hydra/overrides.yaml

    @property
    def task(self) -> str:
        return str(self.cfg["task"]["name"])

    @property
    def scorer(self) -> str:
        return str(self.cfg["scorer"]["label"])

    @property
    def model(self) -> str:
        return str(self.cfg["model"]["name"])

    @property
    def seed(self):
        return self.cfg["seed"]

    @property
    def summary(self) -> dict | None:
        return RunDir(self.path).summary()

    @property
    def finished(self) -> bool:
        """Training reached ``train.steps`` (summary.json says so)."""
        s = self.summary
        return bool(s) and s.get("steps") == self.cfg["train"]["steps"]

    def status(self) -> str:
        """finished | failed: <first line> | training not finished."""
        failed = RunDir(self.path).failed_file
        if failed.exists() and not self.finished:
            return "failed: " + (failed.read_text().splitlines() or [""])[0][:300]
        return "finished" if self.finished else "training not finished (no summary.json at train.steps)"

    def lookup(self, key: str):
        """A config value by dotted key (``scorer`` means the scorer's label)."""
        if key in ("scorer", "model", "task"):
            return getattr(self, key)
        node = self.cfg
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


def is_run(path: Path) -> bool:
    return RunDir(path).is_run()


def run_inside(path: Path) -> Path | None:
    """The run folder ``path`` is (or lies inside), if any."""
    for p in (Path(path), *Path(path).parents):
        if is_run(p):
            return p
    return None


def read_run(path: Path) -> Run:
    """The run folder's config, read by its owner (``RunDir.config``: over the schema), and overrides."""
    run = RunDir(path)
    try:
        cfg = run.config()
    except RunFolderError as e:
        raise ReportError(str(e)) from None
    return Run(path, plain(cfg), run.overrides())


def job_dirs(sweep: Path) -> list[Path]:
    """Job folders below a sweep folder (each holds .hydra/overrides.yaml), in job-number order."""
    jobs = {
        p.parent.parent
        for p in sweep.rglob(OVERRIDES)
        if p.relative_to(sweep).parts[0] not in ("compare", "eval_sweeps")
    }

    def order(p: Path):
        head = p.relative_to(sweep).parts[0].split("_", 1)[0]
        return (int(head) if head.isdigit() else math.inf, str(p))

    return sorted(jobs, key=order)


def is_sweep(path: Path) -> bool:
    return (path / MULTIRUN).is_file() or (path / JOBS).is_file() or bool(job_dirs(path))


def expected_jobs(sweep: Path) -> list[list[str]] | None:
    """The override list of every job, from the sweep's ``jobs.yaml`` (None for a sweep without one)."""
    path = Path(sweep) / JOBS
    if not path.exists():
        return None
    return [list(map(str, job)) for job in (yaml.safe_load(path.read_text()) or [])]


def override_key(o: str) -> tuple[str, str]:
    key, _, value = o.lstrip("+~").partition("=")
    return key, value


def find(paths) -> tuple[list[Run], Path | None, list[tuple[str, str]]]:
    """Runs from the paths (run folders, or one sweep folder): (runs, sweep, job folders without a
    config.yaml yet). Raises ReportError naming every path that is neither."""
    paths = [Path(p).expanduser() for p in paths]
    if not paths:
        raise ReportError("give run folders, or a sweep (multirun) folder")
    bad, runs, sweeps = [], [], []
    for p in paths:
        if not p.exists():
            bad.append(f"{p} does not exist")
        elif not p.is_dir():
            bad.append(f"{p} is a file, not a run folder or a sweep folder")
        elif is_run(p):
            runs.append(p)
        elif is_sweep(p):
            sweeps.append(p)
        else:
            inside = run_inside(p)
            hint = f" (it lies inside the run folder {inside}: give that)" if inside else ""
            bad.append(
                f"{p} is neither a run folder (no {CONFIG}) nor a sweep folder (no {JOBS} or "
                f"{MULTIRUN}, no job folders with {OVERRIDES}){hint}"
            )
    if bad:
        raise ReportError("\n  - ".join(["cannot read:", *bad]))
    if sweeps and (runs or len(sweeps) > 1):
        raise ReportError(
            "give either one sweep folder or run folders, not both: "
            + ", ".join(str(p) for p in [*sweeps, *runs])
        )
    if sweeps:
        sweep = sweeps[0]
        jobs = job_dirs(sweep)
        if not jobs:
            raise ReportError(f"{sweep} has no job folders yet (nothing started)")
        no_cfg = [(str(j), "no config.yaml (not started)") for j in jobs if not is_run(j)]
        started = [j for j in jobs if is_run(j)]
        refuse_same_runs(started)
        return [read_run(j) for j in started], sweep, no_cfg
    resolved = [p.resolve() for p in runs]
    twice = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    if twice:
        raise ReportError(f"the same run folder is given more than once: {', '.join(twice)}")
    refuse_same_runs(runs)
    return [read_run(p) for p in runs], None, []


def flag_same_runs(paths, what: str) -> list:
    """A warning naming the folders among ``paths`` that hold one run (for pools that keep going: a
    study's index, where the report says which seeds it counted); returns what was found."""
    found = same_runs([p for p in map(Path, paths) if is_run(p)])
    if found:
        log.warning("%s", same_runs_message(found, what))
    return found


def refuse_same_runs(paths: list[Path]) -> None:
    """A ReportError naming the folders that hold one run (a copy beside its original: the same run
    id, :func:`ssa_repro.core.identity.same_runs`), before they are pooled as seeds."""
    found = same_runs(paths)
    if found:
        raise ReportError(same_runs_message(found, "cannot pool these runs"))


def all_runs(paths) -> list[Run]:
    """Every run folder at or below the paths (runs of sweeps included), in path order; a ReportError
    where two of them hold one run (:func:`refuse_same_runs`)."""
    found: dict[Path, Run] = {}
    for p in map(Path, paths):
        for cfg in [RunDir(p).config_file] if is_run(p) else sorted(p.rglob(CONFIG)):
            if cfg.parent.name != ".hydra" and cfg.parent not in found:
                try:
                    found[cfg.parent] = read_run(cfg.parent)
                except ReportError:
                    continue
    refuse_same_runs(list(found))  # a copy below the paths (a backup beside its run) is not a seed
    return list(found.values())


def newest_runs(root: str | Path, n: int = 4) -> list[Path]:
    """The newest finished runs under ``root`` (by summary.json time) that share the newest one's task:
    a default for the notebook. Sweep jobs count as runs; comparison folders are skipped."""
    found = []
    for summary in Path(root).expanduser().rglob(SUMMARY):
        run = summary.parent
        if is_run(run) and RunDir(run).eval_dir.is_dir():
            found.append((summary.stat().st_mtime, run))
    found.sort(reverse=True)
    if not found:
        return []
    task = read_run(found[0][1]).task
    return [run for _, run in found if read_run(run).task == task][:n]
