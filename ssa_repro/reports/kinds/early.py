"""The early-learning study's report (conf/study/early_cpu.yaml, ``report: early``): the paper's second
claim, that SSA improves *early learning benchmark performance* — BabyBERTa on the Zorro probes (its
table 3) and a GPT-2-style decoder on perplexity and LM-eval tasks (its table 2) — generated from the
stored results alone, in the form of the ICL report (``reports/kinds/icl.py``).

Per-seed values: ``early_cells`` (one row per job × checkpoint step × method × item × metric); tables
``early_tables``, figures ``early_figures``.

Claims are data (conf/study/early_cpu.yaml's ``claims:``, read by ``reports/claims.py``; this
module gives them their :func:`context`), paired contrasts over seeds (``reports/paired.py`` →
``stats/``): at the last checkpoint, each SSA arm − softmax on the items the paper names. The paper's "early learning" names its
benchmarks (BabyBERTa's child-scale corpus, the small LM), not a point in training; whether SSA is ahead
early in training is the study's own question, asked of the mean of the 12 at the first checkpoint.
The study's ``primary:`` endpoints (on claims' contrasts) are decided as the ICL report decides its own
(:func:`decide`; reports/primary.py), listed first in the findings with their own section.
A contrast on a probe or task that neither arm's models score above chance on (the seed-mean accuracy's
95% Wilson bound on the probe's pairs, not pooled: the seeds share them) is shown but not judged
(``paired.NOT_LEARNED``), as in the ICL report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from ssa_repro import stats
from ssa_repro.evaluation.multiple_choice import TASKS as MC_TASKS
from ssa_repro.reports import claims as claims_engine
from ssa_repro.reports import decide as pipeline
from ssa_repro.reports import inputs as study_inputs
from ssa_repro.reports import paired, seed_power
from ssa_repro.reports.decide import Decided, without_endpoints
from ssa_repro.reports.early_cells import CHANCE, MEAN_12, MEAN_ALL, export, main_group, per_seed, read_back
from ssa_repro.reports.early_figures import (
    perplexity_figure,
    regime_figure,
    table3_figure,
    zorro_curves_figure,
)
from ssa_repro.reports.early_tables import (
    chance_threshold,
    lm_eval_table,
    mlm_loss_table,
    perplexity_table,
    regime_table,
    table3,
)
from ssa_repro.reports.inputs import (
    evaluated_keys,
)
from ssa_repro.reports.kinds.registry import REPORTS, ReportKind
from ssa_repro.reports.markdown import claims_markdown, figure_lines, finish, provenance_lines, section
from ssa_repro.reports.paired import Claim
from ssa_repro.reports.primary_markdown import primary_findings, primary_lines
from ssa_repro.stats.intervals import wilson

CLAIM_NAMES = (
    "zorro_group",
    "zorro_last",
    "zorro_early_step",
    "zorro_arms",
    "lm_group",
    "lm_arm",
    "lm_last",
    "lm_splits",
    "lm_methods",
)
"""What the early-learning claims can name (:func:`context`); ``studies/schema.py`` refuses any other."""
JUDGES = ("zorro", "lm_task")


# ------------------------------------------------------------------ claims
def context(frame: pd.DataFrame) -> claims_engine.Context:
    """The values the early-learning claims read from the per-seed ``frame`` (:data:`CLAIM_NAMES`):
    the Zorro leg's main group (the most seeds), its last and first checkpoints (``zorro_early_step``:
    the first where it differs from the last) and SSA arms; the LM leg's main group, SSA arm, last
    checkpoint, splits, and per number of shots its step and tasks. Judges: ``zorro`` and ``lm_task``
    leave a contrast unjudged where neither arm learned the probe or task (:func:`zorro_learned`,
    :func:`task_learned`)."""
    z = frame[frame.part == "zorro"] if len(frame) else frame
    zg_name = main_group(z, "mlm") if len(z) else None
    zg = z[z.group == zg_name] if zg_name is not None else z.iloc[:0]
    last, first = _last(zg, metric="zorro_accuracy"), _first(zg, metric="zorro_accuracy")
    lm = frame[frame.part == "lm"] if len(frame) else frame
    lg_name = main_group(lm, "lm") if len(lm) else None
    lg = lm[lm.group == lg_name] if lg_name is not None else lm.iloc[:0]
    arm = next((a for a in lg.scorer.unique() if a != "softmax"), None) if len(lg) else None
    acc = lg[lg.metric == "task_accuracy"]
    values = {
        "zorro_group": zg_name,
        "zorro_last": last,
        "zorro_early_step": first if first is not None and first != last else None,
        "zorro_arms": [a for a in ("ssa_n1.5", "ssa_n2") if a in set(zg.scorer)],
        "lm_group": lg_name,
        "lm_arm": arm,
        "lm_last": _last(lg, metric="perplexity"),
        "lm_splits": [
            s for s in ("heldout", "valid", "test") if s in set(lg[lg.metric == "perplexity"].item)
        ],
        "lm_methods": [
            {
                "method": m,
                "step": _last(acc, method=m),
                "tasks": [t for t in MC_TASKS if t in set(acc[acc.method == m].item)],
            }
            for m in sorted(acc.method.unique())
        ],
    }

    def zorro(a: Mapping, b: Mapping) -> bool:
        sel = z[z.group == a["group"]]
        return any(
            zorro_learned(sel, s, a["item"], a["step"], a["method"]) for s in (a["scorer"], b["scorer"])
        )

    def lm_task(a: Mapping, b: Mapping) -> bool:
        sel = lm[lm.group == a["group"]]
        return any(
            task_learned(sel, s, a["item"], a["step"], a["method"]) for s in (a["scorer"], b["scorer"])
        )

    return claims_engine.Context(values, {"zorro": zorro, "lm_task": lm_task})


def claims(frame: pd.DataFrame, entries: Mapping | None) -> list[Claim]:
    """The study's claims (``entries``: its ``claims:`` section) with one paired contrast per arm × item
    (see the module); a contrast on a probe or task that neither arm learned is not judged."""
    return claims_engine.build(entries, context(frame)) if len(frame) else []


# ------------------------------------------------------------------ claims
def _last(frame: pd.DataFrame, **where) -> int | None:
    sel = paired.select(frame, **where)
    return int(sel.step.max()) if len(sel) else None


def _first(frame: pd.DataFrame, **where) -> int | None:
    sel = paired.select(frame, **where)
    return int(sel.step.min()) if len(sel) else None


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


def compute(
    paths: Mapping[str, Path], entries: Mapping | None = None
) -> tuple[pd.DataFrame, list, pd.DataFrame, pd.DataFrame]:
    """From the published per-seed CSVs: (the per-seed frame, the claims, the claims table, the
    findings); ``entries``: the study's ``claims:`` section (none: no claims). The test recomputes the
    report's numbers with this from the CSVs alone."""
    d = decide(paths, {"claims": entries})
    return d.frame, d.claims, d.table, d.found


