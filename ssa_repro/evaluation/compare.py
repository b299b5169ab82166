"""Compare the evaluation grids of several runs, or of a Hydra sweep (``python scripts/compare.py``).

Inputs: run folders (each with ``config.yaml`` and ``eval/<name>/results.csv`` or ``eval/quick/grid.csv``),
or one multirun folder (``outputs/multirun/<time>/``: every job folder below it, found by its
``.hydra/overrides.yaml``). Everything is read from those files; nothing is written into a run folder.

- **Groups.** A run list gives one panel per run, labelled by what tells the runs apart (scorer, then
  model, seed, step, folder name, as needed). A sweep is grouped by the keys overridden in each job's
  ``.hydra/overrides.yaml`` except ``seed``; the seeds of a group are averaged cell-wise (mean, sample
  std with ddof=1, count) and listed in the panel title. Job folders without results (training not
  finished, failed — a multirun job that stopped with an error leaves ``failed.txt`` — or the chosen
  evaluation not run) are listed with the reason and left out; the rest is still compared. Job
  folders are found by ``.hydra/overrides.yaml`` whatever their names (``<num>_<...>`` or the
  override-named folders of ``conf/train.yaml``).
- **Evaluation and metric.** ``eval="auto"`` takes the task's full grid (``linear_grid`` /
  ``quantifier_grid``) when every run has it, else the ``quick`` grid every training run writes. The
  metric defaults to ``mse`` (linear) or ``sequence_error`` (every/some); only the model's own rows
  (``predictor == "model"``) are compared. All metrics here are errors: lower is better.
- **Grid axes.** linear: σ_F (rows) × σ_I (columns); every/some: σ (rows) × prompt length (columns).
- **Heat maps** (``plot_grids``): one panel per run or group on ONE colour scale, from the smallest to the
  largest value over all panels (logarithmic for MSE, whose errors span decades); cells annotated
  (mean, and ± the seed std when a group has several seeds and the grid is small).
- **Difference map** (``difference``, ``plot_difference``): each run or group against the baseline
  (``softmax`` by default when present). For MSE it is ``log10(MSE / MSE_baseline)`` (−1: ten times
  smaller error than the baseline; values clipped at 1e-12 first); for error rates it is the plain
  difference ``error − error_baseline``. Diverging palette RdBu_r centred on 0, symmetric limits
  shared by all panels: blue = lower error than the baseline, red = higher.
- **Summary** (``summary_table``): per run or group, the mean over the grid (and the geometric mean for
  MSE), ``in_dist`` = the mean over the cells at the smallest σ (σ_F and σ_I both smallest for linear;
  every length at the smallest σ for quantifiers), the worst cell and where it is, and the fraction of
  cells where it beats the baseline (strictly lower error) or ties with it.

Files written by ``write`` (into ``out_dir``, by default ``<common parent>/compare/<time>`` for run
lists and ``<sweep>/compare`` for a sweep): ``heatmaps.png/.pdf``, ``difference.png/.pdf``,
``summary.csv``, ``summary.md`` (table, definitions, what was left out), ``cells.csv`` (per group and
cell: mean, std, count), ``runs.csv`` (per run and cell), ``difference.csv`` and ``compare.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
import yaml  # noqa: E402
from matplotlib.colors import LogNorm, Normalize  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

TASK_GRID = {"linear": "linear_grid", "every": "quantifier_grid", "some": "quantifier_grid"}
DEFAULT_METRIC = {"linear": "mse", "every": "sequence_error", "some": "sequence_error"}
AXES = {"linear": ("sigma_f", "sigma_x"), "every": ("sigma_x", "length"), "some": ("sigma_x", "length")}
LOG_METRICS = {"mse"}
AXIS_TEXT = {  # (axis label, short name in cell coordinates)
    "linear": {
        "sigma_f": ("σ_F (std of a and b)", "σ_F"),
        "sigma_x": ("σ_I (std of inputs x)", "σ_I"),
        "length": ("examples per prompt", "n"),
    },
    "quantifier": {
        "sigma_x": ("σ (std of test inputs)", "σ"),
        "length": ("prompt length (numbers)", "len"),
    },
}
# Cell coordinates other than the two axes that may appear in a results table; each must hold a single
# value per run (and the same value in every run) for the grids to be comparable.
OTHER_COORDS = ("sigma_f", "sigma_x", "length", "M", "k")
FLOOR = 1e-12  # log10 ratios clip both sides here first
SEED_KEYS = {"seed"}


class CompareError(ValueError):
    """Inputs that cannot be compared: said before any figure or table is made."""


# ---------------------------------------------------------------------------------------------- runs


@dataclass
class Run:
    """A run folder, as far as its files tell (nothing is loaded onto a device)."""

    path: Path
    cfg: dict
    overrides: list[str] | None = None  # a sweep job's .hydra/overrides.yaml

    @property
    def task(self) -> str:
        return str(self.cfg["task"]["name"])

    @property
    def scorer(self) -> str:
        s = self.cfg.get("scorer", {})
        return str(s.get("label") or s.get("name"))

    @property
    def model(self) -> str:
        return str(self.cfg.get("model", {}).get("name"))

    @property
    def seed(self):
        return self.cfg.get("seed")

    @property
    def finished(self) -> bool:
        return (self.path / "summary.json").exists()

    def table(self, name: str) -> Path:
        """The long-form table of evaluation ``name`` (``quick``: the end-of-training grid)."""
        return (
            self.path / "eval" / "quick" / "grid.csv"
            if name == "quick"
            else self.path / "eval" / name / "results.csv"
        )

    def evals(self) -> list[str]:
        found = sorted(p.parent.name for p in (self.path / "eval").glob("*/results.csv"))
        return (["quick"] if self.table("quick").exists() else []) + found

    def step(self, frame: pd.DataFrame | None = None):
        """Training steps behind the results: the table's ``step`` column, else summary.json."""
        if frame is not None and "step" in frame and frame["step"].notna().any():
            return int(frame["step"].dropna().iloc[0])
        summary = self.path / "summary.json"
        if summary.exists():
            return json.loads(summary.read_text()).get("steps")
        return None

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


