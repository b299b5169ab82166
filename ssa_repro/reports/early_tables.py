"""The early-learning report's tables: the regime's learning curves, the paper's table 3 (Zorro) and
table 2 (LM-eval) beside ours, the masked-LM loss and perplexity over training; from the per-seed frame
(``early_cells``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import gmean

from ssa_repro import stats
from ssa_repro.evaluation.multiple_choice import TASKS as MC_TASKS
from ssa_repro.evaluation.zorro import PAPER_TABLE3
from ssa_repro.reports.early_cells import MEAN_12, MEAN_ALL, SPLIT_TEXT, main_group
from ssa_repro.stats.intervals import wilson

# The paper's table 2 (accuracy %, softmax / SSA; zero-shot, then 3-shot) for the tasks run here, and
# its perplexity (OpenWebText, GPT-2 small after 50k steps).
PAPER_TABLE2 = {
    "arc_challenge": ((20.8, 23.2), (23.40, 25.92)),
    "arc_easy": ((45.5, 47.9), (48.13, 50.19)),
    "hellaswag": ((29.2, 29.5), (30.33, 31.25)),
    "lambada_openai": ((24.8, 25.4), (15.44, 16.46)),
    "boolq": ((60.2, 61.1), (55.34, 57.08)),
    "copa": ((62.3, 64.9), (63.31, 72.69)),
    "rte": ((45.7, 56.8), (47.17, 53.19)),
    "wsc273": ((31.8, 41.3), (35.55, 45.21)),
}

PAPER_PERPLEXITY = (31.7, 27.7)

# ------------------------------------------------------------------ tables
SHORT = {
    "agreement_subject_verb-across_prepositional_phrase": "agr_subj_verb-across_PP",
    "agreement_subject_verb-across_relative_clause": "agr_subj_verb-across_RC",
    "agreement_subject_verb-in_question_with_aux": "agr_subj_verb-in_Q+aux",
    "anaphor_agreement-pronoun_gender": "anaphor_agr-pron_gender",
    "argument_structure-dropped_argument": "arg_str-dropped_arg",
    "argument_structure-swapped_arguments": "arg_str-swapped_args",
    "argument_structure-transitive": "arg_str-transitive",
    "binding-principle_a": "binding-principle_a",
    "case-subjective_pronoun": "case-subjective_pron",
    "filler-gap-wh_question_subject": "filler-gap-wh_Q_subject",
    "irregular-verb": "irregular-verb",
    "quantifiers-superlative": "quantifiers-superlative",
}
"""Zorro file stem → the paper's short name, for its 12 probes (data.root/zorro/names.tsv says the same;
the report reads only stored results)."""

MEAN_TEXT = {MEAN_12: "mean of the paper's 12", MEAN_ALL: "mean of all 23"}

PAPER12 = list(SHORT)


def chance_threshold(n: int) -> float:
    """The smallest accuracy (%) of ``n`` pairs whose 95% Wilson interval lies above 50% (:func:`above_chance`)."""
    k = next(k for k in range(n // 2, n + 1) if wilson(k, n)[0] > 0.5)
    return 100.0 * k / n


def above_chance(value_pct: float, n: float) -> bool:
    """The 95% Wilson interval of an accuracy (``value_pct`` % of ``n`` pairs) lies above 50%."""
    if not n or not np.isfinite(n):
        return False
    return wilson(round(value_pct / 100 * n), int(n))[0] > 0.5


def regime_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Learning curves of the first seed of softmax per group × architecture (the candidates): at every
    step, how many of the paper's 12 probes (and of all 23) lie above chance (Wilson 95% lower bound >
    50%, PLL), the means, and the held-out masked-LM loss."""
    z = frame[(frame.part == "zorro") & (frame.scorer == "softmax")]
    if z.empty:
        return pd.DataFrame()
    rows = []
    for (group, arch), g in z.groupby(["group", "arch"], sort=False):
        g = g[g.seed == g.seed.min()]
        for step, s in g.groupby("step"):
            acc = s[(s.metric == "zorro_accuracy") & (s.method == "pll")]
            per = acc[~acc.item.isin([MEAN_ALL, MEAN_12])]
            p12 = per[per.item.isin(PAPER12)]
            loss = s[s.metric == "mlm_loss"].value
            rows.append(
                {
                    "group": group,
                    "arch": arch,
                    "seed": int(g.seed.min()),
                    "step": int(step),
                    "pairs per probe": int(per.n.max()) if len(per) else 0,
                    "paper 12 above chance": f"{sum(above_chance(r.value, r.n) for r in p12.itertuples())} of {len(p12)}",
                    "all 23 above chance": f"{sum(above_chance(r.value, r.n) for r in per.itertuples())} of {len(per)}",
                    "mean of 12 (%)": round(float(acc[acc.item == MEAN_12].value.mean()), 1),
                    "mean of 23 (%)": round(float(acc[acc.item == MEAN_ALL].value.mean()), 1),
                    "held-out MLM loss": round(float(loss.mean()), 3) if len(loss) else math.nan,
                }
            )
    return pd.DataFrame(rows)


