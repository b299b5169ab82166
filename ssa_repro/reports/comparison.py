"""What a comparison of runs is made of (``reports/compare.py``'s command writes it): the runs grouped
(:class:`Group`: a sweep's override keys but ``seed``, or one panel per run), the protocol, layout and
metric chosen from the task's declaration (:func:`layout`, :func:`metric_kind`), and the per-cell
values over seeds on the cells every compared run has (:func:`collect` → :class:`Comparison`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ssa_repro.core.rundir import RunDir, typed
from ssa_repro.evaluation.deviant_cells import RATE_METRICS
from ssa_repro.evaluation.grid import AXIS_LABELS
from ssa_repro.reports.aggregate import over_seeds
from ssa_repro.reports.results import choose, coord, fmt, read, stored_layout
from ssa_repro.reports.runs import ReportError, Run, expected_jobs, find, job_dirs, override_key
from ssa_repro.tasks import TASKS, build_task

SHORT = {"sigma_x": "σ", "sigma_f": "σ_F", "length": "n", "M": "M", "k": "k"}
SEED_KEYS = {"seed"}


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
    protocol: str
    metric: str
    kind: str  # rate | positive: intervals, colour scale, difference mode
    rows: str
    cols: str
    groups: list[Group]
    per_run: pd.DataFrame  # label, run, seed, step, <rows>, <cols>, value
    cells: pd.DataFrame  # label, <rows>, <cols>, mean, ci_low, ci_high, std, count
    in_dist_at: dict = field(default_factory=dict)  # axis -> the training σ (or the nearest in the grid)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (folder, why) left out
    left_out: list[str] = field(default_factory=list)  # cells not shared by every run
    sweep: Path | None = None
    common_overrides: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fixed: dict = field(default_factory=dict)  # coordinates with one value (e.g. length for linear)

    @property
    def labels(self) -> list[str]:
        return [g.label for g in self.groups]

    @property
    def log(self) -> bool:
        return self.kind == "positive"

    def axis_label(self, axis: str) -> str:
        return AXIS_LABELS.get(axis, axis)

    def short(self, axis: str) -> str:
        return SHORT.get(axis, axis)

    def what(self) -> str:
        fixed = ", ".join(f"{self.short(k)}={fmt(v)}" for k, v in self.fixed.items())
        where = f"eval/{self.eval}/{self.protocol}" + (f", {fixed}" if fixed else "")
        return f"{self.task}: {self.metric.replace('_', ' ')} of the model ({where})"

    def grid(self, label: str, stat: str = "mean") -> pd.DataFrame:
        """A group's grid (``stat``: mean, std, count, ci_low, ci_high), largest row value on top."""
        frame = self.cells[self.cells.label == label]
        table = frame.pivot(index=self.rows, columns=self.cols, values=stat)
        return table.sort_index(ascending=False).sort_index(axis=1)

    def group(self, label: str) -> Group:
        return next(g for g in self.groups if g.label == label)


# ------------------------------------------------------------------------------------------ layout
def metric_kind(task: str, metric: str) -> str:
    """rate (values in [0, 1]) | positive: the task's declared grid metric's kind, else by name."""
    decl = TASKS.get(task).evaluation if task in TASKS else None
    declared = {m.name: m.kind for m in decl.grid.metrics} if decl is not None and decl.grid else {}
    rate = metric in RATE_METRICS | {"token_error", "sequence_error"}
    return declared.get(metric, "rate" if rate else "positive")


def layout(runs: list[Run], task: str, name: str, pid: str) -> tuple[str, str, str, str, list[str]]:
    """(rows, cols, metric, kind, coords) of a comparable evaluation: the heat map layout each evaluator
    stores with its results (``Evaluator.heatmap``, in the protocol's summary.json; the first run that
    holds the protocol) and its cells' coordinates, so every evaluator with a heat map compares."""
    heat, coords = next((f for f in (stored_layout(r, name, pid) for r in runs) if f[0]), (None, []))
    if not heat:
        raise ReportError(
            f"{name} results of task {task} have no heat map to compare (its evaluator draws none): they "
            "have their own tables (lm: scripts/lm_table.py, zorro: scripts/zorro_table.py)"
        )
    kind = heat.get("kind") or metric_kind(task, heat["metric"])
    return heat["rows"], heat["cols"], heat["metric"], kind, coords


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
    labels = []
    for i in range(1, len(fields) + 1):
        labels = [" · ".join(fields[j](r, s) for j in chosen) for r, s in zip(runs, steps)]
        if len(set(labels)) == len(labels) or i == len(fields):
            return labels
        if len({fields[i](r, s) for r, s in zip(runs, steps)}) > 1:
            chosen.append(i)
    return labels


