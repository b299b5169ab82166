"""Differences between settings, cell by cell: the difference map's maths.

Each non-baseline group's grid against the baseline's (``softmax`` by default when present): for
positive metrics (MSE, whose errors span decades) ``log10(value / value_baseline)`` (−1: ten times
smaller error than the baseline; both clipped at 1e-12 first); for rates the plain difference
``value − value_baseline``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssa_repro.reports.runs import ReportError

FLOOR = 1e-12  # log10 ratios clip both sides here first


def resolve_baseline(comp, baseline: str | None = None) -> str | None:
    """The baseline's label: ``baseline`` as a label, ``key=value`` part or scorer; by default the first
    group whose scorer is softmax, else None (no difference map)."""
    labels = comp.labels
    if baseline is None:
        return next((g.label for g in comp.groups if g.scorers == ["softmax"]), None)
    if baseline in labels:
        return baseline
    hits = [g.label for g in comp.groups if baseline in g.label.split(", ") or g.scorers == [baseline]]
    hits += [lab for lab in labels if lab.split(" · ")[0] == baseline and lab not in hits]
    if len(hits) >= 1:
        return hits[0]
    raise ReportError(f"--baseline {baseline!r} matches no run or group; labels: {', '.join(labels)}")


def difference_mode(comp, mode: str = "auto") -> str:
    if mode == "auto":
        return "log10_ratio" if comp.log else "diff"
    if mode not in ("diff", "log10_ratio"):
        raise ReportError(f"difference mode {mode!r}: use auto, diff or log10_ratio")
    return mode


def difference(comp, baseline: str | None = None, mode: str = "auto") -> dict[str, pd.DataFrame]:
    """Per non-baseline group, its grid against the baseline's: ``mean − mean_baseline`` (``diff``) or
    ``log10(mean / mean_baseline)`` (``log10_ratio``, the default for MSE; both clipped at 1e-12)."""
    base = resolve_baseline(comp, baseline)
    if base is None:
        return {}
    mode = difference_mode(comp, mode)
    ref = comp.grid(base)
    out = {}
    for label in comp.labels:
        if label == base:
            continue
        g = comp.grid(label)
        if mode == "diff":
            out[label] = g - ref
        else:
            out[label] = np.log10(g.clip(lower=FLOOR) / ref.clip(lower=FLOOR))
    return out