def _seed_text(values) -> str:
    v = np.asarray(values, dtype=float)
    if not len(v):
        return ""
    return f"{v.mean():.1f} ({v.min():.1f}–{v.max():.1f})"


PAPER_ARM = {"ssa_n1.5": 1, "ssa_n2": 2}  # the column of PAPER_TABLE3 (softmax, SSA-1.5, SSA-2)


def table3(frame: pd.DataFrame, table: pd.DataFrame, method: str = "pll") -> pd.DataFrame:
    """The paper's table 3 beside ours at the last checkpoint of the main group: per probe, each
    scorer's seed mean (min–max), the paper's three numbers, and each SSA arm − softmax (estimate,
    interval, raw sign-flip p: the rows the claims test have their one Holm p in the claims table, and a
    second over these rows would give them two) beside the paper's difference. Descriptive, no verdict: the paper's differences have both signs, and a family of
    14 needs :func:`stats.seeds_to_call` (14) seeds before anything can be called; the claims are the tests."""
    z = frame[(frame.part == "zorro") & (frame.metric == "zorro_accuracy") & (frame.method == method)]
    g = main_group(z, "mlm")
    if g is None:
        return pd.DataFrame()
    z = z[z.group == g]
    z = z[z.step == z.step.max()]
    short = SHORT
    items = [*PAPER12, MEAN_12, MEAN_ALL]
    sub = z[z.item.isin(items)]
    arms = [a for a in ("ssa_n1.5", "ssa_n2", "ssa") if a in set(sub.scorer)]
    tables = [  # Holm within each arm over the rows below (one contrast_table per arm)
        stats.contrast_table(
            sub[sub.scorer.isin(["softmax", arm])].assign(metric="zorro_accuracy"),
            by=["item"],
            arm_col="scorer",
            base="softmax",
            claimed_sign=1,
            n_boot=4000,
        )
        for arm in arms
        if "softmax" in set(sub.scorer)
    ]
    ct = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    rows = []
    for item in items:
        s = sub[sub.item == item]
        if s.empty:
            continue
        name = short.get(item, MEAN_TEXT.get(item))
        row = {"probe": name}
        for sc in ["softmax", *arms]:
            row[sc] = _seed_text(s[s.scorer == sc].value)
        paper = PAPER_TABLE3.get(name)
        if item == MEAN_12:
            paper = tuple(np.mean([v[i] for v in PAPER_TABLE3.values()]) for i in range(3))
        row["paper softmax / 1.5 / 2"] = " / ".join(f"{x:.4g}" for x in paper) if paper else ""
        for arm in arms:
            c = ct[(ct.item == item) & (ct.scorer == arm)] if len(ct) else ct
            if len(c):
                r = c.iloc[0]
                i = PAPER_ARM.get(arm)
                theirs = f" (paper {paper[i] - paper[0]:+.1f})" if paper and i else ""
                row[f"{arm} − softmax"] = (
                    f"{r.estimate:+.1f} [{r.low:+.1f}, {r.high:+.1f}], p {r.p_value:.2g}{theirs}"
                )
        rows.append(row)
    return pd.DataFrame(rows)


