"""Run one evaluation of one run: presets, cells to compute, the store, the derived figures.

    evaluate(run, cfg) -> summary

1. Presets: ``eval=default`` is the task's declared default evaluation (its paper protocol; grid keys
   such as ``eval.sigmas`` apply to it directly), ``eval=quick`` the task's end-of-run evaluation (what
   every training ends with). Both resolve to a concrete evaluation (``grid``, ``lm``, ``zorro``, ...);
   the preset's name is kept in the rows (``preset`` column) for finding them again.
2. The evaluator fills its nulls from the run (``resolve``) and lists every problem (``problems``)
   before any work: :func:`check` does this from a run's config alone.
3. Cells: the protocol's stored cells at this checkpoint step are reused, the missing ones computed
   (all with ``eval.force=true``) and written as they finish (an interrupted evaluation keeps them).
4. Derived files (``results.csv``, further tables, figures, ``summary.json``) are redrawn from every
   stored cell of the protocol at the newest step, under the protocol folder's lock; they are never
   read (a file whose bytes would not change is left as it is; figures are drawn again when the cells
   they show changed, see :func:`redraw`).

Rows carry the run's labels (task, scorer, model, seed, step), ``eval``, ``protocol`` (the id) and
``preset``. Nothing is written outside ``<run_dir>/eval/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import get_type_hints

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from ssa_repro.core import plotting
from ssa_repro.core.atomic import json_text, write_bytes, write_json
from ssa_repro.core.rundir import SUMMARY
from ssa_repro.evaluation.grid import GridConfig
from ssa_repro.evaluation.loading import LoadedRun
from ssa_repro.evaluation.progress import Progress
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.store import Store
from ssa_repro.tasks import TASKS, build_task

log = logging.getLogger("ssa_repro.evaluate")


class EvaluationError(ValueError):
    """An evaluation that cannot run on this run (the message lists every problem)."""


@dataclass
class DefaultConfig(GridConfig):
    """``eval=default``: the task's default evaluation. For grid tasks every grid key applies."""

    name: str = "default"


QUICK_KEYS = ("sigmas", "sigmas_f", "lengths", "n_samples", "batch_size", "skip_first", "seed", "nested")
_GRID_TYPES = get_type_hints(GridConfig)
QuickConfig = dataclasses.make_dataclass(
    "QuickConfig",
    [("name", str, dataclasses.field(default="quick"))]
    + [
        (f.name, _GRID_TYPES[f.name], dataclasses.field(default=f.default))
        for f in dataclasses.fields(GridConfig)
        if f.name in QUICK_KEYS
    ],
    bases=(EvalConfig,),
)
QuickConfig.__doc__ = """``eval=quick``: the task's end-of-run evaluation. For grid tasks these keys are
the grid's (``GridConfig``: the same types and defaults), their nulls the task's quick grid
(``Grid.quick``); set them to evaluate every run of a sweep on one fixed grid."""


EVALUATORS.register("default", schema=DefaultConfig)(DefaultConfig)
EVALUATORS.register("quick", schema=QuickConfig)(QuickConfig)
PRESETS = ("default", "quick")


def _concrete(cfg, run_cfg, task) -> tuple[object, list[str]]:
    """The concrete evaluation config behind a preset (and problems found on the way)."""
    if cfg.name not in PRESETS:
        return cfg, []
    declared = getattr(task, "evaluation", None)
    if declared is None:
        return cfg, [
            f"task {run_cfg.task.name!r} declares no evaluation (Task.evaluation), so eval={cfg.name} "
            "has nothing to run"
        ]
    if cfg.name == "default":
        target, settings = declared.default, {}
    else:
        target, settings = task.quick_evaluation()
    schema = EVALUATORS.schemas[target]
    given = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    own = {k: v for k, v in given.items() if k not in ("name", "force")}
    if set(own) <= set(_keys(schema)):  # the preset's keys are the target's (its schema composes them)
        merged = {**settings, **{k: v for k, v in own.items() if v is not None}}
    else:
        defaults = OmegaConf.to_container(OmegaConf.structured(DefaultConfig), enum_to_str=True)
        changed = [k for k in own if k != "figures" and given[k] != defaults.get(k)]
        if changed and cfg.name == "default":  # (quick's grid keys do not apply to corpus tasks)
            return cfg, [
                f"eval.{', eval.'.join(changed)} belong to the grid evaluation; task {run_cfg.task.name}'s "
                f"default evaluation is eval={target} (its keys: {', '.join(_keys(schema))})"
            ]
        merged = dict(settings)
    out = OmegaConf.merge(
        OmegaConf.structured(schema), {**merged, "force": bool(cfg.force), "figures": bool(cfg.figures)}
    )
    return out, []


