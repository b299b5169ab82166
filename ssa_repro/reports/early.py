"""The early-learning study's report (conf/study/early_cpu.yaml, ``report: early``): the paper's second
claim, that SSA improves *early learning benchmark performance* — BabyBERTa on the Zorro probes (its
table 3) and a GPT-2-style decoder on perplexity and LM-eval tasks (its table 2) — generated from the
stored results alone, in the form of the ICL report (``reports/study.py``).

Per-seed values (one row per job × checkpoint step × method × item × metric, :data:`COLUMNS`; written
as ``<out>/<name>/per_seed_<part>.csv`` and read back before anything is computed):

- ``zorro``: Zorro accuracy in % (``zorro_accuracy``) per paradigm (``item`` = the file stem, or
  ``mean_all`` / ``mean_paper12``) and scoring ``method`` (``pll``, ``holistic``), with the pairs
  scored (``n``); the held-out masked-LM loss (``mlm_loss``) and masked-token accuracy
  (``masked_accuracy``), ``method`` = ``mlm``, ``item`` = ``heldout``;
- ``lm``: perplexity per split (``item`` = heldout | valid | test, ``n`` = tokens), and per LM-eval
  task (``item``) and shots (``method`` = ``0-shot`` …) the accuracy (``task_accuracy``: acc_norm where
  lm-eval reports it, else acc; ``n`` = items) and what guessing scores (``chance``, ``majority``).

Claims are paired contrasts over seeds (``reports/paired.py`` → ``stats/``): at the last
checkpoint, each SSA arm − softmax on the items the paper names. The paper's "early learning" names its
benchmarks (BabyBERTa's child-scale corpus, the small LM), not a point in training; whether SSA is ahead
early in training is the study's own question, asked of the mean of the 12 at the first checkpoint.
A contrast on a probe or task that neither arm's models score above chance on (the seed-mean accuracy's
95% Wilson bound on the probe's pairs, not pooled: the seeds share them) is shown but not judged (``paired.NOT_LEARNED``), as in the ICL report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import gmean

from ssa_repro import stats
from ssa_repro.core.plotting import plt, save
from ssa_repro.evaluation.multiple_choice import TASKS as MC_TASKS
from ssa_repro.evaluation.zorro import PAPER_TABLE3
from ssa_repro.reports import paired
from ssa_repro.reports.paired import JOB_COLUMNS, Claim, Spec
from ssa_repro.reports.study import (
    figure_lines,
    finish,
    provenance_lines,
    read_index,
    run_inputs,
    save_inputs,
    section,
)
from ssa_repro.reports.tables import markdown_table
from ssa_repro.stats.intervals import seed_interval, wilson
from ssa_repro.tasks import TASKS

COLUMNS = [*JOB_COLUMNS, "evaluation", "step", "method", "item", "metric", "n", "value"]
"""A per-seed row: the job, the study's evaluation key, the checkpoint step, the scoring method (Zorro:
pll | holistic; LM-eval: ``<k>-shot``), the item (paradigm, split, task), the metric, the sample
size behind the value (pairs, tokens, items) and the value."""

MEAN_ALL, MEAN_12 = "mean_all", "mean_paper12"
SSA_ARMS = {"ssa_n1.5": "SSA n = 1.5", "ssa_n2": "SSA n = 2", "ssa": "SSA"}
SPLIT_TEXT = {
    "heldout": "held-out training documents",
    "valid": "WikiText-2 valid",
    "test": "WikiText-2 test",
}
CHANCE = 50.0  # Zorro: two sentences, one grammatical

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

PAPER = {
    "mean12": "“the SSA-based BabyBERTa models achieve superior performance on many tasks in the "
    "grammatical probing suite” (abstract; table 3)",
    "agr_rc": "“SSA-2 achieves the strongest gains on syntax-sensitive tasks such as subject–verb "
    "agreement across relative clauses” (§7.2, table 3: 55.5 → 61.55)",
    "arg_str": "“… and argument structure alternations” (§7.2, table 3: dropped 79.65 → 85.55, swapped "
    "83.3 → 88.0, transitive 53.44 → 57.2)",
    "irregular": "“SSA-1.5 yields improvements on morphological and lexical tests such as irregular "
    "verbs” (§7.2, table 3: 70.05 → 78.3)",
    "pron_gender": "“… and pronoun gender” (§7.2, table 3: 48.1 → 51.45)",
    "early_mlm": "not a claim of the paper (the study's own: its “early learning” names the benchmarks, "
    "“SSA outperforms … on several early learning NLP benchmarks and linguistic probing tasks” (abstract), "
    "not early checkpoints); the mean of the 12 probes at the first checkpoint evaluated",
    "ppl": "“the SSA model achieved a perplexity of 27.7, compared to 31.7 for the softmax model, a "
    "12.6% improvement” (§7.2)",
    "lm_eval": "“The SSA variant consistently outperformed the softmax counterpart across all evaluated "
    "tasks (Table 2)” (§7.2)",
}


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


# ------------------------------------------------------------------ claims
def _last(frame: pd.DataFrame, **where) -> int | None:
    sel = paired.select(frame, **where)
    return int(sel.step.max()) if len(sel) else None


def _first(frame: pd.DataFrame, **where) -> int | None:
    sel = paired.select(frame, **where)
    return int(sel.step.min()) if len(sel) else None


def main_group(frame: pd.DataFrame, task: str) -> str | None:
    """The group with the most seeds of ``task`` (the paired comparison; curve groups have one seed)."""
    sel = frame[frame.task == task]
    if sel.empty:
        return None
    return str(sel.groupby("group").seed.nunique().idxmax())


def scored_above(acc: pd.DataFrame, floor: float, percent: bool) -> bool:
    """Whether the seed-mean accuracy of ``acc`` (one row per seed, the same pairs or items each, ``n``
    of them) has its 95% Wilson lower bound above ``floor`` (a fraction). The seeds share their pairs, so
    the bound is on n, not on n × seeds."""
    if acc.empty or not acc.n.max() > 0:
        return False
    n = int(acc.n.max())
    mean = float(acc.value.mean()) / (100.0 if percent else 1.0)
    return bool(wilson(round(mean * n), n)[0] > floor)


def zorro_learned(zg: pd.DataFrame, scorer: str, item: str, step: int, method: str) -> bool:
    """A Zorro probe is learned by a scorer's models when their seed-mean accuracy is above chance
    (:func:`scored_above`); the two means are not tested against chance (always judged)."""
    if item in (MEAN_12, MEAN_ALL):
        return True
    acc = paired.select(zg, scorer=scorer, item=item, step=step, method=method, metric="zorro_accuracy")
    return scored_above(acc, CHANCE / 100, percent=True)


def task_learned(lg: pd.DataFrame, scorer: str, item: str, step: int, method: str) -> bool:
    """An LM-eval task is learned by a scorer's models when their seed-mean accuracy is above the higher
    of chance, the majority answer and the task accuracy's equivalence margin (:func:`scored_above`):
    an open-answer task (LAMBADA) has chance 0, and two accuracies within the margin of 0 cannot differ
    by an amount that matters, so one right answer in 500 is not learning."""
    s = paired.select(lg, scorer=scorer, item=item, step=step, method=method)
    levels = [float(s[s.metric == m].value.max()) for m in ("chance", "majority") if (s.metric == m).any()]
    floor = max([*levels, stats.MARGINS["task_accuracy"]])
    return scored_above(s[s.metric == "task_accuracy"], floor, percent=False)


def claims(frame: pd.DataFrame) -> list[Claim]:
    """The paper's claims with one paired contrast per arm × item (see the module); a contrast on a
    probe or task that neither arm learned (:func:`zorro_learned`, :func:`task_learned`) is not judged."""
    out = []
    z = frame[(frame.part == "zorro")]
    g = main_group(z, "mlm") if len(z) else None
    if g is not None:
        zg = z[z.group == g]
        last, first = _last(zg, metric="zorro_accuracy"), _first(zg, metric="zorro_accuracy")

        def spec(arm, item, step, method="pll"):
            where = {"group": g, "item": item, "method": method, "step": step}
            return Spec(
                f"{arm} − softmax, {item}",
                "zorro_accuracy",
                {**where, "scorer": "softmax"},
                {**where, "scorer": arm},
                1,
                any(zorro_learned(zg, sc, item, step, method) for sc in ("softmax", arm)),
            )

        arms = [a for a in ("ssa_n1.5", "ssa_n2") if a in set(zg.scorer)]
        out += [
            Claim(
                "zorro mean12",
                "SSA raises the mean Zorro accuracy over the paper's 12 probes (PLL, last checkpoint)",
                PAPER["mean12"],
                tuple(spec(a, MEAN_12, last) for a in arms),
                "SSA − softmax (points)",
            ),
            Claim(
                "zorro agr_rc ssa_n2",
                "SSA n = 2 raises agreement across a relative clause",
                PAPER["agr_rc"],
                (spec("ssa_n2", "agreement_subject_verb-across_relative_clause", last),),
                "SSA-2 − softmax (points)",
            ),
            Claim(
                "zorro arg_str ssa_n2",
                "SSA n = 2 raises the three argument-structure probes",
                PAPER["arg_str"],
                tuple(
                    spec("ssa_n2", p, last)
                    for p in (
                        "argument_structure-dropped_argument",
                        "argument_structure-swapped_arguments",
                        "argument_structure-transitive",
                    )
                ),
                "SSA-2 − softmax (points)",
            ),
            Claim(
                "zorro irregular ssa_n1.5",
                "SSA n = 1.5 raises irregular verbs",
                PAPER["irregular"],
                (spec("ssa_n1.5", "irregular-verb", last),),
                "SSA-1.5 − softmax (points)",
            ),
            Claim(
                "zorro pron_gender ssa_n1.5",
                "SSA n = 1.5 raises pronoun gender",
                PAPER["pron_gender"],
                (spec("ssa_n1.5", "anaphor_agreement-pronoun_gender", last),),
                "SSA-1.5 − softmax (points)",
            ),
        ]
        if first is not None and first != last:
            out.append(
                Claim(
                    f"zorro early step{first}",
                    f"SSA is ahead on the mean of the 12 at step {first} (early in training)",
                    PAPER["early_mlm"],
                    tuple(spec(a, MEAN_12, first) for a in arms),
                    "SSA − softmax (points)",
                )
            )
    lm = frame[frame.part == "lm"]
    g = main_group(lm, "lm") if len(lm) else None
    if g is not None:
        lg = lm[lm.group == g]
        arm = next((a for a in lg.scorer.unique() if a != "softmax"), None)
        last = _last(lg, metric="perplexity")
        if arm is not None and last is not None:
            splits = [s for s in ("heldout", "valid", "test") if s in set(lg[lg.metric == "perplexity"].item)]
            out.append(
                Claim(
                    "lm perplexity",
                    "SSA lowers perplexity (last checkpoint)",
                    PAPER["ppl"],
                    tuple(
                        Spec(
                            f"{arm} − softmax, {s}",
                            "perplexity",
                            {"group": g, "item": s, "step": last, "scorer": "softmax"},
                            {"group": g, "item": s, "step": last, "scorer": arm},
                            -1,
                        )
                        for s in splits
                    ),
                    "SSA / softmax (ratio)",
                )
            )
            acc = lg[lg.metric == "task_accuracy"]
            for method in sorted(acc.method.unique()):
                step = _last(acc, method=method)
                tasks = [t for t in MC_TASKS if t in set(acc[acc.method == method].item)]
                out.append(
                    Claim(
                        f"lm lm_eval {method}",
                        f"SSA raises LM-eval accuracy, {method}",
                        PAPER["lm_eval"],
                        tuple(
                            Spec(
                                f"{arm} − softmax, {t}",
                                "task_accuracy",
                                {"group": g, "item": t, "method": method, "step": step, "scorer": "softmax"},
                                {"group": g, "item": t, "method": method, "step": step, "scorer": arm},
                                1,
                                any(task_learned(lg, sc, t, step, method) for sc in ("softmax", arm)),
                            )
                            for t in tasks
                        ),
                        "SSA − softmax (share)",
                    )
                )
    return out


def compute(paths: Mapping[str, Path]) -> tuple[pd.DataFrame, list, pd.DataFrame, pd.DataFrame]:
    """From the published per-seed CSVs: (the per-seed frame, the claims, the claims table, the
    findings). The test recomputes the report's numbers with this from the CSVs alone."""
    frame = read_back(paths)
    found_claims = claims(frame) if len(frame) else []
    table = paired.claims_table(frame, found_claims) if found_claims else pd.DataFrame()
    if len(table):
        per_claim = table.groupby("claim", sort=False).verdict.agg(lambda v: paired.claim_verdict(list(v)))
        table["claim_verdict"] = table.claim.map(per_claim)
    found = paired.findings(table, n=5) if len(table) else pd.DataFrame()
    return frame, found_claims, table, found


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
    interval, sign-flip p Holm-adjusted within the arm over the 12 probes and the two means) beside the
    paper's difference. Descriptive, no verdict: the paper's differences have both signs, and a family of
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
                    f"{r.estimate:+.1f} [{r.low:+.1f}, {r.high:+.1f}], p_Holm {r.p_holm:.2g}{theirs}"
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


