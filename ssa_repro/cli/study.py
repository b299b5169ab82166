"""A study: a matrix of training jobs, each evaluated on fixed prompts, then a report (``scripts/study.py``).

``conf/study/<name>.yaml`` lists the common overrides (``base``), the task variants, the architectures,
and groups of jobs (every combination of tasks × scorers × archs × training σ in a group, for every
seed); and the evaluations every job gets where its task supports them. Each job is
``train.py``'s job (:func:`ssa_repro.cli.train_app.run_job`) in ``<root>/runs/<group>/<job>``, then the
study's evaluations (``runner.evaluate``). A finished job is skipped and stored cells are reused, so
running the command again resumes where it stopped; jobs run in parallel processes (one thread each).
``<root>/index.csv`` maps every job to its run folder and evaluation protocols; the report
(``ssa_repro/reports/study.py``, or the one the study's ``report`` key names) is made from it and the
stored results alone.

Keys of a study's evaluation that are the study's, not the evaluator's: ``tasks`` (registered task
names it is limited to), ``groups`` (study groups it is limited to) and ``steps`` (the checkpoint steps
it is run at, each kept by ``train.keep_at`` or the last; default: the last checkpoint only). Cells are
stored per step, so ``steps`` gives learning curves.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from hydra import compose, initialize_config_dir
from joblib import Parallel, delayed
from omegaconf import DictConfig, OmegaConf

from ssa_repro.cli.devices import job_device
from ssa_repro.cli.train_app import problems as train_problems
from ssa_repro.cli.train_app import run_job
from ssa_repro.config import CONF_DIR
from ssa_repro.core.atomic import write_text
from ssa_repro.core.rundir import resolve_device
from ssa_repro.evaluation import EVALUATORS, runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.tasks import TASKS

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
    """``conf/study/<name>.yaml``, merged over the study it names in ``defaults`` (lists replaced; a
    study that lists ``groups`` replaces its parent's groups rather than adding to them)."""
    path = Path(conf_dir) / "study" / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise SystemExit(f"Error: no study {name!r} in {path.parent}; known: {known}")
    cfg = OmegaConf.load(path)
    parents = [d for d in cfg.pop("defaults", []) if d != "_self_"]
    for parent in parents:
        merged = OmegaConf.merge(load(parent, conf_dir), cfg)
        if "groups" in cfg:
            merged.groups = cfg.groups
        cfg = merged
    return cfg


def jobs(study: DictConfig, extra: tuple[str, ...] = ()) -> list[Job]:
    """Every job of the study, group by group, in a fixed order; ``extra`` overrides go last (for
    example ``device=cpu``: they change where a job runs, not which job it is or its folder).

    Seed-major within a group (every task × scorer × arch of seed 0, then of seed 1, …): a study
    stopped part-way has whole paired sets for its first seeds, so its report can already compare
    every arm seed by seed, over fewer seeds, instead of some arms with all seeds and others none."""
    out = []
    for group, g in study.groups.items():
        for seed, task, scorer, arch, sigma in itertools.product(
            g.get("seeds", study.seeds), g.tasks, g.scorers, g.archs, g.train_sigma
        ):
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


STUDY_KEYS = ("tasks", "groups", "steps")  # an evaluation's keys that the study reads (module docstring)


def study_keys(name: str) -> tuple[str, ...]:
    """The study's own keys of an evaluation: :data:`STUDY_KEYS` less the evaluator's own (``eval=lm``
    has ``tasks``, its LM-eval tasks: there ``tasks`` is the evaluator's, and the task it applies to
    follows from what the tasks support)."""
    own = EVALUATORS.schemas[name].__dataclass_fields__
    return tuple(k for k in STUDY_KEYS if k not in own)


def evaluations(study: DictConfig, task_name: str, group: str | None = None) -> dict[str, DictConfig]:
    """The study's evaluations that apply to a task (by what its declaration supports; the keys
    ``grid_quantifier*`` and ``grid_linear*`` by its kind; an evaluation's ``tasks``, registered task
    names, restricts it to those, its ``groups`` to those study groups when ``group`` is given)."""
    task = TASKS.get(task_name)
    # a task's grid: grid_<task name> where the study has one (the length tasks), else the keys
    # grid_quantifier* or grid_linear* by the task's kind
    own = f"grid_{task_name}"
    kind = own if own in study.evaluations else ("grid_quantifier" if task.classification else "grid_linear")
    out = {}
    for key, settings in study.evaluations.items():
        name = settings.name
        if name not in task.evaluation.supports:
            continue
        if key.startswith("grid_") and not key.startswith(kind):
            continue
        mine = study_keys(name)
        if "tasks" in mine and settings.get("tasks") is not None and task_name not in settings.tasks:
            continue
        if group is not None and settings.get("groups") is not None and group not in settings.groups:
            continue
        settings = OmegaConf.masked_copy(settings, [k for k in settings if k not in mine])
        out[key] = OmegaConf.merge(OmegaConf.structured(EVALUATORS.schemas[name]), settings)
    return out


def eval_steps(study: DictConfig, key: str) -> list[int | None]:
    """The checkpoint steps evaluation ``key`` runs at (``steps``); [None]: the last checkpoint."""
    steps = study.evaluations[key].get("steps")
    return [int(x) for x in steps] if steps else [None]


def run_one(job: Job, study: DictConfig, root: Path, index: int, n_jobs: int) -> list[dict]:
    """Train (or skip) job number ``index`` of ``n_jobs`` at once, then its evaluations; rows of the
    index (one per evaluation). The job takes its own GPU and its share of the cores (cli/devices.py)."""
    run_dir = root / "runs" / job.group / job.name
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=list(job.overrides))
    with job_device(index, n_jobs, cfg.device):
        return _train_and_evaluate(job, study, cfg, run_dir)


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
    # GPU machine each job has one CPU thread (cli/devices.py), too few for Zorro's PLL or LM-eval.
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
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("train", overrides=list(job.overrides))
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
    todo: list[Job], groups: tuple[str, ...] | None, study: DictConfig, tasks: tuple[str, ...] | None = None
) -> list[Job]:
    """The jobs of ``groups`` and ``tasks`` only (all when None); an unknown name stops, naming the
    known ones. ``tasks`` are the study's task names (``every_num``), to run a headline first."""
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
    return [j for j in todo if (not groups or j.group in groups) and (not tasks or j.task in tasks)]


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
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None


