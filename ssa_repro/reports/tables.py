"""Summary tables of a comparison: one row per run or group, and Markdown without extra packages."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ssa_repro.reports.aggregate import separated
from ssa_repro.reports.difference import resolve_baseline
from ssa_repro.reports.results import fmt
from ssa_repro.stats.intervals import seed_interval


def _run_stats(comp, label: str) -> pd.DataFrame:
    """Per run of a group: its grid mean, in-distribution mean and worst cell (over the shared cells)."""
    per = comp.per_run[comp.per_run.label == label]
    rows = []
    for run, g in per.groupby("run", sort=False):
        near = g
        for a, target in comp.in_dist_at.items():
            near = near[near[a] == target]
        rows.append(
            {
                "run": run,
                "mean": g["value"].mean(),
                "in_dist": near["value"].mean(),
                "worst": g["value"].max(),
            }
        )
    return pd.DataFrame(rows)


def summary_table(comp, baseline: str | None = None) -> pd.DataFrame:
    """One row per run or group: the grid mean, in distribution (the cells at the training σ's) and the
    worst cell, each the mean over seeds with its seed-level 95% interval (``_low``/``_high``; the
    geometric mean and a log-scale interval for positive metrics); whether the in-distribution and mean
    intervals separate from the baseline's (``lower``/``higher``, else ``not separated``), and the share
    of cells where the group's seed mean beats / ties the baseline's."""
    base = resolve_baseline(comp, baseline)
    ref = comp.grid(base) if base is not None else None
    stats = {g.label: _run_stats(comp, g.label) for g in comp.groups}
    agg = {
        g.label: {k: seed_interval(stats[g.label][k], comp.kind) for k in ("mean", "in_dist", "worst")}
        for g in comp.groups
    }
    rows = []
    for g in comp.groups:
        cells = comp.cells[comp.cells.label == g.label]
        v = comp.grid(g.label).to_numpy(dtype=float)
        worst = cells.loc[cells["mean"].idxmax()]
        row = {
            "label": g.label,
            "seeds": len(g.runs),
            "seed_list": ", ".join(str(s) for s in g.seeds),
            "step": "/".join(str(s) for s in sorted({s for s in g.steps if s is not None})) or "?",
        }
        for k in ("mean", "in_dist", "worst"):
            a = agg[g.label][k]
            row[k], row[f"{k}_low"], row[f"{k}_high"] = a["mean"], a["ci_low"], a["ci_high"]
        row["worst_cell"] = ", ".join(f"{comp.short(a)}={fmt(worst[a])}" for a in (comp.rows, comp.cols))
        if ref is not None:
            r = ref.to_numpy(dtype=float)
            tie = np.isclose(v, r, rtol=1e-9, atol=1e-12)
            ok = ~np.isnan(v) & ~np.isnan(r)
            n = max(int(ok.sum()), 1)
            row["beats_baseline"] = np.nan if g.label == base else float(((v < r) & ~tie & ok).sum() / n)
            row["ties_baseline"] = np.nan if g.label == base else float((tie & ok).sum() / n)
            for k in ("in_dist", "mean"):
                if g.label == base:
                    row[f"{k}_vs_baseline"] = ""
                    continue
                mine, theirs = agg[g.label][k], agg[base][k]
                if separated(mine, theirs):
                    row[f"{k}_vs_baseline"] = "lower" if mine["mean"] < theirs["mean"] else "higher"
                else:
                    row[f"{k}_vs_baseline"] = "not separated"
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


def seed_ranges(seeds) -> str:
    """Seeds as runs of consecutive integers: [8, 9, 10, 12] → "8–10, 12"."""
    out, run = [], []
    for x in sorted(int(v) for v in seeds):
        if run and x != run[-1] + 1:
            out.append(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
            run = []
        run.append(x)
    if run:
        out.append(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
    return ", ".join(out)