# ------------------------------------------------------------------ figures
def _scorer_order(values) -> list[str]:
    return sorted(set(values), key=lambda x: (x != "softmax", x))


def _step_axis(ax, steps) -> None:
    """A log step axis labelled at the checkpoints themselves (no minor ticks)."""
    steps = sorted({int(x) for x in steps})
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(steps, [f"{x:g}" for x in steps], fontsize=6)


def zorro_curves_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """Zorro learning curves per scorer: one panel per paper probe and the two means, accuracy (PLL)
    against the checkpoint step, the seed mean as a line and the seeds' range as a band; chance dashed."""
    z = frame[(frame.part == "zorro") & (frame.metric == "zorro_accuracy") & (frame.method == "pll")]
    g = main_group(z, "mlm")
    if g is None or z[z.group == g].step.nunique() < 2:
        return None
    z = z[z.group == g]
    short = SHORT
    items = [MEAN_12, MEAN_ALL, *PAPER12]
    fig, axes = plt.subplots(4, 4, figsize=(11, 8.5), sharex=True)
    for ax, item in zip(axes.flat, items):
        s = z[z.item == item]
        for j, sc in enumerate(_scorer_order(z.scorer)):
            t = s[s.scorer == sc].groupby("step").value.agg(["mean", "min", "max"])
            if t.empty:
                continue
            ax.plot(t.index, t["mean"], "-o", ms=2.5, color=f"C{j}", label=sc, lw=1.2)
            ax.fill_between(t.index, t["min"], t["max"], color=f"C{j}", alpha=0.15, lw=0)
        ax.axhline(CHANCE, color="grey", ls="--", lw=0.7)
        ax.set_title(MEAN_TEXT.get(item, short.get(item, item)), fontsize=7.5)
        ax.tick_params(labelsize=6)
        _step_axis(ax, z.step)
    for ax in list(axes.flat)[len(items) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.supxlabel("training step (log)", fontsize=8)
    fig.supylabel("Zorro accuracy, PLL (%)", fontsize=8)
    fig.suptitle("Zorro learning curves: seed mean (line) and range (band); chance 50% dashed", fontsize=9)
    fig.subplots_adjust(
        left=0.07, right=0.98, bottom=0.07, top=0.92, hspace=0.45, wspace=0.3
    )  # (tight_layout: seconds)
    save(fig, figdir / "zorro_curves.png", formats=("png",), dpi=90)
    return figdir / "zorro_curves.png"


def table3_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """The table-3 layout as a dot plot: per probe, each scorer's seeds (dots) and seed mean with its
    95% Student-t interval over seeds (bar), the paper's number (×), chance dashed."""
    z = frame[(frame.part == "zorro") & (frame.metric == "zorro_accuracy") & (frame.method == "pll")]
    g = main_group(z, "mlm")
    if g is None:
        return None
    z = z[z.group == g]
    z = z[z.step == z.step.max()]
    short = SHORT
    items = [*PAPER12, MEAN_12, MEAN_ALL]
    scorers = _scorer_order(z.scorer)
    paper_index = {"softmax": 0, "ssa_n1.5": 1, "ssa_n2": 2}
    fig, ax = plt.subplots(figsize=(7, 0.42 * len(items) + 1.2))
    h = 0.8 / len(scorers)
    for j, sc in enumerate(scorers):
        for i, item in enumerate(items):
            v = z[(z.item == item) & (z.scorer == sc)].value.to_numpy(float)
            if not len(v):
                continue
            y = i - 0.4 + h * (j + 0.5)
            ax.plot(v, np.full(len(v), y), "o", ms=2.5, color=f"C{j}", alpha=0.5)
            ci = seed_interval(v)
            labelled = sc in ax.get_legend_handles_labels()[1]
            ax.plot([ci["mean"]], [y], "|", ms=8, color=f"C{j}", mew=2, label=None if labelled else sc)
            if np.isfinite(ci["ci_low"]):  # (an accuracy: the interval clipped to [0, 100])
                ax.hlines(y, max(ci["ci_low"], 0.0), min(ci["ci_high"], 100.0), color=f"C{j}", lw=1.2)
            name = short.get(item)
            if name in PAPER_TABLE3 and sc in paper_index:
                ax.plot([PAPER_TABLE3[name][paper_index[sc]]], [y], "x", color=f"C{j}", ms=4)
    ax.axvline(CHANCE, color="grey", ls="--", lw=0.7)
    ax.set_xlim(0, 100)
    labels = [short.get(i, MEAN_TEXT.get(i, i)) for i in items]
    ax.set_yticks(range(len(items)), labels, fontsize=7)
    ax.set_ylim(len(items) - 0.5, -0.5)
    ax.set_xlabel(f"Zorro accuracy, PLL (%), step {int(z.step.max())}; × the paper's table 3", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save(fig, figdir / "zorro_table3.png", formats=("png",), dpi=90)
    return figdir / "zorro_table3.png"


def perplexity_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """Perplexity (log scale) against the checkpoint step per split: seed mean line, range band, per
    scorer; and the held-out masked-LM loss of the encoder leg beside them when stored."""
    p = frame[(frame.part == "lm") & (frame.metric == "perplexity")]
    m = frame[(frame.part == "zorro") & (frame.metric == "mlm_loss")]
    panels = []
    gp, gm = main_group(p, "lm"), main_group(m, "mlm")
    if gp is not None:
        p = p[p.group == gp]
        panels += [
            (f"perplexity: {SPLIT_TEXT.get(s, s)}", p[p.item == s], True) for s in sorted(p.item.unique())
        ]
    if gm is not None:
        panels.append(("masked LM: held-out loss (nats)", m[m.group == gm], False))
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.1 * len(panels), 2.7), squeeze=False)
    for ax, (title, s, logy) in zip(axes[0], panels):
        for j, sc in enumerate(_scorer_order(s.scorer)):
            t = s[s.scorer == sc].groupby("step").value.agg(["mean", "min", "max"])
            if logy:  # perplexity: the geometric seed mean (its contrast is a ratio)
                t["mean"] = s[s.scorer == sc].groupby("step").value.agg(geometric_mean)
            ax.plot(t.index, t["mean"], "-o", ms=2.5, color=f"C{j}", label=sc)
            ax.fill_between(t.index, t["min"], t["max"], color=f"C{j}", alpha=0.15, lw=0)
        if logy:
            ax.set_yscale("log")
        _step_axis(ax, s.step)
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=6)
        ax.set_xlabel("training step (log)", fontsize=7)
        ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, figdir / "perplexity_curves.png", formats=("png",), dpi=90)
    return figdir / "perplexity_curves.png"