def _is_run(path: Path) -> bool:
    return (path / "config.yaml").is_file()


def _is_sweep(path: Path) -> bool:
    return (path / "multirun.yaml").is_file() or bool(_job_dirs(path))


def _job_dirs(sweep: Path) -> list[Path]:
    """Job folders below a multirun folder (each holds .hydra/overrides.yaml), in job-number order."""
    jobs = {
        p.parent.parent
        for p in sweep.rglob(".hydra/overrides.yaml")
        if "compare" not in p.relative_to(sweep).parts[:1]
    }

    def order(p: Path):
        head = p.relative_to(sweep).parts[0].split("_", 1)[0]
        return (int(head) if head.isdigit() else math.inf, str(p))

    return sorted(jobs, key=order)


def _read_run(path: Path) -> Run:
    try:
        cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    except yaml.YAMLError as e:
        raise CompareError(f"{path}/config.yaml is not readable YAML: {e}") from None
    if not isinstance(cfg, dict) or "task" not in cfg:
        raise CompareError(f"{path}/config.yaml has no task: not a training run's config")
    ov = path / ".hydra" / "overrides.yaml"
    overrides = [str(o) for o in (yaml.safe_load(ov.read_text()) or [])] if ov.exists() else None
    return Run(path, cfg, overrides)


def _why_missing(run: Run, name: str) -> str:
    """Why a job folder has no results: failed (its failed.txt), not finished, or not evaluated."""
    failed = run.path / "failed.txt"
    if failed.exists() and not run.finished:
        first = (failed.read_text().splitlines() or [""])[0]
        return f"failed: {first[:300]}"
    return "training not finished (no summary.json)" if not run.finished else f"no {name} results"


def _run_inside(path: Path) -> Path | None:
    """The run folder ``path`` is (or lies inside), if any."""
    for p in (path, *path.parents):
        if _is_run(p):
            return p
    return None


def _override_key(o: str) -> tuple[str, str]:
    key, _, value = o.lstrip("+~").partition("=")
    return key, value


def _expected_jobs(sweep: Path) -> list[list[str]] | None:
    """The override list of every job multirun.yaml describes (basic sweeper), or None if unknown."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        cfg = yaml.safe_load((sweep / "multirun.yaml").read_text())
        hydra = cfg["hydra"]
        if "basic" not in str(hydra.get("sweeper", {}).get("_target_", "basic")).lower():
            return None
        args = [str(a) for a in hydra["overrides"]["task"]]
        args += [f"{k}={v}" for k, v in (hydra.get("sweeper", {}).get("params") or {}).items()]
        parsed = OverridesParser.create().parse_overrides(args)
        return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    except Exception:  # noqa: BLE001  (a hand-made or foreign multirun.yaml: just skip the count)
        return None


def newest_runs(root: str | Path, n: int = 4) -> list[Path]:
    """The newest finished runs under ``root`` (by summary.json time) that share the newest one's task:
    a default for the notebook. Sweep jobs count as runs; comparison folders are skipped."""
    found = []
    for summary in Path(root).expanduser().rglob("summary.json"):
        run = summary.parent
        if _is_run(run) and (run / "eval").is_dir():
            found.append((summary.stat().st_mtime, run))
    found.sort(reverse=True)
    if not found:
        return []
    task = _read_run(found[0][1]).task
    return [run for _, run in found if _read_run(run).task == task][:n]


# ------------------------------------------------------------------------------------------ groups


@dataclass
class Group:
    """One panel: a run, or the seeds of one sweep setting."""

    label: str
    runs: list[Run]
    steps: list = field(default_factory=list)

    @property
    def seeds(self) -> list:
        return [r.seed for r in self.runs]

    @property
    def scorers(self) -> list[str]:
        return sorted({r.scorer for r in self.runs})

    def describe(self) -> str:
        r = self.runs[0]
        steps = sorted({s for s in self.steps if s is not None})
        step = "step " + ("/".join(str(s) for s in steps) if steps else "?")
        models = "/".join(sorted({x.model for x in self.runs}))
        line = f"{r.task} · {'/'.join(self.scorers)} · {models} · {step}"
        if len(self.runs) == 1:
            return f"{line} · seed {r.seed}"
        return f"{line}\nseeds {', '.join(str(s) for s in self.seeds)} (n={len(self.runs)}, mean)"


@dataclass
class Comparison:
    """Everything the figures and tables are made from (``collect`` builds it)."""

    task: str
    eval: str
    metric: str
    rows: str  # the grid's axes (columns of the long tables)
    cols: str
    groups: list[Group]
    per_run: pd.DataFrame  # label, run, seed, step, <rows>, <cols>, value
    cells: pd.DataFrame  # label, <rows>, <cols>, mean, std, count
    missing: list[tuple[str, str]] = field(default_factory=list)  # (folder, why) left out
    sweep: Path | None = None
    common_overrides: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fixed: dict = field(default_factory=dict)  # coordinates that are constant (e.g. length for linear)

    @property
    def labels(self) -> list[str]:
        return [g.label for g in self.groups]

    @property
    def log(self) -> bool:
        return self.metric in LOG_METRICS

    @property
    def kind(self) -> str:
        return "linear" if self.task == "linear" else "quantifier"

    def axis_label(self, axis: str) -> str:
        return AXIS_TEXT[self.kind].get(axis, (axis, axis))[0]

    def short(self, axis: str) -> str:
        return AXIS_TEXT[self.kind].get(axis, (axis, axis))[1]

    def grid(self, label: str, stat: str = "mean") -> pd.DataFrame:
        """A group's grid (``stat``: mean, std or count), largest σ on top, as in the single-run plots."""
        frame = self.cells[self.cells.label == label]
        table = frame.pivot(index=self.rows, columns=self.cols, values=stat)
        return table.sort_index(ascending=False).sort_index(axis=1)

    def group(self, label: str) -> Group:
        return next(g for g in self.groups if g.label == label)


