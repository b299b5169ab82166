"""Endpoints that cannot move in their claimed direction: the control at the floor in the pilot.

An error rate is bounded below by 0. An endpoint claiming that b lowers it (``claimed_sign`` −1, b − a
on the identity scale) can improve on the control a by at most the control's own level L, so where

    L = mean over the pilot seeds of a's error  <  m  (the endpoint's margin),

no result can be an improvement that matters (a "yes": beyond ±m): the endpoint can only tie, be
"within ±m", or go against the claim. The pilot is the seeds run before the endpoints were declared
(the data's seeds that are not confirmatory); without confirmatory seeds, every seed. icl_scale's rung C
is the case (issue 58): softmax's error at σ = 16 is 0.0002 against a margin of 0.05. Ratio endpoints
(log scale) and metrics not bounded at 0 are not checked; neither are a 2 × 2's effects.
"""

from __future__ import annotations

import pandas as pd

from ssa_repro.reports import paired
from ssa_repro.reports.tables import seed_ranges


def is_error(metric: str) -> bool:
    """An error rate (bounded below by 0, lower is better): the metrics named ``*error*``."""
    return "error" in str(metric)


def floored(eps: dict, claims: list, frame: pd.DataFrame, table: pd.DataFrame, pilot) -> pd.DataFrame:
    """One row per claim endpoint whose control sits at the floor on the ``pilot`` seeds: ``endpoint``,
    ``metric``, ``control`` (a's mean over the pilot seeds), ``margin``, ``n_pilot``. Empty where none
    does, or where no pilot seed pairs."""
    rows = []
    sub = frame[frame.seed.astype(int).isin([int(s) for s in pilot])] if len(frame) else frame
    for name, e in eps.items():
        if "claim" not in e or not len(table):
            continue
        hit = table[(table.claim == e["claim"]) & (table.contrast == e["contrast"])]
        if not len(hit):
            continue
        r = hit.iloc[0]
        if r["scale"] != "identity" or int(r["claimed_sign"]) != -1 or not is_error(r["metric"]):
            continue
        claim = [c for c in claims if c.key == e["claim"]]
        p = paired.pairs(sub, claim) if claim and len(sub) else pd.DataFrame()
        p = p[p.contrast == e["contrast"]] if len(p) else p
        wide = (
            p.pivot_table(index="seed", columns="arm", values="value", aggfunc="first").dropna()
            if len(p)
            else p
        )
        if not len(wide) or "a" not in wide:
            continue
        level = float(wide["a"].mean())
        if level < float(r["margin"]):
            rows.append(
                {
                    "endpoint": name,
                    "metric": r["metric"],
                    "control": level,
                    "margin": float(r["margin"]),
                    "n_pilot": len(wide),
                }
            )
    return pd.DataFrame(rows)


def lines(rows: pd.DataFrame, pilot) -> list[str]:
    """The report's words for :func:`floored`'s rows ([] where none)."""
    if not len(rows):
        return []
    each = "; ".join(
        f"{r.endpoint}: {r.control:.2g} ({r.metric}, {r.n_pilot} seeds) below its margin ±{r.margin:g}"
        for r in rows.itertuples()
    )
    return [
        f"Floor check (the control's mean on the pilot seeds {seed_ranges(pilot)}, run before the declaration): "
        f"{each}. Such an endpoint cannot improve on its control by the margin, so it can tie or go against "
        "the claim but never say yes; the study file says why it is kept or how it was re-declared.",
        "",
    ]