def regime_figure(frame: pd.DataFrame, figdir: Path) -> Path | None:
    """The candidates' learning curves (softmax, first seed, per group × architecture): mean Zorro
    accuracy of the paper's 12 and all 23 against the step."""
    z = frame[
        (frame.part == "zorro")
        & (frame.scorer == "softmax")
        & (frame.metric == "zorro_accuracy")
        & (frame.method == "pll")
        & frame.item.isin([MEAN_12, MEAN_ALL])
    ]
    if z.empty or z.step.nunique() < 2:
        return None
    fig, ax = plt.subplots(figsize=(5, 3))
    for j, ((group, arch), g) in enumerate(z.groupby(["group", "arch"], sort=False)):
        g = g[g.seed == g.seed.min()]
        for item, ls in ((MEAN_12, "-"), (MEAN_ALL, ":")):
            t = g[g.item == item].groupby("step").value.mean()
            ax.plot(
                t.index,
                t.values,
                ls,
                marker="o",
                ms=2.5,
                color=f"C{j}",
                label=f"{group}/{arch}, {'12' if item == MEAN_12 else '23'}",
            )
    ax.axhline(CHANCE, color="grey", ls="--", lw=0.7)
    _step_axis(ax, z.step)
    ax.set_xlabel("training step (log)", fontsize=8)
    ax.set_ylabel("mean Zorro accuracy, PLL (%)", fontsize=8)
    ax.legend(fontsize=6)
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    save(fig, figdir / "regime.png", formats=("png",), dpi=90)
    return figdir / "regime.png"


