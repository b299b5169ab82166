"""The report of a study, generated from its stored results alone (``python scripts/study.py ... --report-only``).

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

import json
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.core.atomic import write_text
from ssa_repro.reports import (
    factorial,
    icl,
    icl_cells,
    icl_figures,
    icl_frame,
    icl_tables,
    length,
    paired,
    primary,
    provenance,
    runs,
)
from ssa_repro.reports.tables import markdown_table, seed_ranges

CLAIM_COLUMNS = [
    "claim",
    "contrast",
    "metric",
    "n_seeds",
    "mean_a",
    "mean_b",
    "estimate",
    "low",
    "high",
    "p_value",
    "p_holm",
    "family",
    "family_k",
    "verdict",
    "margin",
    "scale",
    "effect_size",
]


@dataclass
class Decided:
    """What a report decides from its per-seed frame: the claims and their table, the findings, the
    declared 2 × 2 designs' effects (``designs``), the primary endpoints (``eps``: as declared, filled;
    ``primaries``: their results, :func:`primary.decide`). With the study's ``confirmatory_seeds``
    (``confirmatory``, as declared): ``primaries`` are decided on those seeds alone (``run``: those in
    the data; ``earlier``: the data's other seeds, run before the declaration), and ``explored`` holds
    the same contrasts on every seed, in their own families (:func:`primary.all_seeds`). With its
    ``replication`` (one ``{seeds, endpoints}`` or a list): ``replications`` holds each one's endpoints
    decided on its seeds alone, in its own family (:class:`primary.Replication`)."""

    frame: pd.DataFrame
    claims: list
    table: pd.DataFrame
    found: pd.DataFrame
    designs: pd.DataFrame = field(default_factory=pd.DataFrame)
    eps: dict = field(default_factory=dict)
    primaries: pd.DataFrame = field(default_factory=pd.DataFrame)
    confirmatory: list | None = None
    run: list = field(default_factory=list)
    earlier: list = field(default_factory=list)
    explored: pd.DataFrame = field(default_factory=pd.DataFrame)
    replications: list = field(default_factory=list)


def decide(paths: dict[str, Path], setup: dict | None = None) -> Decided:
    """From the published per-seed CSVs and the study's file (``setup``: its ``claims:``,
    ``factorials:``, ``primary:`` and ``confirmatory_seeds`` sections): every decision the report prints.
    The primary endpoints leave their claim's or design's Holm family for the family ``primary`` (one
    Holm p per contrast); with ``confirmatory_seeds`` they are decided on those seeds alone
    (:func:`confirm`) and the full tables keep their contrasts in their own families, exploratory."""
    setup = setup or {}
    frame = paired.read_back(paths)
    ctx = icl.context(frame) if len(frame) else None
    claims = icl.claims(frame, setup.get("claims")) if len(frame) else []
    eps = primary.declared(setup.get("primary"), ctx) if ctx else {}
    seeds = setup.get("confirmatory_seeds") if eps else None
    moved = eps if seeds is None else {}  # with confirmatory seeds nothing leaves its family here
    table = (
        paired.claims_table(frame, claims, families=primary.claim_families(moved))
        if claims
        else pd.DataFrame()
    )
    designs = (
        factorial.table(frame, setup.get("factorials"), ctx, primary.design_cells(moved))
        if ctx
        else pd.DataFrame()
    )
    extra = {}
    if seeds is None:
        primaries = primary.decide(eps, table, designs, frame, claims) if eps else pd.DataFrame()
    else:
        primaries, extra = confirm(eps, seeds, frame, claims, setup.get("factorials"), ctx)
        extra["explored"] = primary.all_seeds(eps, table, designs, frame, claims)
        extra |= replicate(eps, setup.get("replication"), frame, claims, setup.get("factorials"), ctx)
        extra["earlier"] = before_declaration(extra)
    if len(table):
        per_claim = table.groupby("claim", sort=False).verdict.agg(lambda v: paired.claim_verdict(list(v)))
        table["claim_verdict"] = table.claim.map(per_claim)
    if not len(table):
        exploratory = table
    elif seeds is None:
        exploratory = table[table.family != primary.FAMILY]
    else:
        exploratory = without_endpoints(table, eps)
    ssa = [c.key for c in claims if c.contrast_text.startswith("SSA")]  # called SSA rows: always shown
    found = (
        paired.findings(exploratory, n=5, first=["architecture"], keep=ssa) if len(table) else pd.DataFrame()
    )
    return Decided(frame, claims, table, found, designs, eps, primaries, **extra)


def replicate(eps: dict, declared, frame, claims: list, factorials: dict | None, ctx) -> dict:
    """The declared ``replication`` (one ``{seeds, endpoints}`` or a list, :func:`primary.replications`):
    each one's endpoints decided on its seeds alone (:func:`confirm`, Holm over them in its own family),
    as :class:`Decided`'s ``replications``; the confirmatory test's ``earlier`` seeds (run before the
    declaration) lose every replication's, which were run after it. {} without one."""
    reps = []
    for rep in primary.replications(declared) if eps else []:  # families numbered as declared
        mine = {n: eps[n] for n in rep.endpoints if n in eps}
        if not mine:  # every endpoint it names removed (a child study's null): nothing to decide
            continue
        rep.endpoints = list(mine)
        rep.results, extra = confirm(mine, rep.seeds, frame, claims, factorials, ctx, rep.family)
        rep.run = extra["run"]
        reps.append(rep)
    return {"replications": reps} if reps else {}