def merged_index(
    old: pd.DataFrame | None,
    results: list[tuple[list[dict], str]],
    ran: set[tuple[str, str]] | None,
    final: bool,
) -> pd.DataFrame:
    """The study's index: the rows of the jobs finished in this invocation (``results``), plus rows
    indexed before. While it runs (``final`` false) every earlier row is kept unless its job was
    re-indexed now, so a study stopped part-way still has an index of all it finished. At the end
    (``final``) the earlier rows of the jobs this invocation ran (``ran``: (group, job) pairs; None:
    the whole study) are replaced by theirs — a failed job's dropped — and the others' kept, so a
    finished study's index names exactly its jobs."""
    new = pd.DataFrame([r for rows, _ in results for r in rows])
    keys = ["group", "job"]
    if old is None or old.empty or not set(keys) <= set(old.columns) or (final and ran is None):
        return new
    if final:
        drop = ran
    else:  # the jobs indexed now
        drop = set(map(tuple, new[keys].itertuples(index=False))) if not new.empty else set()
    keep = old[[tuple(k) not in drop for k in old[keys].itertuples(index=False)]]
    return pd.concat([keep, new], ignore_index=True)


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
) -> Path:
    """Run (or resume) every job of study ``name``; returns the study folder (with ``index.csv``). Every
    job's config is checked first: a problem stops the study before anything is written. A job that
    fails does not stop the others: the study runs them all, writes the index of those that finished
    and ``failures.txt``, and exits non-zero naming each failed job (rerun to retry them). ``groups``:
    only those groups' jobs, ``tasks`` only those tasks' (the index then holds theirs and the others
    indexed before)."""
    study = load(name)
    root = Path(root or Path("outputs") / "study" / study.name)
    todo = select_groups(jobs(study, tuple(extra)), groups, study, tasks)
    ran = {(j.group, j.name) for j in todo} if (groups or tasks) else None
    found = problems(study, todo)
    if found:
        raise SystemExit(f"Error: study {study.name}: invalid job configs:\n  - " + "\n  - ".join(found))
    root.mkdir(parents=True, exist_ok=True)
    log.info("study %s: %d jobs in %s, %d at a time", study.name, len(todo), root, n_jobs)
    t0 = time.perf_counter()
    index_file = root / "index.csv"
    old = read_index(index_file)
    wall = root / "wall_seconds.txt"  # one line per invocation (a resumed study adds one)
    walls = wall.read_text() if wall.exists() else ""

    def write_wall() -> None:
        """This invocation's wall time so far: its line is rewritten each time."""
        write_text(wall, walls + f"{time.perf_counter() - t0:.0f}\n")

    def write_progress(index: pd.DataFrame) -> None:
        """The index so far and this invocation's wall time so far."""
        if not index.empty:
            write_text(index_file, index.to_csv(index=False))
        write_wall()

    results: list[tuple[list[dict], str]] = []
    last_write = time.monotonic()
    try:
        with workers_stop_on_sigterm(), wall_clock(write_wall, WALL_EVERY_S):
            # "generator": results in job order as they come, so the index grows while the study runs
            for result in Parallel(n_jobs=n_jobs, backend="loky", verbose=10, return_as="generator")(
                delayed(run_one_or_fail)(job, study, root, i, n_jobs) for i, job in enumerate(todo)
            ):
                results.append(result)
                if time.monotonic() - last_write > INDEX_EVERY_S and result[0]:
                    write_progress(merged_index(old, results, None, final=False))
                    last_write = time.monotonic()
    except KeyboardInterrupt:  # stopped: index what finished, so the report can use it
        write_progress(merged_index(old, results, None, final=False))
        raise
    write_text(index_file, merged_index(old, results, ran, final=True).to_csv(index=False))
    write_progress(pd.DataFrame())
    failed = [why for _, why in results if why]
    write_text(root / "failures.txt", "".join(f"{why}\n" for why in failed))  # empty: none this time
    if failed:
        raise SystemExit(
            f"Error: study {study.name}: {len(failed)} of {len(todo)} jobs failed (the others finished; "
            f"rerun the same command to retry them; listed in {root / 'failures.txt'}):\n  - "
            + "\n  - ".join(failed)
        )
    return root
