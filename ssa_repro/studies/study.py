"""A study: a matrix of training jobs, each evaluated on fixed prompts, then a report (``scripts/study.py``).

``conf/study/<name>.yaml`` lists the common overrides (``base``), the task variants, the architectures,
and groups of jobs (every combination of tasks × scorers × archs × training σ in a group, for every
seed); and the evaluations every job gets where its task supports them. Each job is
``train.py``'s job (:func:`ssa_repro.jobs.train_job.run_job`) in ``<root>/runs/<group>/<job>``, then the
study's evaluations (``runner.evaluate``). A finished job is skipped and stored cells are reused, so
running the command again resumes where it stopped; jobs run in parallel processes (one thread each).
``<root>/index.csv`` (studies/index.py) maps every job to its run folder and evaluation protocols,
rebuilt from every finished job's rows (``<root>/index.d/<group>/<job>.csv``); the report
(``ssa_repro/reports/kinds/icl.py``, or the one the study's ``report`` key names) is made from it and the
stored results alone.

Before any work the study file is checked against its schema (studies/schema.py) and every job's
config as train.py would; then the study holds ``<root>`` with core/runlock.py's lock (a second study
process on the same folder is refused, naming the holder). docs/reliability.md says what is promised.

Keys of a study's evaluation that are the study's, not the evaluator's: ``tasks`` (registered task
names it is limited to), ``groups`` (study groups it is limited to) and ``steps`` (the checkpoint steps
it is run at, each kept by ``train.keep_at`` or the last; default: the last checkpoint only). Cells are
stored per step, so ``steps`` gives learning curves.

This module is the study's definition: its file loaded and checked, its jobs, their configs and their
evaluations, and the selection and checks a run starts with. Running it: studies/engine.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from ssa_repro.config import CONF_DIR, compose_cached
from ssa_repro.core import matrix
from ssa_repro.evaluation import EVALUATORS, runner
from ssa_repro.evaluation.choice import chosen, study_keys
from ssa_repro.jobs.prepared import problems as train_problems
from ssa_repro.studies import schema as study_schema


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


def compose(job: Job) -> DictConfig:
    """The job's training config: :func:`ssa_repro.config.compose_cached` (each choice of config groups
    composed once per process while ``conf/`` is unchanged, the values applied to a copy), so the
    pre-check (:func:`problems`), the job loop (studies/engine.py ``run_one``) and a resumed study in
    the same process compose a study's hundreds of jobs at a few ms each."""
    return compose_cached(tuple(job.overrides), conf_dir=CONF_DIR)


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


def problems(study: DictConfig, todo: list[Job]) -> list[str]:
    """Every job's config problems (train.py's start-up checks: keys, values, W&B, device, memory,
    corpora) and its evaluations', before anything is written; one job per setting (seeds are alike)."""
    out, seen = [], set()
    for job in todo:
        key = tuple(o for o in job.overrides if not o.startswith("seed="))
        if key in seen:
            continue
        seen.add(key)
        cfg = compose(job)  # (kept: run_one of the setting's first job composes no more)
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
            + f" has them; its seeds: {ranges(known)}"
        )
    return [j for j in todo if not seeds or j.seed in seeds]


def ranges(values: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def default_root(name: str) -> Path:
    """Where a study's runs go unless told: ``outputs/study/<name>``."""
    return Path("outputs") / "study" / name