# ------------------------------------------------------------------------------------------ collect


def find_runs(paths) -> tuple[list[Run], Path | None, list[tuple[str, str]]]:
    """Run folders from the paths (run folders, or one sweep folder): (runs, sweep, job folders that have
    no config.yaml yet). Raises CompareError naming every path that is neither."""
    paths = [Path(p).expanduser() for p in paths]
    if not paths:
        raise CompareError("give run folders, or a sweep (multirun) folder")
    bad, runs, sweeps = [], [], []
    for p in paths:
        if not p.exists():
            bad.append(f"{p} does not exist")
        elif not p.is_dir():
            bad.append(f"{p} is a file, not a run folder or a sweep folder")
        elif _is_run(p):
            runs.append(p)
        elif _is_sweep(p):
            sweeps.append(p)
        else:
            inside = _run_inside(p)
            hint = f" (it lies inside the run folder {inside}: give that)" if inside else ""
            bad.append(
                f"{p} is neither a run folder (no config.yaml) nor a sweep folder (no multirun.yaml, "
                f"no job folders with .hydra/overrides.yaml){hint}"
            )
    if bad:
        raise CompareError("\n  - ".join(["cannot compare:", *bad]))
    if sweeps and (runs or len(sweeps) > 1):
        raise CompareError(
            "give either one sweep folder or run folders, not both: "
            + ", ".join(str(p) for p in [*sweeps, *runs])
        )
    if sweeps:
        sweep = sweeps[0]
        jobs = _job_dirs(sweep)
        if not jobs:
            raise CompareError(f"{sweep} has a multirun.yaml but no job folders yet (nothing started)")
        no_cfg = [(str(j), "no config.yaml (not started)") for j in jobs if not _is_run(j)]
        return [_read_run(j) for j in jobs if _is_run(j)], sweep, no_cfg
    resolved = [p.resolve() for p in runs]
    twice = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    if twice:
        raise CompareError(f"the same run folder is given more than once: {', '.join(twice)}")
    if len(runs) < 2:
        raise CompareError(f"give at least two run folders to compare (or a sweep folder); got {runs[0]}")
    return [_read_run(p) for p in runs], None, []


def _choose_eval(runs: list[Run], task: str, name: str, sweep: bool) -> str:
    have = {r.path: r.evals() for r in runs}
    with_any = [r for r in runs if have[r.path]]
    if not sweep:
        none = [str(r.path) for r in runs if not have[r.path]]
        if none:
            raise CompareError(
                "no evaluation results (eval/quick/grid.csv or eval/<name>/results.csv) in "
                + ", ".join(none)
                + ": is training finished?"
            )
    if not with_any:
        raise CompareError("no job of the sweep has evaluation results yet (nothing finished)")
    if name == "auto":
        for cand in (TASK_GRID[task], "quick"):
            if all(cand in have[r.path] for r in with_any):
                return cand
    elif all(name in have[r.path] for r in with_any) or (
        sweep and any(name in have[r.path] for r in with_any)
    ):
        return name
    common = sorted(set.intersection(*(set(have[r.path]) for r in with_any)))
    lines = [f"{r.path}: {', '.join(have[r.path]) or 'none'}" for r in with_any]
    wanted = f"{TASK_GRID[task]} or quick" if name == "auto" else name
    raise CompareError(
        f"no common evaluation: wanted {wanted} in every run; evaluations present in all: "
        f"{', '.join(common) or 'none'}\n  - " + "\n  - ".join(lines)
    )


def _labels_for_runs(runs: list[Run], steps: list) -> list[str]:
    """The shortest labels that tell the runs apart: scorer, then model, seed, step, folder name."""
    fields = [
        lambda r, s: r.scorer,
        lambda r, s: r.model,
        lambda r, s: f"s{r.seed}",
        lambda r, s: f"step {s}",
        lambda r, s: r.path.name,
        lambda r, s: str(r.path),
    ]
    chosen = [0]
    for i in range(1, len(fields) + 1):
        labels = [" · ".join(fields[j](r, s) for j in chosen) for r, s in zip(runs, steps)]
        if len(set(labels)) == len(labels) or i == len(fields):
            return labels
        if len({fields[i](r, s) for r, s in zip(runs, steps)}) > 1:
            chosen.append(i)
    return labels  # pragma: no cover


def _read_table(run: Run, name: str, metric: str, task: str) -> pd.DataFrame:
    frame = pd.read_csv(run.table(name))
    if "predictor" in frame:
        frame = frame[frame.predictor == "model"]
    if metric not in set(frame.get("metric", pd.Series(dtype=str))):
        have = sorted(set(frame.get("metric", pd.Series(dtype=str))))
        raise CompareError(
            f"metric {metric!r} is not in {run.table(name)} (it has: {', '.join(have) or 'nothing'}); "
            "choose one with --metric"
        )
    frame = frame[frame.metric == metric]
    missing = [a for a in AXES[task] if a not in frame]
    if missing:
        raise CompareError(f"{run.table(name)} has no column {', '.join(missing)}: not a {task} grid")
    return frame