def decide(paths: Mapping[str, Path], setup: Mapping | None = None) -> Decided:
    """Every decision the report prints, from the published per-seed CSVs and the study's file
    (``setup``: its ``claims:``, ``primary:``, ``confirmatory_seeds`` and ``replication``), by the one
    pipeline every report uses (:func:`ssa_repro.reports.decide.decide`; this report has no 2 × 2
    designs)."""
    setup = dict(setup or {})
    frame = read_back(paths)
    found_claims = claims(frame, setup.get("claims"))
    ctx = context(frame) if len(frame) and setup.get("primary") else None
    return pipeline.decide(frame, setup, ctx=ctx, claims=found_claims)


# ------------------------------------------------------------------ the report
def missing_jobs(index: pd.DataFrame | None, setup: Mapping | None) -> list[str]:
    """What the study's config asks for and the index lacks (``inputs.missing_jobs`` with the runner's
    rule, :func:`inputs.evaluated_keys`: an evaluation limited to some ``groups`` is expected only
    there)."""
    return study_inputs.missing_jobs(index, setup, evaluated_keys(setup)) if setup else []


def findings_markdown(
    found: pd.DataFrame,
    found_claims,
    frame: pd.DataFrame,
    table: pd.DataFrame | None = None,
    decided: Decided | None = None,
) -> list[str]:
    """The findings, first: the declared primary endpoints whatever they say (``decided``;
    ``reports/primary_markdown.py``'s :func:`~ssa_repro.reports.primary_markdown.primary_findings`), then the contrasts the
    decision rule calls, then every claim by its verdict (the claims table's, digested: what is ruled
    out, what the seeds are too few for and how many would do, what is not testable at this size), then
    the regime the matrix ran at."""
    lines = []
    head = primary_findings(decided) if decided is not None else []
    if head:
        lines += [*head, "", "**Exploratory** (each within its own Holm family; the rule's calls):", ""]
    shown = table
    if decided is not None and decided.confirmatory is not None and table is not None and len(table):
        shown = without_endpoints(table, decided.eps)  # the endpoints' contrasts: listed above
    text = {c.key: c for c in found_claims}
    for _, r in found.iterrows():
        c = text[r["claim"]]
        lines.append(
            f"- **{c.claim}** — {r['contrast']}: {c.contrast_text} = {paired.contrast_text(r)} ({r['verdict']}; "
            f"a {r['mean_a']:.3g} → b {r['mean_b']:.3g}, means over the paired seeds)."
        )
    if not len(found):
        what = "No other claim" if head else "No claim"
        lines.append(f"- **{what} is supported or contradicted**: the decision rule calls no contrast.")
    # the SSA effects no family calls, against SSA as prominently as for it (issue 38), before the digest
    ssa = [x for x in paired.ssa_effect_lines(shown, found_claims) if x]
    lines += [f"- {x}" if i == 0 else f"  {x}" for i, x in enumerate(ssa)]
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
    for 80% power (``seed_power.power_table``). Called contrasts are the findings above it."""
    if table.empty:
        return []
    power = seed_power.power_table(table)
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
        stats.NONZERO_WITHIN: "Non-zero, within the margin (the test rejects 0 and both intervals lie inside "
        "±m: real, too small to matter)",
        stats.UNDERPOWERED: "Not detected, underpowered (the interval reaches past the margin)",
        paired.NOT_LEARNED: "Not testable at this size (neither arm scores above chance)",
    }
    for verdict in by_verdict:  # "not detected (powered for d_z …)": said as it is (called ones: above)
        if verdict.startswith(stats.POWERED_PREFIX):
            heads[verdict] = verdict[0].upper() + verdict[1:]
    out = []
    for verdict, head in heads.items():
        if verdict in by_verdict:
            out.append(f"- **{head}**: " + "; ".join(by_verdict[verdict]) + ".")
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


def write(
    root: Path, out_dir: Path, name: str, command: str, setup: dict | None = None, prior: Path | None = None
) -> Path:
    """``<out_dir>/<name>.md``, its figures and per-seed CSVs (and ``report_inputs.json``:
    ``reports/inputs.py``'s :data:`~ssa_repro.reports.inputs.INPUTS`) in ``<out_dir>/<name>/``; returns
    the markdown's path. ``prior``: a published report's folder whose per-seed rows join the run
    folders' (a study continued in a later session: ``reports/inputs.py``'s ``with_prior``, as the ICL
    report's). Missing data are reported, not raised."""
    root, out_dir = Path(root), Path(out_dir)
    paths, inputs = study_inputs.gather(root, out_dir / name, setup, prior, per_seed, export, read_back)
    return render(paths, inputs, out_dir, name, command, setup)


def render(
    paths: Mapping[str, Path], inputs: dict, out_dir: Path, name: str, command: str, setup: dict | None
) -> Path:
    """The report from its per-seed CSVs (``paths``) and inputs record alone (``write``'s and
    ``--from-csv``'s common part)."""
    out_dir = Path(out_dir)
    figdir = out_dir / name
    decided = decide(paths, setup)
    frame, found_claims, table, found = decided.frame, decided.claims, decided.table, decided.found
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
        *findings_markdown(found, found_claims, frame, table, decided),
        "",
        *primary_lines(decided),
        "## The paper's claims",
        "",
        *claims_markdown(found_claims, table),
        "",
        "**Decision rule** (docs/statistics.md): per contrast, b − a per seed (same seed: the same initial "
        "weights and batch order under every scorer; the same Zorro pairs, held-out utterances, streams and "
        "task items for every model), averaged over seeds; a 95% expanded percentile bootstrap interval over "
        "seeds; the sign-flip p over seeds "
        + stats.SIGN_FLIP_P
        + ", Holm-adjusted once, across the claim's contrasts (its "
        "family, named beside it). *yes* / *contradicted*: the interval excludes 0 (on the claimed / other "
        "side) and p_Holm < 0.05, unless both intervals lie inside ±m: then *non-zero, within ±m* (never "
        "*contradicted*); *not "
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
        "SSA arm − softmax over paired seeds (points: estimate, 95% interval, raw sign-flip p; the rows the "
        "claims test have their one Holm p in the claims table) beside the paper's difference. Descriptive: a family of 14 needs "
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
        "Per judged contrast of the claims table: its Holm family and the family's size k, the seeds (and "
        "ties, d_s = 0), d_z = mean/SD of the per-seed differences, the power at the seeds used from the "
        "observed differences with their ties (`stats.power_sign_flip`; 0 where the non-zero d_s are too few "
        "for the exact test ever to reach α/k) and the seeds needed for 80% at the observed d_z "
        "(`stats.power_paired`, normal theory), both at α = 0.05/k (Holm's first step: the power is a lower "
        "bound).",
        seed_power.power_table(table) if len(table) else None,
    )
    return finish(lines, table, missing, setup, out_dir, name, after_missing=GPU_LINES, decided=decided)


REPORTS.register("early")(ReportKind(write=write, render=render, read_back=read_back))
