"""A study's primary endpoints (issue 38): declared in its YAML (``primary:``, at most
:data:`claims.MOST_PRIMARY`), decided in one Holm family, with the power analysis that sizes the next run.

Each entry of ``primary:`` names one contrast the report already computes, either a claim's contrast
(``claim``: the claim's key, ``contrast``: its label) or an effect of a declared 2 × 2
(``factorial``: the design's name, ``cell``, ``of``: ``A`` or ``B``, a main effect), with

- ``text``: what the endpoint is, in the report's words (a template of the report's values);
- ``effect``: the planned d_z = E[d]/sd(d) in the claimed direction (> 0), the effect the next run is
  sized for;
- (a child study removes its parent's endpoint by naming it with the value null;)
- optional ``threshold``: a seed *generalises* where its error is below it, which makes the endpoint
  bimodal: the fraction of seeds that generalise is compared by exact McNemar on the discordant seeds
  (:func:`stats.mcnemar_exact`) beside the sign-flip test, planned with ``discordance`` [p10, p01]
  (P(a generalises, b not), P(b generalises, a not)), and its "within ±m" calls are
  :func:`stats.robust_verdict`'s (with ``max_jump``, the largest jump a seed's error can make: 1 for an
  error rate), which hold under bimodal seed outcomes.

With k declared endpoints, each is tested at Holm's level over the k (family ``primary``): its one
Holm p replaces the one it had in its claim's or design's family (which it leaves). The power at the
seeds run is given twice: for the planned d_z (:func:`stats.power_for_endpoint`, normal theory) and
for the observed differences, ties included (:func:`seed_power.observed_power`); the seeds needed for 80%
power at α/k are :func:`stats.plan_table`'s.

A study that gives ``confirmatory_seeds`` (the seeds run after the endpoints were declared) decides the
endpoints on those seeds alone (:func:`decide` on the claims table and the designs recomputed on the
per-seed frame restricted to them: a confirmatory test, the earlier seeds having suggested the
hypotheses); on every seed the same contrasts stay in their claim's or design's own family, exploratory
(:func:`all_seeds`), shown beside the confirmatory result (:func:`results_table`, :func:`note`).

A ``replication`` (``{seeds, endpoints}``, or a list of them: :func:`replications`) declares new seeds,
after the confirmatory test was read, on which some endpoints are decided again, alone: each
replication is its own Holm family (``replication``, then ``replication 2``, …), so one declared later
does not change the level of one already read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.reports import claims as claims_engine
from ssa_repro.reports import paired, seed_power
from ssa_repro.stats.decision import TESTS

FAMILY = "primary"
KEYS = (
    "text",
    "claim",
    "contrast",
    "factorial",
    "cell",
    "of",
    "effect",
    "threshold",
    "discordance",
    "max_jump",
    "kind",
    "decide_by",
)
KINDS = ("continuous", "bimodal", "ratio")  # an endpoint's declared ``kind`` (stats.decision's)
ALPHA = 0.05
NOTE = (
    "The studies were run before these endpoints were declared (issue 38): they are declared now, for the "
    "next runs, and answered here with the seeds already run, at the power printed. Everything else in "
    "this report is exploratory, each contrast corrected within its own stated family."
)
NO_CONFIRMATORY = "no confirmatory seeds run yet"
REPLICATION = "replication"  # the family of a replication's endpoints (Holm over them, on its seeds)
NO_REPLICATION = "no replication seeds run yet"
INTERIM = "interim, {n} of {of} declared seeds: not decided"  # :func:`interim`
ORDINALS = ("A", "A second", "A third", "A fourth", "A fifth")


@dataclass
class Replication:
    """One declared replication: its Holm ``family`` (:func:`family_name`), its declared ``seeds`` and
    ``endpoints`` (names in ``primary``), and once decided the seeds of it in the data (``run``), its
    endpoints' results on them alone (``results``, :func:`decide`'s columns) and each endpoint's declared
    seeds (``declared``: those of ``seeds`` the matrix runs its cells at)."""

    family: str
    seeds: list
    endpoints: list
    run: list = field(default_factory=list)
    results: pd.DataFrame = field(default_factory=pd.DataFrame)
    declared: dict = field(default_factory=dict)  # {endpoint: its seeds of ``seeds`` its cells run at}


def family_name(i: int) -> str:
    """The Holm family of the i-th declared replication (0-based): ``replication``, ``replication 2``, …"""
    return REPLICATION if i == 0 else f"{REPLICATION} {i + 1}"


def replications(declared) -> list[Replication]:
    """A study's ``replication`` value as a list: none (``None``) → [], one ``{seeds, endpoints}`` → one
    replication in the family ``replication``, a list of them → one each, in the families
    ``replication``, ``replication 2``, … in the order declared (a later one never renames an
    earlier)."""
    if not declared:
        return []
    entries = [declared] if isinstance(declared, Mapping) else list(declared)
    return [
        Replication(family_name(i), [int(s) for s in e["seeds"]], list(e["endpoints"]))
        for i, e in enumerate(entries)
    ]


def interim(results: pd.DataFrame, declared, k: int) -> pd.DataFrame:
    """A confirmatory test (or a replication's) decided on part of its declared seeds is an interim look:
    its verdicts are withheld until each of its ``k`` endpoints has all its declared paired seeds.

    Why: the family's Holm p's depend on every endpoint's p, and a call made at a look at part of the
    sample, repeated as seeds come in, would be taken at more than the declared level (each look spends
    α again; no α-spending is declared). ``declared``: one seed count for every endpoint, or {endpoint:
    its count} (:func:`ssa_repro.reports.declared_seeds.per_endpoint`: the declared seeds its cells are
    run at, which may be fewer than the study's). So while any endpoint has fewer paired seeds than its
    declared count, or no row at all, every row's verdict reads :data:`INTERIM` with its own seed count
    and its own declared count; the estimate, interval, p and p_Holm stay shown. Returns a copy of
    ``results`` (:func:`decide`'s rows) with ``interim`` (bool) and ``declared`` (its count) added."""
    if not len(results):
        return results
    out = results.copy()
    if isinstance(declared, Mapping):
        out["declared"] = [int(declared[n]) for n in out.endpoint]
    else:
        out["declared"] = int(declared)
    short = len(out) < k or bool((out.n_seeds.astype(int) < out.declared).any())
    out["interim"] = short
    if short:
        out["verdict"] = [INTERIM.format(n=int(n), of=int(d)) for n, d in zip(out.n_seeds, out.declared)]
    return out


def problems(entries, file: str, claim_keys=None, designs=()) -> list[str]:
    """Every problem of a study's ``primary:`` section, one line each naming the file, the endpoint, the
    key, the value and what is allowed."""
    if entries is None:
        return []
    if not isinstance(entries, Mapping):
        return [
            f"{file}: primary={entries!r} is not a mapping; allowed: {{endpoint name: {{{', '.join(KEYS)}}}}}"
        ]
    out = []
    n = sum(e is not None for e in entries.values())
    if n > claims_engine.MOST_PRIMARY:
        out.append(f"{file}: primary declares {n} endpoints; allowed: at most {claims_engine.MOST_PRIMARY}")
    for name, e in entries.items():
        at = f"{file}: primary.{name}"
        if e is None:  # a child study's null removes its parent's endpoint
            continue
        if not isinstance(e, Mapping):
            out.append(f"{at}={e!r} is not a mapping; allowed keys: {', '.join(KEYS)}")
            continue
        out += [
            f"{at}.{k}={e[k]!r} is not a key of an endpoint; allowed: {', '.join(KEYS)}"
            for k in e
            if k not in KEYS
        ]
        by_claim, by_design = "claim" in e, "factorial" in e
        if by_claim == by_design:
            out.append(
                f"{at}: names {'both' if by_claim else 'neither'} of claim and factorial; allowed: one"
            )
        if by_claim and "contrast" not in e:
            out.append(f"{at}.contrast is missing; an endpoint on a claim names its contrast (label)")
        if by_design:
            out += [
                f"{at}.{k} is missing; an endpoint on a 2 × 2 needs factorial, cell, of"
                for k in ("cell", "of")
                if k not in e
            ]
            if e.get("of") not in (None, "A", "B", "AxB"):
                out.append(
                    f"{at}.of={e['of']!r} is not allowed; allowed: A or B (a main effect), AxB (the interaction)"
                )
            if designs and e["factorial"] not in designs:
                out.append(
                    f"{at}.factorial={e['factorial']!r} names no design; allowed: {', '.join(designs)}"
                )
        if "text" not in e:
            out.append(f"{at}.text is missing; an endpoint says what it is")
        d = e.get("effect")
        if not isinstance(d, (int, float)) or isinstance(d, bool) or not d > 0:
            out.append(f"{at}.effect={d!r} is not allowed; allowed: the planned d_z, a number > 0")
        if "discordance" in e:
            v = e["discordance"]
            if "threshold" not in e:
                out.append(f"{at}.discordance needs threshold (the error below which a seed generalises)")
            if not (
                isinstance(v, (list, tuple))
                and len(v) == 2
                and all(isinstance(x, (int, float)) and 0 <= x <= 1 for x in v)
            ):
                out.append(f"{at}.discordance={v!r} is not allowed; allowed: [p10, p01], probabilities")
        out += _kind_problems(e, at)
        if claim_keys is not None and by_claim and e["claim"] not in claim_keys:
            out.append(f"{at}.claim={e['claim']!r} names no claim; allowed: {', '.join(sorted(claim_keys))}")
    return out


def _kind_problems(e: Mapping, at: str) -> list[str]:
    """An endpoint's ``kind`` and ``decide_by`` against what it declares: bimodal needs a threshold
    (and a threshold means bimodal); McNemar decides only a bimodal endpoint."""
    out = []
    kind = e.get("kind")
    if kind is not None and kind not in KINDS:
        out.append(f"{at}.kind={kind!r} is not allowed; allowed: {', '.join(KINDS)}")
    if kind in ("continuous", "ratio") and "threshold" in e:
        out.append(f"{at}.kind={kind!r} with a threshold; allowed: kind bimodal (a threshold declares it)")
    if kind == "bimodal" and "threshold" not in e:
        out.append(f"{at}.kind='bimodal' needs threshold (the error below which a seed generalises)")
    by = e.get("decide_by")
    if by is not None and by not in TESTS:
        out.append(f"{at}.decide_by={by!r} is not allowed; allowed: {', '.join(TESTS)}")
    if by == "mcnemar" and "threshold" not in e:
        out.append(f"{at}.decide_by='mcnemar' needs threshold (McNemar decides a bimodal endpoint)")
    return out


def outcome(e: Mapping) -> stats.Outcome:
    """An endpoint's declared outcome: bimodal with its threshold (and ``decide_by``) where it declares
    one, else continuous (a ratio's log scale is its metric's)."""
    if "threshold" not in e:
        return stats.Outcome(e.get("kind", "continuous") if e.get("kind") == "ratio" else "continuous")
    return stats.Outcome(
        stats.BIMODAL,
        threshold=float(e["threshold"]),
        max_jump=float(e.get("max_jump", 1.0)),
        decide_by=e.get("decide_by", "sign_flip"),
    )


def planned(e: Mapping) -> float:
    """The one planned d_z of an endpoint: its ``effect``, or less where its ``discordance`` allows
    less (:func:`stats.planned_dz`)."""
    return stats.planned_dz(float(e["effect"]), e.get("discordance"))


def endpoint_metric(e: Mapping, claims, factorials: Mapping | None = None) -> str | None:
    """The metric an endpoint is measured on: its claim's contrast's, or its design's; None where the
    claim or design is not there."""
    if "claim" in e:
        for c in claims:
            if c.key == e["claim"]:
                hit = [s.metric for s in c.specs if s.label == e["contrast"]]
                return hit[0] if hit else (c.specs[0].metric if c.specs else None)
        return None
    design = (factorials or {}).get(e.get("factorial"))
    return design.get("metric") if isinstance(design, Mapping) else None


def effect_key(e: Mapping) -> tuple:
    """Where an endpoint's row is: ("claim", key, contrast) or ("factorial", design, cell, effect)."""
    if "claim" in e:
        return ("claim", e["claim"], e["contrast"])
    return ("factorial", e["factorial"], e["cell"], e["of"])


def declared(entries: Mapping | None, ctx: claims_engine.Context) -> dict[str, dict]:
    """The study's endpoints with their templates filled from the report's values."""
    return {name: claims_engine.fill(dict(e), ctx) for name, e in (entries or {}).items() if e is not None}


def claim_families(eps: Mapping[str, Mapping]) -> dict[tuple[str, str], str]:
    """{(claim, contrast): "primary"} for the endpoints on claims (``paired.claims_table``'s families)."""
    return {(e["claim"], e["contrast"]): FAMILY for e in eps.values() if "claim" in e}


def design_cells(eps: Mapping[str, Mapping]) -> list[tuple[str, str, str]]:
    """The (design, cell, effect) declared primary (``factorial.table``'s ``primary``)."""
    return [(e["factorial"], e["cell"], e["of"]) for e in eps.values() if "factorial" in e]


def _contrast(r) -> stats.Contrast:
    return stats.Contrast(
        r["estimate"],
        r["low"],
        r["high"],
        r["p_value"],
        int(r["n_seeds"]),
        tuple(r["per_seed"]),
        r["scale"],
        0.95,
    )


def decide(
    eps: Mapping[str, Mapping],
    table: pd.DataFrame,
    designs: pd.DataFrame,
    frame: pd.DataFrame,
    claims,
    family: str = FAMILY,
) -> pd.DataFrame:
    """One row per declared endpoint found in the claims table or the designs' table, Holm over the
    ``family`` (``primary``, or a replication's; k = the declared count); the claims table's and the
    designs' rows of these endpoints get the same p_Holm, family and verdict (in place: one Holm p per
    contrast)."""
    k = len(eps)
    found = [(name, e, *hit) for name, e in eps.items() if (hit := _find(e, table, designs))]
    if not found:
        return pd.DataFrame()
    binaries = [
        binary_outcome(e, r, frame, claims) if where == "claim" else None for _, e, where, _, r in found
    ]
    tests = [stats.test_p(_contrast(r), outcome(e), b) for (_, e, *_, r), b in zip(found, binaries)]
    # Holm over the k declared endpoints, each with the p of the test that decides it (McNemar's where
    # declared): one not found (not run, not learned) counts as p = 1, so the found ones are not
    # adjusted over fewer tests than the k printed
    p_holm = stats.holm(np.array(tests + [1.0] * (k - len(found))))[: len(found)]
    rows = []
    for (name, e, where, idx, r), ph, binary in zip(found, p_holm, binaries):
        c = _contrast(r)
        sign = int(r["claimed_sign"])
        dec = stats.decide(
            c,
            outcome=outcome(e),
            margin=r["margin"],
            claimed_sign=sign,
            p_holm=ph,
            alpha=ALPHA,
            effect=planned(e),
            k=k,
            binary=binary["mcnemar"] if binary else None,
        )
        v = dec.verdict
        target = table if where == "claim" else designs
        target.loc[idx, ["p_holm", "family", "family_k", "verdict"]] = [ph, family, k, v]
        d = np.asarray(r["per_seed"], dtype=float)
        n = int(r["n_seeds"])
        rows.append(
            {
                "endpoint": name,
                "text": e["text"],
                "estimate": r["estimate"],
                "low": r["low"],
                "high": r["high"],
                "scale": r["scale"],
                "margin": r["margin"],
                "n_seeds": n,
                "seed_ids": seed_ids(r),
                "ties": int(np.sum(d == 0)),
                "p_value": dec.p_value,
                "test": dec.test,
                "p_holm": ph,
                "k": k,
                "family": family,
                "planned d_z": planned(e),
                "power (planned d_z)": dec.power,
                "power (observed d_s, ties)": seed_power.observed_power(d, ALPHA / k),
                "verdict": v,
                "claimed_sign": sign,
                "binary": binary,
                "claimed_side": bool(np.sign(r["estimate"]) == sign) if r["estimate"] else None,
                "about_ssa": about_ssa(e, r, claims),
                "seeds_worse": int(np.sum(d * sign < 0)),
            }
        )
    return pd.DataFrame(rows)


def seed_ids(r) -> tuple:
    """The seeds a claims or designs row paired (``seed_ids``; () for a row without them)."""
    ids = r.get("seed_ids") if hasattr(r, "get") else None
    return tuple(int(s) for s in ids) if isinstance(ids, (tuple, list)) else ()


def _find(e: Mapping, table: pd.DataFrame, designs: pd.DataFrame) -> tuple | None:
    """(where, index, row) of an endpoint's row in the claims table ("claim") or the designs' table
    ("factorial"); None where it has none, or where its contrast compares two guesses (not judged)."""
    key = effect_key(e)
    if key[0] == "claim":
        hit = table[(table.claim == key[1]) & (table.contrast == key[2])] if len(table) else table
    else:
        hit = (
            designs[(designs.design == key[1]) & (designs.cell == key[2]) & (designs.effect == key[3])]
            if len(designs)
            else designs
        )
    hit = hit[hit.verdict != paired.NOT_LEARNED] if len(hit) else hit  # two guesses: no endpoint
    return (key[0], hit.index[0], hit.iloc[0]) if len(hit) else None


def all_seeds(
    eps: Mapping[str, Mapping], table: pd.DataFrame, designs: pd.DataFrame, frame: pd.DataFrame, claims
) -> pd.DataFrame:
    """With confirmatory seeds: each endpoint's contrast on every seed, as the full claims table or
    designs' table has it, in its own claim's or design's Holm family (exploratory; nothing is changed
    in them): one row per endpoint found, its estimate, interval, seeds (ties), p, p_Holm with its family
    and k, verdict and, for a bimodal endpoint, the seeds that generalise per arm."""
    rows = []
    for name, e in eps.items():
        hit = _find(e, table, designs)
        if hit is None:
            continue
        where, _, r = hit
        d = np.asarray(r["per_seed"], dtype=float)
        sign = int(r["claimed_sign"])
        rows.append(
            {
                "endpoint": name,
                "text": e["text"],
                **{c: r[c] for c in ("estimate", "low", "high", "scale", "margin", "p_value", "p_holm")},
                "n_seeds": int(r["n_seeds"]),
                "seed_ids": seed_ids(r),
                "ties": int(np.sum(d == 0)),
                "family": r["family"],
                "family_k": int(r["family_k"]),
                "verdict": r["verdict"],
                "binary": binary_outcome(e, r, frame, claims) if where == "claim" else None,
                "claimed_side": bool(np.sign(r["estimate"]) == sign) if r["estimate"] else None,
                "about_ssa": about_ssa(e, r, claims),
                "seeds_worse": int(np.sum(d * sign < 0)),
            }
        )
    return pd.DataFrame(rows)


def about_ssa(e: Mapping, r, claims) -> bool:
    """Whether the endpoint compares SSA with softmax (a claim "SSA − …", or a design's factor B, the
    scorer), so that its side is said as for or against SSA."""
    if "claim" in e:
        return any(c.key == e["claim"] and c.contrast_text.startswith("SSA") for c in claims)
    return e.get("of") == "B"


def binary_outcome(e: Mapping, r, frame: pd.DataFrame, claims) -> dict | None:
    """For an endpoint with a ``threshold``: per arm the seeds that generalise (value below it), of the
    seeds the contrast pairs, and the exact McNemar test on the discordant ones."""
    if "threshold" not in e:
        return None
    claim = next((c for c in claims if c.key == e["claim"]), None)
    if claim is None:
        return None
    p = paired.pairs(frame, [claim])
    p = p[p.contrast == e["contrast"]]
    wide = p.pivot_table(index="seed", columns="arm", values="value", aggfunc="first").dropna()
    if not {"a", "b"} <= set(wide.columns) or not len(wide):
        return None
    t = float(e["threshold"])
    ga, gb = stats.generalises(wide["a"], t), stats.generalises(wide["b"], t)
    m = stats.mcnemar_exact(ga, gb)
    return {"threshold": t, "a": int(ga.sum()), "b": int(gb.sum()), "n": len(wide), "mcnemar": m}