def _check_axes(frames: dict[Path, pd.DataFrame], rows: str, cols: str, kind: str) -> dict:
    """Same grid in every run, else a CompareError saying which axis differs and how."""
    problems, fixed = [], {}
    first = next(iter(frames))
    for coord in (rows, cols, *[c for c in OTHER_COORDS if c not in (rows, cols)]):
        values = {
            p: sorted({float(v) for v in f[coord].dropna()}) if coord in f else [] for p, f in frames.items()
        }
        if coord not in (rows, cols):
            varying = [str(p) for p, v in values.items() if len(v) > 1]
            if varying:
                problems.append(
                    f"{coord} varies within the results of {', '.join(varying)}: compare.py draws "
                    f"{rows} × {cols} grids only"
                )
                continue
        ref = values[first]
        differ = [p for p, v in values.items() if v != ref]
        if differ:
            name = AXIS_TEXT[kind].get(coord, (coord,))[0]
            lines = [f"{p}: {_fmt_list(values[p])}" for p in [first, *differ]]
            problems.append(f"grids differ in {coord} ({name}):\n      " + "\n      ".join(lines))
        elif coord not in (rows, cols) and ref:
            fixed[coord] = ref[0]
    for p, f in frames.items():
        dup = f.duplicated([rows, cols]).sum()
        if dup:
            problems.append(f"{p} has {dup} duplicate cells ({rows}, {cols}) in its results")
    if problems:
        raise CompareError("\n  - ".join(["the grids cannot be compared:", *problems]))
    return fixed


def _fmt_list(v: list) -> str:
    return "[" + ", ".join(f"{x:g}" for x in v) + "]"


def collect(paths, eval: str = "auto", metric: str | None = None, group_by=None) -> Comparison:  # noqa: A002
    """Read the runs (or the sweep) and check they can be compared; all errors come before any figure.

    ``paths``: run folders, or a single sweep folder. ``eval``: an evaluation name, ``quick`` or ``auto``.
    ``group_by``: for run lists, config keys (e.g. ``["scorer"]``) whose runs are averaged as seeds.
    """
    runs, sweep, missing = find_runs(paths)
    tasks: dict[str, list[str]] = {}
    for r in runs:
        tasks.setdefault(r.task, []).append(str(r.path))
    if len(tasks) > 1:
        raise CompareError(
            "runs of different tasks cannot be compared:\n  - "
            + "\n  - ".join(f"{t}: {', '.join(ps)}" for t, ps in tasks.items())
        )
    if not runs:
        raise CompareError(f"no job folder of {sweep} has a config.yaml yet (nothing started)")
    task = runs[0].task
    if task not in AXES:
        raise CompareError(f"task {task!r} has no grid layout here (known: {', '.join(AXES)})")
    name = _choose_eval(runs, task, eval, sweep is not None)
    metric = metric or DEFAULT_METRIC[task]
    rows, cols = AXES[task]

    used = []
    for r in runs:
        # a sweep job that failed, or whose training has not finished, may hold results of an earlier
        # start (a resume with more steps): those are not its results
        stale = sweep is not None and not r.finished and (name == "quick" or (r.path / "failed.txt").exists())
        if r.table(name).exists() and not stale:
            used.append(r)
        else:
            missing.append((str(r.path), _why_missing(r, name)))
    frames = {r.path: _read_table(r, name, metric, task) for r in used}
    kind = "linear" if task == "linear" else "quantifier"
    fixed = _check_axes(frames, rows, cols, kind)
    steps = {r.path: r.step(frames[r.path]) for r in used}

    notes = _eval_config_notes(used, name)
    common: list[str] = []
    if sweep is not None:
        expected = _expected_jobs(sweep) or []
        jobs = _job_dirs(sweep)
        present = [set(yaml.safe_load((j / ".hydra" / "overrides.yaml").read_text()) or []) for j in jobs]
        if len(expected) > len(jobs):
            later = [job for job in expected if set(job) not in present]
            missing += [(f"(no folder yet) {' '.join(job)}", "not started") for job in later]
            notes.append(f"multirun.yaml describes {len(expected)} jobs; {len(jobs)} job folders exist")
        all_ov = [dict(_override_key(o) for o in (r.overrides or [])) for r in runs]
        all_ov += [dict(_override_key(o) for o in job) for job in expected]
        keys = sorted({k for ov in all_ov for k in ov if k not in SEED_KEYS and not k.startswith("hydra.")})
        varying = [k for k in keys if len({ov.get(k) for ov in all_ov}) > 1]
        common = [f"{k}={all_ov[0][k]}" for k in keys if k not in varying and k in all_ov[0]]

        def key_of(r: Run):
            ov = dict(_override_key(o) for o in (r.overrides or []))
            return ", ".join(f"{k}={ov.get(k, '—')}" for k in varying) or "all jobs"

        order: dict[str, list[Run]] = {}
        for r in used:
            order.setdefault(key_of(r), []).append(r)
        groups = [Group(k, rs, [steps[r.path] for r in rs]) for k, rs in order.items()]
    elif group_by:
        order = {}
        for r in used:
            key = ", ".join(f"{k}={r.lookup(k)}" for k in group_by)
            order.setdefault(key, []).append(r)
        groups = [Group(k, rs, [steps[r.path] for r in rs]) for k, rs in order.items()]
    else:
        labels = _labels_for_runs(used, [steps[r.path] for r in used])
        groups = [Group(lab, [r], [steps[r.path]]) for lab, r in zip(labels, used)]

    parts = []
    for g in groups:
        for r in g.runs:
            f = frames[r.path]
            parts.append(
                pd.DataFrame(
                    {
                        "label": g.label,
                        "run": str(r.path),
                        "seed": r.seed,
                        "step": steps[r.path],
                        rows: f[rows].astype(float).values,
                        cols: f[cols].astype(float).values,
                        "value": f["value"].astype(float).values,
                    }
                )
            )
    per_run = pd.concat(parts, ignore_index=True)
    if cols == "length":
        per_run[cols] = per_run[cols].astype(int)
    cells = (
        per_run.groupby(["label", rows, cols], sort=False)["value"]
        .agg(mean="mean", std="std", count="count")
        .reset_index()
    )
    return Comparison(
        task=task,
        eval=name,
        metric=metric,
        rows=rows,
        cols=cols,
        groups=groups,
        per_run=per_run,
        cells=cells,
        missing=missing,
        sweep=sweep,
        common_overrides=common,
        notes=notes,
        fixed=fixed,
    )


