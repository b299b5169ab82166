"""Compare the stored evaluation results of several runs, or of a sweep (``python scripts/compare.py``).

Inputs: run folders, or one sweep folder (its job folders and ``jobs.yaml``). Everything is read from
the runs' stored results (``eval/<evaluation>/<protocol>/``); nothing is written into a run folder.

- **Groups.** A run list gives one panel per run, labelled by what tells the runs apart (scorer, then
  model, seed, step, folder name, as needed; ``--group-by`` averages runs sharing config keys as
  seeds). A sweep is grouped by the keys overridden in its jobs except ``seed``; the seeds of a group
  are aggregated cell by cell (``reports/aggregate.py``). Jobs without results (failed, not finished,
  not evaluated with the chosen protocol, not started) are listed with the reason and left out.
- **Protocol.** The runs are compared on one stored protocol (``reports/results.py:choose``); the
  layout and metric come from the task's declaration (its grid's rows, columns and headline metric,
  log scale for positive metrics) or the deviant grid (M × k).
- **Shared cells.** Where the runs' grids differ (other σ's or lengths), the comparison uses the cells
  every compared run has and lists the ones it left out.
- **Outputs** (``write``; ``<sweep>/compare`` for a sweep, ``<common parent>/compare/<time>`` for
  runs): ``heatmaps.png/.pdf``, ``difference.png/.pdf``, ``summary.csv``, ``summary.md`` (the table,
  definitions, seed intervals, what was left out), ``cells.csv`` (per group and cell: mean, seed
  interval, std, count), ``runs.csv`` (per run and cell), ``difference.csv``, ``compare.json``.

The comparison itself (groups, protocol, layout, the per-cell values) is ``reports/comparison.py``'s;
this module writes it and is the command.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import pandas as pd

from ssa_repro.core.atomic import write_json, write_text
from ssa_repro.core.plotting import plt
from ssa_repro.reports import figures, lm_table, tables, zorro_table
from ssa_repro.reports.comparison import (  # noqa: F401 (the tests and callers read them here)
    SEED_KEYS,
    SHORT,
    Comparison,
    Group,
    collect,
    layout,
    metric_kind,
)
from ssa_repro.reports.difference import difference, difference_mode, resolve_baseline
from ssa_repro.reports.results import coord
from ssa_repro.reports.runs import ReportError, all_runs, run_inside


# ------------------------------------------------------------------------------------------ writing
def default_out_dir(comp: Comparison, now: datetime | None = None) -> Path:
    """``<sweep>/compare`` for a sweep; ``<common parent>/compare/<time>`` for runs (never in a run)."""
    if comp.sweep is not None:
        return comp.sweep / "compare"
    runs = [str(r.path.resolve()) for g in comp.groups for r in g.runs]
    parent = Path(os.path.commonpath(runs))
    inside = run_inside(parent)
    while inside is not None:
        parent = inside.parent
        inside = run_inside(parent)
    stamp = (now or datetime.now()).strftime("%Y-%m-%d_%H-%M-%S")
    return parent / "compare" / stamp


def write(
    comp: Comparison, out_dir: Path, baseline: str | None = None, mode: str = "auto", close: bool = True
) -> dict:
    """Write the figures and tables into ``out_dir``; returns what was written and the colour scales."""
    out_dir = Path(out_dir)
    inside = run_inside(out_dir.resolve())
    if inside is not None:
        raise ReportError(
            f"{out_dir} lies inside the run folder {inside}: comparisons never write into a run"
        )
    base = resolve_baseline(comp, baseline)
    mode = difference_mode(comp, mode)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    grids = figures.plot_grids(comp, out_dir / "heatmaps")
    diff = figures.plot_difference(comp, base, mode, out_dir / "difference")
    summary = tables.summary_table(comp, base)
    write_text(out_dir / "summary.csv", summary.to_csv(index=False))
    write_text(out_dir / "cells.csv", comp.cells.to_csv(index=False))
    write_text(out_dir / "runs.csv", comp.per_run.to_csv(index=False))
    diffs = difference(comp, base, mode)
    if diffs:
        long = [
            d.stack().rename("value").reset_index().assign(label=lab, baseline=base, mode=mode)
            for lab, d in diffs.items()
        ]
        write_text(out_dir / "difference.csv", pd.concat(long, ignore_index=True).to_csv(index=False))
    write_text(out_dir / "summary.md", _markdown_report(comp, summary, base, mode, diff is not None))
    info = {
        "task": comp.task,
        "eval": comp.eval,
        "protocol": comp.protocol,
        "metric": comp.metric,
        "axes": [comp.rows, comp.cols],
        "baseline": base,
        "difference": mode if diffs else None,
        "groups": {g.label: [str(r.path) for r in g.runs] for g in comp.groups},
        "missing": [{"folder": f, "why": w} for f, w in comp.missing],
        "left_out_cells": comp.left_out,
        "sweep": str(comp.sweep) if comp.sweep else None,
        "common_overrides": comp.common_overrides,
        "notes": comp.notes,
        "colour_scale": {"vmin": grids.vmin, "vmax": grids.vmax, "log": grids.log},
        "difference_scale": {"vmin": diff.vmin, "vmax": diff.vmax} if diff else None,
        "files": sorted(p.name for p in out_dir.iterdir() if p.is_file() and not p.name.startswith("."))
        + ["compare.json"],
        "seconds": time.perf_counter() - t0,
    }
    write_json(out_dir / "compare.json", info)
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
    lines = [f"# Comparison: {comp.what()}", ""]
    if comp.sweep is not None:
        lines.append(
            f"Sweep `{comp.sweep}`, grouped by the overridden keys except seed (seeds aggregated cell-wise)."
        )
        if comp.common_overrides:
            lines.append(f"Overrides common to all jobs: `{' '.join(comp.common_overrides)}`.")
    lines += ["", "Runs:", ""]
    for g in comp.groups:
        lines.append(f"- **{g.label}**: " + ", ".join(f"`{_rel(comp, r.path)}`" for r in g.runs))
    lines += ["", tables.markdown_table(summary), ""]
    at = ", ".join(f"{comp.short(a)}={v:g}" for a, v in comp.in_dist_at.items()) or "the smallest σ"
    avg = "geometric mean over seeds (log-scale interval)" if comp.log else "mean over seeds"
    defs = [
        f"`mean`: mean of the {comp.metric} over the {comp.rows} × {comp.cols} cells, per run; then the {avg}",
        f"`in_dist`: mean over the cells at the training distribution ({at}), per run; then the {avg}",
        "`worst`: the largest cell value per run; `worst_cell`: where the seed-mean grid is largest",
        "`_low`/`_high`: 95% interval over seeds (Student t; NaN with one seed)",
    ]
    if base is not None:
        defs.append(
            f"`beats_baseline` / `ties_baseline`: share of cells whose seed mean is strictly lower / equal than **{base}**'s"
        )
        defs.append(
            "`in_dist_vs_baseline`, `mean_vs_baseline`: `lower`/`higher` only where the seed intervals do not "
            "overlap, else `not separated` (no difference is claimed)"
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
    lines += [f"- {d}" for d in defs]
    if comp.notes:
        lines += ["", "Notes:", *[f"- {n}" for n in comp.notes]]
    if comp.left_out:
        lines += [
            "",
            f"Cells not held by every run, left out ({len(comp.left_out)}): " + "; ".join(comp.left_out),
        ]
    if comp.missing:
        lines += [
            "",
            f"Not included ({len(comp.missing)}):",
            *[f"- `{_rel(comp, f)}`: {w}" for f, w in comp.missing],
        ]
    lines += ["", "![heat maps](heatmaps.png)", ""]
    if has_diff:
        lines += ["![difference](difference.png)", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ command
# corpus tasks have their own tables, not heat maps: the paper's table 2 (lm) and table 3 (mlm)
OWN_TABLES = {"lm": "the LM table (ssa-lm-table)", "mlm": "the Zorro table (ssa-zorro-table)"}


def kinds_problem(paths) -> str | None:
    """One line when the runs at or below ``paths`` mix a corpus task (lm, mlm: their own tables) with
    another task, which no single comparison covers (it ended in ``KeyError: 'shots'``); else None."""
    by_task: dict[str, list[str]] = {}
    for r in all_runs(paths):
        by_task.setdefault(r.task, []).append(r.path.name)
    if len(by_task) < 2 or not set(by_task) & set(OWN_TABLES):
        return None  # one kind (several ICL tasks are refused by collect, naming them)
    listed = "; ".join(
        f"task={t}: {', '.join(names[:3])}{' …' if len(names) > 3 else ''}" for t, names in by_task.items()
    )
    own = ", ".join(f"{t} runs with {OWN_TABLES[t]}" for t in by_task if t in OWN_TABLES)
    return f"the runs are of different kinds and cannot be compared ({listed}); compare the {own}, the others on their own"


def run(args: argparse.Namespace) -> int:
    """``ssa-compare``'s work on its parsed arguments (ssa_repro/cli/arguments.py ``compare``)."""
    try:  # (walking the paths refuses a run given twice, a copy beside its original: said in words)
        mixed = kinds_problem(args.paths)
        corpus = (
            "mlm"
            if zorro_table.mlm_run_dirs(args.paths)
            else "lm"
            if lm_table.lm_run_dirs(args.paths)
            else None
        )
    except ReportError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    if mixed:
        print(f"Error: {mixed}", file=sys.stderr)
        return 2
    if corpus == "mlm":
        return zorro_table.main(args.paths, args.out, "pll")
    if corpus == "lm":
        return lm_table.main(args.paths, args.out)
    t0 = time.perf_counter()
    try:
        group_by = [k.strip() for k in args.group_by.split(",")] if args.group_by else None
        at = None
        if args.at:
            key, _, value = args.at.partition("=")
            at = {key.strip(): coord(value)}
        comp = collect(args.paths, eval=args.eval, metric=args.metric, group_by=group_by, at=at)
        base = resolve_baseline(comp, args.baseline)
        out = Path(args.out) if args.out else default_out_dir(comp)
        t_read = time.perf_counter() - t0
        result = write(comp, out, base, args.difference)
    except ReportError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    n_runs = sum(len(g.runs) for g in comp.groups)
    print(f"{comp.what()}: {len(comp.groups)} panel(s) from {n_runs} run(s); baseline: {base or 'none'}")
    print(tables.markdown_table(result["summary"]))
    for note in comp.notes:
        print(f"note: {note}")
    if comp.left_out:
        print(f"cells not held by every run, left out: {'; '.join(comp.left_out)}")
    if comp.missing:
        print(f"not included ({len(comp.missing)}):")
        for f, w in comp.missing:
            print(f"  - {_rel(comp, f)}: {w}")
    print(f"wrote {out}/ (read {t_read:.1f} s, figures and tables {result['info']['seconds']:.1f} s)")
    return 0
