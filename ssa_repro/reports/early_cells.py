"""The early-learning report's per-seed values (conf/study/early_cpu.yaml, ``report: early``; the report
itself: ``reports/kinds/early.py``), read from a study's index and its runs' stored cells.

Per-seed values (one row per job × checkpoint step × method × item × metric, :data:`COLUMNS`; written
as ``<out>/<name>/per_seed_<part>.csv`` and read back before anything is computed):

- ``zorro``: Zorro accuracy in % (``zorro_accuracy``) per paradigm (``item`` = the file stem, or
  ``mean_all`` / ``mean_paper12``) and scoring ``method`` (``pll``, ``holistic``), with the pairs
  scored (``n``); the held-out masked-LM loss (``mlm_loss``) and masked-token accuracy
  (``masked_accuracy``), ``method`` = ``mlm``, ``item`` = ``heldout``;
- ``lm``: perplexity per split (``item`` = heldout | valid | test, ``n`` = tokens), and per LM-eval
  task (``item``) and shots (``method`` = ``0-shot`` …) the accuracy (``task_accuracy``: acc_norm where
  lm-eval reports it, else acc; ``n`` = items) and what guessing scores (``chance``, ``majority``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.evaluation.multiple_choice import TASKS as MC_TASKS
from ssa_repro.reports import paired
from ssa_repro.reports.paired import JOB_COLUMNS

COLUMNS = [*JOB_COLUMNS, "evaluation", "step", "method", "item", "metric", "n", "value"]
"""A per-seed row: the job, the study's evaluation key, the checkpoint step, the scoring method (Zorro:
pll | holistic; LM-eval: ``<k>-shot``), the item (paradigm, split, task), the metric, the sample
size behind the value (pairs, tokens, items) and the value."""

MEAN_ALL, MEAN_12 = "mean_all", "mean_paper12"

SPLIT_TEXT = {
    "heldout": "held-out training documents",
    "valid": "WikiText-2 valid",
    "test": "WikiText-2 test",
}

CHANCE = 50.0  # Zorro: two sentences, one grammatical


# ------------------------------------------------------------------ per-seed values
def _stem(paradigm: str) -> str:
    if paradigm.startswith("mean (paper"):
        return MEAN_12
    if paradigm.startswith("mean ("):
        return MEAN_ALL
    return paradigm


def _cells(index: pd.DataFrame, kind: str):
    """The stored cells (every step) of each evaluation key of ``kind`` in the index, non-empty ones."""
    keys = sorted(set(index[index["eval"] == kind].evaluation)) if "eval" in index else []
    for key in keys:
        c = paired.read_cells(index, key, steps="all")
        if not c.empty:
            yield c


def zorro_part(index: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows of every ``zorro`` evaluation key of the index, at every stored step."""
    out = []
    for c in _cells(index, "zorro"):
        acc = c[c.metric == "accuracy"]
        out.append(
            acc.assign(
                item=[_stem(p) for p in acc.paradigm],
                metric="zorro_accuracy",
                n=acc.n_samples,
            )[COLUMNS]
        )
        held = c[c.paradigm == "heldout"]
        masked = held[held.metric == "heldout_masked_tokens"].set_index([*JOB_COLUMNS, "step"]).value
        for metric, name in (
            ("heldout_mlm_loss", "mlm_loss"),
            ("heldout_masked_accuracy", "masked_accuracy"),
        ):
            h = held[held.metric == metric]
            if h.empty:
                continue
            n = [masked.get(tuple(r), np.nan) for r in h[[*JOB_COLUMNS, "step"]].itertuples(index=False)]
            out.append(h.assign(method="mlm", item="heldout", metric=name, n=n)[COLUMNS])
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=COLUMNS)


def lm_part(index: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows of every ``lm`` evaluation key of the index, at every stored step."""
    out = []
    for c in _cells(index, "lm"):
        ppl = c[(c.metric == "perplexity") & c.split.notna()] if "split" in c else c.iloc[:0]
        out.append(ppl.assign(method="stream", item=ppl.split, n=ppl.n)[COLUMNS])
        if "benchmark" not in c:
            continue
        b = c[c.benchmark.notna()]
        for name in b.benchmark.unique():
            t = b[b.benchmark == name]
            score = "acc_norm" if MC_TASKS[name].acc_norm else "acc"
            for metric, as_name in ((score, "task_accuracy"), ("chance", "chance"), ("majority", "majority")):
                r = t[t.metric == metric]
                out.append(
                    r.assign(method=[f"{int(k)}-shot" for k in r.shots], item=name, metric=as_name)[COLUMNS]
                )
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=COLUMNS)


def per_seed(index: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {"zorro": zorro_part(index), "lm": lm_part(index)}


def export(parts: Mapping[str, pd.DataFrame], out_dir: Path) -> dict[str, Path]:
    """``paired.export`` in this report's layout (a row per job × step × method × item × metric; its
    sort leaves out the last two columns, n and value)."""
    return paired.export(parts, out_dir, COLUMNS, free=("evaluation", "n", "value"), unsorted=2)


def read_back(paths: Mapping[str, Path]) -> pd.DataFrame:
    return paired.read_back(
        paths, COLUMNS, text=("group", "task", "scorer", "arch", "evaluation", "method", "item", "metric")
    )


def main_group(frame: pd.DataFrame, task: str) -> str | None:
    """The group with the most seeds of ``task`` (the paired comparison; curve groups have one seed)."""
    sel = frame[frame.task == task]
    if sel.empty:
        return None
    return str(sel.groupby("group").seed.nunique().idxmax())
