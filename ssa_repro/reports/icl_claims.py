"""The in-context-learning study's claims (conf/study/icl_cpu.yaml and its children, length_cpu): what the
claims in ``conf/study/claims/icl.yaml`` can name, computed from the per-seed frame.

The claims themselves are data (``reports/claims.py``: the grammar; docs/studies.md: adding one); this
module gives them their :class:`~ssa_repro.reports.claims.Context`, the grid's and deviant protocol's
points, the arms and groups present, and the rule that leaves a contrast unjudged. The rest of the ICL
report: the per-seed values (``icl_cells``), its vocabulary (``icl_frame``), tables (``icl_tables``),
figures (``icl_figures``), length curves (``length``), and the report itself (``kinds/icl``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ssa_repro.reports import claims as claims_engine
from ssa_repro.reports import paired
from ssa_repro.reports.icl_frame import (
    ADVERSE,
    ARCH_TEXT,
    BASE,
    KNOWN_GROUPS,
    QUANT,
    _g,
    _prefix,
    axes,
    bases,
    tag,
)
from ssa_repro.reports.length import LENGTH_METRIC, length_curves, length_learned
from ssa_repro.reports.paired import Claim

# the architectures of icl_cpu's `architecture` group, in the order of their claims
ARCHITECTURES = ("postln", "preln_embln", "postln_noemb", "attn_only", "preln_nofinal")
CLAIM_NAMES = (
    "sigma_max",
    "sigma_min",
    "length_max",
    "M_max",
    "sigma_f",
    "sigma_f_ood",
    "sigma_f_max",
    "quant",
    "bases",
    "boundary_metric",
    "boundary_archs",
    "wide_inputs",
    "wide_M",
    "architectures",
    "other_groups",
    "group_archs",
    "ladder_cells",
)
"""What the ICL claims can name (:func:`context`); ``studies/schema.py`` refuses any other."""
JUDGES = ("learned",)


def context(frame: pd.DataFrame) -> claims_engine.Context:
    """The values the ICL claims read from the per-seed ``frame`` (:data:`CLAIM_NAMES`; None or empty
    where the frame lacks them, so a claim's ``when`` skips it) and the judge ``learned``: a contrast of
    a length task where neither scorer's model beats the label-rule baselines at the length compared
    (:func:`length.length_learned` at that cell) is not judged."""
    ax = axes(frame)
    s_max, s_min, m_max = ax["sigma_max"], ax["sigma_min"], ax["M_max"]
    bnd = (
        paired.select(frame, part="boundary", summary="prompts=query_sweep") if "part" in frame else frame[:0]
    )
    ms = [x for x in ax["M"] if x > 1] or ax["M"]
    learned = length_learned(frame, ratio=None)  # at every test length: a contrast is judged where it is
    learned = {
        tuple(k): v
        for k, v in zip(learned[["group", "task", "arch", "scorer", "summary"]].values, learned.learned)
    }

    def ladder(b: Mapping) -> list[dict]:
        g = frame[frame.group == b["group"]]
        cells = ladder_cells(ax, set(g.task.unique()), g)
        return [dict(zip(("label", "task", "metric", "summary"), c)) for c in cells]

    def judged(a: Mapping, b: Mapping) -> bool:
        # at the length the contrast compares (its cell's summary): two models at the baseline there
        # compare two guesses, whatever they did at the training length
        return any(
            learned.get((a["group"], a["task"], a["arch"], s, a.get("summary")), True)
            for s in (a["scorer"], b["scorer"])
        )

    # each column's values once (.unique(): iterating pandas' Arrow-backed strings row by row was a
    # third of an ICL report's time)
    tasks, groups, bnd_archs = (set(c.unique()) for c in (frame.task, frame.group, bnd.arch))
    archs_of = (
        {g: sorted(a.unique()) for g, a in frame.groupby("group", sort=False).arch} if len(frame) else {}
    )
    values = {
        "sigma_max": None if s_max is None else _g(s_max),
        "sigma_min": None if s_min is None else _g(s_min),
        "length_max": ax["length_max"],
        "M_max": None if m_max is None else _g(m_max),
        "sigma_f": [_g(f) for f in ax["sigma_f"]],
        "sigma_f_ood": [_g(f) for f in ax["sigma_f"] if f > 1],
        "sigma_f_max": _g(ax["sigma_f"][-1]) if ax["sigma_f"] else None,
        "quant": [{"task": t, "adverse": ADVERSE[t.split("_")[0]]} for t in QUANT if t in tasks],
        "bases": [
            {
                "group": g,
                "arch": a,
                "at": f" @ {tag((g, a))}" if tag((g, a)) else "",
                "prefix": _prefix((g, a)),
            }
            for g, a in bases(frame)
        ],
        "boundary_metric": _boundary_metric(bnd),
        "boundary_archs": [
            {"name": a, "text": ARCH_TEXT.get(a, a)}
            for a in [*[a for a in ARCH_TEXT if a in bnd_archs], *sorted(bnd_archs - set(ARCH_TEXT))]
        ],
        "wide_inputs": "wide_inputs" in groups or None,
        "wide_M": [_g(m) for m in ms[-2:]],
        "architectures": [
            {"name": a, "text": ARCH_TEXT[a]} for a in ARCHITECTURES if a in archs_of.get("architecture", ())
        ],
        "other_groups": sorted(groups - set(KNOWN_GROUPS)),
        "group_archs": lambda b: archs_of.get(b["group"], []),
        "ladder_cells": ladder,
    }
    return claims_engine.Context(values, {"learned": judged})


def _boundary_metric(bnd: pd.DataFrame) -> str | None:
    """The boundary claim's metric: the plateau's slope beyond the training range of y (1: extrapolates,
    0: a plateau) where the evaluation stores it, else the 99.5% quantile of ŷ; None without rows."""
    if not len(bnd):
        return None
    return "slope_pos" if bnd[bnd.metric == "slope_pos"].value.notna().any() else "upper"


def claims(frame: pd.DataFrame, entries: Mapping | None) -> list[Claim]:
    """The study's claims (``entries``: its ``claims:`` section) as paired contrasts on ``frame``."""
    return claims_engine.build(entries, context(frame)) if len(frame) else []


def ladder_cells(ax: dict, tasks: set, frame: pd.DataFrame | None = None) -> list[tuple[str, str, str, str]]:
    """The cells a ladder compares across rungs, (label, task, metric, summary): per quantifier task σ
    shift at training lengths, length shift at the training σ and the adverse deviant insertion (largest
    M, k = 1); on linear the largest σ_F at x ~ N(0, 1); and, where ``frame`` has length curves
    (:func:`length.length_rows`), the longest length at σ_x = 1 of linear (MSE) and of the length tasks
    (token error)."""
    s_max, s_min, L, m_max = ax["sigma_max"], ax["sigma_min"], ax["length_max"], ax["M_max"]
    cells = []
    for t in [t for t in QUANT if t in tasks]:
        if s_max is not None:
            shift = f"train_lengths sigma={_g(s_max)}"
            cells.append((f"σ = {_g(s_max)} (training lengths)", t, "sequence_error", shift))
            cells.append(
                (f"length {L} (σ = {_g(s_min)})", t, "sequence_error", f"sigma={_g(s_min)} length={L}")
            )
        if m_max is not None:
            sign = ADVERSE[t.split("_")[0]]
            cells.append(
                (f"deviant {sign} M = {_g(m_max)}", t, "sequence_error", f"sign={sign} M={_g(m_max)} k=1")
            )
    if ax["sigma_f"] and "linear" in tasks and ax["sigma_f"][-1] > 1:
        sf = _g(ax["sigma_f"][-1])
        cells.append((f"σ_F = {sf}", "linear", "mse", f"sigma_f={sf} sigma_x=1"))
    curves = length_curves(frame) if frame is not None else pd.DataFrame()
    for t in sorted(tasks - set(QUANT)):
        c = curves[(curves.task == t) & np.isclose(curves.sigma_x, 1.0)] if len(curves) else curves
        if len(c):
            top = c[c.ratio == c.ratio.max()].iloc[0]
            cells.append(
                (f"length {top.length} (×{top.ratio:g})", t, LENGTH_METRIC.get(t, "token_error"), top.summary)
            )
    return cells


__all__ = ["BASE", "CLAIM_NAMES", "JUDGES", "axes", "bases", "claims", "context", "ladder_cells"]
__all__ += ["length_curves", "length_learned"]
