"""Run one evaluation of one run: presets, cells to compute, the store, the derived figures.

    build(cfg, run_cfg, task) -> (evaluator, problems)      from the run's config alone
    run_evaluator(run, evaluator) -> summary                 the loaded run: cells, store, redraw
    evaluate(run, cfg) -> summary                            the two in a row

1. Presets: ``eval=default`` and ``eval=quick`` name, through the run's task, a concrete evaluation
   (``presets.py``); the preset's name is kept in the rows (``preset`` column).
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
import logging
import time

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from ssa_repro.core import plotting
from ssa_repro.core.atomic import json_text
from ssa_repro.core.refusals import value_refusal
from ssa_repro.core.rundir import SUMMARY
from ssa_repro.evaluation import presets
from ssa_repro.evaluation.loading import LoadedRun
from ssa_repro.evaluation.presets import DefaultConfig, QuickConfig  # noqa: F401  (older import path)
from ssa_repro.evaluation.progress import Progress
from ssa_repro.evaluation.registry import EVALUATORS, Evaluator
from ssa_repro.evaluation.store import Store
from ssa_repro.tasks import TASKS, build_task

log = logging.getLogger("ssa_repro.evaluate")


class EvaluationError(ValueError):
    """An evaluation that cannot run on this run (the message lists every problem)."""


def build(cfg, run_cfg, task=None) -> tuple[Evaluator | None, list[str]]:
    """The evaluator for ``cfg`` (a config, or a schema instance such as ``GridConfig(sigmas=[1, 5])``)
    on the run whose config is ``run_cfg`` (read over the schema), resolved, and its problems. ``task``:
    the run's task where the caller has built it already (else built here from ``run_cfg.task``)."""
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    if task is None:
        if run_cfg.task.name not in TASKS:
            return None, [
                f"the run's task {run_cfg.task.name!r} is not registered; known: {', '.join(TASKS.names())}"
            ]
        task = build_task(run_cfg.task)
    preset = cfg.name
    cfg, found = presets.concrete(cfg, task)
    if found:
        return None, found
    if cfg.name not in EVALUATORS:
        return None, [f"eval={cfg.name} is no evaluation; known: {', '.join(EVALUATORS.names())}"]
    cls = EVALUATORS.get(cfg.name)
    try:  # a private, typed copy (a value the schema refuses is a problem, said like the others)
        cfg = OmegaConf.merge(OmegaConf.structured(EVALUATORS.schemas[cfg.name]), cfg)
    except ValidationError as e:
        return None, [value_refusal(e, "eval.")]
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
    """Evaluate ``run`` with the evaluation ``cfg`` names (built on the run's config and task); see
    :func:`run_evaluator`."""
    ev, found = build(cfg, run.cfg, run.task)
    if found:
        raise EvaluationError("\n  - ".join([f"cannot run eval={cfg.name} on {run.run_dir}:", *found]))
    return run_evaluator(run, ev, between)


def run_evaluator(run: LoadedRun, ev: Evaluator, between=None) -> dict:
    """Compute the missing cells of ``ev`` (built by :func:`build`, its problems none) on ``run``, store
    them, redraw; returns the summary. ``between()`` is called after each stored batch of cells (a safe
    point to stop at on a signal)."""
    store = store_of(run.run_dir, ev)
    store.repair()  # damaged stored files moved aside: their cells count as missing
    wanted = ev.cells()
    run_id = getattr(run, "run_id", None)  # cells of another model (identity) are never reused
    have = set() if ev.cfg.force else store.present(run.step, run_id)
    short = set() if ev.cfg.force else short_cells(store, ev, wanted, run.step, run_id)
    missing = [c for c in wanted if store.cell_key(c) not in have or store.cell_key(c) in short]
    if short:
        log.warning(
            "%s: %d stored cell(s) lack their rows in %s (an earlier call was stopped between its "
            "parts); they are computed again",
            ev.name,
            len(short),
            ", ".join(t for t in ev.tables() if t != "results"),
        )
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


def short_cells(store: Store, ev: Evaluator, wanted: list[dict], step: int, run_id) -> set[tuple]:
    """The keys of the cells of ``wanted`` stored in ``results`` at ``step`` whose rows another table
    of the protocol should hold (:meth:`Evaluator.covers`) and does not: a kill between a call's
    parts. Computing them again writes every table of them anew (readers keep the newest part)."""
    have = store.present(step, run_id)
    short: set[tuple] = set()
    for table in ev.tables():
        if table == "results":
            continue
        rows = store.present(step, run_id, table)
        expected = {store.cell_key(c) for c in ev.covers(table, wanted)}
        short |= {k for k in expected & have if k not in rows}
    return short


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
                store.write_derived(f"{table}.csv", frame.to_csv(index=False).encode())
        figures = store.drawn(title)
        if figures is None:
            # figures off: draw still writes the tables it derives (boundary.csv, ...), and the heat maps and
            # curves are not even built (plotting.enabled; building them was most of a small evaluation's
            # time); nothing is recorded as drawn, so a later call with figures on draws them
            drawn = ev.draw(latest, f"{title} · step {step}", store.dir) if step is not None else []
            figures = [p.name for p in drawn]
            if plotting.enabled():
                store.record_drawn(title, figures)
        summary = {
            "evaluation": ev.name,
            "protocol_id": store.id,
            "protocol": store.protocol,
            "presets": sorted(set(results["preset"])) if "preset" in results else [],
            "step": step,
            "steps": sorted(int(s) for s in results["step"].unique()) if len(results) else [],
            "dir": str(store.dir.relative_to(store.run_dir)),  # relative: a copied run folder works in place
            "figures": figures,
            "tables": [t for t in ev.tables() if len(frames[t])],
            "heatmap": ev.heatmap(),
            **ev.summarize(latest),
        }
        marked = results[results["non_finite"].fillna("") != ""] if "non_finite" in results else results[:0]
        if len(marked):  # cells whose values are not finite (marked when stored): said in the summary
            summary["non_finite_rows"] = int(len(marked))
        store.write_derived(SUMMARY, json_text(summary).encode())
    return {**summary, "dir": str(store.dir)}  # (to the caller: where this process finds it)