# ------------------------------------------------------------------ the report
def evaluations_for(setup: Mapping | None):
    """(group, study task key) → the evaluation keys that apply to it: by the registered task its
    overrides name and what that task supports, and an evaluation's ``groups`` when it has them."""
    setup = setup or {}

    def registered(task: str) -> str:
        ov = [o.split("=", 1)[1] for o in setup.get("tasks", {}).get(task, []) if o.startswith("task=")]
        return ov[0] if ov else task

    def which(group: str, task: str) -> list[str]:
        name = registered(task)
        if name not in TASKS:
            return []
        supports = TASKS.get(name).evaluation.supports
        return [
            k
            for k, v in setup.get("evaluations", {}).items()
            if v.get("name") in supports and (not v.get("groups") or group in v.get("groups"))
        ]

    return which


def missing_jobs(index: pd.DataFrame | None, setup: Mapping | None) -> list[str]:
    """What the study's config asks for and the index lacks (``paired.missing_jobs``, group by group, so
    that an evaluation limited to some ``groups`` is expected only there)."""
    if not setup:
        return []
    which = evaluations_for(setup)
    lines = []
    for group in setup.get("groups", {}):
        one = {**setup, "groups": {group: setup["groups"][group]}}
        lines += paired.missing_jobs(index, one, lambda task, g=group: which(g, task))
    return lines


