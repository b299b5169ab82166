"""A study: a matrix of training jobs, each evaluated on fixed prompts, then a report (``scripts/study.py``).

``conf/study/<name>.yaml`` lists the common overrides (``base``), the task variants, the architectures,
and groups of jobs (every combination of tasks × scorers × archs × training σ in a group, for every
seed); and the evaluations every job gets where its task supports them. Each job is
``train.py``'s job (:func:`ssa_repro.jobs.train_job.run_job`) in ``<root>/runs/<group>/<job>``, then the
study's evaluations (``runner.evaluate``). A finished job is skipped and stored cells are reused, so
running the command again resumes where it stopped; jobs run in parallel processes (one thread each).
``<root>/index.csv`` maps every job to its run folder and evaluation protocols, rebuilt from every
finished job's rows (``<root>/index.d/<group>/<job>.csv``); the report (``ssa_repro/reports/study.py``,
or the one the study's ``report`` key names) is made from it and the stored results alone.

Before any work the study file is checked against its schema (studies/schema.py) and every job's
config as train.py would; then the study holds ``<root>`` with core/runlock.py's lock (a second study
process on the same folder is refused, naming the holder). docs/reliability.md says what is promised.

Keys of a study's evaluation that are the study's, not the evaluator's: ``tasks`` (registered task
names it is limited to), ``groups`` (study groups it is limited to) and ``steps`` (the checkpoint steps
it is run at, each kept by ``train.keep_at`` or the last; default: the last checkpoint only). Cells are
stored per step, so ``steps`` gives learning curves.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import logging
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from joblib import Parallel, delayed
from omegaconf import DictConfig, ListConfig, OmegaConf
from tqdm import tqdm

from ssa_repro.config import CONF_DIR, compose_cached
from ssa_repro.core import matrix
from ssa_repro.core.atomic import storage_advice, write_text
from ssa_repro.core.rundir import RunDir, resolve_device
from ssa_repro.core.runlock import RunLock, RunLocked
from ssa_repro.evaluation import EVALUATORS, runner
from ssa_repro.evaluation.choice import chosen, study_keys
from ssa_repro.evaluation.loading import load_run
from ssa_repro.jobs.devices import job_device
from ssa_repro.jobs.prepared import problems as train_problems
from ssa_repro.jobs.train_job import run_job
from ssa_repro.reports.paired import INDEX_DTYPES
from ssa_repro.studies import schema as study_schema
from ssa_repro.training import ensemble

log = logging.getLogger("ssa_repro.study")


@dataclass(frozen=True)
class Job:
    group: str
    task: str
    scorer: str
    arch: str
    train_sigma: float
    seed: int
    overrides: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.task}-{self.scorer}-{self.arch}-sigma{self.train_sigma:g}-s{self.seed}"


def load(name: str, conf_dir: Path = CONF_DIR) -> DictConfig:
    """``conf/study/<name>.yaml`` (or ``name`` itself, a path ending in ``.yaml``), merged over the
    study it names in ``defaults`` (lists replaced; a study that lists ``groups`` replaces its parent's
    groups rather than adding to them), then checked against the schema (studies/schema.py): a
    problem stops here, one line each, naming the file, the key, the value and what is allowed."""
    path = study_path(name, conf_dir)
    cfg = _merged(path, conf_dir)
    found = study_schema.problems(cfg, _shown(path))
    if found:
        raise SystemExit("Error: invalid study file:\n  - " + "\n  - ".join(found))
    return cfg


def study_path(name: str, conf_dir: Path = CONF_DIR) -> Path:
    """The file of study ``name``: a ``.yaml`` path as given, else ``<conf_dir>/study/<name>.yaml``."""
    if str(name).endswith((".yaml", ".yml")):
        path = Path(name)
    else:
        path = Path(conf_dir) / "study" / f"{name}.yaml"
    if not path.is_file():
        folder = Path(conf_dir) / "study"
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
        raise SystemExit(f"Error: no study {name!r} in {folder}; known: {known}")
    return path


def _shown(path: Path) -> str:
    """``path`` relative to the working directory where it is under it (shorter messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _merged(path: Path, conf_dir: Path) -> DictConfig:
    try:
        cfg = OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001  (YAML syntax, duplicate keys: named with the file and line)
        why = " ".join(str(e).split())
        raise SystemExit(f"Error: {_shown(path)} is not a readable study file: {why}") from None
    if not isinstance(cfg, DictConfig):
        raise SystemExit(
            f"Error: {_shown(path)}: a study file is a mapping of keys (name, seeds, …), not a list"
        )
    parents = cfg.pop("defaults", [])
    if not isinstance(parents, (list, ListConfig)):
        raise SystemExit(
            f"Error: {_shown(path)}: defaults={parents!r} is not a list; allowed: [<study>, _self_]"
        )
    for parent in [d for d in parents if d != "_self_"]:
        merged = OmegaConf.merge(_merged(study_path(str(parent), conf_dir), conf_dir), cfg)
        if "groups" in cfg:
            merged.groups = cfg.groups
        cfg = merged
    return cfg


def jobs(study: DictConfig, extra: tuple[str, ...] = ()) -> list[Job]:
    """Every job of the study, group by group, in a fixed order; ``extra`` overrides go last (for
    example ``device=cpu``: they change where a job runs, not which job it is or its folder).

    Seed-major within a group (every task × scorer × arch of seed 0, then of seed 1, …): a study
    stopped part-way has whole paired sets for its first seeds, so its report can already compare
    every arm seed by seed, over fewer seeds, instead of some arms with all seeds and others none. A
    group's cells, its ``more`` sub-matrices at more seeds included: core/matrix.py."""
    out = []
    for group, g in study.groups.items():
        for seed, task, scorer, arch, sigma in matrix.group_cells(g, study.seeds):
            task_ov = list(study.tasks[task])
            sigma_ov = [f"task.x_dist.std={float(sigma)}"] if float(sigma) != 1.0 else []
            overrides = (
                *study.base,
                *task_ov,
                *study.archs[arch],
                f"scorer={scorer}",
                *sigma_ov,
                f"seed={seed}",
                *extra,
            )
            out.append(Job(str(group), str(task), str(scorer), str(arch), float(sigma), int(seed), overrides))
    return out


def evaluations(study: DictConfig, task_name: str, group: str | None = None) -> dict[str, DictConfig]:
    """The study's evaluations that run on a job of task ``task_name`` in ``group``
    (:func:`ssa_repro.evaluation.choice.chosen`, the rule the reports read too), each over its
    evaluator's schema with the study's own keys (``tasks``, ``groups``, ``steps``) taken out."""
    out = {}
    for key in chosen(study.evaluations, task_name, group):
        settings = study.evaluations[key]
        mine = study_keys(settings.name)
        settings = OmegaConf.masked_copy(settings, [k for k in settings if k not in mine])
        out[key] = OmegaConf.merge(OmegaConf.structured(EVALUATORS.schemas[settings.name]), settings)
    return out


def report_setup(study: DictConfig) -> dict:
    """The study's config as the report reads it (a plain dict), with ``task_names``: each task key's
    registered task as the runner composes it (``experiment=paper_every`` names ``every``), so the
    report's missing-data notes expect the evaluations the runner runs (reports/paired.py
    ``evaluated_keys``; the reports do not compose)."""
    setup = OmegaConf.to_container(study)
    names = {}
    for key, overrides in study.tasks.items():
        named = [o.split("=", 1)[1] for o in overrides if o.startswith("task=")]
        names[str(key)] = named[-1] if named else str(compose_cached((*study.base, *overrides)).task.name)
    setup["task_names"] = names
    return setup


def eval_steps(study: DictConfig, key: str) -> list[int | None]:
    """The checkpoint steps evaluation ``key`` runs at (``steps``); [None]: the last checkpoint."""
    steps = study.evaluations[key].get("steps")
    return [int(x) for x in steps] if steps else [None]


def run_one(job: Job, study: DictConfig, root: Path, index: int, n_jobs: int) -> list[dict]:
    """Train (or skip) job number ``index`` of ``n_jobs`` at once, then its evaluations; rows of the
    index (one per evaluation). The job takes its own GPU and its share of the cores (jobs/devices.py).
    A job finished by an earlier call whose record still holds (:func:`done_key`) returns its stored
    rows without loading its run: a resumed study skips its finished jobs in milliseconds each."""
    run_dir = root / "runs" / job.group / job.name
    cfg = _compose(job)
    chosen = evaluations(study, str(cfg.task.name), job.group)
    rows = finished_rows(root, job, done_key(cfg, study, chosen, run_dir))
    if rows is not None:
        return rows
    with job_device(index, n_jobs, cfg.device):
        rows = _train_and_evaluate(job, study, cfg, run_dir)
    key = done_key(cfg, study, chosen, run_dir)  # of the run as the evaluations left it
    return [{**r, DONE_KEY: key} for r in rows]


DONE_KEY = "_done_key"  # carried from run_one to store_rows, which keeps it beside the rows, not in them


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


def problems(study: DictConfig, todo: list[Job]) -> list[str]:
    """Every job's config problems (train.py's start-up checks: keys, values, W&B, device, memory,
    corpora) and its evaluations', before anything is written; one job per setting (seeds are alike)."""
    out, seen = [], set()
    for job in todo:
        key = tuple(o for o in job.overrides if not o.startswith("seed="))
        if key in seen:
            continue
        seen.add(key)
        cfg = _compose(job)  # (kept: run_one of the setting's first job composes no more)
        chosen = evaluations(study, str(cfg.task.name), job.group)
        found = (
            train_problems(cfg)
            + [p for ecfg in chosen.values() for p in runner.check(cfg, ecfg)]
            + [p for key in chosen for p in step_problems(study, key, cfg)]
        )
        out += [f"{job.group}/{job.name}: {p}" for p in found]
    return out


def step_problems(study: DictConfig, key: str, cfg: DictConfig) -> list[str]:
    """An evaluation's ``steps`` that the job keeps no checkpoint of (``train.keep_at``, a multiple of
    ``train.keep_every``, or ``train.steps``, the last)."""
    tr, out = cfg.train, []
    for step in eval_steps(study, key):
        if step is None or step == tr.steps or step in tr.keep_at:
            continue
        if tr.keep_every and step % tr.keep_every == 0 and step <= tr.steps:
            continue
        out.append(
            f"evaluations.{key}.steps has {step}, but the job keeps no checkpoint there: add it to "
            f"train.keep_at={list(tr.keep_at)} (train.steps={tr.steps})"
        )
    return out


def select_groups(
    todo: list[Job],
    groups: tuple[str, ...] | None,
    study: DictConfig,
    tasks: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
) -> list[Job]:
    """The jobs of ``groups``, ``tasks`` and ``seeds`` only (all when None); an unknown name stops,
    naming the known ones. ``tasks`` are the study's task names (``every_num``), to run a headline first;
    ``seeds`` split a matrix between processes (each its own root), and a seed that none of the selected
    jobs has stops, naming the seeds they have."""
    unknown = [g for g in groups or () if g not in study.groups]
    if unknown:
        raise SystemExit(
            f"Error: study {study.name} has no group(s) {unknown}; known: {', '.join(study.groups)}"
        )
    unknown = [t for t in tasks or () if t not in study.tasks]
    if unknown:
        raise SystemExit(
            f"Error: study {study.name} has no task(s) {unknown}; known: {', '.join(study.tasks)}"
        )
    todo = [j for j in todo if (not groups or j.group in groups) and (not tasks or j.task in tasks)]
    known = sorted({j.seed for j in todo})
    unknown = [s for s in seeds or () if s not in known]
    if unknown:
        raise SystemExit(
            f"Error: --seeds {unknown}: no job of study {study.name}"
            + (f" in group(s) {list(groups)}" if groups else "")
            + (f" and task(s) {list(tasks)}" if tasks else "")
            + f" has them; its seeds: {_ranges(known)}"
        )
    return [j for j in todo if not seeds or j.seed in seeds]


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


INDEX_EVERY_S = 20.0  # while a study runs, its index.csv (and wall time) is rewritten at most this often
WALL_EVERY_S = 60.0  # and its wall time at least this often (a study killed mid-job keeps its time so far)


@contextlib.contextmanager
def wall_clock(write, every: float):
    """Call ``write()`` every ``every`` seconds from a daemon thread while the block runs; the thread has
    stopped when the block ends, so what the caller writes after it is the last word."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            write()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def read_index(path: Path) -> pd.DataFrame | None:
    """A study's index.csv, or None where there is none or it has no rows."""
    try:
        return pd.read_csv(path, dtype=INDEX_DTYPES)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None


ROWS_DIR = "index.d"  # <root>/index.d/<group>/<job>.csv: one finished job's rows of the index
REPORT_COLUMNS = ("group", "job", "run_dir", "evaluation", "protocol_id")  # what a report reads


class IndexDamaged(ValueError):
    """index.csv is cut or damaged; the message names the file and what is wrong."""


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


class Progress:
    """One overall line for the study (tqdm: jobs done of N, failures, elapsed, ETA), drawn only when
    stderr is a terminal; elsewhere (a log file, CI) one log line per finished job instead of joblib's
    ``[Parallel(n_jobs=1)]: Done 1 tasks`` chatter, with the time since this invocation started and the
    jobs left at the rate so far (elapsed / done × left: jobs running side by side count as they finish)."""

    def __init__(self, name: str, total: int, clock=time.monotonic):
        self.done_n, self.failed, self.total = 0, 0, total
        self.clock, self.t0 = clock, clock()
        self.bar = tqdm(total=total, desc=f"study {name}", unit="job", disable=not sys.stderr.isatty())

    def done(self, job: Job, why: str) -> None:
        self.done_n += 1
        self.failed += bool(why)
        if self.bar.disable:
            failed = ", failed" if why else ""
            elapsed = self.clock() - self.t0
            left = elapsed / self.done_n * (self.total - self.done_n)
            log.info(
                "job %d of %d done (%s/%s%s): %s elapsed, about %s left at this rate",
                self.done_n,
                self.total,
                job.group,
                job.name,
                failed,
                _hms(elapsed),
                _hms(left),
            )
            return
        self.bar.set_postfix(failed=self.failed, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _hms(seconds: float) -> str:
    """3725.4 -> '1:02:05' (as the training log's ETA)."""
    return str(datetime.timedelta(seconds=round(seconds)))


@contextlib.contextmanager
def workers_stop_on_sigterm():
    """SIGTERM (``kill <pid>``, a scheduler's stop) raises KeyboardInterrupt while the jobs run, as
    Ctrl-C does: joblib then terminates its worker processes. Without it the study process dies and
    its workers go on training, holding their runs' locks, so the next ``study.py`` finds those runs
    locked (found when a study was restarted with ``kill``)."""

    def stop(signum, frame):
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


ENSEMBLE_MODES = ("auto", "on", "off")


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
        cfg = _compose(job)
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
            seeds=("seed", lambda x: _ranges(sorted(x))),
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


def _compose(job: Job) -> DictConfig:
    """The job's training config: :func:`ssa_repro.config.compose_cached` (each choice of config groups
    composed once per process while ``conf/`` is unchanged, the values applied to a copy), so the
    pre-check (:func:`problems`), the job loop (:func:`run_one`) and a resumed study in the same process
    compose a study's hundreds of jobs at a few ms each."""
    return compose_cached(tuple(job.overrides), conf_dir=CONF_DIR)


def _on_cuda(todo: list[Job]) -> bool:
    return bool(todo) and resolve_device(_compose(todo[0]).device).type == "cuda"


def train_ensembles(name: str, root: Path, todo: list[Job], n_jobs: int = 1) -> None:
    """Train the study's jobs that differ only in the seed as seed ensembles (one stacked model per group,
    ssa_repro/training/ensemble.py; split by what fits in memory), ``n_jobs`` at a time (each in its own
    process with its share of the CPU cores and its GPU, as the job loop's jobs: on one GPU side by side
    they are slower each, faster together), with a progress line per ensemble; the job loop
    (:func:`_run`) then finds them finished and evaluates them as it does separately trained runs. A group
    that cannot be stacked (its scorer, the mlm task) and a seed or an ensemble that fails are left to
    the job loop, which trains them one process per job as before."""
    cfgs = [_compose(job) for job in todo]
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(ensemble.group_key(cfg), []).append(i)
    stack = []
    for members in groups.values():
        why, _ = ensemble.stack_problem(cfgs[members[0]])
        if len(members) < 2 or why:
            if why:
                log.info("study %s: %s keeps one process per job (%s)", name, todo[members[0]].name, why)
            continue
        stack.append(members)
    # ensembles side by side share the device's memory (one GPU, or the CPU's): at most `side` at a time
    side = max(1, min(n_jobs, len(stack)))
    share = ensemble.MEMORY_SHARE / side
    # A group's seeds stay in one ensemble (split only by memory): every ensemble runs all the steps, so
    # the wall time is steps / an ensemble's steps per second, which more processes on one GPU lower.
    # Measured on an H200 at 4L/64 (docs/results/gpu_check_2026-11-28_third.md): one ensemble of 30 seeds
    # ran at 20-22 steps/s (its whole call), 16 side by side of 2-4 seeds at 16.4 each.
    chunks = []
    for members in stack:
        size = max(1, ensemble.seeds_that_fit(cfgs[members[0]], share=share))
        chunks += [members[i : i + size] for i in range(0, len(members), size)]
    n_par = max(1, min(side, len(chunks)))
    work = []
    for n, chunk in enumerate(chunks, 1):
        first = todo[chunk[0]]
        what = (
            f"{first.group}/{first.name} × {len(chunk)} seeds ({', '.join(str(todo[i].seed) for i in chunk)})"
        )
        dirs = [root / "runs" / todo[i].group / todo[i].name for i in chunk]
        work.append(delayed(_train_chunk)(name, n, len(chunks), what, [cfgs[i] for i in chunk], dirs, n_par))
    if work:
        log.info("study %s: %d seed ensembles, %d at a time", name, len(chunks), n_par)
        with workers_stop_on_sigterm():
            try:
                Parallel(n_jobs=n_par, backend="loky", verbose=0)(work)
            except Exception as e:  # noqa: BLE001  (a worker killed: out of memory, a fatal CUDA error)
                log.warning(
                    "study %s: the seed ensembles stopped (%s: %s); the jobs they did not finish train alone",
                    name,
                    type(e).__name__,
                    e,
                )


def _train_chunk(name: str, n: int, total: int, what: str, cfgs: list, dirs: list, n_par: int) -> None:
    """One seed ensemble, placed as job ``n - 1`` of ``n_par`` parallel ones (:func:`job_device`); its
    failure is logged, not raised (the job loop then trains its jobs alone and reports theirs)."""
    root, handler, level = logging.getLogger(), None, logging.getLogger().level
    if not root.handlers:  # a worker process: the progress lines as the study's own, for this call only
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s] %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    try:
        log.info("study %s: seed ensemble %d of %d: %s", name, n, total, what)
        with job_device(n - 1, n_par, cfgs[0].device):
            ensemble.train_ensemble(cfgs, dirs)
    except Exception as e:  # noqa: BLE001  (the job loop trains these jobs alone, and reports theirs)
        log.warning(
            "study %s: seed ensemble %d failed (%s: %s); its jobs train alone", name, n, type(e).__name__, e
        )
    finally:
        if handler is not None:  # loky reuses the worker for the job loop's jobs: leave it as found
            root.removeHandler(handler)
            root.setLevel(level)


def default_root(name: str) -> Path:
    """Where a study's runs go unless told: ``outputs/study/<name>``."""
    return Path("outputs") / "study" / name


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
