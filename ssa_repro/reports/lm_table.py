"""The paper's table 2 from the ``eval=lm`` results of several runs: perplexities, then each task's
accuracy ± standard error, zero- and few-shot, one column per run (``python scripts/lm_table.py``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ssa_repro.core.atomic import write_text
from ssa_repro.evaluation.multiple_choice import TASKS as MC_TASKS
from ssa_repro.evaluation.store import stored
from ssa_repro.reports.runs import all_runs, read_run, run_inside


def _cell(value, err, pct=True) -> str:
    if value is None or value != value:
        return "–"
    scale = 100 if pct else 1
    if err is None or err != err:
        return f"{value * scale:.1f}"
    return f"{value * scale:.1f} ± {err * scale:.1f}"


def lm_table_frames(runs: list[tuple[str, pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """Rows: perplexities, then each task's acc (acc_norm where lm-eval reports it, as the paper's
    harness numbers are); columns: ``<shots>-shot <label>`` for each run. Values in %, ± stderr."""
    table: dict[str, dict[str, str]] = {}
    order: list[str] = []

    def put(row, col, text):
        if row not in table:
            table[row] = {}
            order.append(row)
        table[row][col] = text

    shots = sorted({int(s) for _, _, res in runs for s in res["shots"].dropna().unique()}) if runs else []
    for label, ppl, _ in runs:  # perplexities do not depend on shots: in the first shot columns
        for r in ppl.itertuples():
            put(
                f"perplexity: {r.split}",
                f"{shots[0]}-shot {label}" if shots else label,
                f"{r.perplexity:.2f}",
            )
    for k in shots:
        for label, _, res in runs:
            sub = res[res.shots == k]
            for name in MC_TASKS:
                rows = sub[sub.benchmark == name]
                if rows.empty:
                    continue
                metric = "acc_norm" if "acc_norm" in set(rows.metric) else "acc"
                r = rows[rows.metric == metric].iloc[0]
                put(
                    f"{MC_TASKS[name].paper} [{name}, {metric}]",
                    f"{k}-shot {label}",
                    _cell(r.value, r.stderr),
                )
    frame = pd.DataFrame.from_dict(table, orient="index").loc[order]
    frame.index.name = "row"
    return frame.fillna("")


def _markdown(frame: pd.DataFrame) -> str:
    cols = ["row", *frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for idx, r in frame.iterrows():
        lines.append("| " + " | ".join([str(idx), *[str(v) for v in r.values]]) + " |")
    return "\n".join(lines)


def lm_table(run_dirs: list[str | Path], out: str | Path | None = None) -> pd.DataFrame:
    """Table 2 for several ``eval=lm``-evaluated runs (labelled by scorer; each run's newest stored lm
    protocol with LM-eval tasks, else its newest); writes ``<out>.csv`` and ``<out>.md`` when ``out``."""
    runs = []
    for d in run_dirs:
        stores = stored(d, "lm")
        if not stores:
            raise FileNotFoundError(
                f"{d} has no stored eval=lm results: run python evaluate.py run_dir={d} eval=lm"
            )
        frames = [(s, s.read("results")) for s in stores]
        with_tasks = [(s, f) for s, f in frames if "benchmark" in f and f["benchmark"].notna().any()]
        store, res = (with_tasks or frames)[-1]
        label = str(read_run(Path(d)).scorer)
        if any(label == r[0] for r in runs):
            label = f"{label} ({Path(d).name})"
        bench = res[res["benchmark"].notna()] if "benchmark" in res else res.iloc[:0]
        runs.append((label, store.read("perplexity"), bench))
    frame = lm_table_frames(runs)
    if out is not None:
        out = Path(out)
        write_text(out.with_suffix(".csv"), frame.to_csv())
        write_text(out.with_suffix(".md"), _markdown(frame) + "\n")
    return frame


def lm_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run folders of task=lm runs with stored eval=lm results, at or below each path."""
    return [r.path for r in all_runs(paths) if r.task == "lm" and stored(r.path, "lm")]


def main(paths: list[str | Path], out: str | Path | None = None) -> int:
    """``scripts/lm_table.py`` (and the hook for ``scripts/compare.py``): table 2 for the ``eval=lm``
    runs found under ``paths``, written to ``<out>/lm_table.csv`` and ``.md`` and printed."""
    runs = lm_run_dirs(paths)
    if not runs:
        print(
            f"no eval=lm results under {', '.join(map(str, paths))}: run python evaluate.py run_dir=... eval=lm"
        )
        return 1
    folder = Path(out) if out else Path(paths[0])
    if run_inside(folder) is not None:
        folder = run_inside(folder).parent
    frame = lm_table(runs, folder / "lm_table")
    print(_markdown(frame))
    print(f"\nwritten: {folder / 'lm_table.csv'}, {folder / 'lm_table.md'}")
    return 0