def mlm_loss_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Held-out masked-LM loss per step, seed mean (min–max) per scorer, main group."""
    z = frame[(frame.part == "zorro") & (frame.metric == "mlm_loss")]
    g = main_group(z, "mlm")
    if g is None:
        return pd.DataFrame()
    z = z[z.group == g]
    out = z.pivot_table(index="step", columns="scorer", values="value", aggfunc=lambda v: _seed_text_3(v))
    return out.reset_index()


def _seed_text_3(values) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3f} ({v.min():.3f}–{v.max():.3f}, {len(v)})"


def geometric_mean(v) -> float:
    """exp(mean log v) (``scipy.stats.gmean``): a perplexity's seed mean, on its contrast's (ratio) scale."""
    return float(gmean(np.asarray(v, dtype=float)))


def perplexity_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Perplexity per split and step, geometric seed mean (min–max, seeds) per scorer; the paper's at the side."""
    p = frame[(frame.part == "lm") & (frame.metric == "perplexity")]
    g = main_group(p, "lm")
    if g is None:
        return pd.DataFrame()
    p = p[p.group == g]
    rows = []
    for (split, step), s in p.groupby(["item", "step"], sort=True):
        row = {"split": SPLIT_TEXT.get(split, split), "step": int(step), "tokens": int(s.n.max())}
        for sc in sorted(s.scorer.unique(), key=lambda x: (x != "softmax", x)):
            v = s[s.scorer == sc].value.to_numpy(float)
            row[sc] = f"{geometric_mean(v):.1f} ({v.min():.1f}–{v.max():.1f}, {len(v)})"
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        out["paper (OpenWebText, GPT-2 small)"] = f"{PAPER_PERPLEXITY[0]} / {PAPER_PERPLEXITY[1]}"
    return out


def lm_eval_table(frame: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Table 2's layout: per task × shots, each scorer's seed-mean accuracy (%), the seeds whose 95%
    Wilson interval lies above chance, chance and majority levels, the paper's numbers, and the paired
    contrast from the claims table."""
    lm = frame[frame.part == "lm"]
    g = main_group(lm, "lm")
    if g is None:
        return pd.DataFrame()
    lm = lm[lm.group == g]
    acc = lm[lm.metric == "task_accuracy"]
    if acc.empty:
        return pd.DataFrame()
    acc = acc[acc.step == acc.step.max()]
    rows = []
    for (task, method), s in acc.groupby(["item", "method"], sort=False):
        k = 0 if method.startswith("0") else 1
        levels = lm[(lm.item == task) & (lm.method == method)]
        ch = float(levels[levels.metric == "chance"].value.mean())
        maj = float(levels[levels.metric == "majority"].value.mean())
        row = {
            "task": MC_TASKS[task].paper,
            "shots": method,
            "chance / majority (%)": f"{100 * ch:.1f} / {100 * maj:.1f}",
        }
        for sc in sorted(s.scorer.unique(), key=lambda x: (x != "softmax", x)):
            v = s[s.scorer == sc]
            above = sum(
                wilson(round(r.value * r.n), int(r.n))[0] > max(ch, maj) for r in v.itertuples() if r.n > 0
            )
            row[sc] = f"{100 * v.value.mean():.1f} (above chance: {above} of {len(v)})"
        paper = PAPER_TABLE2.get(task)
        row["paper softmax / SSA"] = f"{paper[k][0]} / {paper[k][1]}" if paper else ""
        c = (
            table[(table.claim == f"lm lm_eval {method}") & table.contrast.str.endswith(f", {task}")]
            if len(table)
            else table
        )
        if len(c):
            r = c.iloc[0]
            row["SSA − softmax"] = (
                f"{100 * r.estimate:+.1f} [{100 * r.low:+.1f}, {100 * r.high:+.1f}] → {r.verdict}"
            )
        rows.append(row)
    return pd.DataFrame(rows)
