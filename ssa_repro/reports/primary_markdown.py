"""The primary endpoints in a report's markdown (every report kind's): the findings' first part (the
endpoints whatever they say, for SSA or against it; with confirmatory seeds, beside the same contrast on
every seed), the other findings' lines, and the *Primary endpoints* section (declaration, plan, results,
blocks, the robust rule's simulated error rates)."""

from __future__ import annotations

import pandas as pd

from ssa_repro import stats
from ssa_repro.reports import blocks, floor, paired, primary, primary_tables
from ssa_repro.reports.decide import Decided, without_endpoints
from ssa_repro.reports.tables import markdown_table, seed_ranges


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
        f"{r['planned d_z']:.2g})."
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
            if primary_tables.shortfall(rep.results, len(rep.seeds), len(rep.endpoints), rep.run)
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
            seeds = primary.seed_ids(r) or decided.run  # the seeds this endpoint's test paired
            line = f"{i}. Confirmatory (seeds {seed_ranges(seeds)}): {_primary_line(r)}"
        else:
            line = f"{i}. **{e['text']}**: {primary.NO_CONFIRMATORY} (seeds {declared} declared)."
        for rep in decided.replications:
            if name not in rep.endpoints:
                continue
            fam = f"family `{rep.family}`, " if several else ""
            again = rep.results.set_index("endpoint") if len(rep.results) else pd.DataFrame()
            if name in again.index:
                seeds = primary.seed_ids(again.loc[name]) or rep.run
                line += f" Replication ({fam}seeds {seed_ranges(seeds)}): {_primary_line(again.loc[name])}"
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


def primary_lines(decided: Decided) -> list[str]:
    """The *Primary endpoints* section: the declaration's status, the power-analysis table
    (:func:`primary_tables.plan`: seeds for 80% power at α/k, continuous and generalising), each endpoint's
    result, and, where an endpoint is bimodal, the robust rule with its simulated error rates."""
    if not decided.eps:
        return []
    k = len(decided.eps)
    lines = [
        "## Primary endpoints",
        "",
        primary_tables.note(decided.confirmatory, decided.run, decided.earlier, _shortfall(decided)),
        "",
        *_floor_lines(decided),
        *(
            line
            for i, rep in enumerate(decided.replications)
            for line in (
                primary_tables.replication_note(rep, decided.eps, i, len(decided.replications) == 1),
                "",
            )
        ),
        f"Power analysis (`stats.plan_table`): for each of the k = {k} endpoints the seeds needed for ≥ 80% "
        f"power at Holm's first level α/k = {0.05 / k:.4g}, for the continuous outcome (exact sign-flip test "
        "at the planned d_z) and, where a threshold is declared, for the fraction of seeds that generalise "
        "(exact McNemar at the planned discordance p10, p01).",
        "",
        markdown_table(primary_tables.plan(decided.eps, k)),
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
            markdown_table(primary_tables.plan({n: decided.eps[n] for n in rep.endpoints}, kr)),
            "",
        ]
    lines += blocks.lines(decided)
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
                primary_tables.results_table(
                    decided.primaries,
                    decided.explored,
                    decided.run,
                    decided.eps,
                    decided.replications,
                    decided.declared,
                )
            ),
            "",
        ]
    elif len(decided.primaries):
        lines += [
            "Results at the seeds run (b − a; the power at those seeds for the planned d_z, and for "
            "differences like the observed ones with their ties, `stats.power_sign_flip`):",
            "",
            markdown_table(primary_tables.results_table(decided.primaries)),
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
            "bimodal: 10% of seeds jump, by 0.3, 0.5 (the size of the failures seen here) or 1): how often “within ±m” is called at a true effect of exactly m "
            "(a false call) and at 0 (a true one). The robust rule bounds the jumps it has not seen, so "
            "with none seen it can call “within ±m” only from "
            f"{_equivalence_seeds(margin, float(e.get('max_jump', 1.0)))} seeds on "
            f"(`stats.seeds_for_equivalence`, m = {margin:g}, largest jump {float(e.get('max_jump', 1.0)):g}): "
            "below that a bimodal endpoint is never “within ±m”, only “not detected”. The same rule decides every "
            "contrast on the same metric in this report (the claims table, the 2 × 2 designs, the exploratory "
            "rows: `stats.decide`, `reports/decide.py`).",
            "",
            markdown_table(
                primary_tables.simulated_rates(
                    margin,
                    float(e["threshold"]),
                    float(e.get("max_jump", 1.0)),
                    counts or primary_tables.SIM_SEEDS,
                )
            ),
            "",
        ]
    return lines


def _floor_lines(decided: Decided) -> list[str]:
    """:func:`floor.lines` on the pilot: the seeds before the declaration (every seed without
    confirmatory seeds)."""
    if decided.confirmatory is None:
        pilot = sorted(int(s) for s in decided.frame.seed.unique()) if len(decided.frame) else []
    else:
        pilot = list(decided.earlier)
    rows = floor.floored(decided.eps, decided.claims, decided.frame, decided.table, pilot)
    return floor.lines(rows, pilot)


def _shortfall(decided: Decided) -> str:
    """Why the confirmatory test is interim (:func:`primary_tables.shortfall`), "" when it is not."""
    if decided.confirmatory is None:
        return ""
    return primary_tables.shortfall(
        decided.primaries, len(decided.confirmatory), len(decided.eps), decided.run
    )


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