def _eval_config_notes(runs: list[Run], name: str) -> list[str]:
    """Evaluation settings that differ between runs (same grid, but e.g. other prompts or counts)."""
    configs = {}
    for r in runs:
        if name == "quick":
            configs[r.path] = r.cfg.get("evaluation") or {}
        else:
            s = r.table(name).parent / "summary.json"
            configs[r.path] = json.loads(s.read_text()).get("eval_config", {}) if s.exists() else {}
    keys = sorted({k for c in configs.values() for k in c})
    differ = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs.values()}) > 1]
    return [f"evaluation settings differ between runs in: {', '.join(differ)}"] if differ else []


# ------------------------------------------------------------------------------------------- tables


def resolve_baseline(comp: Comparison, baseline: str | None = None) -> str | None:
    """The baseline's label: ``baseline`` as a label, ``key=value`` part or scorer; by default the first
    group whose scorer is softmax, else None (no difference map)."""
    labels = comp.labels
    if baseline is None:
        return next((g.label for g in comp.groups if g.scorers == ["softmax"]), None)
    if baseline in labels:
        return baseline
    hits = [g.label for g in comp.groups if baseline in g.label.split(", ") or g.scorers == [baseline]]
    hits += [lab for lab in labels if lab.split(" · ")[0] == baseline and lab not in hits]
    if len(hits) >= 1:
        return hits[0]
    raise CompareError(f"--baseline {baseline!r} matches no run or group; labels: {', '.join(labels)}")


def difference_mode(comp: Comparison, mode: str = "auto") -> str:
    if mode == "auto":
        return "log10_ratio" if comp.log else "diff"
    if mode not in ("diff", "log10_ratio"):
        raise CompareError(f"difference mode {mode!r}: use auto, diff or log10_ratio")
    return mode


def difference(comp: Comparison, baseline: str | None = None, mode: str = "auto") -> dict[str, pd.DataFrame]:
    """Per non-baseline group, its grid against the baseline's: ``mean − mean_baseline`` (``diff``) or
    ``log10(mean / mean_baseline)`` (``log10_ratio``, the default for MSE; both clipped at 1e-12)."""
    base = resolve_baseline(comp, baseline)
    if base is None:
        return {}
    mode = difference_mode(comp, mode)
    ref = comp.grid(base)
    out = {}
    for label in comp.labels:
        if label == base:
            continue
        g = comp.grid(label)
        if mode == "diff":
            out[label] = g - ref
        else:
            out[label] = np.log10(g.clip(lower=FLOOR) / ref.clip(lower=FLOOR))
    return out


