"""The ICL report kind (``icl``, the default: icl_cpu, icl_scale, length_cpu, relpos_cpu, mechanism_cpu):
the report of a study, generated from its stored results alone (``python scripts/study.py ... --report-only``).

Findings first. Reads ``<root>/index.csv`` (job → run folder, evaluation protocols) and every job's stored
cells, reduces them to per-seed values and writes them as tidy CSVs
(``<out>/<name>/per_seed_<part>.csv``), and what else it reads from the run folders (wall time, the
runs' commits and devices, what is missing) as ``<out>/<name>/report_inputs.json`` (:data:`INPUTS`).
Everything below is computed from those files as read back (:func:`render`), so the report can be
regenerated from the published files alone (:func:`from_csv`, ``--from-csv``;
tests/test_report_freshness.py checks every committed report that way). Then ``<out>/<name>.md``:

1. a title that says what models of this size can and cannot show; the provenance (the report's commit,
   command, machine and the study's wall time; the runs' commits from their provenance.json, a dirty
   tree flagged);
2. 3–5 findings, picked by rule (:func:`paired.findings`: the called contrasts with the largest effect in
   units of their margin, one per claim, the architecture first when called);
3. the claims table: every claim of the paper with its words, one paired contrast per task (b − a over
   paired seeds: estimate, bootstrap interval, sign-flip p Holm-adjusted within the claim, seeds), the
   verdict per contrast and per claim, and the decision rule with its simulated error rates;
4. the sections per axis (σ and length shift apart, the out-of-distribution cells, deviant prompts,
   boundary values, the architecture, alternatives, wide inputs, linear MSE per σ_F, seeds that
   generalise, power), each with small PNG figures with per-seed dots;
5. what is missing (groups or evaluations not yet stored), and the setup.

``<out>/<name>_claims.csv`` holds the claims table's numbers. The ICL-specific parts are in
``reports/icl*.py`` and ``reports/length.py`` (the claims: the study file's ``claims:``, read by
``reports/claims.py``); the generic ones in ``reports/paired.py`` and ``reports/provenance.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.reports import decide as pipeline
from ssa_repro.reports import (
    factorial,
    icl_cells,
    icl_figures,
    icl_frame,
    icl_tables,
    length,
    mechanism,
    paired,
    provenance,
    seed_power,
)
from ssa_repro.reports import icl_claims as icl
from ssa_repro.reports.decide import (  # noqa: F401 (early.py and the tests read them here)
    Decided,
    before_declaration,
    confirm,
    replicate,
    without_endpoints,
)
from ssa_repro.reports.inputs import (  # noqa: F401 (the study command and the tests read them here)
    INPUTS,
    ROOT_ID,
    continued_inputs,
    evaluated_keys,
    from_csv,
    gather,
    job_keys,
    load_inputs,
    missing_jobs,
    prior_jobs,
    read_index,
    root_id,
    run_inputs,
    save_inputs,
    shown_path,
    trained_index,
    with_prior,
)
from ssa_repro.reports.kinds.registry import REPORTS, ReportKind
from ssa_repro.reports.markdown import (  # noqa: F401 (the study command and the tests read them here)
    CLAIM_COLUMNS,
    NO_DATA,
    NOT_DECLARED,
    claims_markdown,
    figure_lines,
    finish,
    provenance_lines,
    remove_stale_figures,
    rule_markdown,
    section,
    setup_lines,
)
from ssa_repro.reports.primary_markdown import (  # noqa: F401 (the study command and the tests read them here)
    confirmatory_findings,
    findings_markdown,
    primary_findings,
    primary_lines,
)


def decide(paths: dict[str, Path], setup: dict | None = None) -> Decided:
    """From the published per-seed CSVs and the study's file (``setup``): every decision the ICL report
    prints (:func:`ssa_repro.reports.decide.decide`, with the ICL claims and template values; the
    architecture's claims lead the findings when called)."""
    setup = setup or {}
    frame = paired.read_back(paths)
    ctx = icl.context(frame) if len(frame) else None
    claims = icl.claims(frame, setup.get("claims")) if len(frame) else []
    return pipeline.decide(frame, setup, ctx=ctx, claims=claims, first=["architecture"])


def compute(
    paths: dict[str, Path], entries: dict | None = None
) -> tuple[pd.DataFrame, list, pd.DataFrame, pd.DataFrame]:
    """From the published per-seed CSVs: (the per-seed frame, the claims, the claims table, the
    findings); ``entries``: the study's ``claims:`` section (reports/claims.py; none: no claims). The
    test recomputes the report's numbers with this from the CSVs alone."""
    d = decide(paths, {"claims": entries})
    return d.frame, d.claims, d.table, d.found


def title(name: str, setup: dict | None, where: str = "a CPU") -> str:
    """The report's title: what models of this size, trained on ``where``, can show."""

    def val(key, default="?", overrides=None):  # the last override of ``key`` wins, as in Hydra
        found = overrides if overrides is not None else (setup or {}).get("base", [])
        hit = [o.split("=", 1)[1] for o in found if o.startswith(key + "=")]
        return hit[-1] if hit else default

    size = f"{val('model.n_layer')}-layer, width-{val('model.n_embd')}"
    steps = val("train.steps")
    other = _other_sizes(setup or {}, val, (val("model.n_layer"), val("model.n_embd"), steps))
    archs = (setup or {}).get("archs", {})
    used = [a for g in (setup or {}).get("groups", {}).values() for a in g.get("archs", [])]
    archs = {a: archs[a] for a in dict.fromkeys(used) if a in archs} or archs  # not the inherited table
    if any(o.startswith("model.pos=") for ov in archs.values() for o in ov):  # a position-scheme axis
        return (
            f"# {name}: what {size} transformers trained for {steps} steps{other} on {where} can show about SSA's "
            f"length claims under {len(archs)} position schemes ({', '.join(archs)}) — not the paper's scale"
        )
    if any("n_layer" in o for ov in archs.values() for o in ov):  # the archs set the size: a scale ladder
        return (
            f"# {name}: what small transformers trained on {where} ({', '.join(archs)}) can show about SSA's "
            "in-context-learning claims as they grow — not the paper's scale"
        )
    scorers = {s for g in (setup or {}).get("groups", {}).values() for s in g.get("scorers", [])}
    if scorers and "ssa" not in scorers:  # no SSA arm: the study cannot speak to SSA's claims
        return (
            f"# {name}: what {size} transformers trained for {steps} steps{other} on {where} can show about "
            f"where the in-context-learning failure modes come from ({', '.join(sorted(scorers))} only: no SSA "
            "arm, no claim about SSA) — not the paper's scale"
        )
    return (
        f"# {name}: what {size} transformers trained for {steps} steps{other} on {where} can show about SSA's "
        "in-context-learning claims — failure modes and the role of LayerNorm, not the paper's scale"
    )


def _other_sizes(setup: dict, val, default: tuple) -> str:
    """The groups whose task or arch overrides train another size or length than the base's (``val``:
    an override's value; ``default``: the base's layers, width, steps), as " (group g: L-layer,
    width-W, S steps)"; "" where every group trains the base's."""
    tasks, archs, base = setup.get("tasks", {}), setup.get("archs", {}), setup.get("base", [])
    other = {}
    for name, g in setup.get("groups", {}).items():
        for t in g.get("tasks", []):
            for a in g.get("archs", []):
                ov = [*base, *tasks.get(t, []), *archs.get(a, [])]
                got = (
                    val("model.n_layer", "?", ov),
                    val("model.n_embd", "?", ov),
                    val("train.steps", "?", ov),
                )
                if got != default:
                    other.setdefault(got, []).append(name)
    parts = [
        f"group{'s' if len(set(gs)) > 1 else ''} {', '.join(dict.fromkeys(gs))}: {n}-layer, width-{w}, {st} steps"
        for (n, w, st), gs in other.items()
    ]
    return f" ({'; '.join(parts)})" if parts else ""


def write(
    root: Path, out_dir: Path, name: str, command: str, setup: dict | None = None, prior: Path | None = None
) -> Path:
    """``<out_dir>/<name>.md``, its figures and per-seed CSVs (and :data:`INPUTS`) in
    ``<out_dir>/<name>/``; returns the markdown's path. ``prior``: a published report's folder whose
    per-seed rows join the run folders' (:func:`with_prior`: a study continued in a later session).
    ``setup``: the study's config (conf/study/<name>.yaml as a dict), stated in the report and used to
    name what is missing. Missing data (no index yet, groups or evaluations not stored) are reported, not
    raised."""
    root, out_dir = Path(root), Path(out_dir)
    paths, inputs = gather(
        root, out_dir / name, setup, prior, icl_cells.per_seed, paired.export, paired.read_back
    )
    return render(paths, inputs, out_dir, name, command, setup)


def render(
    paths: dict[str, Path], inputs: dict, out_dir: Path, name: str, command: str, setup: dict | None
) -> Path:
    """The report from its per-seed CSVs (``paths``) and :data:`INPUTS` record alone: :func:`write`'s
    and :func:`from_csv`'s common part."""
    out_dir = Path(out_dir)
    figdir = out_dir / name
    decided = decide(paths, setup)
    frame, claims, table, found = decided.frame, decided.claims, decided.table, decided.found
    missing = list(inputs["missing"])
    lines = [
        title(name, setup, provenance.trained_on(inputs["runs"])),
        "",
        *provenance_lines(
            command,
            inputs["wall_seconds"],
            inputs["runs"],
            name,
            paths,
            "job × predictor × metric × cell summary",
        ),
        "",
        "## Findings",
        "",
        *findings_markdown(found, claims, table, decided),
        "",
        *primary_lines(decided),
        *mechanism.lines(table),
        "## The paper's claims",
        "",
        *claims_markdown(claims, table),
        "",
        *rule_markdown(table),
        "",
    ]
    figs = []
    lines += section(
        "Did the models learn, and σ shift vs length shift (apart)",
        "Sequence and token error per shift region (σ shift: another σ at training lengths; "
        "length shift: the training σ, longer prompts), seed mean (min–max, seeds), with the "
        "label-rule baselines (they do not depend on the scorer).",
        icl_frame.over_bases(icl_tables.shift_table, frame),
    )
    for base in icl_frame.bases(frame):
        for task in icl_frame.QUANT:
            lines += figure_lines(
                icl_figures.shift_figure(frame, task, figdir, base), f"shift {task}", name, figs
            )
    curves = length.length_table(frame) if len(frame) else pd.DataFrame()
    if len(curves):
        lines += section(
            "Length extrapolation at σ = 1",
            "Each task's error at test lengths as a multiple of its training length (×1: the longest "
            "training prompt, read from the run), at the training distribution (σ_x = 1); per architecture "
            "(position scheme) and scorer, seed mean, with the baselines once. Metric: sequence error for "
            "the quantifiers, MSE for linear, token error for the length tasks.",
            curves,
        )
        for task in dict.fromkeys(curves.task):
            lines += figure_lines(length.length_figure(frame, task, figdir), f"length {task}", name, figs)
        recall = length.recall_table(frame)
        if len(recall):
            lines += section(
                "Where recall looks as the pairs grow",
                "eval=recall on every MQAR run: per layer, the attention the query puts on its own pair "
                "(key and value; the most attending head's, `pair_weight_max_head`, and the heads' mean, "
                "`pair_weight`) and the attention entropy (nats), at 1×, 4× and 16× the training pairs, "
                "seed mean; uniform attention over the visible keys beside them (2 / #visible, log "
                "#visible). Descriptive: no contrast is decided here.",
                recall,
            )
        learned = length.length_learned(frame, ratio=None)
        if len(learned):
            top = learned.groupby("task").ratio.transform("max")
            learned = learned[np.isclose(learned.ratio, 1.0) | np.isclose(learned.ratio, top)]
            lines += section(
                "Did the length tasks' models learn",
                "At the training length (×1) and at the longest length the claims compare, σ_x = 1: the "
                "model's seed-mean error against the best label-rule baseline's at that length; a seed has "
                "learned (there) when its own error is lower by more than the metric's margin and by 10% of the "
                "baseline's, an arm when at least half its seeds have (`length.length_learned`). An SSA − "
                "softmax contrast is judged at "
                "the length it compares: where neither model beats the baselines at that length it is shown "
                f"but not judged (*{paired.NOT_LEARNED}*): it joins no Holm family, no finding and no claim "
                "verdict.",
                learned.drop(columns=["summary"]).round(4),
            )
    lines += section(
        "Where the out-of-distribution effects are",
        "SSA − softmax per cell of the largest-σ row and the longest length (not diluted by the "
        "grid mean), paired by seed, with the raw sign-flip p: exploratory, no verdict here (the cells "
        "the claims test are decided in the claims table, with the one Holm p of their family).",
        icl_frame.over_bases(icl_tables.ood_table, frame),
    )
    lines += section(
        "Deviant prompts",
        "Largest M, k = 1, per insertion sign (adverse: following the inserted value is wrong; "
        "control: it is right): errors at the inserted token vs after it vs elsewhere, how often "
        "predictions follow it (beside the labels), attention on it per layer (heads' mean and "
        "the most attending head) and the uniform share. Seed means.",
        icl_frame.over_bases(icl_tables.deviant_table, frame),
    )
    for base in icl_frame.bases(frame):
        for task in [*icl_frame.QUANT, "linear"]:
            f = icl_figures.deviant_grid_figure(frame, task, figdir, base)
            lines += figure_lines(f, f"deviant {task}", name, figs)
    lines += section(
        "Boundary values",
        "Query sweep, per architecture: the 99.5% quantile of ŷ (`upper`), of y_true "
        "(`y_true_high`) and of y in training (`train_high`), the saturation point and any "
        "plateau or read-out bound the evaluation stores; seed means. Every arm but "
        "`preln_nofinal` ends in LayerNorm + linear read-out, which bounds ŷ for any input.",
        icl_tables.boundary_table(frame) if len(frame) else None,
    )
    lines += figure_lines(
        icl_figures.boundary_figure(frame, figdir) if len(frame) else None, "boundary", name, figs
    )
    groups = set((setup or {}).get("groups", {})) or None  # None (no setup): every section
    lines += other_groups_lines(table, groups)
    for f in icl_figures.ladder_figures(frame, figdir) if len(frame) else []:
        lines += figure_lines(f, f.stem, name, figs)
    if groups is None or "architecture" in groups:  # sections that read one group's runs: where it exists
        lines += architecture_lines(frame, figdir, name, figs)
    lines += factorial_lines(decided.designs)
    if groups is None or "alternatives" in groups:
        lines += alternatives_lines(frame)
    if groups is None or "wide_inputs" in groups:
        lines += wide_lines(table)
    lines += section(
        "Linear MSE per σ_F at x ~ N(0, 1) (the paper's table 1)",
        "Seed mean of the MSE per σ_F (σ_x = 1), with the zero predictor and least squares.",
        icl_frame.over_bases(icl_tables.linear_table1, frame),
    )
    for base in icl_frame.bases(frame):
        lines += figure_lines(icl_figures.linear_figure(frame, figdir, base), "linear MSE", name, figs)
    lines += section(
        "Seeds that generalise (bimodal outcomes)",
        "Seeds with sequence error below 0.1, softmax vs SSA over the seeds with both arms (paired by seed), "
        "the seeds where only one generalises, and the exact McNemar test on them (two-sided).",
        icl_frame.over_bases(icl_tables.generalising, frame),
    )
    lines += section(
        "Power for the effects seen",
        "Per judged contrast of the claims table: its Holm family and that family's size k, the seeds it "
        "used and how many of them tie (d_s = 0), d_z = mean/SD of the per-seed differences; the power at "
        "the seeds used, from the observed differences with their ties (`stats.power_sign_flip`: the exact "
        "sign-flip test on resamples of the non-zero d_s, 1000 per contrast; 0 where the non-zero d_s are too "
        "few for the test ever to reach α/k, e.g. 3 ties among 8 seeds: smallest p 2^−4 = 0.0625; near 1 "
        "where every d_s has the same sign: the power for an effect like the one seen, for planning, not a "
        "second reading of the p) and the seeds needed for 80% at the observed d_z (`stats.power_paired`, "
        "normal theory, counted up; 0 until k · 2^(1−n) < 0.05, the exact test's floor), both at α = 0.05/k "
        "(Holm's first step: the power is a lower bound).",
        seed_power.power_table(table) if len(table) else None,
    )
    remove_stale_figures(figdir, figs)
    return finish(lines, table, missing, setup, out_dir, name, decided=decided)


CONTRAST_COLUMNS = [
    "claim",
    "contrast",
    "n_seeds",
    "mean_a",
    "mean_b",
    "estimate",
    "low",
    "high",
    "p_holm",
    "family",
    "verdict",
]


def factorial_lines(designs: pd.DataFrame) -> list[str]:
    """The declared 2 × 2 designs (``reports/factorial.py``): main effects and interaction per cell."""
    if not len(designs):
        return []
    texts = "; ".join(f"`{d}`: {t}" for d, t in dict(zip(designs.design, designs.text)).items())
    return section(
        "The 2 × 2 as a factorial (paired by seed)",
        f"{texts}. Per cell, the four arms' seed means (over the seeds with all four), the main effects "
        "(A: the mean over B of a1 − a0; B: the mean over A of b1 − b0) and the interaction ((a1b1 − a1b0) − "
        "(a0b1 − a0b0)), each a paired contrast over seeds (`stats.factorial_2x2`) with its one Holm p "
        "(the design's family; the primary endpoints' family for those declared primary).",
        factorial.markdown(designs),
    )


def claim_rows(table: pd.DataFrame, claims: list[str]) -> pd.DataFrame | None:
    """The claims table's rows of ``claims``, the columns a section shows (None where there are none)."""
    rows = table[table.claim.isin(claims)] if len(table) else pd.DataFrame()
    return rows[CONTRAST_COLUMNS].round(4) if len(rows) else None


def other_groups_lines(table: pd.DataFrame, groups: set | None) -> list[str]:
    """A section per group outside icl_cpu's (icl_scale's ladder): its SSA − softmax contrast per
    architecture (rung), the claims table's ``ssa_<group>`` rows (its figures follow: ``icl_figures.ladder_figures``)."""
    out = []
    for group in sorted((groups or set()) - set(icl_frame.KNOWN_GROUPS)):
        out += section(
            f"Group `{group}`: SSA − softmax per architecture",
            f"The claims table's `ssa_{group}` rows: per architecture (a rung of a scale ladder), SSA − "
            "softmax paired by seed on σ shift at training lengths, length shift at the training σ and the "
            "adverse deviant insertion (quantifiers), the largest σ_F (linear; a ratio of MSEs) and the "
            "longest length of a length task (token error; not judged where neither model learned it).",
            claim_rows(table, [f"ssa_{group}"]),
        )
    return out


def architecture_lines(frame: pd.DataFrame, figdir: Path, name: str, figs: list) -> list[str]:
    """The LayerNorm 2 × 2 (icl_cpu's architecture group): its table and per-seed figure."""
    lines = section(
        "Architecture: LayerNorm placement × embedding LayerNorm",
        "Seed mean (min–max, seeds); pre-LN from the core group (its seeds), the others from the "
        "architecture group. The contrasts are the claims table's `architecture` row.",
        icl_tables.architecture_table(frame) if len(frame) else None,
    )
    arch = (
        paired.select(frame, part="grid", predictor="model", task="every_num", train_sigma=1.0)
        if len(frame)
        else frame
    )
    ax = icl_frame.axes(frame) if len(frame) else {}
    if len(arch) and ax.get("sigma_max") is not None:
        a = arch[
            (arch.summary == f"train_lengths sigma={icl_frame._g(ax['sigma_max'])}")
            & arch.group.isin(["core", "architecture"])
        ]
        f = icl_figures.dots(
            a.assign(arch=a.arch.map(lambda x: icl_frame.ARCH_TEXT.get(x, x))),
            "arch",
            "scorer",
            f"every_num, σ = {icl_frame._g(ax['sigma_max'])} at training lengths, per seed",
            "sequence error",
            figdir / "architecture.png",
        )
        lines += figure_lines(f, "architecture", name, figs)
    return lines


def alternatives_lines(frame: pd.DataFrame) -> list[str]:
    """icl_cpu's alternatives group (temperature, the negative control, and hybrid heads) against softmax."""
    ax = icl_frame.axes(frame) if len(frame) else {}
    alt = None
    if len(frame) and ax.get("sigma_max") is not None:
        summaries = {
            f"train_lengths sigma={icl_frame._g(ax['sigma_max'])}": f"σ = {icl_frame._g(ax['sigma_max'])}",
            f"sigma={icl_frame._g(ax['sigma_min'])} length={ax['length_max']}": f"length {ax['length_max']}",
        }
        if ax["sigma_f"]:
            summaries[f"sigma_f={icl_frame._g(ax['sigma_f'][-1])} sigma_x=1"] = (
                f"σ_F = {icl_frame._g(ax['sigma_f'][-1])}"
            )
        alt = icl_tables.contrasts_against(frame, "alternatives", summaries)
    return section(
        "Alternatives (temperature is the negative control)",
        "The learnable per-head temperature can be absorbed into W_Q: it computes softmax's "
        "function class, so its difference from softmax is the noise floor between scorers.",
        alt,
    )


def wide_lines(table: pd.DataFrame) -> list[str]:
    """icl_cpu's wide-inputs group: the claims table's ``wide_*`` rows."""
    return section(
        "Wide inputs (σ_train = 5)",
        "The claims table's `wide_*` rows, per contrast.",
        claim_rows(table, ["wide_deviant", "wide_small"]),
    )


REPORTS.register("icl")(ReportKind(write=write, render=render, read_back=paired.read_back))
