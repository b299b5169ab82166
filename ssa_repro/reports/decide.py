"""The one decision pipeline of every study report (issue 58): from the per-seed frame, the claims,
the 2 × 2 designs and the declared primary endpoints, every verdict a report prints.

Every contrast (a primary endpoint, a replication's, a claim row, a design's effect) is decided by
:func:`ssa_repro.stats.decision.decide` with its outcome's declared kind (:func:`outcomes`): an
outcome a primary endpoint declares bimodal (its ``threshold``) is bimodal wherever the same metric is
measured in the study, so the robust "within ±m" rule holds for the exploratory rows too. The ICL
report (``reports/kinds/icl.py``) and the early-learning report (``reports/kinds/early.py``) call :func:`decide`
with their own per-seed frame, template values and claims; nothing here depends on the kind of study.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.reports import declared_seeds, factorial, paired, primary


@dataclass
class Decided:
    """What a report decides from its per-seed frame: the claims and their table, the findings, the
    declared 2 × 2 designs' effects (``designs``), the primary endpoints (``eps``: as declared, filled;
    ``primaries``: their results, :func:`primary.decide`). With the study's ``confirmatory_seeds``
    (``confirmatory``, as declared): ``primaries`` are decided on those seeds alone (``run``: those in
    the data; ``earlier``: the data's other seeds, run before the declaration; ``declared``: {endpoint:
    the confirmatory seeds its cells are run at}, :mod:`~ssa_repro.reports.declared_seeds`, the count
    its test is complete at), and ``explored`` holds
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
    declared: dict = field(default_factory=dict)
    explored: pd.DataFrame = field(default_factory=pd.DataFrame)
    replications: list = field(default_factory=list)


def replicate(
    eps: dict,
    declared,
    frame,
    claims: list,
    setup: dict,
    ctx,
    outcomes: dict | None = None,
) -> dict:
    """The declared ``replication`` (one ``{seeds, endpoints}`` or a list, :func:`primary.replications`):
    each one's endpoints decided on its seeds alone (:func:`confirm`, Holm over them in its own family),
    as :class:`Decided`'s ``replications``, each endpoint complete at the seeds of the replication its
    cells are run at (``setup``'s matrix, :mod:`~ssa_repro.reports.declared_seeds`); the confirmatory
    test's ``earlier`` seeds (run before the declaration) lose every replication's, which were run after
    it. {} without one."""
    reps = []
    for rep in primary.replications(declared) if eps else []:  # families numbered as declared
        mine = {n: eps[n] for n in rep.endpoints if n in eps}
        if not mine:  # every endpoint it names removed (a child study's null): nothing to decide
            continue
        rep.endpoints = list(mine)
        rep.declared = declared_seeds.per_endpoint(mine, rep.seeds, setup, claims, ctx)
        rep.results, extra = confirm(
            mine, rep.seeds, frame, claims, setup.get("factorials"), ctx, rep.family, outcomes, rep.declared
        )
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
    outcomes: dict | None = None,
    declared: dict | None = None,
) -> tuple[pd.DataFrame, dict]:
    """The primary endpoints decided on the confirmatory ``seeds`` alone (:func:`primary.decide` on the
    endpoints' claims and designs recomputed on the per-seed frame restricted to those seeds; the claims
    as built from the whole frame, the templates filled from its values ``ctx``). Returns (the results,
    :class:`Decided`'s ``confirmatory``, ``run`` and ``earlier``); no confirmatory seed in the data: no
    results. With fewer paired seeds than declared the verdicts are withheld (:func:`primary.interim`):
    ``declared``, {endpoint: its declared seeds} (:func:`declared_seeds.per_endpoint`), else every
    endpoint is declared at all of ``seeds``."""
    wanted = sorted(int(s) for s in seeds)
    sub = frame[frame.seed.astype(int).isin(wanted)]
    run = sorted(int(s) for s in sub.seed.unique())
    earlier = sorted(int(s) for s in frame.seed.unique() if int(s) not in set(wanted))
    extra = {"confirmatory": wanted, "run": run, "earlier": earlier}
    if not len(sub):
        return pd.DataFrame(), extra
    keys = {e["claim"] for e in eps.values() if "claim" in e}
    mine = [c for c in claims if c.key in keys]
    table = (
        paired.claims_table(sub, mine, families=primary.claim_families(eps), outcomes=outcomes)
        if mine
        else pd.DataFrame()
    )
    used = {e["factorial"] for e in eps.values() if "factorial" in e}
    designs = factorial.table(
        sub,
        {k: v for k, v in (factorials or {}).items() if k in used},
        ctx,
        primary.design_cells(eps),
        outcomes=outcomes,
    )
    counts = {n: len(declared[n]) for n in eps} if declared is not None else len(wanted)
    return primary.interim(primary.decide(eps, table, designs, sub, claims, family), counts, len(eps)), extra


