"""The mechanism probe's declared hypothesis against its data (issue 58; conf/study/mechanism_cpu.yaml).

The hypothesis, declared before the runs: a pre-LN block normalises what attention reads, not the
stream it writes to, so a stream that grows with σ drowns what attention adds; the arms that keep the
stream's scale keep attention's share, and generalise. Per arm it predicts

    generalises  ⇔  not (the stream grows with σ  and  attention's share of it falls)

read from the claims table's rows ``scale_residual: <arm>`` and ``attn_share: <arm>`` (each called
"yes" or not by the decision rule) and ``architecture: <arm>`` (the arm lowers the σ = 16 error against
pre-LN: it generalises; pre-LN itself fails, the ``sigma`` claim). An arm whose outcome the prediction
gets wrong contradicts the hypothesis; :func:`lines` says so, arm by arm, and whether any does.
"""

from __future__ import annotations

import pandas as pd

from ssa_repro import stats
from ssa_repro.reports import paired
from ssa_repro.reports.tables import markdown_table

REFERENCE = "preln"  # the arm the architecture claims compare against (it fails at σ = 16)


def _row(table: pd.DataFrame, claim: str):
    hit = table[table.claim == claim]
    return hit.iloc[0] if len(hit) else None


def table(claims_table: pd.DataFrame) -> pd.DataFrame:
    """One row per arm with both probes measured: the stream's and attention share's σ = 16 / σ = 1
    ratios with their verdicts, whether it generalises, what the hypothesis predicts, and whether the
    two agree; empty where the claims table holds no such probes."""
    if not len(claims_table):
        return pd.DataFrame()
    arms = [c.split(": ", 1)[1] for c in claims_table.claim if c.startswith("scale_residual: ")]
    rows = []
    for arm in dict.fromkeys(arms):
        stream, share = _row(claims_table, f"scale_residual: {arm}"), _row(claims_table, f"attn_share: {arm}")
        if stream is None or share is None:
            continue
        if arm == REFERENCE:
            arch = _row(claims_table, "sigma")  # pre-LN's own error under σ shift: rises → fails
            generalises = None if arch is None else arch.verdict != stats.YES
        else:
            arch = _row(claims_table, f"architecture: {arm}")
            generalises = None if arch is None else arch.verdict == stats.YES
        if generalises is None:
            continue
        grows, falls = stream.verdict == stats.YES, share.verdict == stats.YES
        predicted = not (grows and falls)
        rows.append(
            {
                "arm": arm,
                "stream σ = 16 / σ = 1": f"{paired.fmt(stream.estimate, 'log')} ({stream.verdict})",
                "attention's share σ = 16 / σ = 1": f"{paired.fmt(share.estimate, 'log')} ({share.verdict})",
                "predicted": "generalises" if predicted else "fails",
                "observed (error at σ = 16)": "generalises" if generalises else "fails",
                "agrees": predicted == generalises,
            }
        )
    return pd.DataFrame(rows)


def lines(claims_table: pd.DataFrame) -> list[str]:
    """The report's *The declared hypothesis* section; [] without the probes."""
    t = table(claims_table)
    if not len(t):
        return []
    wrong = t[~t.agrees]
    verdict = (
        "**The data contradict the hypothesis**: "
        + "; ".join(
            f"{r['arm']} (predicted: {r['predicted']}; observed: {r['observed (error at σ = 16)']})"
            for _, r in wrong.iterrows()
        )
        + ". The scale of these sites does not separate the arms that fail from those that generalise."
        if len(wrong)
        else "The data agree with the hypothesis on every arm."
    )
    return [
        "## The declared hypothesis",
        "",
        "Declared before the runs (conf/study/mechanism_cpu.yaml): a pre-LN block normalises what attention "
        "reads, not the stream it writes to, so a stream that grows with σ drowns what attention adds; the "
        "arms that keep the stream's scale keep attention's share and generalise. Per arm it predicts: "
        "generalises unless the stream grows with σ *and* attention's share of it falls (each as the "
        "claims table calls it, σ = 16 against σ = 1). " + verdict,
        "",
        markdown_table(t.assign(agrees=t.agrees.map({True: "yes", False: "**no**"}))),
        "",
    ]
