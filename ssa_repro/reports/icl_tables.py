"""The ICL report's tables: shift regions, out-of-distribution cells, deviant prompts, boundary values,
the architecture 2 × 2, the alternatives, the paper's table 1 and the seeds that generalise; each from
the per-seed frame (``icl_cells``), seed means or paired contrasts over seeds."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.reports import paired
from ssa_repro.reports.icl_frame import (
    ADVERSE,
    ARCH_TEXT,
    BASE,
    ERRORS,
    QUANT,
    REGIONS,
    TASK_TEXT,
    _g,
    _mean_table,
    _mmm,
    axes,
    seed_stats,
)


def shift_table(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """Per task × scorer (and each baseline once): the sequence and token error in each shift region, as
    seed mean (min–max over seeds), on the arm ``base`` = (group, architecture)."""
    g = paired.select(frame, part="grid", group=base[0], arch=base[1])
    g = g[g.summary.str.startswith("region=") & g.task.isin(QUANT)]
    if g.empty:
        return pd.DataFrame()
    rows = []
    for (task, scorer, pred), sub in g.groupby(["task", "scorer", "predictor"], sort=False):
        if pred != "model" and scorer != "softmax":
            continue  # a baseline does not depend on the scorer: shown once
        row = {
            "task": TASK_TEXT.get(task, task),
            "predictor": scorer if pred == "model" else f"baseline: {pred}",
        }
        for metric in ERRORS:
            for r in REGIONS:
                s = sub[(sub.metric == metric) & (sub.summary == f"region={r}")]
                if len(s):
                    row[f"{metric.split('_')[0]}: {r.replace('_', ' ')}"] = _mmm(
                        seed_stats(s, ["metric"]).iloc[0]
                    )
        rows.append(row)
    return pd.DataFrame(rows)


def ood_table(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """SSA − softmax per cell of the σ = max row and of the longest length (core, sequence error), each a
    paired contrast with its raw sign-flip p: where the out-of-distribution effects live. Exploratory and
    uncalled: the two cells the claims test are decided there, with the one Holm p of their family (a
    second Holm p over these cells would give the same contrast two)."""
    ax = axes(frame)
    if ax["sigma_max"] is None:
        return pd.DataFrame()
    g = paired.select(
        frame, part="grid", group=base[0], arch=base[1], predictor="model", metric="sequence_error"
    )
    cells = g[
        g.summary.str.match(rf"sigma={_g(ax['sigma_max'])} length=|sigma=[\d.]+ length={ax['length_max']}$")
    ]
    cells = cells[cells.task.isin(QUANT)]
    if cells.empty or cells.scorer.nunique() < 2:
        return pd.DataFrame()
    t = stats.contrast_table(
        cells[cells.scorer.isin(["softmax", "ssa"])], by=["task", "summary"], family=["task"], n_boot=2000
    )
    means = cells.groupby(["task", "summary", "scorer"]).value.mean().unstack("scorer")
    return pd.DataFrame(
        {
            "task": [TASK_TEXT.get(x, x) for x in t.task],
            "cell": t.summary,
            "softmax": [f"{means.loc[(a, b), 'softmax']:.3g}" for a, b in zip(t.task, t.summary)],
            "SSA": [f"{means.loc[(a, b), 'ssa']:.3g}" for a, b in zip(t.task, t.summary)],
            "SSA − softmax [95%], raw p": [
                f"{e:+.3g} [{lo:+.3g}, {hi:+.3g}], {p:.2g}"
                for e, lo, hi, p in zip(t.estimate, t.low, t.high, t.p_value)
            ],
        }
    )


def deviant_table(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """Per quantifier task × scorer × sign at the largest M, k = 1 (the arm ``base``): where the errors
    are, whether the predictions follow the inserted value (beside the labels), and the attention on it."""
    ax = axes(frame)
    if ax["M_max"] is None:
        return pd.DataFrame()
    d = paired.select(frame, part="deviant", group=base[0], arch=base[1])
    d = d[d.task.isin(QUANT) & d.summary.str.endswith(f"M={_g(ax['M_max'])} k=1")]
    d = d[d.summary.str.startswith("sign=") | d.summary.str.match(r"layer=\d+ head=(mean|max)")]
    if d.empty:
        return pd.DataFrame()
    sign = d.summary.str.extract(r"sign=(\w+)")[0]
    name = np.where(
        d.summary.str.startswith("layer="),
        d.summary.str.extract(r"(layer=\d+ head=\w+)")[0] + " attention",
        np.where(d.predictor == "labels", d.metric + " (labels)", d.metric),
    )
    d = d.assign(sign=sign.to_numpy(), what=name)
    d = d.assign(
        sign=[
            f"{s} ({'adverse' if ADVERSE[t.split('_')[0]] == s else 'control'})"
            for s, t in zip(d.sign, d.task)
        ]
    )
    keep = [
        "sequence_error",
        "error_at_inserted",
        "error_after_inserted",
        "error_elsewhere",
        "follows_largest",
        "follows_largest (labels)",
        "uniform_share",
        "attention_on_inserted",
        "attention_on_inserted_max_head",
    ]
    d = d[d.what.isin(keep) | d.what.str.startswith("layer=")]
    g = d.groupby(["task", "scorer", "sign", "what"], sort=False).value.mean().unstack("what").reset_index()
    g["task"] = [TASK_TEXT.get(t, t) for t in g.task]
    cols = (
        ["task", "scorer", "sign"]
        + [c for c in keep if c in g]
        + sorted(c for c in g if str(c).startswith("layer="))
    )
    return g[cols].round(3)


def boundary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per architecture × scorer × training σ (query sweep): the seed means of the boundary estimates."""
    b = paired.select(frame, part="boundary", summary="prompts=query_sweep", predictor="model")
    shown = ["upper", "y_true_high", "train_high", "saturation_pos", "slope_pos", "plateau_pos", "bound_high"]
    b = b[b.metric.isin(shown)]
    if b.empty:
        return pd.DataFrame()
    keys = ["arch", "scorer", "train_sigma"]
    t = b.pivot_table(index=keys, columns="metric", values="value", aggfunc="mean", sort=False)
    t = t[[m for m in shown if m in t.columns]]
    t["seeds"] = b.groupby(keys, sort=False).seed.nunique()
    t = t.reset_index()
    t["arch"] = [ARCH_TEXT.get(a, a) for a in t.arch]
    return t.round(3)