def before_declaration(extra: dict) -> list:
    """The seeds run before the endpoints were declared: neither confirmatory nor a replication's."""
    later = {s for rep in extra.get("replications", ()) for s in rep.seeds}
    return [s for s in extra.get("earlier", ()) if s not in later]


def confirm(
    eps: dict,
    seeds,
    frame: pd.DataFrame,
    claims: list,
    factorials: dict | None,
    ctx,
    family: str = primary.FAMILY,
) -> tuple[pd.DataFrame, dict]:
    """The primary endpoints decided on the confirmatory ``seeds`` alone (:func:`primary.decide` on the
    endpoints' claims and designs recomputed on the per-seed frame restricted to those seeds; the claims
    as built from the whole frame, the templates filled from its values ``ctx``). Returns (the results,
    :class:`Decided`'s ``confirmatory``, ``run`` and ``earlier``); no confirmatory seed in the data: no
    results. With fewer paired seeds than declared the verdicts are withheld (:func:`primary.interim`)."""
    wanted = sorted(int(s) for s in seeds)
    sub = frame[frame.seed.astype(int).isin(wanted)]
    run = sorted(int(s) for s in sub.seed.unique())
    earlier = sorted(int(s) for s in frame.seed.unique() if int(s) not in set(wanted))
    extra = {"confirmatory": wanted, "run": run, "earlier": earlier}
    if not len(sub):
        return pd.DataFrame(), extra
    keys = {e["claim"] for e in eps.values() if "claim" in e}
    mine = [c for c in claims if c.key in keys]
    table = paired.claims_table(sub, mine, families=primary.claim_families(eps)) if mine else pd.DataFrame()
    used = {e["factorial"] for e in eps.values() if "factorial" in e}
    designs = factorial.table(
        sub, {k: v for k, v in (factorials or {}).items() if k in used}, ctx, primary.design_cells(eps)
    )
    return primary.interim(
        primary.decide(eps, table, designs, sub, claims, family), len(wanted), len(eps)
    ), extra


def without_endpoints(table: pd.DataFrame, eps: dict) -> pd.DataFrame:
    """With confirmatory seeds: the claims table without the primary endpoints' contrasts, which are shown
    on every seed beside their confirmatory test (the findings do not list them twice)."""
    keys = set(primary.claim_families(eps))
    return table[np.array([(c, s) not in keys for c, s in zip(table.claim, table.contrast)], dtype=bool)]


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


def claims_markdown(claims, table: pd.DataFrame) -> list[str]:
    rows, unmeasured = [], []
    for c in claims:
        t = table[table.claim == c.key] if len(table) else pd.DataFrame()
        if t.empty:
            unmeasured.append(c.claim)
            continue
        measured = "; ".join(
            f"{r['contrast']}: {paired.contrast_text(r)} → {r['verdict']}" for _, r in t.iterrows()
        )
        rows.append(
            {
                "claim (tested as)": c.claim,
                "the paper's words": c.paper,
                "measured (b − a per contrast)": f"*{c.contrast_text}* — " + (measured or "no data"),
                "verdict": paired.claim_verdict(list(t.verdict)) if len(t) else "not measured",
            }
        )
    out = [markdown_table(pd.DataFrame(rows))] if rows else ["No claim could be measured (see *Missing*)."]
    if unmeasured:
        out += ["", "Not measured (no paired data yet, see *Missing*): " + "; ".join(unmeasured) + "."]
    return out


def findings_markdown(
    found: pd.DataFrame, claims, table: pd.DataFrame | None = None, decided: Decided | None = None
) -> list[str]:
    """The findings: the declared primary endpoints first, whatever they say, for SSA or against it
    (with confirmatory seeds: the confirmatory result and beside it the same contrast on every seed,
    exploratory); then the exploratory contrasts the rule calls (``found``), or why there are none (with
    too few seeds the smallest two-sided sign-flip p is 2^(1−n)); then the exploratory SSA contrasts with
    a raw p < 0.05 that no Holm family calls, for and against SSA alike (:func:`paired.ssa_effects`)."""
    lines = primary_findings(decided) if decided is not None else []
    if lines:
        lines += ["", "**Exploratory** (each within its own Holm family; the rule's calls):", ""]
    if decided is not None and decided.confirmatory is not None and table is not None and len(table):
        table = without_endpoints(table, decided.eps)  # the endpoints' contrasts: listed above
    lines += _called_lines(found, claims, table)
    return lines + paired.ssa_effect_lines(table, claims)


def primary_findings(decided: Decided) -> list[str]:
    """The findings' first part, the declared primary endpoints whatever they say, for SSA or against
    it (every report's: ICL and early): each decided in the family ``primary``, or, with confirmatory
    seeds, on those seeds alone beside the same contrast on every seed (:func:`confirmatory_findings`);
    [] without endpoints found."""
    if decided.confirmatory is not None:
        return confirmatory_findings(decided) if len(decided.primaries) or len(decided.explored) else []
    if not len(decided.primaries):
        return []
    lines = [
        "**Primary endpoints** (declared after these runs, for the next ones; see *Primary endpoints*):",
        "",
    ]
    for i, (_, r) in enumerate(decided.primaries.iterrows(), 1):
        lines.append(f"{i}. {_primary_line(r)}")
    return lines


