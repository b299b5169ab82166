"""Reading the stored results of many runs: which protocol to compare, and its cells.

Each run stores its results per evaluation protocol (``ssa_repro/evaluation/store.py``). Runs can be
compared on a protocol they share: the same evaluation with the same settings (the grid's axis values
may differ: comparisons use the cells the runs share and say which were left out). ``choose`` picks
it from what the user asked for: ``auto`` (the task's default evaluation where every run has it,
else the end-of-run ``quick`` one), a preset (``default``, ``quick``), an evaluation name (``grid``,
``deviant``, ...) or a protocol id.
"""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd

from ssa_repro.core.rundir import SUMMARY
from ssa_repro.evaluation.store import Store, stored
from ssa_repro.reports.runs import ReportError, Run


def _presets(store: Store) -> set[str]:
    frame = store.read("results")
    return set(frame["preset"].dropna()) if "preset" in frame else set()


def _matches(store: Store, want: str) -> bool:
    return want in (store.name, store.id) or want in _presets(store)


def choose(runs: list[Run], want: str = "auto", strict: bool = True) -> tuple[str, str]:
    """(evaluation, protocol id) to compare. ``strict``: every run must hold it (a run list); else
    the protocol most runs hold (a sweep, whose other jobs are listed as missing)."""
    per_run = {r.path: stored(r.path) for r in runs}
    if not any(per_run.values()):
        raise ReportError(
            "no stored evaluation results in "
            + ", ".join(str(r.path) for r in runs)
            + " (eval/<evaluation>/<protocol>/): is training finished, or was it run with evaluation=off?"
        )
    wants = ["default", "quick"] if want == "auto" else [want]
    for w in wants:
        counts = Counter(
            (s.name, s.id)
            for stores in per_run.values()
            for s in {(x.name, x.id): x for x in stores}.values()
            if _matches(s, w)
        )
        if not counts:
            continue
        (name, pid), n = counts.most_common(1)[0]
        if n == len(runs) or not strict:
            return name, pid
    lines = [
        f"{r.path}: "
        + (
            ", ".join(f"{s.name}/{s.id} ({'/'.join(sorted(_presets(s))) or '-'})" for s in per_run[r.path])
            or "none"
        )
        for r in runs
    ]
    raise ReportError(
        f"no evaluation protocol matching {want!r} is stored in every run; stored (evaluation/id (presets)):\n  - "
        + "\n  - ".join(lines)
        + "\nevaluate the runs with the same settings (python evaluate.py -m run_dir=A,B ...), or choose with --eval"
    )


def coord(value):
    """A cell coordinate as compared: a number as float (``10`` and ``10.0`` are one cell), else a
    string (the shift evaluation's ``variant``)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def fmt(value) -> str:
    """A coordinate for labels: numbers as ``%g``, strings as they are."""
    return f"{value:g}" if isinstance(value, float | int) else str(value)


def stored_layout(run: Run, name: str, pid: str) -> tuple[dict | None, list[str]]:
    """(the heat map layout the evaluator stored with its results: rows, cols, metric and, where
    stored, the metric's kind, or None; the coordinates of a cell) of a run's protocol."""
    store = store_of(run, name, pid)
    if store is None:
        return None, []
    path = store.dir / SUMMARY
    summary = json.loads(path.read_text()) if path.exists() else {}
    return summary.get("heatmap"), list(store.coords)


def store_of(run: Run, name: str, pid: str) -> Store | None:
    return next((s for s in stored(run.path, name) if s.id == pid), None)


def read(run: Run, name: str, pid: str, table: str = "results") -> pd.DataFrame:
    """The stored rows of a run's protocol (each cell once: its newest part), newest step only."""
    store = store_of(run, name, pid)
    if store is None:
        return pd.DataFrame()
    frame = store.read(table)
    if len(frame) and "step" in frame:
        frame = frame[frame["step"] == frame["step"].max()]
    return frame