def _keys(schema) -> list[str]:
    return [k for k in schema.__dataclass_fields__ if k not in ("name", "force")]


def build(cfg, run_cfg) -> tuple[Evaluator | None, list[str]]:
    """The evaluator for ``cfg`` (a config, or a schema instance such as ``GridConfig(sigmas=[1, 5])``)
    on the run whose config is ``run_cfg``, resolved, and its problems."""
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    if run_cfg.task.name not in TASKS:
        return None, [
            f"the run's task {run_cfg.task.name!r} is not registered; known: {', '.join(TASKS.names())}"
        ]
    task = build_task(run_cfg.task)
    preset = cfg.name
    cfg, found = _concrete(cfg, run_cfg, task)
    if found:
        return None, found
    cls = EVALUATORS.get(cfg.name)
    if not (isinstance(cls, type) and issubclass(cls, Evaluator)):
        return None, [f"eval={cfg.name} is a preset, not an evaluation"]
    try:  # a private, typed copy (a value the schema refuses is a problem, said like the others)
        cfg = OmegaConf.merge(OmegaConf.structured(EVALUATORS.schemas[cfg.name]), cfg)
    except ValidationError as e:
        return None, [f"eval.{e.full_key}: {str(e).splitlines()[0]}"]
    ev = cls(cfg, run_cfg, task)
    ev.preset = preset
    ev.resolve()
    return ev, ev.problems()


def check(run_cfg, cfg) -> list[str]:
    """Problems with an evaluation config for a run, from its config alone: before any work."""
    return build(cfg, run_cfg)[1]


def store_of(run_dir, ev: Evaluator) -> Store:
    return Store(run_dir, ev.name, ev.protocol(), list(ev.coords), repair=True)


def evaluate(run: LoadedRun, cfg, between=None) -> dict:
    """Evaluate ``run`` (compute the missing cells, store them, redraw); returns the summary.
    ``between()`` is called after each stored batch of cells (a safe point to stop at on a signal)."""
    ev, found = build(cfg, run.cfg)
    if found:
        raise EvaluationError("\n  - ".join([f"cannot run eval={cfg.name} on {run.run_dir}:", *found]))
    store = store_of(run.run_dir, ev)
    store.repair()  # damaged stored files moved aside: their cells count as missing
    wanted = ev.cells()
    run_id = getattr(run, "run_id", None)  # cells of another model (identity) are never reused
    have = set() if ev.cfg.force else store.present(run.step, run_id)
    missing = [c for c in wanted if store.cell_key(c) not in have]
    log.info(
        "%s (eval=%s) on %s, step %d: %d cells, %d stored, %d to compute; results in %s",
        ev.name,
        ev.preset,
        run.run_dir,
        run.step,
        len(wanted),
        len(wanted) - len(missing),
        len(missing),
        store.dir,
    )
    ev.out_dir = store.dir  # for evaluators that write arrays or model-made figures while computing
    store.ensure()
    t0 = time.perf_counter()
    tags = {
        "eval": ev.name,
        "protocol": store.id,
        "preset": ev.preset,
        **({"run_id": run_id} if run_id else {}),
    }
    if missing:
        was_training = run.model.training
        run.model.eval()
        try:
            with Progress(len(missing), ev.name) as bar, plotting.saving(ev.cfg.figures):
                for tables in ev.compute(run, missing, bar):
                    tables = {k: v.assign(**tags) for k, v in tables.items() if v is not None and len(v)}
                    store.write({k: mark_non_finite(v, ev, k) for k, v in tables.items()})
                    if between is not None:
                        between()
        finally:
            run.model.train(was_training)
    seconds = time.perf_counter() - t0
    with plotting.saving(ev.cfg.figures):  # derived files are drawn from the cells, never read
        summary = redraw(store, ev, run.title, run_id)
    summary.update(
        {
            "cells_asked": len(wanted),
            "cells_reused": len(wanted) - len(missing),
            "cells_computed": len(missing),
            "seconds": seconds,
        }
    )
    log.info("%s: %.1f s; %s", ev.name, seconds, store.dir / SUMMARY)
    return summary