def summary_table(comp: Comparison, baseline: str | None = None) -> pd.DataFrame:
    """One row per run or group: grid mean (and geometric mean for MSE), in distribution (the cells at
    the smallest σ), the worst cell and where, and the share of cells that beat / tie the baseline."""
    base = resolve_baseline(comp, baseline)
    ref = comp.grid(base) if base is not None else None
    sigma_axes = [a for a in (comp.rows, comp.cols) if a.startswith("sigma")]
    rows = []
    for g in comp.groups:
        cells = comp.cells[comp.cells.label == g.label]
        grid = comp.grid(g.label)
        v = grid.to_numpy(dtype=float)
        in_dist = cells
        for a in sigma_axes:
            in_dist = in_dist[in_dist[a] == cells[a].min()]
        worst = cells.loc[cells["mean"].idxmax()]
        row = {
            "label": g.label,
            "runs": len(g.runs),
            "seeds": ", ".join(str(s) for s in g.seeds),
            "step": "/".join(str(s) for s in sorted({s for s in g.steps if s is not None})) or "?",
            "mean": float(np.nanmean(v)),
        }
        if comp.log:
            row["geo_mean"] = float(10 ** np.nanmean(np.log10(np.clip(v, FLOOR, None))))
        row["in_dist"] = float(in_dist["mean"].mean())
        row["worst"] = float(worst["mean"])
        row["worst_cell"] = (
            f"{comp.short(comp.rows)}={worst[comp.rows]:g}, {comp.short(comp.cols)}={worst[comp.cols]:g}"
        )
        if ref is not None:
            r = ref.to_numpy(dtype=float)
            tie = np.isclose(v, r, rtol=1e-9, atol=1e-12)
            ok = ~np.isnan(v) & ~np.isnan(r)
            n = ok.sum()
            row["beats_baseline"] = np.nan if g.label == base else float(((v < r) & ~tie & ok).sum() / n)
            row["ties_baseline"] = np.nan if g.label == base else float((tie & ok).sum() / n)
        if cells["count"].max() > 1:
            row["seed_std_mean"] = float(cells["std"].mean())
        row["n_cells"] = int(np.isfinite(v).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no tabulate needed); floats with 4 significant digits."""

    def cell(x) -> str:
        if isinstance(x, float):
            return "—" if math.isnan(x) else f"{x:.4g}"
        return str(x).replace("|", "\\|")

    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(x) for x in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


# ------------------------------------------------------------------------------------------ figures


@dataclass
class Plot:
    fig: plt.Figure
    vmin: float
    vmax: float
    log: bool
    paths: list[Path] = field(default_factory=list)


def short_number(v: float, signed: bool = False) -> str:
    """At most about 5 characters: 0.015, 0.53, 3.4, 41, 4123, 2e4, 3e-4."""
    if v is None or not np.isfinite(v):
        return ""
    sign = "+" if signed and v > 0 else ""
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e4 or a < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{sign}{m}e{int(e)}"
    if a >= 10:
        return f"{sign}{v:.0f}"
    if a >= 1:
        return f"{sign}{v:.1f}"
    return f"{sign}{v:.2g}"


def short_rate(v: float, signed: bool = False, decimals: int = 2) -> str:
    """Error rates in [0, 1] (and their differences) with fixed decimals: 0, <.01, 0.05, 1.00, +0.12."""
    if v is None or not np.isfinite(v):
        return ""
    if v == 0:
        return "0"
    if signed:
        return f"{v:+.{decimals}f}"
    if abs(v) < 0.5 * 10**-decimals:
        return "<." + "0" * (decimals - 1) + "1"
    return f"{v:.{decimals}f}"


def _formatter(comp: Comparison, values: np.ndarray):
    """Rates get fixed decimals (3 when every value is below 0.1, 4 below 0.01); other values 2-3 digits."""
    values = values[np.isfinite(values)]
    if comp.log or not values.size or np.min(values) < -1 or np.max(values) > 1:
        return short_number
    top = np.max(np.abs(values))
    decimals = 2 if top >= 0.1 else 3 if top >= 0.01 else 4
    return lambda v, signed=False: short_rate(v, signed, decimals)


def _layout(n: int, n_rows: int, n_cols: int, lines: int, two_line_cells: bool = False):
    """Figure size and panels per row so that cells keep a readable size for 1 to many panels."""
    cell_w = 0.5 if n_cols <= 12 else 0.42
    cell_h = (0.34 if n_rows <= 12 else 0.27) * (1.6 if two_line_cells else 1.0)
    pw = n_cols * cell_w + 1.2
    ph = n_rows * cell_h + 0.9 + 0.2 * lines
    per_row = max(1, min(n, 4, int(22 // pw)))
    fig_rows = math.ceil(n / per_row)
    per_row = math.ceil(n / fig_rows)
    size = (max(6.5, per_row * pw + 1.3), fig_rows * ph + 0.7)
    font = 7.5 if cell_h >= 0.32 else 6.0
    return per_row, fig_rows, size, font


def _panels(tables, titles, norm, cmap, suptitle, cbar_label, annot, comp, font_scale=1.0, center=None):
    n = len(tables)
    n_rows, n_cols = tables[0].shape
    two = any("\n" in str(x) for a in annot for x in np.ravel(a))
    lines = max(t.count("\n") + 1 for t in titles)
    per_row, fig_rows, size, font = _layout(n, n_rows, n_cols, lines, two)
    fig, axes = plt.subplots(fig_rows, per_row, figsize=size, squeeze=False, layout="constrained")
    flat = axes.ravel()
    for ax, table, title, ann in zip(flat, tables, titles, annot):
        log = isinstance(norm, LogNorm)
        with warnings.catch_warnings():  # seaborn 0.13 calls cmap.set_bad (deprecated in matplotlib 3.11)
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            sns.heatmap(
                table.clip(lower=norm.vmin) if log else table,
                annot=ann,
                fmt="",
                annot_kws={"fontsize": font * font_scale},
                cmap=cmap,
                norm=norm if log else None,
                vmin=None if log else norm.vmin,
                vmax=None if log else norm.vmax,
                center=center,
                cbar=False,
                linewidths=0.4,
                linecolor="white",
                square=False,
                ax=ax,
            )
        ax.set_title(title, fontsize=8.5)
        ax.set_xlabel(comp.axis_label(comp.cols), fontsize=8)
        ax.set_ylabel(comp.axis_label(comp.rows), fontsize=8)
        ax.set_xticklabels([f"{float(c):g}" for c in table.columns], rotation=0, fontsize=7)
        ax.set_yticklabels([f"{float(r):g}" for r in table.index], rotation=0, fontsize=7)
    for ax in flat[n:]:
        ax.set_visible(False)
    mappable = flat[0].collections[0]
    cbar = fig.colorbar(
        mappable, ax=list(flat[:n]), shrink=min(1.0, 0.5 + 0.25 * fig_rows), pad=0.02, aspect=20 * fig_rows
    )
    cbar.set_label(cbar_label, fontsize=8.5)
    cbar.ax.tick_params(which="both", labelsize=7.5)
    if not isinstance(norm, LogNorm):
        cbar.formatter = FuncFormatter(lambda x, _: f"{x:.3g}")
        cbar.update_ticks()
    width = int(size[0] * 13)  # characters that fit at 10 pt
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in suptitle.splitlines()), fontsize=10)
    return fig


def _what(comp: Comparison) -> str:
    fixed = ", ".join(f"{v:g} {comp.axis_label(k)}" for k, v in comp.fixed.items())
    where = f"eval/{comp.eval}" + (f", {fixed}" if fixed else "")
    return f"{comp.task}: {comp.metric.replace('_', ' ')} of the model ({where})"


def plot_grids(comp: Comparison, path: Path | None = None, annotate_std: bool | None = None) -> Plot:
    """Side-by-side heat maps, one panel per run or group, on one colour scale (log for MSE):
    vmin/vmax are the smallest/largest value over all panels (smallest positive one for log)."""
    tables = [comp.grid(lab) for lab in comp.labels]
    values = np.concatenate([t.to_numpy(dtype=float).ravel() for t in tables])
    values = values[np.isfinite(values)]
    if comp.log:
        pos = values[values > 0]
        vmin = float(pos.min()) if pos.size else FLOOR
        vmax = float(values.max()) if values.size else 1.0
        vmax = vmax if vmax > vmin else vmin * 10
        norm = LogNorm(vmin=vmin, vmax=vmax)
    else:
        vmin = float(values.min()) if values.size else 0.0
        vmax = float(values.max()) if values.size else 1.0
        vmax = vmax if vmax > vmin else vmin + 1.0
        norm = Normalize(vmin=vmin, vmax=vmax)
    n_cells = tables[0].size
    multi = comp.cells["count"].max() > 1
    if annotate_std is None:
        annotate_std = multi and n_cells <= 36
    fmt = _formatter(comp, values)
    annot = []
    for lab, t in zip(comp.labels, tables):
        a = np.vectorize(fmt, otypes=[object])(t.to_numpy(dtype=float))
        if annotate_std:
            s = comp.grid(lab, "std").to_numpy(dtype=float)
            sd = np.vectorize(fmt, otypes=[object])(s)
            a = np.where(np.isfinite(s), a + "\n±" + sd, a)
        annot.append(a)
    titles = [f"{g.label}\n{g.describe()}" for g in comp.groups]
    scale = "log colour scale" if comp.log else "linear colour scale"
    spread = " · cells: seed mean ± std" if annotate_std else (" · cells: seed mean" if multi else "")
    fig = _panels(
        tables,
        titles,
        norm,
        "viridis",
        f"{_what(comp)}\none shared {scale}{spread}",
        f"{comp.metric}{' (log scale)' if comp.log else ''}",
        annot,
        comp,
    )
    return Plot(fig, vmin, vmax, comp.log, _save(fig, path))


def plot_difference(
    comp: Comparison, baseline: str | None = None, mode: str = "auto", path: Path | None = None
) -> Plot | None:
    """The difference map of every run or group against the baseline (see ``difference``): RdBu_r,
    centred on 0, limits ±max|difference| shared by all panels. None when there is no baseline."""
    diffs = difference(comp, baseline, mode)
    if not diffs:
        return None
    base = resolve_baseline(comp, baseline)
    mode = difference_mode(comp, mode)
    values = np.concatenate([d.to_numpy(dtype=float).ravel() for d in diffs.values()])
    lim = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
    lim = lim if lim > 0 else 1.0
    norm = Normalize(vmin=-lim, vmax=lim)
    if mode == "log10_ratio":
        titles = [f"log10({lab} / {base})" for lab in diffs]
        label = f"log10({comp.metric} / {comp.metric} of {base})"
    else:
        titles = [f"{lab} − {base}" for lab in diffs]
        label = f"{comp.metric} − {comp.metric} of {base}"
    titles = [f"{t}\n{comp.group(lab).describe().splitlines()[-1]}" for t, lab in zip(titles, diffs)]
    fmt = _formatter(comp, values)
    annot = [
        np.vectorize(lambda x: fmt(x, True), otypes=[object])(d.to_numpy(dtype=float)) for d in diffs.values()
    ]
    fig = _panels(
        list(diffs.values()),
        titles,
        norm,
        "RdBu_r",
        f"{_what(comp)}\nagainst {base}: blue = lower error, red = higher",
        label,
        annot,
        comp,
        center=0,
    )
    return Plot(fig, -lim, lim, False, _save(fig, path))


def _save(fig, path: Path | None) -> list[Path]:
    if path is None:
        return []
    path = Path(path)
    out = [path.with_suffix(".png"), path.with_suffix(".pdf")]
    for p in out:
        fig.savefig(p, dpi=120)
    return out


# ------------------------------------------------------------------------------------------ writing


def default_out_dir(comp: Comparison, now: datetime | None = None) -> Path:
    """``<sweep>/compare`` for a sweep; ``<common parent>/compare/<time>`` for runs (never in a run)."""
    if comp.sweep is not None:
        return comp.sweep / "compare"
    runs = [str(r.path.resolve()) for g in comp.groups for r in g.runs]
    parent = Path(os.path.commonpath(runs))
    inside = _run_inside(parent)
    while inside is not None:
        parent = inside.parent
        inside = _run_inside(parent)
    stamp = (now or datetime.now()).strftime("%Y-%m-%d_%H-%M-%S")
    return parent / "compare" / stamp


def write(
    comp: Comparison, out_dir: Path, baseline: str | None = None, mode: str = "auto", close: bool = True
) -> dict:
    """Write the figures and tables into ``out_dir``; returns what was written and the colour scales."""
    out_dir = Path(out_dir)
    inside = _run_inside(out_dir.resolve())
    if inside is not None:
        raise CompareError(
            f"{out_dir} lies inside the run folder {inside}: comparisons never write into a run"
        )
    base = resolve_baseline(comp, baseline)
    mode = difference_mode(comp, mode)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    grids = plot_grids(comp, out_dir / "heatmaps")
    diff = plot_difference(comp, base, mode, out_dir / "difference")
    summary = summary_table(comp, base)
    summary.to_csv(out_dir / "summary.csv", index=False)
    comp.cells.to_csv(out_dir / "cells.csv", index=False)
    comp.per_run.to_csv(out_dir / "runs.csv", index=False)
    diffs = difference(comp, base, mode)
    if diffs:
        long = [
            d.stack().rename("value").reset_index().assign(label=lab, baseline=base, mode=mode)
            for lab, d in diffs.items()
        ]
        pd.concat(long, ignore_index=True).to_csv(out_dir / "difference.csv", index=False)
    md = _markdown_report(comp, summary, base, mode, diff is not None)
    (out_dir / "summary.md").write_text(md)
    info = {
        "task": comp.task,
        "eval": comp.eval,
        "metric": comp.metric,
        "axes": [comp.rows, comp.cols],
        "baseline": base,
        "difference": mode if diffs else None,
        "groups": {g.label: [str(r.path) for r in g.runs] for g in comp.groups},
        "missing": [{"folder": f, "why": w} for f, w in comp.missing],
        "sweep": str(comp.sweep) if comp.sweep else None,
        "common_overrides": comp.common_overrides,
        "notes": comp.notes,
        "colour_scale": {"vmin": grids.vmin, "vmax": grids.vmax, "log": grids.log},
        "difference_scale": {"vmin": diff.vmin, "vmax": diff.vmax} if diff else None,
        "files": sorted(p.name for p in out_dir.iterdir() if p.is_file()) + ["compare.json"],
        "seconds": time.perf_counter() - t0,
    }
    (out_dir / "compare.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    if close:
        plt.close(grids.fig)
        if diff is not None:
            plt.close(diff.fig)
    return {"out_dir": out_dir, "summary": summary, "grids": grids, "difference": diff, "info": info}


def _rel(comp: Comparison, path) -> str:
    """A job folder relative to its sweep (the sweep is named once); other paths as given."""
    if comp.sweep is not None and Path(path).is_relative_to(comp.sweep):
        return str(Path(path).relative_to(comp.sweep))
    return str(path)


def _markdown_report(comp: Comparison, summary: pd.DataFrame, base, mode: str, has_diff: bool) -> str:
    lines = [f"# Comparison: {_what(comp)}", ""]
    if comp.sweep is not None:
        lines.append(
            f"Sweep `{comp.sweep}`, grouped by the overridden keys except seed (seeds averaged cell-wise)."
        )
        if comp.common_overrides:
            lines.append(f"Overrides common to all jobs: `{' '.join(comp.common_overrides)}`.")
    lines += ["", "Runs:", ""]
    for g in comp.groups:
        lines.append(f"- **{g.label}**: " + ", ".join(f"`{_rel(comp, r.path)}`" for r in g.runs))
    lines += ["", markdown_table(summary), ""]
    defs = [
        f"`mean`: mean of the {comp.metric} over the {comp.rows} × {comp.cols} grid (after averaging seeds)",
        "`in_dist`: mean over the cells at the smallest σ"
        + (" (σ_F and σ_I both smallest)" if comp.kind == "linear" else " (every length)"),
        "`worst`: the largest cell value, at `worst_cell`",
    ]
    if comp.log:
        defs.insert(1, "`geo_mean`: geometric mean over the grid (MSE spans decades)")
    if base is not None:
        defs.append(
            f"`beats_baseline` / `ties_baseline`: share of cells with a strictly lower / equal error than **{base}**"
        )
        if has_diff:
            what = (
                f"log10({comp.metric} / {comp.metric} of {base}): −1 = ten times lower error"
                if mode == "log10_ratio"
                else f"{comp.metric} − {comp.metric} of {base}"
            )
            defs.append(f"difference map (`difference.png`): {what}; blue = better than {base}")
    else:
        defs.append("no baseline (no softmax run; choose one with --baseline): no difference map")
    if (comp.cells["count"] > 1).any():
        defs.append(
            "`seed_std_mean`: mean over cells of the seeds' standard deviation (ddof=1); per cell in `cells.csv`"
        )
    lines += [f"- {d}" for d in defs]
    if comp.notes:
        lines += ["", "Notes:", *[f"- {n}" for n in comp.notes]]
    if comp.missing:
        lines += [
            "",
            f"Not included ({len(comp.missing)}: no results):",
            *[f"- `{_rel(comp, f)}`: {w}" for f, w in comp.missing],
        ]
    lines += ["", "![heat maps](heatmaps.png)", ""]
    if has_diff:
        lines += ["![difference](difference.png)", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ command


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compare.py",
        description="Compare evaluation grids of run folders, or of every job in a sweep (multirun) folder: "
        "side-by-side heat maps on one colour scale, a difference map against a baseline, a summary table. "
        "A sweep is grouped by its overridden keys except seed (seeds averaged); jobs without results are "
        "listed and left out.",
    )
    p.add_argument("paths", nargs="+", help="run folders, or one sweep folder (outputs/multirun/<time>)")
    p.add_argument(
        "--eval",
        default="auto",
        help="evaluation to compare: auto (default: the task's grid linear_grid/quantifier_grid if every "
        "run has it, else quick), quick, or any eval/<name>",
    )
    p.add_argument("--metric", default=None, help="default: mse (linear), sequence_error (every/some)")
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default: <common parent>/compare/<time> for runs, <sweep>/compare for a sweep)",
    )
    p.add_argument(
        "--baseline",
        default=None,
        help="label (or scorer) the difference map subtracts; default softmax if present",
    )
    p.add_argument(
        "--difference",
        default="auto",
        choices=["auto", "diff", "log10_ratio"],
        help="auto (default): log10 ratio for MSE, plain difference for error rates",
    )
    p.add_argument(
        "--group-by",
        default=None,
        help="for run lists: comma-separated config keys (e.g. scorer) whose runs are averaged as seeds",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # corpus tasks have their own tables: the paper's table 2 (task=lm) and table 3 (task=mlm)
    from ssa_repro.evaluation import lm, zorro

    if zorro.mlm_run_dirs(args.paths):
        return zorro.compare_main(args.paths, args.out, "pll")
    if lm.lm_run_dirs(args.paths):
        return lm.compare_main(args.paths, args.out)
    t0 = time.perf_counter()
    try:
        group_by = [k.strip() for k in args.group_by.split(",")] if args.group_by else None
        comp = collect(args.paths, eval=args.eval, metric=args.metric, group_by=group_by)
        base = resolve_baseline(comp, args.baseline)
        out = Path(args.out) if args.out else default_out_dir(comp)
        inside = _run_inside(out.resolve())
        if inside is not None:
            raise CompareError(
                f"--out {out} lies inside the run folder {inside}: comparisons never write into a run"
            )
        t_read = time.perf_counter() - t0
        result = write(comp, out, base, args.difference)
    except CompareError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    n_runs = sum(len(g.runs) for g in comp.groups)
    print(f"{_what(comp)}: {len(comp.groups)} panel(s) from {n_runs} run(s); baseline: {base or 'none'}")
    print(markdown_table(result["summary"]))
    for note in comp.notes:
        print(f"note: {note}")
    if comp.missing:
        print(f"not included ({len(comp.missing)}, no results):")
        for f, w in comp.missing:
            print(f"  - {_rel(comp, f)}: {w}")
    print(f"wrote {out}/ (read {t_read:.1f} s, figures and tables {result['info']['seconds']:.1f} s)")
    return 0