def _side(r) -> str:
    """Which side an endpoint's estimate is on: SSA's or against it, or the claim's."""
    if r["claimed_side"] is None:
        return ""
    if r["about_ssa"]:
        return " — estimate on SSA's side" if r["claimed_side"] else " — **estimate against SSA**"
    return " — estimate on the claimed side" if r["claimed_side"] else " — estimate against the claim"


def _generalising(b) -> str:
    return (
        f"; seeds generalising (error < {b['threshold']:g}): a {b['a']}/{b['n']}, b {b['b']}/{b['n']}, "
        f"McNemar p {b['mcnemar'].p_value:.2g}"
        if b
        else ""
    )


def _primary_line(r) -> str:
    """A finding of one endpoint decided in the family ``primary`` (:func:`primary.decide`'s row)."""
    sc = r["scale"]
    return (
        f"**{r['text']}** = {paired.fmt(r['estimate'], sc)} [{paired.fmt(r['low'], sc)}, "
        f"{paired.fmt(r['high'], sc)}], p_Holm {r['p_holm']:.2g} ({r.get('family', primary.FAMILY)}, "
        f"k = {int(r['k'])}), "
        f"{_seeds(r['n_seeds'])}, {int(r['seeds_worse'])} against the claimed direction"
        f"{_generalising(r['binary'])}: **{r['verdict']}**{_side(r)}; power at these seeds "
        f"{r['power (observed d_s, ties)']:.2f} (observed d_s), {r['power (planned d_z)']:.2f} (planned d_z "
        f"{r['planned d_z']:g})."
    )


def _seeds(n) -> str:
    return f"{int(n)} seed{'' if int(n) == 1 else 's'}"


def _explored_text(r) -> str:
    """An endpoint's contrast on every seed (:func:`primary.all_seeds`'s row), exploratory."""
    sc = r["scale"]
    return (
        f"{paired.fmt(r['estimate'], sc)} [{paired.fmt(r['low'], sc)}, {paired.fmt(r['high'], sc)}], "
        f"p raw {r['p_value']:.2g}, p_Holm {r['p_holm']:.2g} (its own family `{r['family']}`, "
        f"k = {int(r['family_k'])}), {int(r['n_seeds'])} seeds, {int(r['seeds_worse'])} against the claimed "
        f"direction{_generalising(r['binary'])}: {r['verdict']}{_side(r)}"
    )


def confirmatory_findings(decided: Decided) -> list[str]:
    """The primary endpoints' findings with confirmatory seeds: per endpoint its confirmatory result
    (on those seeds alone; "no confirmatory seeds run yet" where there is none) and the same contrast
    on every seed, exploratory."""
    declared = seed_ranges(decided.confirmatory)
    before = f"after seeds {seed_ranges(decided.earlier)} were run and " if decided.earlier else ""
    short = _shortfall(decided)
    if decided.run and short:
        head = (
            f"**Primary endpoints** (declared {before}before seeds {declared}; interim: {short}, with seeds "
            f"{seed_ranges(decided.run)} run, so none is decided yet; beside each, the same contrast on every "
            "seed, exploratory; see *Primary endpoints*):"
        )
    elif decided.run:
        head = (
            f"**Primary endpoints** (declared {before}before seeds {declared}; decided on the confirmatory "
            f"seeds alone, {seed_ranges(decided.run)}; beside each, the same contrast on every seed, "
            "exploratory; see *Primary endpoints*):"
        )
    else:
        head = (
            f"**Primary endpoints** (declared {before}before seeds {declared}: "
            f"{primary.NO_CONFIRMATORY}, so none is decided; the estimates on the seeds run, exploratory; "
            "see *Primary endpoints*):"
        )
    several = len(decided.replications) > 1
    for i, rep in enumerate(decided.replications):
        which = "a replication" + (f" (family `{rep.family}`)" if several else "")
        read = "the confirmatory test" + (" and the earlier replications" if i else "")
        state = (
            f" ({primary.NO_REPLICATION})"
            if not rep.run
            else " (interim)"
            if primary.shortfall(rep.results, len(rep.seeds), len(rep.endpoints), rep.run)
            else ""
        )
        again_text = (
            f"; {which} of {len(rep.endpoints)} of them, declared after {read} had "
            f"been read, decides {'them' if len(rep.endpoints) > 1 else 'it'} again on new seeds "
            f"{seed_ranges(rep.seeds)} alone" + state
        )
        head = head.replace("; see *Primary endpoints*", again_text + "; see *Primary endpoints*")
    conf = decided.primaries.set_index("endpoint") if len(decided.primaries) else pd.DataFrame()
    every = decided.explored.set_index("endpoint") if len(decided.explored) else pd.DataFrame()
    lines = [head, ""]
    i = 0
    for name, e in decided.eps.items():
        if name not in conf.index and name not in every.index:
            continue
        i += 1
        if name in conf.index:
            r = conf.loc[name]
            line = f"{i}. Confirmatory (seeds {seed_ranges(decided.run)}): {_primary_line(r)}"
        else:
            line = f"{i}. **{e['text']}**: {primary.NO_CONFIRMATORY} (seeds {declared} declared)."
        for rep in decided.replications:
            if name not in rep.endpoints:
                continue
            fam = f"family `{rep.family}`, " if several else ""
            again = rep.results.set_index("endpoint") if len(rep.results) else pd.DataFrame()
            if name in again.index:
                line += f" Replication ({fam}seeds {seed_ranges(rep.run)}): {_primary_line(again.loc[name])}"
            else:
                line += (
                    f" Replication: {primary.NO_REPLICATION} ({fam}seeds {seed_ranges(rep.seeds)} declared)."
                )
        if name in every.index:
            line += f" All seeds (exploratory): {_explored_text(every.loc[name])}."
        lines.append(line)
    return lines