def findings_markdown(
    found: pd.DataFrame, found_claims, frame: pd.DataFrame, table: pd.DataFrame | None = None
) -> list[str]:
    """The findings, first: the contrasts the decision rule calls, then every claim by its verdict (the
    claims table's, digested: what is ruled out, what the seeds are too few for and how many would do,
    what is not testable at this size), then the regime the matrix ran at."""
    lines = []
    text = {c.key: c for c in found_claims}
    for _, r in found.iterrows():
        c = text[r["claim"]]
        lines.append(
            f"- **{c.claim}** — {r['contrast']}: {c.contrast_text} = {paired.contrast_text(r)} ({r['verdict']}; "
            f"a {r['mean_a']:.3g} → b {r['mean_b']:.3g})."
        )
    if not lines:
        lines.append("- **No claim is supported or contradicted**: the decision rule calls no contrast.")
    lines += verdict_digest(found_claims, table if table is not None else pd.DataFrame())
    reg = regime_table(frame)
    if len(reg):
        last = reg.sort_values("step").groupby(["group", "arch"], sort=False).tail(1)
        lines.append(
            "- **Regime** (softmax, first seed, last checkpoint; above chance: 95% Wilson lower bound > 50%): "
            + "; ".join(
                f"{r['group']} ({r['arch']}, step {r['step']}): {r['paper 12 above chance']} paper probes above "
                f"chance, mean of 12 {r['mean of 12 (%)']}%"
                for _, r in last.iterrows()
            )
            + "."
        )
    return lines