def without_endpoints(table: pd.DataFrame, eps: dict) -> pd.DataFrame:
    """With confirmatory seeds: the claims table without the primary endpoints' contrasts, which are shown
    on every seed beside their confirmatory test (the findings do not list them twice)."""
    keys = set(primary.claim_families(eps))
    return table[np.array([(c, s) not in keys for c, s in zip(table.claim, table.contrast)], dtype=bool)]


def outcomes(eps: dict, claims: list, factorials: dict | None = None) -> dict[str, stats.Outcome]:
    """{metric: :class:`stats.Outcome`} the study declares: each primary endpoint with a ``threshold``
    makes its metric bimodal (``max_jump`` its declared one, default 1) study-wide; the rest of the
    metrics are continuous (on their contrast scale; log: a ratio). Two endpoints declaring the same
    metric with different thresholds are an error naming both."""
    out: dict[str, stats.Outcome] = {}
    where: dict[str, str] = {}
    for name, e in eps.items():
        if "threshold" not in e:
            continue
        metric = primary.endpoint_metric(e, claims, factorials)
        if metric is None:
            continue
        o = stats.Outcome(
            stats.BIMODAL,
            threshold=float(e["threshold"]),
            max_jump=float(e.get("max_jump", 1.0)),
        )
        if metric in out and (out[metric].threshold, out[metric].max_jump) != (o.threshold, o.max_jump):
            raise ValueError(
                f"primary.{name}: threshold {o.threshold} / max_jump {o.max_jump} on {metric!r} disagrees with "
                f"primary.{where[metric]}'s {out[metric].threshold} / {out[metric].max_jump}; one metric, one kind"
            )
        out[metric], where[metric] = o, name
    return out


def decide(frame: pd.DataFrame, setup: dict | None, *, ctx, claims: list, first=()) -> Decided:
    """From the per-seed ``frame``, the study's file (``setup``: its ``claims:``, ``factorials:``,
    ``primary:``, ``confirmatory_seeds`` and ``replication`` sections), the template values ``ctx``
    (None: no endpoints or designs can be filled) and the ``claims`` built from the frame: every
    decision the report prints. The primary endpoints leave their claim's or design's Holm family for
    the family ``primary`` (one Holm p per contrast); with ``confirmatory_seeds`` they are decided on
    those seeds alone (:func:`confirm`), each complete at the confirmatory seeds the matrix (``groups``)
    runs its cells at (:mod:`~ssa_repro.reports.declared_seeds`), and the full tables keep their contrasts in their own families,
    exploratory. ``first``: the claims the findings list first when called."""
    setup = setup or {}
    factorials = setup.get("factorials")
    eps = primary.declared(setup.get("primary"), ctx) if ctx is not None else {}
    kinds = outcomes(eps, claims, factorials)
    seeds = setup.get("confirmatory_seeds") if eps else None
    moved = eps if seeds is None else {}  # with confirmatory seeds nothing leaves its family here
    table = (
        paired.claims_table(frame, claims, families=primary.claim_families(moved), outcomes=kinds)
        if claims
        else pd.DataFrame()
    )
    designs = (
        factorial.table(frame, factorials, ctx, primary.design_cells(moved), outcomes=kinds)
        if ctx is not None and factorials
        else pd.DataFrame()
    )
    extra = {}
    if eps and seeds is None:
        primaries = primary.decide(eps, table, designs, frame, claims)
    elif eps:
        mine = declared_seeds.per_endpoint(eps, seeds, setup, claims, ctx)
        primaries, extra = confirm(eps, seeds, frame, claims, factorials, ctx, outcomes=kinds, declared=mine)
        extra["declared"] = mine
        extra["explored"] = primary.all_seeds(eps, table, designs, frame, claims)
        extra |= replicate(eps, setup.get("replication"), frame, claims, setup, ctx, kinds)
        extra["earlier"] = before_declaration(extra)
    else:
        primaries = pd.DataFrame()
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
    found = paired.findings(exploratory, n=5, first=list(first), keep=ssa) if len(table) else pd.DataFrame()
    return Decided(frame, claims, table, found, designs, eps, primaries, **extra)
