"""Seeds run in blocks (issue 58): the seeds run before a study's endpoints were declared (``earlier``:
in early_cpu an H200 at another commit, in icl_scale's rung A another device than icl_cpu's CPU) and
those run after them may differ in level, so a row pooling them mixes two levels.

For each primary endpoint on a claim's contrast, :func:`table` compares the per-seed differences d_s
of the two blocks (Welch's t test, unequal variances: the blocks' spreads differ too) and gives each
block's mean; the report (:func:`lines`) says which rows pool them and why: the endpoints are decided
on the confirmatory seeds alone (one block), and every row on all seeds is exploratory, to be read per
block where the blocks differ (p < 0.05).
"""

from __future__ import annotations

import pandas as pd
from scipy import stats as sps

from ssa_repro import stats
from ssa_repro.reports import paired
from ssa_repro.reports.tables import markdown_table, seed_ranges

ALPHA = 0.05


def per_seed(e: dict, frame: pd.DataFrame, claims) -> pd.Series:
    """The endpoint's d_s by seed (b − a, on its metric's scale), over the seeds with both arms; empty
    for an endpoint on a 2 × 2 design or a claim not in ``claims``."""
    claim = next((c for c in claims if "claim" in e and c.key == e["claim"]), None)
    if claim is None:
        return pd.Series(dtype=float)
    p = paired.pairs(frame, [claim])
    p = p[p.contrast == e["contrast"]]
    if p.empty:
        return pd.Series(dtype=float)
    wide = p.pivot_table(index="seed", columns="arm", values="value", aggfunc="first").dropna()
    if not {"a", "b"} <= set(wide.columns):
        return pd.Series(dtype=float)
    scale = {**stats.METRIC_SCALES, **paired.EXTRA_SCALES}.get(p.metric.iloc[0], "identity")
    a, b = wide["a"].to_numpy(float), wide["b"].to_numpy(float)
    return pd.Series(stats.per_seed_differences(a, b, scale), index=wide.index.astype(int))


def table(decided) -> pd.DataFrame:
    """One row per endpoint with seeds in both blocks: the earlier block's and the later seeds' count
    and mean d_s, the difference and Welch's p; empty without earlier seeds."""
    earlier = set(int(s) for s in (decided.earlier or ()))
    if not earlier:
        return pd.DataFrame()
    rows = []
    for name, e in decided.eps.items():
        d = per_seed(e, decided.frame, decided.claims)
        first, later = d[d.index.isin(earlier)], d[~d.index.isin(earlier)]
        if len(first) < 2 or len(later) < 2:
            continue
        test = sps.ttest_ind(first, later, equal_var=False)
        rows.append(
            {
                "endpoint": name,
                "earlier seeds": f"{seed_ranges(list(first.index))} (n = {len(first)})",
                "mean d_s, earlier": f"{first.mean():+.3g}",
                "later seeds": f"{seed_ranges(list(later.index))} (n = {len(later)})",
                "mean d_s, later": f"{later.mean():+.3g}",
                "difference": f"{first.mean() - later.mean():+.3g}",
                "Welch p": f"{test.pvalue:.2g}",
                "blocks differ": bool(test.pvalue < ALPHA),
            }
        )
    return pd.DataFrame(rows)


def lines(decided) -> list[str]:
    """The report's *Blocks* paragraph and table; [] without earlier seeds or endpoints on claims."""
    t = table(decided)
    if not len(t):
        return []
    differ = list(t.endpoint[t["blocks differ"]])
    verdict = (
        f"They differ (Welch p < {ALPHA:g}) for {', '.join(differ)}: there the all-seeds rows (and every "
        "row of the claims table on the same cells) pool two levels; they are exploratory, and read per "
        "block."
        if differ
        else f"No endpoint's blocks differ at p < {ALPHA:g}; the all-seeds rows stay exploratory all the same."
    )
    return [
        "**Blocks.** The seeds run before the endpoints were declared (they suggested them; they may have run "
        "on another device or commit: see the runs' provenance above) against the seeds run after: each "
        "endpoint's per-seed differences, block by block (Welch's t test, unequal variances). The endpoints "
        "are decided on the confirmatory seeds alone (and each replication on its own), one block each. "
        + verdict,
        "",
        markdown_table(t.drop(columns="blocks differ")),
        "",
    ]