def _estimates(t: pd.DataFrame) -> str:
    """``ssa_n2 − softmax, mean_paper12 +0.44 [−0.21, +1.01]; …`` for a claim's judged contrasts."""

    # ratios near 1 (perplexity) need a third decimal: paired.fmt keeps 3 significant digits
    def f(x: float, scale: str) -> str:
        return f"×{math.exp(x):.3f}" if scale == "log" else paired.fmt(x, scale)

    return "; ".join(
        f"{r['contrast']} {f(r['estimate'], r['scale'])} [{f(r['low'], r['scale'])}, {f(r['high'], r['scale'])}]"
        for _, r in t.iterrows()
    )


def verdict_digest(found_claims, table: pd.DataFrame) -> list[str]:
    """One line per verdict other than the called ones: the claims with it and their estimates (judged
    contrasts only); for *underpowered*, the paired seeds each of its contrasts' effect (as seen) would need
    for 80% power (``paired.power_table``). Called contrasts are the findings above it."""
    if table.empty:
        return []
    power = paired.power_table(table)
    by_verdict: dict[str, list[str]] = {}
    for c in found_claims:
        t = table[table.claim == c.key]
        if t.empty:
            continue
        verdict = paired.claim_verdict(list(t.verdict))
        judged = t[t.verdict != paired.NOT_LEARNED]
        item = (
            f"*{c.claim}* ({_estimates(judged)}; {int(t.n_seeds.max())} seeds)"
            if len(judged)
            else f"*{c.claim}*"
        )
        if verdict == stats.UNDERPOWERED and len(power):
            need = power[power.claim == c.key]["seeds for 80%"].astype(str).tolist()
            if need:
                item += f" — seeds for 80% power: {', '.join(need)}"
        by_verdict.setdefault(verdict, []).append(item)
    heads = {
        stats.WITHIN: "Not detected, within the margin (both intervals inside ±m: no effect that matters, at "
        "these settings)",
        stats.UNDERPOWERED: "Not detected, underpowered (the interval reaches past the margin)",
        paired.NOT_LEARNED: "Not testable at this size (neither arm scores above chance)",
    }
    out = []
    for verdict, head in heads.items():
        if verdict in by_verdict:
            out.append(f"- **{head}**: " + "; ".join(by_verdict[verdict]) + ".")
    return out


def claims_markdown(found_claims, table: pd.DataFrame) -> list[str]:
    rows, unmeasured = [], []
    for c in found_claims:
        t = table[table.claim == c.key] if len(table) else pd.DataFrame()
        if t.empty:
            unmeasured.append(c.claim)
            continue
        rows.append(
            {
                "claim (tested as)": c.claim,
                "the paper's words": c.paper,
                "measured (b − a per contrast)": f"*{c.contrast_text}* — "
                + "; ".join(
                    f"{r['contrast']}: {paired.contrast_text(r)} → {r['verdict']}" for _, r in t.iterrows()
                ),
                "verdict": paired.claim_verdict(list(t.verdict)),
            }
        )
    out = [markdown_table(pd.DataFrame(rows))] if rows else ["No claim could be measured (see *Missing*)."]
    if unmeasured:
        out += ["", "Not measured (no paired data yet, see *Missing*): " + "; ".join(unmeasured) + "."]
    return out


