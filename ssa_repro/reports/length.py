"""Length extrapolation (length_cpu and any grid over prompt lengths): each task's error against test
length as a multiple of its run's training length, whether a length task was learned at all, and its
table and figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.core import plotting
from ssa_repro.core.plotting import plt, save
from ssa_repro.reports.icl_frame import ARCH_TEXT, QUANT, TASK_TEXT

# ------------------------------------------------------------------ length curves (length_cpu)
# a task's curve metric: MSE for linear, sequence error for the quantifiers, token error for length tasks
LENGTH_METRIC = {"linear": "mse"}


def curve_metric(task: str) -> str:
    return LENGTH_METRIC.get(task, "sequence_error" if task in QUANT else "token_error")


def length_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-seed rows of the length curves (:func:`length_rows`) with their σ_x, length and ratio to
    the training length as columns, each task at its curve metric (:func:`curve_metric`)."""
    if frame is None or not len(frame):
        return pd.DataFrame()
    c = frame[frame.summary.str.startswith("sigma_x=") & frame.summary.str.contains(" ratio=")]
    c = c[[m == curve_metric(t) for t, m in zip(c.task, c.metric)]]
    if c.empty:
        return pd.DataFrame()
    parts = c.summary.str.extract(r"sigma_x=([\d.e+-]+) length=(\d+) ratio=([\d.e+-]+)")
    return c.assign(sigma_x=parts[0].astype(float), length=parts[1].astype(int), ratio=parts[2].astype(float))


LEARNED_BELOW = 0.1  # a seed learned: its error at least 10% of the baseline's below it (and the margin)


def length_learned(frame: pd.DataFrame, ratio: float | None = 1.0) -> pd.DataFrame:
    """Whether each length task's model learned it: per group × task × architecture × scorer (× test
    length), the seed-mean error at σ_x = 1 against the best label-rule baseline's at the same length
    (``baseline``, the lowest seed-mean of the baselines; they do not depend on the model); a seed has
    learned where its own error is lower by more than the metric's margin (``stats.MARGINS``: 0.02 for
    token error) and by more than :data:`LEARNED_BELOW` of the baseline's error, and the arm is
    ``learned`` where at least half its seeds have (``seeds learned``: k/n). Issue 58: MQAR with
    learned positions, softmax per seed [0.000, 0.844, …, 0.846] against a baseline 0.8687, was called
    learned by its mean (0.7255) though one seed of seven learned, and the others sit 0.02-0.025 under
    the baseline, at chance for this task.
    ``ratio``: the test length as a multiple of the training length (1: the training length, the report's
    table), or None for every length, with ``ratio`` and ``summary`` columns (what the judge of a contrast
    reads: a contrast at 16× is judged by what the models do at 16×, not at 1×). The paper's tasks
    (quantifiers, linear) are not listed: their claims read their own cells."""
    cols = ["group", "task", "arch", "scorer", "model", "baseline", "seeds learned", "learned"]
    keys = ["group", "task", "arch", "scorer"] + ([] if ratio is not None else ["ratio", "summary"])
    cols = keys + cols[4:]
    c = length_curves(frame)
    if c.empty:
        return pd.DataFrame(columns=cols)
    c = c[np.isclose(c.sigma_x, 1.0) & ~c.task.isin([*QUANT, "linear"])]
    if ratio is not None:
        c = c[np.isclose(c.ratio, ratio)]
    per_seed = c[c.predictor == "model"].groupby([*keys, "seed"]).value.mean()
    model = per_seed.groupby(keys).mean()
    if model.empty:
        return pd.DataFrame(columns=cols)
    at = ["task"] + ([] if ratio is not None else ["ratio"])
    base = c[c.predictor != "model"].groupby([*at, "predictor"]).value.mean().groupby(at).min()
    out = model.rename("model").reset_index()
    out["baseline"] = [base.get(tuple(k) if len(at) > 1 else k[0], np.nan) for k in out[at].to_numpy()]
    out["margin"] = [stats.MARGINS.get(curve_metric(t), 0.0) for t in out.task]
    seeds = per_seed.rename("seed_value").reset_index().merge(out[[*keys, "baseline", "margin"]], on=keys)
    gap = np.maximum(seeds.margin, LEARNED_BELOW * seeds.baseline)
    seeds["learned"] = (seeds.seed_value < seeds.baseline - gap) | seeds.baseline.isna()
    k = seeds.groupby(keys).learned.agg(["sum", "size"])
    hit = k.reindex(pd.MultiIndex.from_frame(out[keys]))
    out["seeds learned"] = [f"{int(a)}/{int(b)}" for a, b in zip(hit["sum"], hit["size"])]
    out["learned"] = (2 * hit["sum"].to_numpy() >= hit["size"].to_numpy()) | out.baseline.isna().to_numpy()
    return out[cols]