def _called_lines(found: pd.DataFrame, claims, table: pd.DataFrame | None) -> list[str]:
    if found.empty:
        n = int(table.n_seeds.max()) if table is not None and len(table) else 0
        if n and 2.0 ** (1 - n) >= 0.05:
            within = int((table.verdict == stats.WITHIN).sum())
            return [
                f"No contrast can be called: with at most {n} paired seeds the exact sign-flip test's smallest "
                f"two-sided p is 2^(1−{n}) = {2.0 ** (1 - n):.3g} ≥ 0.05. What this study shows are the "
                f"estimates with their intervals below, and the contrasts whose interval lies inside the "
                f"margin (*not detected (within ±m)*: {within} of {len(table)})."
            ]
        return ["No contrast is called by the decision rule yet (see the claims table and *Missing*)."]
    text = {c.key: c for c in claims}
    lines = []
    for i, (_, r) in enumerate(found.iterrows(), 1):
        c = text[r["claim"]]
        lines.append(
            f"{i}. **{c.claim}** — {r['contrast']}: {c.contrast_text} = {paired.contrast_text(r)} "
            f"({r['verdict']}; a {r['mean_a']:.3g} → b {r['mean_b']:.3g}, means over the paired seeds; |effect| = "
            f"{abs(r['estimate']) / r['margin']:.1f} margins)."
        )
    return lines


def rule_markdown(table: pd.DataFrame) -> list[str]:
    seeds = sorted(set(int(n) for n in table.n_seeds)) if len(table) else []
    lines = [
        "**Decision rule** (docs/statistics.md). Per contrast, b − a per seed (same seed: same initial "
        "weights and training prompts; same evaluation prompts), averaged over seeds; a 95% expanded "
        "percentile bootstrap interval over seeds; the sign-flip p over seeds "
        + stats.SIGN_FLIP_P
        + ", Holm-adjusted once, in "
        "the contrast's one family, named beside it: the contrasts of its claim (one per task), a family "
        "claims share, or the declared primary endpoints. *yes*: the interval excludes 0 on the claimed "
        "side and p_Holm < 0.05; *contradicted*: the same on the other side, unless both intervals lie "
        "inside ±m: then *non-zero, within ±m* (real, too small to matter; never *contradicted*); *not "
        "detected (within ±m)*: the interval and Student's t interval of the d_s inside ±m (m per metric: "
        + ", ".join(f"{k} {v:.3g}" for k, v in list(stats.MARGINS.items())[:4])
        + ", MSE ±log 1.1 on the log scale); otherwise *not detected (underpowered)*. A claim: *yes* if "
        "every contrast is, *partly* if some are, else *contradicted* if any is, *within ±m* if all are, "
        "else underpowered. With n seeds the smallest two-sided p is 2^(1−n) (0.031 at 6 seeds, 0.002 at "
        "10): with 6 seeds no contrast survives Holm in a family of two or more.",
    ]
    if seeds:
        rates = paired.rule_error_rates(seeds)
        lines += [
            "",
            "Simulated (normal seed outcomes, within-seed correlation ρ = 0.5, 400 replications, "
            "`stats.simulate_rule`, at this study's seed counts): how often one contrast is called, before "
            "Holm (Δ = 0: the false-positive rate, either direction; Δ > 0: detection in the claimed "
            "direction), beside the old overlap rule and the paired t test. Monte Carlo SE about ±0.01–0.025.",
            "",
            markdown_table(rates.round(3)),
        ]
    return lines


INPUTS = "report_inputs.json"
"""Beside a report's per-seed CSVs: what the report read from its study's run folders besides them (the
CSVs' names, the study's wall time per invocation, the runs' commits and devices as
:func:`provenance.summarise` states them, the *Missing* lines). With the CSVs it is all a report is
computed from, so ``--from-csv`` regenerates the report without the run folders (:func:`from_csv`)."""


def read_index(root: Path) -> pd.DataFrame | None:
    """``<root>/index.csv`` (job → run folder, evaluations), or None where no job has been indexed."""
    path = Path(root) / "index.csv"
    if not path.exists():
        return None
    index = pd.read_csv(path, dtype=paired.INDEX_DTYPES)
    if {"group", "job", "run_dir"} <= set(index.columns):
        # A run folder is where the study keeps it, <root>/runs/<group>/<job>: the index's run_dir was
        # written relative to the directory the study ran from, which a report made from elsewhere (or a
        # study folder moved) does not share; read from there, the cells would silently be missing.
        here = [Path(root) / "runs" / str(g) / str(j) for g, j in zip(index.group, index.job)]
        index["run_dir"] = [str(h) if h.is_dir() else d for h, d in zip(here, index.run_dir)]
        runs.flag_same_runs(index.run_dir.unique(), f"the study in {root}")  # a copied job is no seed
    return index