def title(name: str) -> str:
    return (
        f"# {name}: what small encoders and decoders, sized to train in minutes on a CPU, can show about SSA's "
        "early-learning claims (Zorro, perplexity, LM-eval) — not the paper's scale"
    )


GPU_LINES = [
    "## At the paper's scale (a GPU)",
    "",
    "`python train.py -m experiment=paper_babyberta scorer=softmax,ssa_n1.5,ssa_n2 seed=0,1,2,3,4,5,6 "
    "train.keep_at=[5000,25000,50000,100340]` then `python evaluate.py run_dir=<run> eval=zorro step=<step>` "
    "per kept step (BabyBERTa's size: 8 layers, width 256, one 10-pattern epoch of 100,340 steps at batch 16); "
    "`python train.py -m experiment=paper_lm scorer=softmax,ssa seed=0,1,2,3,4,5,6,7,8` then `eval=lm` "
    "(GPT-2 small, 50k steps of 0.5M tokens: the paper's 120 A100-hours per run). Seeds: 7 let the "
    "encoder's claims (families of up to 3 contrasts) be called, 9 the LM-eval families of 8 tasks "
    "(k · 2^(1−n) < 0.05). Their cost per run, measured per step on one H200: docs/performance.md, "
    'section "The paper-scale commands\' step time".',
    "",
]


def write(root: Path, out_dir: Path, name: str, command: str, setup: dict | None = None) -> Path:
    """``<out_dir>/<name>.md``, its figures and per-seed CSVs (and ``report_inputs.json``:
    ``reports/study.py``'s :data:`~ssa_repro.reports.study.INPUTS`) in ``<out_dir>/<name>/``; returns
    the markdown's path. Missing data are reported, not raised."""
    root, out_dir = Path(root), Path(out_dir)
    figdir = out_dir / name
    figdir.mkdir(parents=True, exist_ok=True)
    index = read_index(root)
    paths = export(per_seed(index) if index is not None else {}, figdir)
    inputs = save_inputs(figdir, run_inputs(root, index, missing_jobs(index, setup), paths))
    return render(paths, inputs, out_dir, name, command, setup)


