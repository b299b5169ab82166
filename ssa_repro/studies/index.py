"""A study's index: every finished job's rows (which run folder holds which evaluation), kept per job in
``<root>/index.d/<group>/<job>.csv`` and gathered into ``<root>/index.csv``, the file the reports read.

A job's rows are stored with a record of what they were made from (:func:`done_key`: its config, its
evaluations' configs and versions, its checkpoints' and results' files), so a resumed study skips a job
whose record still holds without loading its run (:func:`finished_rows`). index.csv is rebuilt whole
from the jobs' rows (:func:`write_index`); one cut short or damaged is :class:`IndexDamaged`, never read
as a shorter index.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ssa_repro.core.atomic import write_text
from ssa_repro.core.rundir import RunDir
from ssa_repro.evaluation import EVALUATORS
from ssa_repro.reports.paired import INDEX_DTYPES
from ssa_repro.studies.study import Job, eval_steps, jobs

log = logging.getLogger("ssa_repro.study")

DONE_KEY = "_done_key"  # carried from run_one to store_rows, which keeps it beside the rows, not in them
ROWS_DIR = "index.d"  # <root>/index.d/<group>/<job>.csv: one finished job's rows of the index
REPORT_COLUMNS = ("group", "job", "run_dir", "evaluation", "protocol_id")  # what a report reads


class IndexDamaged(ValueError):
    """index.csv is cut or damaged; the message names the file and what is wrong."""


def done_key(cfg: DictConfig, study: DictConfig, chosen: dict, run_dir: Path) -> str | None:
    """What a finished job's rows were made from: its composed config, its evaluations' configs, steps
    and evaluator versions, and the name, size and modification time of its checkpoints and of every
    file its evaluations wrote (lock files aside). Any of them changed (a config edited, a cell
    recomputed or deleted, a derived table removed, the run retrained, an evaluator's version bumped)
    and the job runs again. None: not trained, or an evaluation set to ``force``."""
    rd = RunDir(run_dir)
    last = rd.last_checkpoint
    if not last.is_file() or any(e.get("force") for e in chosen.values()):  # force: always computed anew
        return None
    files = [
        *sorted(last.parent.glob("*.pt")),  # the last checkpoint and those kept for evaluations at steps
        *(f for f in sorted(rd.eval_dir.rglob("*")) if f.is_file() and not f.name.startswith(".lock")),
    ]
    parts = [
        OmegaConf.to_yaml(cfg),
        # the evaluator's code version too (bumped when its computation changes: new cells are due)
        *(
            f"{k}: {OmegaConf.to_yaml(e)} {eval_steps(study, k)} v{EVALUATORS.get(e.name).version}"
            for k, e in sorted(chosen.items())
        ),
        *(f"{f.relative_to(run_dir)} {f.stat().st_size} {f.stat().st_mtime_ns}" for f in files),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def finished_rows(root: Path, job: Job, key: str | None) -> list[dict] | None:
    """The job's stored index rows where its record (:func:`store_rows`) matches ``key``; else None."""
    path = job_rows_path(root, job.group, job.name)
    try:
        if key is None or path.with_suffix(".key").read_text().strip() != key:
            return None
        rows = pd.read_csv(path, dtype=INDEX_DTYPES).to_dict("records")
    except (OSError, ValueError):  # no record, or a damaged one: the job runs
        return None
    log.info(
        "study job %s/%s: finished earlier, nothing changed since: not loaded again", job.group, job.name
    )
    return [{**r, DONE_KEY: key} for r in rows] if rows else None


def job_rows_path(root: Path, group: str, job: str) -> Path:
    return Path(root) / ROWS_DIR / group / f"{job}.csv"


def store_rows(root: Path, job: Job, rows: list[dict]) -> None:
    """Keep one job's index rows in its own file (a failed job's, none: its file is removed), so the
    index is rebuilt from every finished job whichever process or invocation finished it."""
    path = job_rows_path(root, job.group, job.name)
    record = path.with_suffix(".key")  # what the rows were made from (done_key): run_one's shortcut
    record.unlink(missing_ok=True)  # first: a record never vouches for rows it was not written with
    keys = {r.get(DONE_KEY) for r in rows}
    rows = [{k: v for k, v in r.items() if k != DONE_KEY} for r in rows]
    if rows:
        write_text(path, pd.DataFrame(rows).to_csv(index=False))
        if len(keys) == 1 and None not in keys:
            write_text(record, f"{keys.pop()}\n")
    else:
        path.unlink(missing_ok=True)


def checked_index(path: Path, columns: tuple[str, ...] = REPORT_COLUMNS) -> pd.DataFrame | None:
    """index.csv read and checked (None where there is none): a file cut short (every write ends in a
    newline), unparsable, without ``columns`` or with a row missing one of them is
    :class:`IndexDamaged`, never read as a shorter index."""
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    if not text.strip():
        return None
    why = None
    if not text.endswith(b"\n"):
        why = "it does not end with a newline (cut while written, or truncated)"
    else:
        try:
            frame = pd.read_csv(path, dtype=INDEX_DTYPES)
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            why = f"it is not a readable CSV ({' '.join(str(e).split())})"
        else:
            lacking = [c for c in columns if c not in frame.columns]
            holes = [c for c in columns if c in frame.columns and frame[c].isna().any()]
            if lacking:
                why = f"it lacks the column(s) {', '.join(lacking)}"
            elif holes:
                rows = sorted({int(i) + 2 for c in holes for i in frame.index[frame[c].isna()]})
                why = f"line(s) {', '.join(map(str, rows[:5]))} lack {', '.join(holes)} (a cut row)"
    if why:
        raise IndexDamaged(f"{path} is damaged: {why}")
    return frame


def rebuild_index(root: Path, study_jobs: list[Job]) -> pd.DataFrame:
    """The index from every finished job's rows (``index.d``), in the study's job order; rows of jobs
    no longer in the study are left out. Before ``index.d`` existed a study kept only index.csv: its
    rows are split into ``index.d`` first (a damaged one is set aside with a warning: the jobs are
    indexed again as the study runs, finished ones without work)."""
    root = Path(root)
    legacy = root / "index.csv"
    if not (root / ROWS_DIR).exists() and legacy.exists():
        try:
            old = checked_index(legacy, ("group", "job"))
        except IndexDamaged as e:
            log.warning(
                "%s; left aside: its jobs are indexed again as they are run (finished ones are skipped)", e
            )
            old = None
        for (group, job), rows in old.groupby(["group", "job"], sort=False) if old is not None else []:
            write_text(job_rows_path(root, str(group), str(job)), rows.to_csv(index=False))
    parts = [job_rows_path(root, j.group, j.name) for j in study_jobs]
    frames = [pd.read_csv(p, dtype=INDEX_DTYPES) for p in parts if p.exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write_index(root: Path, study_jobs: list[Job]) -> pd.DataFrame:
    """Rebuild ``<root>/index.csv`` from the jobs' rows (written whole, atomically; none: no file)."""
    index = rebuild_index(root, study_jobs)
    if not index.empty:
        write_text(Path(root) / "index.csv", index.to_csv(index=False))
    return index


def report_index(root: Path, study: DictConfig) -> Path:
    """The index a report reads, checked: rebuilt from the jobs' rows where the study has them (a cut or
    stale index.csv is rewritten, with a warning); otherwise index.csv as it is, refused when damaged."""
    path = Path(root) / "index.csv"
    if (Path(root) / ROWS_DIR).is_dir():
        try:
            checked_index(path)
            damaged = None
        except IndexDamaged as e:
            damaged = e
        before = path.read_bytes() if path.exists() else None
        index = write_index(root, jobs(study))
        after = path.read_bytes() if path.exists() else None
        if damaged or (before is not None and before != after):
            log.warning(
                "%s; rebuilt from the rows of the %d finished jobs in %s",
                damaged or f"{path} differed from its jobs' rows",
                index.job.nunique() if len(index) else 0,
                Path(root) / ROWS_DIR,
            )
        return path
    try:
        checked_index(path)
    except IndexDamaged as e:
        raise SystemExit(
            f"Error: {e}; run the study again without --report-only to rebuild it (finished jobs are "
            "skipped and stored cells reused)"
        ) from None
    return path