def run_inputs(root: Path, index: pd.DataFrame | None, missing: list[str], paths: dict[str, Path]) -> dict:
    """The :data:`INPUTS` record of a study's run folders under ``root``: ``per_seed`` {part: CSV file
    name}, ``wall_seconds`` (one per invocation, ``wall_seconds.txt``), ``runs`` (the starts' commits and
    devices, :func:`provenance.summarise`) and ``missing`` (the *Missing* section's lines)."""
    root = Path(root)
    wall_file = root / "wall_seconds.txt"
    walls = [float(x) for x in wall_file.read_text().split()] if wall_file.exists() else []
    run_dirs = (
        index.run_dir.unique()
        if index is not None
        else sorted(str(p.parent) for p in root.glob(f"runs/*/*/{provenance.PROVENANCE}"))
    )
    if index is None:
        missing = [
            f"`{root / 'index.csv'}` does not exist: no job has been evaluated and indexed yet",
            *missing,
        ]
    return {
        "per_seed": {part: Path(p).name for part, p in paths.items()},
        "wall_seconds": walls,
        "runs": provenance.summarise(provenance.run_commits(run_dirs)),
        "missing": missing,
    }


def save_inputs(figdir: Path, inputs: dict) -> dict:
    """Write ``inputs`` as ``<figdir>/report_inputs.json``; returns it as read back (what
    :func:`from_csv` will see), so a fresh report and a regenerated one are rendered from the same data."""
    text = json.dumps(inputs, indent=1, ensure_ascii=False) + "\n"
    write_text(Path(figdir) / INPUTS, text)
    return json.loads(text)


