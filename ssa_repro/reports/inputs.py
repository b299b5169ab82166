"""What a study report reads besides its per-seed CSVs, and where from (every report kind's: ICL and
early): the study's index, the runs' wall time, commits and devices, what is missing, recorded as
``<out>/<name>/report_inputs.json`` (:data:`INPUTS`), so a report regenerates from the published files
alone (:func:`from_csv`); and a published study continued in a later session (:func:`with_prior`,
:func:`continued_inputs`)."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from ssa_repro.core import matrix
from ssa_repro.core.atomic import write_text
from ssa_repro.evaluation.choice import chosen
from ssa_repro.reports import paired, provenance, runs

INPUTS = "report_inputs.json"
"""Beside a report's per-seed CSVs: what the report read from its study's run folders besides them (the
CSVs' names, the study's wall time per invocation, the runs' commits and devices as
:func:`provenance.summarise` states them, the *Missing* lines). With the CSVs it is all a report is
computed from, so ``--from-csv`` regenerates the report without the run folders (:func:`from_csv`)."""


def read_index(root: Path) -> pd.DataFrame | None:
    """``<root>/index.csv`` (job → run folder, evaluations), or None where no job has been indexed."""
    path = Path(root) / "index.csv"
    if not path.exists():
        return None
    index = pd.read_csv(path, dtype=paired.INDEX_DTYPES)
    if {"group", "job", "run_dir"} <= set(index.columns):
        # A run folder is where the study keeps it, <root>/runs/<group>/<job>: the index's run_dir was
        # written relative to the directory the study ran from, which a report made from elsewhere (or a
        # study folder moved) does not share; read from there, the cells would silently be missing.
        here = [Path(root) / "runs" / str(g) / str(j) for g, j in zip(index.group, index.job)]
        index["run_dir"] = [str(h) if h.is_dir() else d for h, d in zip(here, index.run_dir)]
        runs.flag_same_runs(index.run_dir.unique(), f"the study in {root}")  # a copied job is no seed
    return index


def run_inputs(root: Path, index: pd.DataFrame | None, missing: list[str], paths: dict[str, Path]) -> dict:
    """The :data:`INPUTS` record of a study's run folders under ``root``: ``per_seed`` {part: CSV file
    name}, ``wall_seconds`` (one per invocation, ``wall_seconds.txt``), ``runs`` (the starts' commits and
    devices, :func:`provenance.summarise`) and ``missing`` (the *Missing* section's lines)."""
    root = Path(root)
    wall_file = root / "wall_seconds.txt"
    walls = [float(x) for x in wall_file.read_text().split()] if wall_file.exists() else []
    run_dirs = (
        index.run_dir.unique()
        if index is not None
        else sorted(str(p.parent) for p in root.glob(f"runs/*/*/{provenance.PROVENANCE}"))
    )
    if index is None:
        missing = [
            f"`{root / 'index.csv'}` does not exist: no job has been evaluated and indexed yet",
            *missing,
        ]
    return {
        "per_seed": {part: Path(p).name for part, p in paths.items()},
        "wall_seconds": walls,
        "runs": provenance.summarise(provenance.run_commits(run_dirs)),
        "missing": missing,
    }


def save_inputs(figdir: Path, inputs: dict) -> dict:
    """Write ``inputs`` as ``<figdir>/report_inputs.json``; returns it as read back (what
    :func:`from_csv` will see), so a fresh report and a regenerated one are rendered from the same data."""
    text = json.dumps(inputs, indent=1, ensure_ascii=False) + "\n"
    write_text(Path(figdir) / INPUTS, text)
    return json.loads(text)


def load_inputs(src: Path, flag: str = "--from-csv") -> tuple[dict[str, Path], dict]:
    """(per-seed CSV paths by part, the :data:`INPUTS` record) of a report's folder ``src``; a missing
    or unreadable file, or a CSV it names that is not there, stops with the path (and the command-line
    ``flag`` that named the folder)."""
    src = Path(src)
    path = src / INPUTS
    try:
        inputs = json.loads(path.read_text())
        paths = {part: src / f for part, f in inputs["per_seed"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(
            f"Error: {flag} {src}: {path} is missing or not a report-inputs record ({e}); it is written "
            "beside the per-seed CSVs by the report generated from the run folders"
        ) from None
    absent = [str(p) for p in paths.values() if not p.is_file()]
    if absent:
        raise SystemExit(
            f"Error: {flag} {src}: {INPUTS} names per-seed CSVs that are not there: {', '.join(absent)}"
        )
    return paths, inputs


def from_csv(render, src: Path, out_dir: Path, name: str, command: str, setup: dict | None) -> Path:
    """A report regenerated from its per-seed CSVs and :data:`INPUTS` in ``src`` alone (no run folder):
    they are copied into ``<out_dir>/<name>/`` (unless that is ``src``) and ``render(paths, inputs,
    out_dir, name, command, setup)`` writes the report as the one from the run folders would be."""
    paths, inputs = load_inputs(src)
    figdir = Path(out_dir) / name
    figdir.mkdir(parents=True, exist_ok=True)
    if figdir.resolve() != Path(src).resolve():
        for p in [*paths.values(), Path(src) / INPUTS]:
            shutil.copyfile(p, figdir / p.name)
        paths = {part: figdir / p.name for part, p in paths.items()}
    return render(paths, inputs, out_dir, name, command, setup)


def job_keys(frame: pd.DataFrame) -> list[tuple]:
    """One (group, task, scorer, arch, train_sigma, seed) per row of a per-seed frame (or an index):
    typed alike whether the frame was read from a CSV or computed (σ a float, seed an int)."""
    return list(
        zip(
            *(frame[c].astype(str) for c in ("group", "task", "scorer", "arch")),
            frame.train_sigma.astype(float),
            frame.seed.astype(int),
        )
    )


def prior_jobs(prior: Path, read=paired.read_back) -> set[tuple]:
    """The jobs (:func:`job_keys`) whose rows a published report's folder ``prior`` holds: what a study
    continued from it (``--continue-from``) does not train again. ``read``: the report's reader of its
    per-seed CSVs (the early report's has its own columns)."""
    paths, _ = load_inputs(prior)
    return set(job_keys(read(paths)))


def with_prior(
    parts: dict[str, pd.DataFrame], prior: Path | None, read=paired.read_back
) -> tuple[dict[str, pd.DataFrame], dict | None]:
    """This study's per-seed parts (from its run folders) joined with those published in ``prior`` (a
    report's folder: per-seed CSVs and :data:`INPUTS`) — a study continued in a later session, whose
    earlier run folders are gone (``--continue-from``). A job in both keeps only the new rows (it was
    trained again). Returns (the parts, ``prior``'s inputs record; None without ``prior``)."""
    if prior is None:
        return dict(parts), None
    paths, inputs = load_inputs(prior)
    old = read(paths)
    out = {}
    for part in dict.fromkeys([*parts, *old.part.unique()]):
        new = parts.get(part)
        kept = old[old.part == part].drop(columns="part")
        if new is not None and not new.empty:
            fresh = set(job_keys(new))
            kept = kept[[k not in fresh for k in job_keys(kept)]]
            kept = pd.concat([new, kept], ignore_index=True)
        out[part] = kept
    return out, inputs


def trained_index(
    index: pd.DataFrame | None, parts: dict[str, pd.DataFrame], evaluated
) -> pd.DataFrame | None:
    """``index`` (job → evaluations) with the jobs that only published rows hold (:func:`with_prior`)
    added, each with the evaluations its published rows come from (their ``evaluation`` column; every
    evaluation ``evaluated(group, task)`` names where rows carry none): what :func:`missing_jobs`
    counts, so the *Missing* lines of a continued report are its own, not the earlier report's."""
    rows = [
        f[[*paired.JOB_COLUMNS, *(["evaluation"] if "evaluation" in f else [])]]
        for f in parts.values()
        if f is not None and not f.empty
    ]
    if not rows:
        return index
    jobs = pd.concat(rows, ignore_index=True).drop_duplicates()
    known = set(zip(index.group, index.job)) if index is not None else set()  # by (group, Job.name)
    extra = []
    stored: dict[tuple, set] = {}  # job key -> the evaluations its published rows come from
    names = jobs.evaluation if "evaluation" in jobs else [None] * len(jobs)
    for key, name in zip(job_keys(jobs), names):
        stored.setdefault(key, set()).update([name] if isinstance(name, str) else [])
    for (group, task, scorer, arch, sigma, seed), evals in stored.items():
        job = f"{task}-{scorer}-{arch}-sigma{sigma:g}-s{seed}"
        if (group, job) in known:
            continue
        for evaluation in sorted(evals) or evaluated(group, task) or [None]:
            extra.append({"group": group, "task": task, "job": job, "evaluation": evaluation})
    if not extra:
        return index
    extra = pd.DataFrame(extra)
    return extra if index is None else pd.concat([index, extra], ignore_index=True)


ROOT_ID = ".root_id"
"""In a study's run folder: a random identity, so that a continued report published and then joined
again with the same folder (``--continue-from`` twice in one session) counts that folder's runs once."""


def root_id(root: Path) -> str | None:
    """``root``'s identity (:data:`ROOT_ID`), made on first use; None where ``root`` does not exist."""
    root = Path(root)
    if not root.is_dir():
        return None
    path = root / ROOT_ID
    if not path.is_file():
        write_text(path, uuid.uuid4().hex + "\n")
    return path.read_text().strip()


def shown_path(path: Path) -> str:
    """``path`` as a published record states it: relative to the working directory where it lies inside
    it, else from its ``docs/`` part (a report's folder in another checkout), else its name alone (no
    machine's absolute path in a committed file)."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        parts = path.parts
        return str(Path(*parts[parts.index("docs") :])) if "docs" in parts else path.name


def continued_inputs(prior: dict, new: dict, source: Path, root: Path | None = None) -> dict:
    """The :data:`INPUTS` record of a continued study: the published record ``prior`` and this session's
    ``new`` one (from the run folder ``root``) joined: wall times one after the other, runs summed
    (:func:`provenance.merge_summaries`), the *Missing* lines this report's own. The
    earlier record is kept under ``continued`` with ``root``'s identity: where ``prior`` was itself
    joined with this ``root`` (a report published, then made again), its earlier record is used, so
    that no run or wall time is counted twice."""
    ident = root_id(root) if root is not None else None
    before = prior.get("continued") or {}
    if ident is not None and before.get("root_id") == ident:
        prior = before["earlier"]
    out = dict(new)
    out["wall_seconds"] = [*prior.get("wall_seconds", []), *new["wall_seconds"]]
    out["runs"] = provenance.merge_summaries(prior.get("runs", {}), new["runs"])
    out["missing"] = list(new["missing"])  # the published jobs counted with what they hold (trained_index)
    if prior.get("reconstructed"):
        out["reconstructed"] = prior["reconstructed"]
    earlier = {k: v for k, v in prior.items() if k != "per_seed"}
    out["continued"] = {"from": shown_path(source), "root_id": ident, "earlier": earlier}
    return out


# ------------------------------------------------------------------ missing data
def missing_jobs(
    index: pd.DataFrame | None, setup: Mapping | None, evaluated: Callable[[str, str], list[str]]
):
    """Lines naming what the study's config asks for and the index lacks: per group, jobs not in the
    index, and evaluations (``evaluated(group, task)``: the evaluation keys that run on a job of that
    study task key in that group, :func:`evaluated_keys`) not stored."""
    if not setup:
        return []
    lines = []
    have = index if index is not None else pd.DataFrame(columns=["group", "task", "job", "evaluation"])
    for group, g in setup.get("groups", {}).items():
        expected = len(matrix.group_cells(g, setup.get("seeds", [])))  # with its `more` sub-matrices
        rows = have[have.group == group]
        got = rows.job.nunique() if len(rows) else 0
        if got < expected:
            lines.append(f"group `{group}`: {got} of {expected} jobs trained and indexed")
        for task in g["tasks"]:
            want = evaluated(group, task)
            t = rows[rows.task == task]
            for key in want:
                n = t[t.evaluation == key].job.nunique() if len(t) else 0
                if n < t.job.nunique() or (got and not len(t)):
                    lines.append(f"group `{group}`, task `{task}`: `{key}` stored for {n} jobs")
    return lines


def evaluated_keys(setup: Mapping | None) -> Callable[[str, str], list[str]]:
    """(group, study task key) → the study's evaluation keys that run on such a job: the runner's rule
    (:func:`ssa_repro.evaluation.choice.chosen`) on the key's registered task: from ``task_names`` where
    the setup has it (``cli/study.py`` ``report_setup``: as the runner composes it), else the key's
    ``task=`` override, else the key itself."""
    setup = setup or {}
    evals, tasks, names = setup.get("evaluations", {}), setup.get("tasks", {}), setup.get("task_names", {})

    def registered(task: str) -> str:
        if task in names:
            return names[task]
        named = [o.split("=", 1)[1] for o in tasks.get(task, []) if o.startswith("task=")]
        return named[-1] if named else task

    def which(group: str, task: str) -> list[str]:
        return chosen(evals, registered(task), group)

    return which


def gather(
    root: Path, figdir: Path, setup: Mapping | None, prior: Path | None, per_seed, export, read_back
) -> tuple[dict[str, Path], dict]:
    """Every report kind's ``write`` up to its render: the run folders' per-seed parts (``per_seed(index)``,
    {} without an index) joined with ``prior``'s (:func:`with_prior`, read by ``read_back``), exported as
    CSVs into ``figdir`` (``export(parts, figdir)``), and the inputs record (what ran, what is missing,
    continued from ``prior``'s) saved beside them. Returns (the CSVs' paths, the inputs record)."""
    figdir.mkdir(parents=True, exist_ok=True)
    index = read_index(root)
    parts, prior_inputs = with_prior(per_seed(index) if index is not None else {}, prior, read=read_back)
    paths = export(parts, figdir)
    evaluated = evaluated_keys(setup)
    missing = missing_jobs(trained_index(index, parts, evaluated), setup, evaluated)
    inputs = run_inputs(root, index, missing, paths)
    if prior_inputs is not None:
        inputs = continued_inputs(prior_inputs, inputs, prior, root)
    return paths, save_inputs(figdir, inputs)
