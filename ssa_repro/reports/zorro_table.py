"""The paper's table 3 from the ``eval=zorro`` results of several runs (``python scripts/zorro_table.py``):
one row per paradigm (the paper's 12 first, under its names, then the rest and the means), per scorer
the mean accuracy over seeds, its standard deviation and the number of seeds, and the paper's numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.core.atomic import write_text
from ssa_repro.core.plotting import plt, save
from ssa_repro.evaluation.store import stored
from ssa_repro.evaluation.zorro import PAPER_SCORERS, PAPER_TABLE3
from ssa_repro.reports.runs import all_runs, run_inside


def mlm_run_dirs(paths) -> list[Path]:
    """Run folders of task=mlm runs at or below the paths: what ``scripts/compare.py`` hands to
    :func:`main`."""
    return [r.path for r in all_runs(paths) if r.task == "mlm"]


def main(paths, out: str | Path | None = None, method: str = "pll") -> int:
    """Table 3 for ``paths``: writes the table files into ``out`` (default: the first path when it is a
    sweep folder, else ``zorro_table/`` beside that run), prints the markdown; 2 with a message when
    there are no Zorro results."""
    try:
        table = zorro_table(paths, method)
    except (FileNotFoundError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    if out is None:  # a sweep folder; never inside a run folder (next to it instead)
        out = Path(paths[0])
        out = out.parent / "zorro_table" if run_inside(out) is not None else out
    out = Path(out)
    files = write_zorro_table(table, out)
    print((out / "zorro_table.md").read_text())
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _results(paths) -> pd.DataFrame:
    """Every mlm run's Zorro rows (its newest stored zorro protocol with pairs scored)."""
    frames = []
    for r in all_runs(paths):
        for store in reversed(stored(r.path, "zorro")):
            f = store.read("results")
            f = f[f.metric == "accuracy"] if len(f) else f
            if len(f):
                frames.append(f)
                break
    if not frames:
        raise FileNotFoundError(
            f"no stored eval=zorro results under {list(map(str, paths))}; run python evaluate.py run_dir=... eval=zorro"
        )
    return pd.concat(frames, ignore_index=True)


def zorro_table(paths, method: str = "pll") -> pd.DataFrame:
    """The paper's table-3 layout from the ``eval=zorro`` results of run (or sweep) folders: one row per
    paradigm (the paper's 12 first, under its names, then the rest and the means), per scorer the mean
    accuracy over seeds, its standard deviation over seeds and the number of seeds; and the paper's
    own numbers for the 12."""
    frame = _results(paths)
    frame = frame[frame.method == method]
    if frame.empty:
        raise ValueError(f"no rows for method={method} in the stored Zorro results")
    frame["paper_name"] = frame.paper_name.fillna("")
    frame["row"] = np.where(frame.paper_name != "", frame.paper_name, frame.paradigm)
    agg = frame.groupby(["row", "scorer"]).value.agg(["mean", "std", "count"]).reset_index()
    scorers = [s for s in PAPER_SCORERS if s in set(agg.scorer)] + sorted(
        set(agg.scorer) - set(PAPER_SCORERS)
    )
    wide = agg.pivot(index="row", columns="scorer")
    out = pd.DataFrame(index=wide.index)
    for s in scorers:
        out[s] = wide[("mean", s)]
        out[f"{s} sd"] = wide[("std", s)]
        out[f"{s} seeds"] = wide[("count", s)]
    for k, s in enumerate(PAPER_SCORERS):
        out[f"paper {s}"] = [PAPER_TABLE3.get(r, (np.nan,) * 3)[k] for r in out.index]
    reported = [r for r in PAPER_TABLE3 if r in out.index]
    means = sorted(r for r in out.index if r.startswith("mean ("))
    rest = sorted(set(out.index) - set(reported) - set(means))
    out = out.loc[reported + rest + means]
    out.index.name = "probe"
    return out


def write_zorro_table(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """``zorro_table.csv``, ``zorro_table.md`` and a grouped bar chart ``zorro_table.png``/``.pdf``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "zorro_table.csv", table.to_csv())
    scorers = [c for c in table.columns if not c.endswith((" sd", " seeds")) and not c.startswith("paper ")]
    lines = ["| probe | " + " | ".join(scorers) + " | paper " + " / ".join(PAPER_SCORERS) + " |"]
    lines.append("|---" * (len(scorers) + 2) + "|")
    for probe, row in table.iterrows():
        cells = []
        for s in scorers:
            v, sd, n = row[s], row[f"{s} sd"], row[f"{s} seeds"]
            cells.append("" if pd.isna(v) else f"{v:.1f}" + (f" ± {sd:.1f} ({int(n)})" if n > 1 else ""))
        paper = [row[f"paper {s}"] for s in PAPER_SCORERS]
        ptxt = "" if all(pd.isna(paper)) else " / ".join(f"{p:g}" for p in paper)
        lines.append(f"| {probe} | " + " | ".join(cells) + f" | {ptxt} |")
    write_text(out_dir / "zorro_table.md", "\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.3 * len(table) * max(1, len(scorers)) ** 0.5))
    h = 0.8 / max(1, len(scorers))
    for k, s in enumerate(scorers):
        y = np.arange(len(table)) + (k - (len(scorers) - 1) / 2) * h
        ax.barh(y, table[s], height=h, xerr=table[f"{s} sd"].fillna(0), label=s, error_kw={"lw": 0.7})
    ax.set_yticks(
        np.arange(len(table)), [f"★ {p}" if p in PAPER_TABLE3 else p for p in table.index], fontsize=7
    )
    for tick, p in zip(ax.get_yticklabels(), table.index, strict=True):
        if p in PAPER_TABLE3:
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    ax.axvline(50, color="grey", ls="--", lw=0.8)
    ax.set_xlim(0, 100)
    ax.set_xlabel("Zorro accuracy (%), mean over seeds ± sd")
    ax.set_title("Zorro by scorer (★ bold: the paper's table 3 probes)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return [
        out_dir / "zorro_table.csv",
        out_dir / "zorro_table.md",
        *save(fig, out_dir / "zorro_table"),
    ]