def load_inputs(src: Path, flag: str = "--from-csv") -> tuple[dict[str, Path], dict]:
    """(per-seed CSV paths by part, the :data:`INPUTS` record) of a report's folder ``src``; a missing
    or unreadable file, or a CSV it names that is not there, stops with the path (and the command-line
    ``flag`` that named the folder)."""
    src = Path(src)
    path = src / INPUTS
    try:
        inputs = json.loads(path.read_text())
        paths = {part: src / f for part, f in inputs["per_seed"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(
            f"Error: {flag} {src}: {path} is missing or not a report-inputs record ({e}); it is written "
            "beside the per-seed CSVs by the report generated from the run folders"
        ) from None
    absent = [str(p) for p in paths.values() if not p.is_file()]
    if absent:
        raise SystemExit(
            f"Error: {flag} {src}: {INPUTS} names per-seed CSVs that are not there: {', '.join(absent)}"
        )
    return paths, inputs


def from_csv(render, src: Path, out_dir: Path, name: str, command: str, setup: dict | None) -> Path:
    """A report regenerated from its per-seed CSVs and :data:`INPUTS` in ``src`` alone (no run folder):
    they are copied into ``<out_dir>/<name>/`` (unless that is ``src``) and ``render(paths, inputs,
    out_dir, name, command, setup)`` writes the report as the one from the run folders would be."""
    paths, inputs = load_inputs(src)
    figdir = Path(out_dir) / name
    figdir.mkdir(parents=True, exist_ok=True)
    if figdir.resolve() != Path(src).resolve():
        for p in [*paths.values(), Path(src) / INPUTS]:
            shutil.copyfile(p, figdir / p.name)
        paths = {part: figdir / p.name for part, p in paths.items()}
    return render(paths, inputs, out_dir, name, command, setup)


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
    figdir = out_dir / name
    figdir.mkdir(parents=True, exist_ok=True)
    index = read_index(root)
    parts = icl_cells.per_seed(index) if index is not None else {}
    parts, prior_inputs = with_prior(parts, prior)
    paths = paired.export(parts, figdir)
    evaluated = paired.evaluated_keys(setup)
    missing = paired.missing_jobs(trained_index(index, parts, evaluated), setup, evaluated)
    inputs = run_inputs(root, index, missing, paths)
    if prior_inputs is not None:
        inputs = continued_inputs(prior_inputs, inputs, prior, root)
    inputs = save_inputs(figdir, inputs)
    return render(paths, inputs, out_dir, name, command, setup)


def job_keys(frame: pd.DataFrame) -> list[tuple]:
    """One (group, task, scorer, arch, train_sigma, seed) per row of a per-seed frame (or an index):
    typed alike whether the frame was read from a CSV or computed (σ a float, seed an int)."""
    return list(
        zip(
            *(frame[c].astype(str) for c in ("group", "task", "scorer", "arch")),
            frame.train_sigma.astype(float),
            frame.seed.astype(int),
        )
    )


def prior_jobs(prior: Path, read=paired.read_back) -> set[tuple]:
    """The jobs (:func:`job_keys`) whose rows a published report's folder ``prior`` holds: what a study
    continued from it (``--continue-from``) does not train again. ``read``: the report's reader of its
    per-seed CSVs (the early report's has its own columns)."""
    paths, _ = load_inputs(prior)
    return set(job_keys(read(paths)))


def with_prior(
    parts: dict[str, pd.DataFrame], prior: Path | None, read=paired.read_back
) -> tuple[dict[str, pd.DataFrame], dict | None]:
    """This study's per-seed parts (from its run folders) joined with those published in ``prior`` (a
    report's folder: per-seed CSVs and :data:`INPUTS`) — a study continued in a later session, whose
    earlier run folders are gone (``--continue-from``). A job in both keeps only the new rows (it was
    trained again). Returns (the parts, ``prior``'s inputs record; None without ``prior``)."""
    if prior is None:
        return dict(parts), None
    paths, inputs = load_inputs(prior)
    old = read(paths)
    out = {}
    for part in dict.fromkeys([*parts, *old.part.unique()]):
        new = parts.get(part)
        kept = old[old.part == part].drop(columns="part")
        if new is not None and not new.empty:
            fresh = set(job_keys(new))
            kept = kept[[k not in fresh for k in job_keys(kept)]]
            kept = pd.concat([new, kept], ignore_index=True)
        out[part] = kept
    return out, inputs


def trained_index(
    index: pd.DataFrame | None, parts: dict[str, pd.DataFrame], evaluated
) -> pd.DataFrame | None:
    """``index`` (job → evaluations) with the jobs that only published rows hold (:func:`with_prior`)
    added, each with the evaluations its published rows come from (their ``evaluation`` column; every
    evaluation ``evaluated(group, task)`` names where rows carry none): what :func:`paired.missing_jobs`
    counts, so the *Missing* lines of a continued report are its own, not the earlier report's."""
    rows = [
        f[[*paired.JOB_COLUMNS, *(["evaluation"] if "evaluation" in f else [])]]
        for f in parts.values()
        if f is not None and not f.empty
    ]
    if not rows:
        return index
    jobs = pd.concat(rows, ignore_index=True).drop_duplicates()
    known = set(zip(index.group, index.job)) if index is not None else set()  # by (group, Job.name)
    extra = []
    stored: dict[tuple, set] = {}  # job key -> the evaluations its published rows come from
    names = jobs.evaluation if "evaluation" in jobs else [None] * len(jobs)
    for key, name in zip(job_keys(jobs), names):
        stored.setdefault(key, set()).update([name] if isinstance(name, str) else [])
    for (group, task, scorer, arch, sigma, seed), evals in stored.items():
        job = f"{task}-{scorer}-{arch}-sigma{sigma:g}-s{seed}"
        if (group, job) in known:
            continue
        for evaluation in sorted(evals) or evaluated(group, task) or [None]:
            extra.append({"group": group, "task": task, "job": job, "evaluation": evaluation})
    if not extra:
        return index
    extra = pd.DataFrame(extra)
    return extra if index is None else pd.concat([index, extra], ignore_index=True)


ROOT_ID = ".root_id"
"""In a study's run folder: a random identity, so that a continued report published and then joined
again with the same folder (``--continue-from`` twice in one session) counts that folder's runs once."""


def root_id(root: Path) -> str | None:
    """``root``'s identity (:data:`ROOT_ID`), made on first use; None where ``root`` does not exist."""
    root = Path(root)
    if not root.is_dir():
        return None
    path = root / ROOT_ID
    if not path.is_file():
        write_text(path, uuid.uuid4().hex + "\n")
    return path.read_text().strip()


def shown_path(path: Path) -> str:
    """``path`` as a published record states it: relative to the working directory where it lies inside
    it, else from its ``docs/`` part (a report's folder in another checkout), else its name alone (no
    machine's absolute path in a committed file)."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        parts = path.parts
        return str(Path(*parts[parts.index("docs") :])) if "docs" in parts else path.name


def continued_inputs(prior: dict, new: dict, source: Path, root: Path | None = None) -> dict:
    """The :data:`INPUTS` record of a continued study: the published record ``prior`` and this session's
    ``new`` one (from the run folder ``root``) joined: wall times one after the other, runs summed
    (:func:`provenance.merge_summaries`), the *Missing* lines this report's own. The
    earlier record is kept under ``continued`` with ``root``'s identity: where ``prior`` was itself
    joined with this ``root`` (a report published, then made again), its earlier record is used, so
    that no run or wall time is counted twice."""
    ident = root_id(root) if root is not None else None
    before = prior.get("continued") or {}
    if ident is not None and before.get("root_id") == ident:
        prior = before["earlier"]
    out = dict(new)
    out["wall_seconds"] = [*prior.get("wall_seconds", []), *new["wall_seconds"]]
    out["runs"] = provenance.merge_summaries(prior.get("runs", {}), new["runs"])
    out["missing"] = list(new["missing"])  # the published jobs counted with what they hold (trained_index)
    if prior.get("reconstructed"):
        out["reconstructed"] = prior["reconstructed"]
    earlier = {k: v for k, v in prior.items() if k != "per_seed"}
    out["continued"] = {"from": shown_path(source), "root_id": ident, "earlier": earlier}
    return out


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
        learned = length.length_learned(frame, ratio=None)
        if len(learned):
            top = learned.groupby("task").ratio.transform("max")
            learned = learned[np.isclose(learned.ratio, 1.0) | np.isclose(learned.ratio, top)]
            lines += section(
                "Did the length tasks' models learn",
                "At the training length (×1) and at the longest length the claims compare, σ_x = 1: the "
                "model's seed-mean error against the best label-rule baseline's at that length; learned "
                "(there) when lower by more than the metric's margin. An SSA − softmax contrast is judged at "
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
        "Seeds with sequence error below 0.1, softmax vs SSA, Fisher's exact test.",
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
        paired.power_table(table) if len(table) else None,
    )
    remove_stale_figures(figdir, figs)
    return finish(lines, table, missing, setup, out_dir, name)


def remove_stale_figures(figdir: Path, figs: list) -> None:
    """Remove the PNGs in the report's own folder that this report did not draw (a renamed or no longer
    drawn figure), so the folder holds exactly what the markdown links; nothing else is touched."""
    drawn = {Path(f).resolve() for f in figs}
    for old in Path(figdir).glob("*.png"):
        if old.resolve() not in drawn:
            old.unlink()


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


def primary_lines(decided: Decided) -> list[str]:
    """The *Primary endpoints* section: the declaration's status, the power-analysis table
    (:func:`primary.plan`: seeds for 80% power at α/k, continuous and generalising), each endpoint's
    result, and, where an endpoint is bimodal, the robust rule with its simulated error rates."""
    if not decided.eps:
        return []
    k = len(decided.eps)
    lines = [
        "## Primary endpoints",
        "",
        primary.note(decided.confirmatory, decided.run, decided.earlier, _shortfall(decided)),
        "",
        *(
            line
            for i, rep in enumerate(decided.replications)
            for line in (primary.replication_note(rep, decided.eps, i, len(decided.replications) == 1), "")
        ),
        f"Power analysis (`stats.plan_table`): for each of the k = {k} endpoints the seeds needed for ≥ 80% "
        f"power at Holm's first level α/k = {0.05 / k:.4g}, for the continuous outcome (exact sign-flip test "
        "at the planned d_z) and, where a threshold is declared, for the fraction of seeds that generalise "
        "(exact McNemar at the planned discordance p10, p01).",
        "",
        markdown_table(primary.plan(decided.eps, k)),
        "",
    ]
    for rep in decided.replications:
        kr = len(rep.endpoints)
        if not kr or kr == k:  # the same Holm level as the table above
            continue
        whose = "The replication's" if len(decided.replications) == 1 else f"Family `{rep.family}`'s"
        lines += [
            f"{whose} {kr} endpoint{'s' if kr > 1 else ''} at its Holm level α/{kr} = {0.05 / kr:.4g}:",
            "",
            markdown_table(primary.plan({n: decided.eps[n] for n in rep.endpoints}, kr)),
            "",
        ]
    if decided.confirmatory is not None and (len(decided.primaries) or len(decided.explored)):
        declared = seed_ranges(decided.confirmatory)
        lines += [
            (
                f"Results (b − a): per endpoint the confirmatory test on seeds {seed_ranges(decided.run)} "
                f"alone (of {declared}, declared; the power at those seeds for the planned d_z, and for "
                "differences like the observed ones with their ties, `stats.power_sign_flip`), "
                + _replications_text(decided.replications)
                + "then the same contrast on every seed, exploratory: its p_Holm is its own claim's or "
                "design's family's, and it decides nothing."
                if decided.run
                else f"Results (b − a): {primary.NO_CONFIRMATORY} (seeds {declared} declared), so no "
                "endpoint is decided; per endpoint the same contrast on the seeds run, exploratory: its "
                "p_Holm is its own claim's or design's family's, and it decides nothing."
            ),
            "",
            markdown_table(
                primary.results_table(
                    decided.primaries,
                    decided.explored,
                    decided.run,
                    decided.eps,
                    decided.replications,
                )
            ),
            "",
        ]
    elif len(decided.primaries):
        lines += [
            "Results at the seeds run (b − a; the power at those seeds for the planned d_z, and for "
            "differences like the observed ones with their ties, `stats.power_sign_flip`):",
            "",
            markdown_table(primary.results_table(decided.primaries)),
            "",
        ]
    shown = decided.primaries if len(decided.primaries) else decided.explored
    bimodal = [e for e in decided.eps.values() if "threshold" in e]
    if bimodal and len(shown):
        e = bimodal[0]
        r = shown[shown.text == e["text"]]
        margin = float(r.margin.iloc[0]) if len(r) else 0.05
        # the seed counts the bimodal endpoints were decided at (every seed and the confirmatory ones)
        both = [
            f
            for f in (decided.primaries, *(r.results for r in decided.replications), decided.explored)
            if len(f)
        ]
        # (a simulation needs two seeds at least: an interim count of one is left out)
        counts = [int(x) for f in both for x in f[f.binary.notna()].n_seeds if int(x) >= 2]
        lines += [
            "Bimodal endpoints (a seed generalises or it does not) decide “within ±m” by the robust rule "
            "(`stats.robust_verdict`): the equivalence call stands only if the interval that allows for "
            f"seeds jumping by up to {float(e.get('max_jump', 1.0)):g} (`stats.robust_interval`) lies inside ±m "
            "too. Its simulated error rates (`stats.simulate_equivalence`, 300 replications, seeded; sd = m/2, "
            "bimodal: 10% of seeds jump): how often “within ±m” is called at a true effect of exactly m "
            "(a false call) and at 0 (a true one). The robust rule bounds the jumps it has not seen, so "
            "with none seen it can call “within ±m” only from "
            f"{_equivalence_seeds(margin, float(e.get('max_jump', 1.0)))} seeds on "
            f"(`stats.seeds_for_equivalence`, m = {margin:g}, largest jump {float(e.get('max_jump', 1.0)):g}): "
            "below that a bimodal endpoint is never “within ±m”, only “not detected (underpowered)”.",
            "",
            markdown_table(
                primary.simulated_rates(
                    margin, float(e["threshold"]), float(e.get("max_jump", 1.0)), counts or primary.SIM_SEEDS
                )
            ),
            "",
        ]
    return lines


def _shortfall(decided: Decided) -> str:
    """Why the confirmatory test is interim (:func:`primary.shortfall`), "" when it is not."""
    if decided.confirmatory is None:
        return ""
    return primary.shortfall(decided.primaries, len(decided.confirmatory), len(decided.eps), decided.run)


def _replications_text(reps: list) -> str:
    """The results paragraph's words for the replications' rows ("" without one)."""
    if not reps:
        return ""
    if len(reps) == 1:
        return f"then the replication's test on its seeds alone (of {seed_ranges(reps[0].seeds)}, declared), "
    each = "; ".join(f"`{r.family}` of {seed_ranges(r.seeds)}" for r in reps)
    return f"then each replication's test on its own seeds alone ({each}, declared), "


def _equivalence_seeds(margin: float, max_jump: float) -> str:
    """:func:`stats.seeds_for_equivalence` as text (2 where a jump cannot exceed the margin)."""
    if not margin < max_jump:
        return "2"
    return str(stats.seeds_for_equivalence(margin, max_jump))


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


def finish(
    lines: list[str],
    table: pd.DataFrame,
    missing: list[str],
    setup: dict | None,
    out_dir: Path,
    name: str,
    after_missing: list[str] = (),
) -> Path:
    """A study report's end (every study's): the *Missing* section, ``after_missing``, the setup; then
    ``<name>.md`` and ``<name>_claims.csv`` (the claims table, one row per contrast) written atomically."""
    lines = [
        *lines,
        "## Missing",
        "",
        *([f"- {m}" for m in missing] or ["Nothing: every group and evaluation is stored."]),
        "",
        *after_missing,
    ]
    if setup:
        lines += setup_lines(setup)
    path = out_dir / f"{name}.md"
    write_text(path, "\n".join(lines))
    out = (
        table.reindex(columns=[*CLAIM_COLUMNS, "claim_verdict"])
        if len(table)
        else pd.DataFrame(columns=CLAIM_COLUMNS)
    )
    write_text(out_dir / f"{name}_claims.csv", out.to_csv(index=False, float_format="%.6g"))
    return path


def provenance_lines(command: str, walls, runs: dict, name: str, paths: dict, rows: str) -> list[str]:
    """A report's opening lines: how and where it was generated, the runs' commits (``runs``:
    :func:`provenance.summarise`), and links to the per-seed CSVs (``rows``: what one row of them is)."""
    links = ", ".join(f"[`{p.name}`]({name}/{p.name})" for p in paths.values()) or "none"
    return [
        provenance.header(command, walls),
        provenance.summary_text(runs),
        f"Per-seed values: {links} (one row per {rows}; every number below is computed from them).",
    ]


def figure_lines(path: Path | None, alt: str, name: str, figs: list) -> list[str]:
    """A figure's markdown line (``path`` None: not drawn, no line); ``figs`` collects the drawn ones."""
    if path is None:
        return []
    figs.append(path)
    return [f"![{alt}]({name}/{path.name})", ""]