def mark_non_finite(frame: pd.DataFrame, ev: Evaluator, table: str) -> pd.DataFrame:
    """``frame`` with a ``non_finite`` column naming, in each row, the numeric columns that hold an
    infinity, added only where there is one; a warning names the cells. (A value overflowed, e.g. a
    baseline's mse at ``eval.sigmas=[1e7]``: it is kept and marked, never stored silently. NaN is not
    marked: evaluations store it for "not defined here", e.g. an interval of one sample.)"""
    bad = frame.select_dtypes("number").apply(lambda col: np.isinf(col.astype(float)))
    rows = bad.any(axis=1)
    if not rows.any():
        return frame
    names = bad.apply(lambda r: ",".join(c for c in bad.columns if r[c]), axis=1)
    coords = [c for c in [*ev.coords, "predictor", "metric"] if c in frame]
    shown = [
        ", ".join(f"{c}={frame.at[i, c]}" for c in coords) + f": {names[i]}" for i in frame.index[rows][:5]
    ]
    log.warning(
        "%s (%s): %d stored row(s) hold values that are not finite (they overflowed or are undefined at "
        "these settings); stored with their names in the non_finite column: %s%s",
        ev.name,
        table,
        int(rows.sum()),
        "; ".join(shown),
        " ..." if rows.sum() > 5 else "",
    )
    return frame.assign(non_finite=names.where(rows, ""))


def redraw(store: Store, ev: Evaluator, title: str, run_id: str | None = None) -> dict:
    """Tables, figures and summary.json of the protocol, from every stored cell (newest step). Nothing
    derived is read: the tables and the summary are made anew and written where their bytes differ
    (a damaged one is replaced, an unchanged one left as it is); the figures are drawn again when the
    parts they were drawn from (named in ``.drawn.json``) or the title changed, or one is missing."""
    with store.locked():
        frames = {t: store.read(t, run_id) for t in ev.tables()}
        results = frames["results"]
        step = int(results["step"].max()) if len(results) else None
        latest = {t: (f[f["step"] == step] if len(f) and "step" in f else f) for t, f in frames.items()}
        for table, frame in frames.items():
            if len(frame):
                _write_if_changed(store.dir / f"{table}.csv", frame.to_csv(index=False).encode())
        figures = _drawn(store, title)
        if figures is None:
            # figures off: draw still writes the tables it derives (boundary.csv, ...), and the heat maps and
            # curves are not even built (plotting.enabled; building them was most of a small evaluation's
            # time); nothing is recorded as drawn, so a later call with figures on draws them
            drawn = ev.draw(latest, f"{title} · step {step}", store.dir) if step is not None else []
            figures = [p.name for p in drawn]
            if plotting.enabled():
                write_json(store.dir / DRAWN, {"key": _drawing_key(store, title), "figures": figures})
        summary = {
            "evaluation": ev.name,
            "protocol_id": store.id,
            "protocol": store.protocol,
            "presets": sorted(set(results["preset"])) if "preset" in results else [],
            "step": step,
            "steps": sorted(int(s) for s in results["step"].unique()) if len(results) else [],
            "dir": str(store.dir),
            "figures": figures,
            "tables": [t for t in ev.tables() if len(frames[t])],
            "heatmap": ev.heatmap(),
            **ev.summarize(latest),
        }
        marked = results[results["non_finite"].fillna("") != ""] if "non_finite" in results else results[:0]
        if len(marked):  # cells whose values are not finite (marked when stored): said in the summary
            summary["non_finite_rows"] = int(len(marked))
        _write_if_changed(store.dir / SUMMARY, json_text(summary).encode())
    return summary


DRAWN = ".drawn.json"  # which parts (and title) the figures were drawn from: whether to draw again


def _drawing_key(store: Store, title: str) -> str:
    """A hash of the title and the names of the parts present (a part is never rewritten: new cells,
    recomputed cells and parts moved aside all change the names)."""
    names = sorted(p.name for p in (store.dir / "parts").glob("*.csv"))
    return hashlib.sha256(json.dumps([title, names]).encode()).hexdigest()


def _drawn(store: Store, title: str) -> list[str] | None:
    """The figures' names if they were drawn from the parts present and all exist; else None."""
    try:
        info = json.loads((store.dir / DRAWN).read_text())
        figures = [str(f) for f in info["figures"]]
        current = info["key"] == _drawing_key(store, title)
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or damaged: draw
        return None
    return figures if current and all((store.dir / f).is_file() for f in figures) else None


def _write_if_changed(path, data: bytes) -> None:
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    write_bytes(path, data)