def architecture_table(frame: pd.DataFrame) -> pd.DataFrame:
    """every_num and linear per architecture × scorer (pre-LN from core): in distribution, σ shift at
    training lengths, length shift at the training σ, deviant error; linear in distribution and σ_F max."""
    ax = axes(frame)
    if ax["sigma_max"] is None:
        return pd.DataFrame()
    want = {
        ("every_num", "grid", "sequence_error", "region=in_distribution"): "every_num in distribution",
        (
            "every_num",
            "grid",
            "sequence_error",
            f"train_lengths sigma={_g(ax['sigma_max'])}",
        ): f"every_num σ = {_g(ax['sigma_max'])}",
        (
            "every_num",
            "grid",
            "sequence_error",
            f"sigma={_g(ax['sigma_min'])} length={ax['length_max']}",
        ): f"every_num length {ax['length_max']}",
    }
    if ax["M_max"] is not None:
        want[("every_num", "deviant", "sequence_error", f"sign=positive M={_g(ax['M_max'])} k=1")] = (
            f"every_num deviant +{_g(ax['M_max'])}"
        )
    if ax["sigma_f"]:
        want[("linear", "grid", "mse", "sigma_f=1 sigma_x=1")] = "linear MSE in distribution"
        want[("linear", "grid", "mse", f"sigma_f={_g(ax['sigma_f'][-1])} sigma_x=1")] = (
            f"linear MSE σ_F = {_g(ax['sigma_f'][-1])}"
        )
    rows = frame[
        (frame.predictor == "model")
        & frame.group.isin(["core", "architecture"])
        & np.isclose(frame.train_sigma, 1.0)
        & frame.summary.isin({k[3] for k in want})  # vectorised first: the zip below is per row
    ]
    key = list(zip(rows.task, rows.part, rows.metric, rows.summary))
    rows = rows[[k in want for k in key]]
    if rows.empty or rows.arch.nunique() < 2:
        return pd.DataFrame()
    rows = rows.assign(what=[want[k] for k in zip(rows.task, rows.part, rows.metric, rows.summary)])
    t = _mean_table(rows, ["arch", "scorer"], "what")
    t["arch"] = [ARCH_TEXT.get(a, a) for a in t.arch]
    return t[["arch", "scorer"] + [v for v in want.values() if v in t]]