def _in_dist_at(task: str, cfg: dict, values: dict[str, list[float]]) -> dict:
    """The grid value of each σ axis nearest the training distribution's (from the run's config)."""
    task_obj = build_task(typed(cfg).task)
    out = {}
    for axis, target in task_obj.train_sigmas().items():
        if axis in values and values[axis]:
            out[axis] = min(values[axis], key=lambda v: abs(v - target))
    return out


# ------------------------------------------------------------------------------------------ collect
def collect(
    paths, eval: str = "auto", metric: str | None = None, group_by=None, at: dict | None = None
) -> Comparison:  # noqa: A002
    """Read the runs (or the sweep) and check they can be compared; all errors come before any figure.
    ``at`` picks the value of a coordinate that is not an axis (e.g. ``{"length": 10}``) where the
    results hold several; by default the largest value all runs share."""
    runs, sweep, missing = find(paths)
    if not runs:
        raise ReportError(f"no job folder of {sweep} has a config.yaml yet (nothing started)")
    tasks: dict[str, list[str]] = {}
    for r in runs:
        tasks.setdefault(r.task, []).append(str(r.path))
    if len(tasks) > 1:
        raise ReportError(
            "runs of different tasks cannot be compared:\n  - "
            + "\n  - ".join(f"{t}: {', '.join(ps)}" for t, ps in tasks.items())
        )
    if sweep is None and len(runs) < 2:
        raise ReportError(f"give at least two run folders to compare (or a sweep folder); got {runs[0].path}")
    task = runs[0].task
    usable = [r for r in runs if sweep is None or r.finished]
    for r in runs:
        if r not in usable:
            missing.append((str(r.path), r.status()))
    if not usable:
        raise ReportError(f"no job of {sweep} has finished training yet")
    name, pid = choose(usable, eval, strict=sweep is None)
    rows, cols, default_metric, kind, coords = layout(usable, task, name, pid)
    metric = metric or default_metric
    if metric != default_metric:
        kind = metric_kind(task, metric)

    frames, used = {}, []
    for r in usable:
        f = read(r, name, pid)
        if f.empty:
            have = RunDir(r.path).eval_dir
            missing.append(
                (str(r.path), f"no results of {name}/{pid}" + ("" if have.is_dir() else " (no eval/)"))
            )
            continue
        f = f[(f.predictor == "model") & (f.metric == metric)]
        if f.empty:
            raise ReportError(
                f"metric {metric!r} is not in {r.path}'s {name}/{pid} results; choose one with --metric"
            )
        frames[r.path], used = f, [*used, r]
    if not used:
        raise ReportError(f"no run holds results of {name}/{pid}")

    # a coordinate other than the two axes with several values: one slice (the largest shared, or --at)
    notes = []
    for c in coords:
        if c in (rows, cols) or not all(c in f for f in frames.values()):
            continue
        held = [{coord(v) for v in f[c].dropna()} for f in frames.values()]
        if max(len(h) for h in held) <= 1:
            continue
        shared_values = sorted(set.intersection(*held))
        pick = coord((at or {}).get(c, shared_values[-1] if shared_values else max(max(h) for h in held)))
        notes.append(
            f"{c} has several values ({', '.join(fmt(v) for v in sorted(set.union(*held)))}): compared at "
            f"{c}={fmt(pick)} (choose another with --at {c}=<value>)"
        )
        frames = {p: f[f[c].map(coord) == pick] for p, f in frames.items()}
    # the cells every run shares; the others are listed
    keys = {p: set(zip(f[rows].map(coord), f[cols].map(coord))) for p, f in frames.items()}
    shared = set.intersection(*keys.values())
    if not shared:
        lines = [f"{p}: {sorted(k)[:6]}{' …' if len(k) > 6 else ''}" for p, k in keys.items()]
        raise ReportError(
            f"the runs share no cell of {rows} × {cols}:\n  - "
            + "\n  - ".join(lines)
            + "\nevaluate them on one grid (e.g. python evaluate.py -m run_dir=A,B eval.lengths=[…])"
        )
    left_out = sorted({c for k in keys.values() for c in k - shared})
    fixed = {}
    for c in coords:
        if c in (rows, cols):
            continue
        vals = {coord(v) for f in frames.values() if c in f for v in f[c].dropna()}
        if len(vals) == 1:
            fixed[c] = vals.pop()
        elif len(vals) > 1:
            raise ReportError(
                f"{c} varies within the results ({sorted(vals)}): compare.py draws {rows} × {cols} grids; "
                f"evaluate one {c} (eval.{'lengths' if c == 'length' else c}=[…])"
            )
    steps = {r.path: int(frames[r.path]["step"].iloc[0]) for r in used}

    common: list[str] = []
    if sweep is not None:
        expected = expected_jobs(sweep) or []
        present = [set(r.overrides or []) for r in runs] + [
            set(RunDir(j).overrides() or []) for j in job_dirs(sweep) if not RunDir(j).is_run()
        ]
        later = [job for job in expected if set(job) not in present]
        missing += [(f"(no folder yet) {' '.join(job)}", "not started") for job in later]
        if expected:
            notes.append(f"jobs.yaml lists {len(expected)} jobs; {len(runs)} have a run folder")
        all_ov = [dict(override_key(o) for o in (r.overrides or [])) for r in runs]
        all_ov += [dict(override_key(o) for o in job) for job in expected]
        keys_ = sorted({k for ov in all_ov for k in ov if k not in SEED_KEYS and not k.startswith("hydra.")})
        varying = [k for k in keys_ if len({ov.get(k) for ov in all_ov}) > 1]
        common = [f"{k}={all_ov[0][k]}" for k in keys_ if k not in varying and k in all_ov[0]]

        def key_of(r: Run):
            ov = dict(override_key(o) for o in (r.overrides or []))
            return ", ".join(f"{k}={ov.get(k, '—')}" for k in varying) or "all jobs"

        order: dict[str, list[Run]] = {}
        for r in used:
            order.setdefault(key_of(r), []).append(r)
        groups = [Group(k, rs, [steps[r.path] for r in rs]) for k, rs in order.items()]
    elif group_by:
        order = {}
        for r in used:
            order.setdefault(", ".join(f"{k}={r.lookup(k)}" for k in group_by), []).append(r)
        groups = [Group(k, rs, [steps[r.path] for r in rs]) for k, rs in order.items()]
    else:
        labels = _labels_for_runs(used, [steps[r.path] for r in used])
        groups = [Group(lab, [r], [steps[r.path]]) for lab, r in zip(labels, used)]

    parts = []
    for g in groups:
        for r in g.runs:
            f = frames[r.path]
            f = f[[(a, b) in shared for a, b in zip(f[rows].map(coord), f[cols].map(coord))]]
            parts.append(
                pd.DataFrame(
                    {
                        "label": g.label,
                        "run": str(r.path),
                        "seed": r.seed,
                        "step": steps[r.path],
                        rows: f[rows].map(coord).values,
                        cols: f[cols].map(coord).values,
                        "value": f["value"].astype(float).values,
                    }
                )
            )
    per_run = pd.concat(parts, ignore_index=True)
    for axis in (rows, cols):
        if axis in ("length", "k"):
            per_run[axis] = per_run[axis].astype(int)
    cells = over_seeds(per_run, ["label", rows, cols], kind)
    values = {a: sorted(per_run[a].unique()) for a in (rows, cols)}
    return Comparison(
        task=task,
        eval=name,
        protocol=pid,
        metric=metric,
        kind=kind,
        rows=rows,
        cols=cols,
        groups=groups,
        per_run=per_run,
        cells=cells,
        in_dist_at=_in_dist_at(task, used[0].cfg, values),
        missing=missing,
        left_out=[f"{SHORT.get(rows, rows)}={fmt(a)}, {SHORT.get(cols, cols)}={fmt(b)}" for a, b in left_out],
        sweep=sweep,
        common_overrides=common,
        notes=notes,
        fixed=fixed,
    )
