"""A study's 2 × 2 designs in its report: declared in its YAML (``factorials:``), decided by
:func:`stats.factorial_2x2` paired by seed (docs/statistics.md).

Each entry of ``factorials:`` names two factors of two levels each, as column filters of the per-seed
frame (``a``: [level 0, level 1], ``b``: the same), the filters the four cells share (``both``), the
``metric``, the ``sign`` the study expects of each factor's effect on it (−1: level 1 lowers it) and the
``cells`` it is read at (``{name: filters}``). Per cell and seed s, with y_ij(s) the value at A = i,
B = j (on the metric's contrast scale: log for MSE),

    A (main effect)  = mean over B of y_1j − y_0j,
    B (main effect)  = mean over A of y_i1 − y_i0,
    A × B            = (y_11 − y_10) − (y_01 − y_00)   (B's effect under A = 1 minus under A = 0),

each a paired contrast over the seeds with all four cells: estimate, bootstrap interval, exact sign-flip
p, Holm-adjusted within the design's family (its effects at every cell; an effect declared primary
leaves it for the ``primary`` family, ``reports/primary.py``), and the decision rule's verdict with the
metric's margin (an interaction is claimed in neither direction: its verdict says only whether it is
non-zero). Text and filters are templates of the report's values (``{sigma_max}``, as in the claims).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.reports import claims as claims_engine
from ssa_repro.reports import paired

KEYS = ("text", "metric", "sign", "both", "a", "b", "cells")
EFFECT_NAMES = {"A": "main effect of A", "B": "main effect of B", "AxB": "interaction A × B"}
N_BOOT = 4000


def problems(entries, file: str, names) -> list[str]:
    """Every problem of a study's ``factorials:`` section, one line each naming the file, the design,
    the key, the value and what is allowed."""
    if entries is None:
        return []
    if not isinstance(entries, Mapping):
        return [
            f"{file}: factorials={entries!r} is not a mapping; allowed: {{design name: {{{', '.join(KEYS)}}}}}"
        ]
    out = []
    for name, e in entries.items():
        at = f"{file}: factorials.{name}"
        if not isinstance(e, Mapping):
            out.append(f"{at}={e!r} is not a mapping; allowed keys: {', '.join(KEYS)}")
            continue
        out += [
            f"{at}.{k}={e[k]!r} is not a key of a design; allowed: {', '.join(KEYS)}"
            for k in e
            if k not in KEYS
        ]
        out += [f"{at}.{k} is missing; a design needs {', '.join(KEYS)}" for k in KEYS if k not in e]
        for k in ("a", "b"):
            v = e.get(k)
            if v is not None and not (
                isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, Mapping) for x in v)
            ):
                out.append(f"{at}.{k}={v!r} is not allowed; allowed: two column filters [level 0, level 1]")
        if e.get("sign") not in (None, 1, -1):
            out.append(f"{at}.sign={e['sign']!r} is not allowed; allowed: 1 or -1")
        if e.get("cells") is not None and not isinstance(e["cells"], Mapping):
            out.append(f"{at}.cells={e['cells']!r} is not a mapping; allowed: {{cell name: filters}}")
    return out


def table(
    frame: pd.DataFrame,
    entries: Mapping | None,
    ctx: claims_engine.Context,
    primary=(),
    outcomes: Mapping[str, stats.Outcome] | None = None,
) -> pd.DataFrame:
    """One row per design × cell × effect (``design``, ``text``, ``cell``, ``effect``, ``metric``,
    ``n_seeds``, ``estimate``, ``low``, ``high``, ``p_value``, ``p_holm``, ``family``, ``family_k``,
    ``verdict``, ``margin``, ``scale``, ``per_seed``, ``claimed_sign``, ``means`` (the four cells' seed
    means over the paired seeds: {(i, j): mean})); ``primary``: the (design, cell, effect) declared
    primary, whose family is ``primary`` (their Holm p is :mod:`~ssa_repro.reports.primary`'s);
    ``outcomes``: the study's outcome kinds by metric (a bimodal metric: the robust rule)."""
    rows = []
    for name, e in (entries or {}).items():
        e = claims_engine.fill(e, ctx)
        metric = e["metric"]
        sc = {**stats.METRIC_SCALES, **paired.EXTRA_SCALES}.get(metric, "identity")
        margin = {**stats.MARGINS, **paired.EXTRA_MARGINS}[metric]
        for cell, where in e["cells"].items():
            wide = {}
            for i, la in enumerate(e["a"]):
                for j, lb in enumerate(e["b"]):
                    sel = paired.select(frame, metric=metric, **{**e["both"], **where, **la, **lb})
                    wide[(i, j)] = sel.groupby("seed").value.mean()
            w = pd.DataFrame(wide).dropna()
            if len(w) < 2:
                continue
            res = stats.factorial_2x2(
                {k: w[k].to_numpy(float) for k in wide}, scale=sc, n_boot=N_BOOT, seed=0
            )
            on = np.log(w.clip(lower=stats.FLOOR)) if sc == "log" else w
            means = {k: float(np.exp(v) if sc == "log" else v) for k, v in on.mean().items()}
            for eff, c in res.items():
                rows.append(
                    {
                        "design": name,
                        "text": e["text"],
                        "cell": cell,
                        "effect": eff,
                        "metric": metric,
                        "n_seeds": c.n_seeds,
                        "estimate": c.estimate,
                        "low": c.low,
                        "high": c.high,
                        "p_value": c.p_value,
                        "margin": margin,
                        "scale": sc,
                        "per_seed": c.per_seed,
                        "seed_ids": tuple(int(s) for s in w.index),  # the seeds paired
                        "claimed_sign": int(e["sign"]),
                        "means": means,
                        "family": "primary" if (name, cell, eff) in set(primary) else f"factorial {name}",
                        "_contrast": c,
                    }
                )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"] = out.groupby("family", sort=False).p_value.transform(lambda p: stats.holm(p.to_numpy()))
    out["family_k"] = out.groupby("family", sort=False).p_value.transform("size")
    out["verdict"] = [rule(r, (outcomes or {}).get(r["metric"])) for _, r in out.iterrows()]
    return out


def rule(r, outcome: stats.Outcome | None = None) -> str:
    """The decision rule on a factorial row (its ``p_holm``; :func:`stats.decide` with the metric's
    declared ``outcome``): an interaction is claimed in neither direction, so a called one is
    "non-zero" (or "non-zero, within ±m"), never "yes"/"contradicted"."""
    v = stats.decide(
        r["_contrast"],
        outcome=outcome or stats.Outcome(),
        margin=r["margin"],
        claimed_sign=r["claimed_sign"],
        p_holm=r["p_holm"],
    ).verdict
    if r["effect"] == "AxB" and v in (stats.YES, stats.CONTRADICTED):
        return "non-zero"
    return v


def markdown(t: pd.DataFrame) -> pd.DataFrame:
    """The report's rows: per design × cell × effect, the four cells' means, the estimate with its
    interval, its one Holm p with the family named, seeds (and ties), verdict."""
    rows = []
    for _, r in t.iterrows():
        m = r["means"]
        d = np.asarray(r["per_seed"], dtype=float)
        rows.append(
            {
                "design": r["design"],
                "cell": r["cell"],
                "effect": EFFECT_NAMES[r["effect"]],
                "means a0b0 / a0b1 / a1b0 / a1b1": " / ".join(
                    f"{m[k]:.3g}" for k in ((0, 0), (0, 1), (1, 0), (1, 1))
                ),
                "estimate [95%]": f"{paired.fmt(r['estimate'], r['scale'])} [{paired.fmt(r['low'], r['scale'])}, "
                f"{paired.fmt(r['high'], r['scale'])}]",
                "p (raw)": f"{r['p_value']:.2g}",
                "p_Holm (family, k)": f"{r['p_holm']:.2g} ({r['family']}, {int(r['family_k'])})",
                "seeds (ties)": f"{int(r['n_seeds'])} ({int(np.sum(d == 0))})",
                "verdict": r["verdict"],
            }
        )
    return pd.DataFrame(rows)