def render(
    paths: Mapping[str, Path], inputs: dict, out_dir: Path, name: str, command: str, setup: dict | None
) -> Path:
    """The report from its per-seed CSVs (``paths``) and inputs record alone (``write``'s and
    ``--from-csv``'s common part)."""
    out_dir = Path(out_dir)
    figdir = out_dir / name
    frame, found_claims, table, found = compute(paths)
    missing = list(inputs["missing"])
    lines = [
        title(name),
        "",
        *provenance_lines(
            command,
            inputs["wall_seconds"],
            inputs["runs"],
            name,
            paths,
            "job × checkpoint step × method × item × metric",
        ),
        "",
        "## Findings",
        "",
        *findings_markdown(found, found_claims, frame, table),
        "",
        "## The paper's claims",
        "",
        *claims_markdown(found_claims, table),
        "",
        "**Decision rule** (docs/statistics.md): per contrast, b − a per seed (same seed: the same initial "
        "weights and batch order under every scorer; the same Zorro pairs, held-out utterances, streams and "
        "task items for every model), averaged over seeds; a 95% expanded percentile bootstrap interval over "
        "seeds; the exact sign-flip p over seeds, Holm-adjusted across the claim's contrasts. *yes* / "
        "*contradicted*: the interval excludes 0 (on the claimed / other side) and p_Holm < 0.05; *not "
        "detected (within ±m)*: the interval and Student's t interval of the d_s inside ±m (Zorro ±2 points, masked-LM loss ±0.02 nats, "
        "perplexity ratio ±2%, LM-eval accuracy ±0.02); otherwise *not detected (underpowered)*. With n seeds "
        "the smallest two-sided p is 2^(1−n): 3 seeds can call no difference (0.25), 7 seeds a family of up to "
        "3 contrasts. A contrast on a probe or LM-eval task that neither arm's models score above chance on "
        "(the seed-mean accuracy's 95% Wilson bound on its pairs or items above 50%, or above the higher of "
        "chance and the majority answer) is shown but not judged (*" + paired.NOT_LEARNED + "*): it joins no "
        "Holm family, no finding and no claim verdict; the Zorro means are always judged. The LM-eval claim "
        "is one family per number of shots. The tests are conditional on the probe pairs and items scored "
        "(every model sees the same).",
        "",
    ]
    figs = []
    reg = regime_table(frame) if len(frame) else pd.DataFrame()
    lines += section(
        "Choosing the regime: learning curves",
        "Softmax, first seed, per group and architecture (the candidate settings): at each kept checkpoint, "
        "how many Zorro probes lie above chance (95% Wilson interval of the PLL accuracy above 50%), the "
        "means and the held-out masked-LM loss. The bar depends on the pairs scored ("
        + ", ".join(
            f"{chance_threshold(int(n)):.1f}% of {int(n)}" for n in sorted(set(reg["pairs per probe"])) if n
        )
        + "), so counts at different numbers of pairs do not compare exactly. The rule: the cheapest setting whose last checkpoint has most "
        "of the paper's 12 above chance, else the cheapest at the plateau of the count (conf/study/"
        + name
        + ".yaml records the measurement the matrix was chosen from, before it ran; the other candidates "
        "here were trained alongside, to show whether a longer or wider model would have changed the choice).",
        reg,
    )
    for f in (regime_figure(frame, figdir), zorro_curves_figure(frame, figdir)) if len(frame) else ():
        lines += figure_lines(f, f.stem if f else "", name, figs)
    lines += section(
        "Zorro at the last checkpoint: the paper's table 3 beside ours",
        "PLL accuracy (%), seed mean (min–max) per scorer, the paper's softmax / SSA-1.5 / SSA-2, and each "
        "SSA arm − softmax over paired seeds (points: estimate, 95% interval, sign-flip p Holm-adjusted within "
        "the arm over these 14 rows) beside the paper's difference. Descriptive: a family of 14 needs "
        f"{stats.seeds_to_call(14)} seeds before any row can be called (14 · 2^(1−n) < 0.05), and the paper's "
        "differences have both signs; the claims above are the tests.",
        table3(frame, table) if len(frame) else None,
    )
    lines += section(
        "Zorro by holistic scoring (BabyBERTa's own)",
        "The same layout with the holistic score (minus the mean cross entropy of the unmasked sentence).",
        table3(frame, table, method="holistic") if len(frame) else None,
    )
    lines += figure_lines(table3_figure(frame, figdir) if len(frame) else None, "table 3", name, figs)
    lines += section(
        "Held-out masked-LM loss over training",
        "Nats per masked token on every held-out utterance (one fixed mask each), seed mean (min–max, seeds).",
        mlm_loss_table(frame) if len(frame) else None,
    )
    lines += section(
        "Perplexity over training (the decoder)",
        "Token perplexity per split and checkpoint, geometric seed mean (min–max, seeds); the paper's number is on "
        "another corpus, tokeniser and scale, so only the direction compares.",
        perplexity_table(frame) if len(frame) else None,
    )
    lines += figure_lines(perplexity_figure(frame, figdir) if len(frame) else None, "perplexity", name, figs)
    lines += section(
        "LM-eval tasks: the paper's table 2 beside ours",
        "Accuracy (%; acc_norm where lm-eval reports it, else acc: the paper does not say which of the two "
        "its table 2 gives), seed mean, and how many seeds' 95% Wilson interval lies above the higher of "
        "chance and majority; RTE is RTE-3 and WSC is WSC273 (stand-ins); CB, MultiRC and WiC are not "
        "available offline. The first 500 items of each task (lm-eval's --limit; COPA has 100); at the "
        "128-token window a 3-shot prompt is cut from the left, the same cut for every choice of an item, "
        "so it often keeps only part of one example. A task whose seed-mean accuracy is not above the "
        "higher of chance, majority and the ±0.02 margin (95% Wilson) for either arm is not judged. The "
        "contrasts are Holm-adjusted per number of shots (one family of tasks each).",
        lm_eval_table(frame, table) if len(frame) else None,
    )
    lines += section(
        "Power for the effects seen",
        "Per judged contrast of the claims table: d_z = mean/SD of the per-seed differences, the size k of "
        "its claim's Holm family, the power of the paired test at the seeds used and the seeds needed for "
        "80%, both at α = 0.05/k (Holm's first step: the power is a lower bound; 0 until k · 2^(1−n) < 0.05, "
        "the exact sign-flip test's floor).",
        paired.power_table(table) if len(table) else None,
    )
    return finish(lines, table, missing, setup, out_dir, name, after_missing=GPU_LINES)