def length_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task × architecture (position scheme) × scorer, and each baseline once: the curve metric at
    σ_x = 1 per test length as a multiple of the training length (seed mean; seeds in the last column)."""
    c = length_curves(frame)
    c = c[np.isclose(c.sigma_x, 1.0)] if len(c) else c
    if c.empty:
        return pd.DataFrame()
    c = c[(c.predictor == "model") | (c.scorer == "softmax")]
    who = np.where(c.predictor == "model", c.scorer, "baseline: " + c.predictor)
    c = c.assign(who=who, arch=np.where(c.predictor == "model", c.arch, "—"))
    t = c.pivot_table(
        index=["task", "arch", "who"], columns="ratio", values="value", aggfunc="mean", sort=False
    )
    t.columns = [f"×{r:.2g}" for r in t.columns]
    t = t[sorted(t.columns, key=lambda x: float(x[1:]))]
    t["seeds"] = c.groupby(["task", "arch", "who"], sort=False).seed.nunique()
    t["metric"] = [curve_metric(task) for task in t.index.get_level_values("task")]
    return t.reset_index().rename(columns={"who": "predictor"}).round(4)


def length_figure(frame: pd.DataFrame, task: str, out: Path) -> Path | None:
    """Error against test length / training length at σ_x = 1: a panel per architecture (position
    scheme), a line per scorer (seed mean) over its per-seed dots; baselines dashed."""
    c = length_curves(frame)
    c = c[(c.task == task) & np.isclose(c.sigma_x, 1.0)] if len(c) else c
    model = c[c.predictor == "model"] if len(c) else c
    if model.empty:
        return None
    if not plotting.enabled():  # saving off (plotting.saving): the path it would write, nothing built
        return out / f"length_{task}.png"
    archs = sorted(set(model.arch))
    fig, axs = plt.subplots(1, len(archs), figsize=(2.4 * len(archs) + 0.6, 2.6), sharey=True, squeeze=False)
    for a, arch in zip(axs[0], archs):
        for j, (scorer, g) in enumerate(model[model.arch == arch].groupby("scorer", sort=True)):
            a.plot(g.ratio, g.value, "o", ms=2, alpha=0.35, color=f"C{j}")
            m = g.groupby("ratio").value.mean()
            a.plot(m.index, m.to_numpy(), "-", lw=1.5, color=f"C{j}", label=scorer)
        for k, (pred, b) in enumerate(c[c.predictor != "model"].groupby("predictor", sort=True)):
            m = b.groupby("ratio").value.mean()
            a.plot(m.index, m.to_numpy(), ["--", ":", "-."][k % 3], color="k", lw=0.8, label=pred)
        a.axvline(1.0, color="0.6", lw=0.6)
        a.set_xscale("log", base=2)
        a.set_title(ARCH_TEXT.get(arch, arch), fontsize=8)
        a.set_xlabel("test length / training length", fontsize=7)
        a.tick_params(labelsize=6)
    axs[0][0].set_ylabel(curve_metric(task).replace("_", " "), fontsize=8)
    axs[0][-1].legend(fontsize=6)
    fig.suptitle(f"{TASK_TEXT.get(task, task)}: length extrapolation at σ_x = 1, per seed", fontsize=8)
    fig.tight_layout()
    save(fig, out / f"length_{task}.png", formats=("png",), dpi=100)
    return out / f"length_{task}.png"


# ------------------------------------------------------------------ where recall looks (eval=recall)
RECALL_METRICS = ("pair_weight_max_head", "pair_weight", "entropy")


def recall_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per scorer × architecture × layer (and uniform attention once): the attention on the queried
    pair (the most attending head's, and the heads' mean) and the attention entropy at each number of
    pairs, seed mean (seeds in the last column), from eval=recall's per-seed rows."""
    if frame is None or not len(frame) or "evaluation" not in frame:
        return pd.DataFrame()
    c = frame[frame.evaluation.astype(str).str.startswith("recall") & frame.metric.isin(RECALL_METRICS)]
    if c.empty:
        return pd.DataFrame()
    parts = c.summary.str.extract(r"pairs=(\d+) (.+)")
    c = c.assign(pairs=parts[0].astype(int), where=parts[1])
    who = np.where(c.predictor == "model", c.scorer, "uniform")
    c = c.assign(who=who, arch=np.where(c.predictor == "model", c.arch, "—"))
    keys = ["metric", "arch", "who", "where"]
    t = c.pivot_table(index=keys, columns="pairs", values="value", aggfunc="mean", sort=True)
    t.columns = [f"{n} pairs" for n in t.columns]
    t["seeds"] = c.groupby(keys).seed.nunique()
    return t.reset_index().rename(columns={"who": "scorer", "where": "layer"}).round(4)