def contrasts_against(
    frame: pd.DataFrame,
    group: str,
    summaries: Mapping[str, str],
    arm_col: str = "scorer",
    base: str = "softmax",
) -> pd.DataFrame:
    """Every arm of ``group`` against ``base`` (from core, paired by seed), per task × summary, sequence
    error (MSE for linear); Holm within each task. For the alternatives (temperature, hybrid)."""
    rows = frame[(frame.part == "grid") & (frame.predictor == "model") & np.isclose(frame.train_sigma, 1.0)]
    rows = rows[
        ((rows.group == group) | ((rows.group == "core") & (rows.scorer == base))) & (rows.arch == "preln")
    ]
    rows = rows[rows.summary.isin(list(summaries)) & rows.metric.isin(["sequence_error", "mse"])]
    if rows.empty or rows[arm_col].nunique() < 2:
        return pd.DataFrame()
    t = stats.contrast_table(
        rows,
        by=["task", "metric", "summary"],
        arm_col=arm_col,
        base=base,
        family=["task"],
        n_boot=2000,
        inside_margin=True,
    )
    t["family"] = f"{group}: " + t.task.astype(str)  # named beside each Holm p (paired.holm_text)
    t["family_k"] = t.groupby("family").family.transform("size")
    return pd.DataFrame(
        {
            "task": [TASK_TEXT.get(x, x) for x in t.task],
            "where": [summaries[s] for s in t.summary],
            arm_col: t[arm_col],
            f"− {base} [95%]": [paired.contrast_text(r) for _, r in t.iterrows()],
            "verdict (claim: lower)": t.verdict,
        }
    )


def linear_table1(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """MSE per σ_F at x ~ N(0, 1) (the paper's table 1): per scorer (the arm ``base``, seed mean) and the
    baselines (zero, least squares, …)."""
    g = paired.select(frame, part="grid", group=base[0], arch=base[1], task="linear")
    g = g[g.summary.str.endswith("sigma_x=1")]
    if g.empty:
        return pd.DataFrame()
    g = g[(g.predictor == "model") | (g.scorer == "softmax")]  # baselines do not depend on the scorer
    g = g.assign(
        who=np.where(g.predictor == "model", g.scorer, "baseline: " + g.predictor),
        sigma_f=g.summary.str.extract(r"sigma_f=([\d.]+)")[0].astype(float),
    )
    t = g.pivot_table(index="who", columns="sigma_f", values="value", aggfunc="mean")
    t.columns = [f"σ_F = {c:g}" for c in t.columns]
    t = t.reset_index().rename(columns={"who": "predictor"})
    return t.sort_values("predictor", key=lambda s: s.str.startswith("baseline")).round(4)


def generalising(frame: pd.DataFrame, base: tuple[str, str] = BASE, threshold: float = 0.1) -> pd.DataFrame:
    """Seeds whose σ-shift sequence error (training lengths, largest σ) stays below ``threshold``, per
    quantifier task, softmax vs SSA over the seeds with both arms, with the exact McNemar test on the
    discordant seeds (paired by seed: a seed generalises or not under each scorer)."""
    ax = axes(frame)
    if ax["sigma_max"] is None:
        return pd.DataFrame()
    rows = []
    for summ, where in (
        (f"train_lengths sigma={_g(ax['sigma_max'])}", f"σ = {_g(ax['sigma_max'])}"),
        (f"sigma={_g(ax['sigma_min'])} length={ax['length_max']}", f"length {ax['length_max']}"),
    ):
        g = paired.select(
            frame,
            part="grid",
            group=base[0],
            arch=base[1],
            predictor="model",
            metric="sequence_error",
            summary=summ,
        )
        for task in [t for t in QUANT if t in set(g.task)]:
            wide = g[g.task == task].pivot_table(
                index="seed", columns="scorer", values="value", aggfunc="first"
            )
            if not {"softmax", "ssa"} <= set(wide.columns):
                continue
            wide = wide[["softmax", "ssa"]].dropna()  # paired: the seeds with both arms
            if not len(wide):
                continue
            ga, gb = stats.generalises(wide.softmax, threshold), stats.generalises(wide.ssa, threshold)
            test = stats.mcnemar_exact(ga, gb)
            rows.append(
                {
                    "task": TASK_TEXT[task],
                    "where": where,
                    "softmax": f"{int(ga.sum())}/{len(wide)}",
                    "SSA": f"{int(gb.sum())}/{len(wide)}",
                    "only softmax / only SSA": f"{test.n10} / {test.n01}",
                    "McNemar p": f"{test.p_value:.2g}",
                }
            )
    return pd.DataFrame(rows)
