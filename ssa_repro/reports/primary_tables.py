"""The primary endpoints' tables and notes a report prints (from :mod:`~ssa_repro.reports.primary`'s
decisions): the declaration's note, each replication's, the interim shortfall, the power plan (the one
planned d_z per endpoint, continuous and binary), the equivalence rules' simulated error rates (jumps
0.3, 0.5 and 1) and the results table (confirmatory, replications, every seed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ssa_repro import stats
from ssa_repro.reports import paired
from ssa_repro.reports.primary import (
    ALPHA,
    NO_CONFIRMATORY,
    NO_REPLICATION,
    NOTE,
    ORDINALS,
    REPLICATION,
    Replication,
    planned,
    seed_ids,
)
from ssa_repro.reports.tables import seed_ranges

SIM_JUMPS = (0.3, 0.5, 1.0)  # the simulated jumps of a bimodal outcome (issue 58: not 1.0 alone)
SIM_SEEDS = (6, 8, 10)  # the robust rule's simulated error rates where no endpoint has been decided yet


def replication_note(rep: Replication, eps: Mapping | None = None, i: int = 0, alone: bool = True) -> str:
    """The *Primary endpoints* section's paragraph for a declared replication (``i``: its place in the
    declared order; ``alone``: the only one declared): new seeds for some endpoints, declared after the
    confirmatory test had been read, deciding them again on those seeds alone (``rep.run``: those in
    the data)."""
    names = [n for n in rep.endpoints if n in (eps or {})]
    declared = seed_ranges(rep.seeds)
    ordinal = ORDINALS[i] if i < len(ORDINALS) else "Another"
    later = " and the earlier replications" if i else ""
    head = (
        f"{ordinal} replication was declared after the confirmatory test{later} had been read and before "
        f"seeds {declared} were run: {len(names)} of the endpoints ({', '.join(names)}) tested again on "
        f"those new seeds alone, Holm over {'the ' + str(len(names)) if len(names) > 1 else 'it alone'} "
        f"(family `{rep.family}`, k = {len(names)}). The confirmatory seeds are not extended (a "
        "second look at them would spend their α again); "
        + (
            "the two tests stand side by side, neither overrides the other. "
            if i == 0 and alone
            else "the tests stand side by side, none overrides another. "
        )
    )
    if not len(rep.run):
        return head + f"{NO_REPLICATION.capitalize()}: none of seeds {declared} is in this report's data."
    head += f"Seeds in the data: {seed_ranges(rep.run)} ({len(rep.run)} of the {len(rep.seeds)} declared)."
    short = shortfall(rep.results, len(rep.seeds), len(rep.endpoints), rep.run)
    if short:
        head += (
            f" Interim: {short}; its endpoints are decided only once each has all its seeds paired, so none "
            "is called here."
        )
    return head


def note(confirmatory=None, run=(), earlier=(), short: str = "") -> str:
    """The *Primary endpoints* section's opening: :data:`NOTE` without ``confirmatory`` seeds; with them,
    that the endpoints were declared after the ``earlier`` seeds had been run and before the
    confirmatory ones, which alone decide them (``run``: those of them in the data; ``short``:
    :func:`shortfall`'s words where the test is interim)."""
    if confirmatory is None:
        return NOTE
    declared = seed_ranges(confirmatory)
    if len(earlier):
        head = (
            f"These endpoints were declared (issue 38) after seeds {seed_ranges(earlier)} had been run, partly "
            f"in view of what those seeds showed, and before the confirmatory seeds {declared} were run. "
        )
    else:  # no seed of the data precedes them: declared with the study, before any of its runs
        head = f"These endpoints were declared with the study, before any of its runs (seeds {declared}). "
    if not len(run):
        return head + (
            f"No confirmatory seeds run yet: none of seeds {declared} is in this report's data, so no "
            "endpoint is decided here; the estimates on the seeds run are shown, exploratory (the seeds "
            "that suggested the hypotheses cannot test them). Everything else in this report is "
            "exploratory, each contrast corrected within its own stated family."
        )
    if short:
        head += (
            f"Interim: {short} ({len(run)} of the {len(confirmatory)} confirmatory seeds are in this report's "
            f"data: {seed_ranges(run)}). The endpoints are decided only once each has all its declared seeds "
            "paired (a call at each look at part of the sample would spend α again), so no endpoint is "
            "called here: each shows its estimate, interval and p on the seeds run so far, marked interim. "
        )
    return head + (
        f"Each endpoint is decided on the confirmatory seeds alone ({seed_ranges(run)}: "
        f"{len(run)} of the {len(confirmatory)} declared in the data), Holm over the k endpoints; beside it the "
        "same contrast on every seed, exploratory, in its own claim's or design's family (the earlier "
        "seeds suggested the hypotheses, so they do not test them). Everything else in this report is "
        "exploratory, each contrast corrected within its own stated family."
    )


def shortfall(results: pd.DataFrame, declared: int, k: int, run=()) -> str:
    """Why a test is interim (:func:`interim`), in words; "" when it is complete, or when none of its
    seeds is in the data (``run`` empty: "no … seeds run yet" is said instead). Each endpoint is short
    of its own declared count (``results.declared``, else ``declared``): where they differ, the endpoint
    furthest from its count is named."""
    if not len(results):  # seeds run, none paired yet (an arm still missing): interim too
        return f"none of the {k} endpoints has a paired seed yet" if len(run) else ""
    if not bool(results.interim.any()):
        return ""
    if len(results) < k:
        missing = k - len(results)
        return f"{missing} of the {k} endpoints {'have' if missing > 1 else 'has'} no paired seed yet"
    of = results.declared.astype(int) if "declared" in results else pd.Series(declared, index=results.index)
    if of.nunique() == 1:
        return (
            f"the fewest paired seeds an endpoint has is {int(results.n_seeds.min())} of the {int(of.iloc[0])} "
            "declared"
        )
    i = (results.n_seeds.astype(int) / of.clip(lower=1)).idxmin()  # the furthest from its own count
    return (
        f"{results.endpoint[i]} has {int(results.n_seeds[i])} of the {int(of[i])} paired seeds declared for its "
        "cells, the furthest from its count"
    )


def plan(eps: Mapping[str, Mapping], k: int) -> pd.DataFrame:
    """:func:`stats.plan_table` of the endpoints (continuous, and the binary one of each that declares a
    ``discordance``), at α/k: the seeds each needs for 80% power. The continuous form is planned at the
    one planned d_z (:func:`planned`: the declared one, or less where the discordance allows less), so
    the two forms agree."""
    rows = []
    for name, e in eps.items():
        rows.append({"name": name, "kind": "continuous", "effect": planned(e)})  # the one planned d_z
        if "discordance" in e:
            rows.append(
                {
                    "name": f"{name} (generalises)",
                    "kind": "binary",
                    "effect": tuple(float(x) for x in e["discordance"]),
                    "threshold": float(e["threshold"]),
                }
            )
    t = stats.plan_table(rows, k=k, alpha=ALPHA)
    return t.drop(columns=["margin"]).assign(level=lambda x: x.level.round(4))


def simulated_rates(
    margin: float,
    threshold: float,
    max_jump: float,
    seeds: Sequence[int] = SIM_SEEDS,
    jumps: Sequence[float] = SIM_JUMPS,
) -> pd.DataFrame:
    """The equivalence rules' simulated error rates (:func:`stats.simulate_equivalence`, seeded) at a
    true effect of exactly ±m (a "within ±m" call there is false) and at 0, with normal seed outcomes
    and bimodal ones (10% of seeds jump, by each of ``jumps``: the failures these outcomes show jump by
    about 0.5, where the plain rule's false calls are many, not by the largest jump 1, where it makes
    none): the plain rule's and the robust rule's (with the declared ``threshold`` and ``max_jump``), at
    each seed count in ``seeds`` (the counts the endpoints were decided at)."""
    rows = []
    models = [("normal", None), *(("bimodal", float(j)) for j in jumps)]
    for n in sorted({int(x) for x in seeds}):
        for model, jump in models:
            for effect in (margin, 0.0):
                r = stats.simulate_equivalence(
                    n,
                    effect,
                    margin,
                    model=model,
                    sd=margin / 2,
                    jump=jump if jump is not None else max_jump,
                    threshold=threshold,
                    max_jump=max_jump,
                    n_sim=300,
                    n_boot=500,
                    seed=0,
                )
                rows.append(
                    {
                        "seeds": n,
                        "outcomes": model if jump is None else f"{model}, jump {jump:g}",
                        "true effect": f"{effect:g}",
                        "“within ±m” (plain rule)": round(r["within"], 3),
                        "“within ±m” (robust rule)": round(r["within_robust"], 3),
                    }
                )
    return pd.DataFrame(rows)


def results_table(
    decided: pd.DataFrame,
    explored: pd.DataFrame | None = None,
    run=None,
    eps: Mapping | None = None,
    reps: Sequence[Replication] = (),
    declared: Mapping | None = None,
) -> pd.DataFrame:
    """The report's table: per endpoint the estimate with its interval, seeds (ties), p raw and p_Holm
    in the primary family, the power at the seeds run (planned d_z; observed d_s), the verdict, and for
    a bimodal endpoint the seeds that generalise per arm with McNemar's p.

    With confirmatory seeds (``explored``: :func:`all_seeds`; ``run``: the confirmatory seeds in the
    data; ``eps``: the endpoints, in their order): two rows per endpoint, first the confirmatory test
    (``decided``: on those seeds alone; "no confirmatory seeds run yet" where it has none), then the
    same contrast on every seed, exploratory, with the p_Holm of its own family and no power. With
    replications (``reps``, :class:`Replication` decided): between the two, each replication's row of
    each endpoint it names, in the declared order. ``declared``: {endpoint: its declared confirmatory
    seeds} (the seeds run that its cells are declared at are named in its test)."""
    if explored is None:
        return pd.DataFrame([{"endpoint": r["text"], **_result_row(r)} for _, r in decided.iterrows()])
    run = sorted(int(x) for x in (run or ()))

    conf = decided.set_index("endpoint") if len(decided) else pd.DataFrame()
    every = explored.set_index("endpoint") if len(explored) else pd.DataFrame()
    k = len(eps or {})
    rows = []
    for name, e in (eps or {}).items():
        if name not in conf.index and name not in every.index:
            continue
        mine = []  # this endpoint's rows: its text on the first only
        if name in conf.index:
            r = conf.loc[name]
            seeds = seed_ids(r) or _of(run, declared, name)  # the seeds the test paired
            test = f"confirmatory: seeds {seed_ranges(seeds)} (n = {int(r['n_seeds'])})"
            mine.append({"test": test, **_result_row(r, k=k)})
        elif run:  # some confirmatory seeds run, none of them for this endpoint
            mine.append({"test": NO_CONFIRMATORY})
        mine += [_replication_row(name, rep, k) for rep in reps if name in rep.endpoints]
        if name in every.index:
            r = every.loc[name]
            test = f"all seeds, exploratory (n = {int(r['n_seeds'])})"
            mine.append({"test": test, **_result_row(r, k=k, exploratory=True)})
        rows += [{"endpoint": e["text"] if i == 0 else "", **m} for i, m in enumerate(mine)]
    out = pd.DataFrame(rows)
    return out.fillna("—") if len(out) else out


def _of(run, declared: Mapping | None, name: str) -> list:
    """The seeds of ``run`` that endpoint ``name`` is declared at (all of them without ``declared``)."""
    if not declared or name not in declared:
        return list(run)
    mine = set(declared[name])
    return [s for s in run if s in mine]


def _replication_row(name: str, rep: Replication, k: int) -> dict:
    """An endpoint's row of replication ``rep`` in :func:`results_table` (its p_Holm in the
    replication's family, named in the cell: that family's k may differ from the column's)."""
    hit = rep.results[rep.results.endpoint == name] if len(rep.results) else None
    if hit is None or not len(hit):
        return {"test": NO_REPLICATION if rep.family == REPLICATION else f"{rep.family}: {NO_REPLICATION}"}
    r = hit.iloc[0]
    seeds = seed_ids(r) or _of(rep.run, rep.declared, name)  # the seeds the test paired
    row = {"test": f"{rep.family}: seeds {seed_ranges(seeds)} (n = {int(r['n_seeds'])})"}
    row.update(_result_row(r, k=k))
    row[f"p_Holm (primary, k = {k})"] = f"{r['p_holm']:.2g} (family `{rep.family}`, k = {int(r['k'])})"
    return row


def _result_row(r, k: int | None = None, exploratory: bool = False) -> dict:
    """One row of :func:`results_table` (without its endpoint's text); ``exploratory``: a contrast on
    every seed, in its own family (no p_Holm in the primary family: its own family's beside the dash;
    its verdict marked exploratory; no power: it is not a test of the endpoint)."""
    sc = r["scale"]
    b = r["binary"]
    k = int(r["k"]) if k is None else k
    if exploratory:
        p_holm = f"— (own family `{r['family']}`, k = {int(r['family_k'])}: {r['p_holm']:.2g})"
        power = ("—", "—")
    else:
        p_holm = f"{r['p_holm']:.2g}"
        power = (
            f"{r['power (planned d_z)']:.2f} (d_z {r['planned d_z']:.2g})",
            f"{r['power (observed d_s, ties)']:.2f}",
        )
    return {
        "estimate [95%]": f"{paired.fmt(r['estimate'], sc)} [{paired.fmt(r['low'], sc)}, {paired.fmt(r['high'], sc)}]",
        "margin": paired.fmt(r["margin"], sc) if sc == "log" else f"±{r['margin']:.3g}",
        "seeds (ties)": f"{int(r['n_seeds'])} ({int(r['ties'])})",
        "p raw": f"{r['p_value']:.2g}",
        f"p_Holm (primary, k = {k})": p_holm,
        "power at seeds run: planned d_z": power[0],
        "power at seeds run: observed d_s, ties": power[1],
        "generalises (a, b; McNemar p)": (
            f"{b['a']}/{b['n']}, {b['b']}/{b['n']} below {b['threshold']:g}; p {b['mcnemar'].p_value:.2g}"
            if b
            else "—"
        ),
        "verdict": f"{r['verdict']}; exploratory" if exploratory else r["verdict"],
    }