def section(heading: str, text: str, table: pd.DataFrame | None) -> list[str]:
    body = markdown_table(table) if table is not None and len(table) else "No data yet (see *Missing*)."
    return [f"## {heading}", "", text, "", body, ""]


def setup_lines(setup: dict) -> list[str]:
    """The study's matrix as the report states it: common overrides, groups, evaluations."""

    def cell(v) -> str:  # an axis, or `more`: [{seeds, some axes}] as "every_num × postln: seeds 8–29"
        if v and isinstance(v[0], dict):
            return "; ".join(
                " × ".join(
                    ", ".join(map(str, e[a])) for a in ("tasks", "scorers", "archs", "train_sigma") if a in e
                )
                + f": seeds {seed_ranges(e['seeds'])}"
                for e in v
            )
        return ", ".join(str(x) for x in v)

    groups = [{"group": g, **{k: cell(v) for k, v in spec.items()}} for g, spec in setup["groups"].items()]
    evals = [
        {"evaluation": k, **{kk: str(vv) for kk, vv in v.items()}} for k, v in setup["evaluations"].items()
    ]
    return [
        "## Setup",
        "",
        f"Every job: `python train.py {' '.join(setup['base'])}` + its task, architecture, scorer, training σ "
        f"and seed ({', '.join(str(s) for s in setup['seeds'])} unless the group names its own); then the "
        "evaluations below on fixed prompts shared by every model (conf/study/"
        + str(setup["name"])
        + ".yaml).",
        "",
        markdown_table(pd.DataFrame(groups)),
        "",
        "Tasks: " + "; ".join(f"`{t}` = `{' '.join(ov)}`" for t, ov in setup["tasks"].items()) + ".",
        "Architectures: " + "; ".join(f"`{a}` = `{' '.join(ov)}`" for a, ov in setup["archs"].items()) + ".",
        "",
        markdown_table(pd.DataFrame(evals).fillna("")),
        "",
    ]
