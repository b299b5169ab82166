"""Tidy tables of paired contrasts: per-seed records in, one row per contrast out, with Holm's
correction within each family and a verdict (docs/statistics.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from ssa_repro.stats.decision import Outcome, decide
from ssa_repro.stats.paired import (
    MARGINS,
    METRIC_SCALES,
    SCALES,
    Contrast,
    _check_choice,
    holm,
    paired_contrast,
)


def per_seed_frame(rows: Iterable[Mapping], *, value: str = "value", seed_col: str = "seed") -> pd.DataFrame:
    """Records (one per seed × arm × cell …, e.g. ``{"task", "scorer", "seed", "metric", "value"}``)
    as a DataFrame; checks that ``seed_col`` and ``value`` are there and ``value`` is numeric."""
    df = pd.DataFrame(list(rows))
    missing = [c for c in (seed_col, value) if c not in df.columns]
    if missing:
        raise ValueError(f"per-seed rows lack the column(s) {missing}; they have {list(df.columns)}")
    try:
        df[value] = pd.to_numeric(df[value])
    except (TypeError, ValueError) as e:
        raise ValueError(f"column {value!r} must be numeric: {e}") from None
    return df


def _resolve(setting, metric, table: Mapping, what: str):
    """A float/str setting as given, a mapping looked up by metric, None: the module's table."""
    if setting is not None and not isinstance(setting, Mapping):
        return setting
    lookup = table if setting is None else setting
    if metric not in lookup:
        raise ValueError(
            f"no {what} for metric {metric!r}: pass {what}= (a value or a mapping by metric); "
            f"known: {', '.join(sorted(lookup))}"
        )
    return lookup[metric]


def contrast_table(
    df: pd.DataFrame,
    by: str | Sequence[str] = (),
    arm_col: str = "scorer",
    base: str = "softmax",
    value: str = "value",
    seed_col: str = "seed",
    *,
    prompt_col: str | None = None,
    metric_col: str = "metric",
    claimed_sign: int | str = -1,
    margin: float | Mapping[str, float] | None = None,
    scale: str | Mapping[str, str] | None = None,
    family: Sequence[str] | None = None,
    alpha: float = 0.05,
    level: float = 0.95,
    n_boot: int = 10_000,
    boot_seed: int = 0,
    inside_margin: bool = False,
    outcome: Outcome | Mapping[str, Outcome] | None = None,
) -> pd.DataFrame:
    """One row per contrast: within each group of ``by`` (e.g. task, metric, σ, length), every arm of
    ``arm_col`` other than ``base`` against ``base``, paired by ``seed_col`` (and by ``prompt_col`` when
    given: per-prompt values, a hierarchical bootstrap). Columns: the ``by`` values, ``arm_col``,
    ``base``, ``metric`` (when ``metric_col`` is a column), ``n_seeds``, ``estimate``, ``low``, ``high``,
    ``p_value`` (sign flip), ``p_holm`` (Holm within each ``family`` group, by default the whole table),
    ``verdict``, ``margin``, ``scale``, ``claimed_sign``, ``effect_size``, ``per_seed`` (the d_s, a tuple)
    ``dropped_seeds`` (seeds without both arms, or with a NaN; left out) and ``seed_ids`` (the seeds paired).

    ``margin`` and ``scale``: a value, a mapping by metric, or None for :data:`MARGINS` /
    :data:`METRIC_SCALES` by the group's ``metric_col`` value. ``claimed_sign``: ±1, or the name of a
    column holding it (constant within a contrast). Each (group, arm, seed[, prompt]) must hold one
    value: a duplicate means a ``by`` column is missing. ``inside_margin``: :func:`verdict`'s option
    (default False, the committed rule): a significant contrast inside ±m is "non-zero, within ±m".
    ``outcome``: the outcome's declared kind (:class:`~ssa_repro.stats.decision.Outcome`), one, or a
    mapping by metric (metrics not named, and None: continuous); every verdict is
    :func:`~ssa_repro.stats.decision.decide`'s, so a bimodal metric gets the robust rule here too.
    """
    by = [by] if isinstance(by, str) else list(by)
    family = list(family) if family is not None else []
    needed = [*by, arm_col, seed_col, value] + ([prompt_col] if prompt_col else []) + family
    if isinstance(claimed_sign, str):
        needed.append(claimed_sign)
    missing = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing:
        raise ValueError(
            f"contrast_table: column(s) {missing} not in the frame (columns: {list(df.columns)})"
        )
    if [c for c in family if c not in by]:
        raise ValueError(f"family={family} must be a subset of by={by}")
    has_metric = metric_col in df.columns
    if has_metric and metric_col not in by and df[metric_col].nunique() > 1:
        raise ValueError(f"the frame holds several {metric_col!r} values; add {metric_col!r} to by={by}")
    keys = [*by, arm_col, seed_col] + ([prompt_col] if prompt_col else [])
    dup = df.duplicated(keys, keep=False)
    if dup.any():
        raise ValueError(
            f"contrast_table: {int(dup.sum())} rows share {keys} (one value each is needed; is a `by` "
            f"column missing?), e.g. {df.loc[dup, keys].head(3).to_dict('records')}"
        )
    rows = []
    groups = df.groupby(by, sort=False, dropna=False) if by else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        arms = list(dict.fromkeys(g[arm_col]))
        if base not in arms:
            raise ValueError(
                f"contrast_table: group {dict(zip(by, key))} has no {arm_col}={base!r} (has {arms})"
            )
        metric = g[metric_col].iloc[0] if has_metric else None
        m = float(_resolve(margin, metric, MARGINS, "margin"))
        if scale is None or isinstance(scale, Mapping):  # by metric; metrics not named: identity
            sc = (METRIC_SCALES if scale is None else scale).get(metric, "identity")
        else:
            sc = scale
        _check_choice("scale", sc, SCALES)
        for arm in arms:
            if arm == base:
                continue
            pair = g[g[arm_col].isin([base, arm])]
            if prompt_col:
                wide = pair.pivot_table(
                    index=seed_col, columns=[arm_col, prompt_col], values=value, aggfunc="first"
                )
                a_w, b_w = wide[base], wide[arm]
                if set(a_w.columns) != set(b_w.columns):
                    raise ValueError(
                        f"contrast_table: group {dict(zip(by, key))}: {base} and {arm} have different prompts"
                    )
                b_w = b_w[a_w.columns]
                ok = a_w.notna().all(axis=1) & b_w.notna().all(axis=1)
                a, b = a_w[ok].to_numpy(), b_w[ok].to_numpy()
                seeds_all, seeds_ok = list(wide.index), list(wide.index[ok])
            else:
                wide = pair.pivot(index=seed_col, columns=arm_col, values=value)
                ok = wide.notna().all(axis=1)
                a, b = wide.loc[ok, base].to_numpy(), wide.loc[ok, arm].to_numpy()
                seeds_all, seeds_ok = list(wide.index), list(wide.index[ok])
            if isinstance(claimed_sign, str):
                signs = pair[claimed_sign].unique()
                if len(signs) != 1:
                    raise ValueError(f"column {claimed_sign!r} varies within {dict(zip(by, key))}: {signs}")
                sign = int(signs[0])
            else:
                sign = int(claimed_sign)
            if len(seeds_ok):
                c = paired_contrast(a, b, scale=sc, level=level, n_boot=n_boot, seed=boot_seed)
            else:
                c = Contrast(math.nan, math.nan, math.nan, math.nan, 0, (), sc, level)
            rows.append(
                {
                    **dict(zip(by, key)),
                    arm_col: arm,
                    "base": base,
                    **({"metric": metric} if has_metric and metric_col not in by else {}),
                    "n_seeds": c.n_seeds,
                    "estimate": c.estimate,
                    "low": c.low,
                    "high": c.high,
                    "p_value": c.p_value,
                    "margin": m,
                    "scale": sc,
                    "claimed_sign": sign,
                    "effect_size": c.effect_size,
                    "per_seed": c.per_seed,
                    "dropped_seeds": tuple(s for s in seeds_all if s not in seeds_ok),
                    "seed_ids": tuple(int(s) for s in seeds_ok),  # the seeds paired, d_s's order
                    "_contrast": c,
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    if family:
        out["p_holm"] = out.groupby(family, sort=False, dropna=False)["p_value"].transform(
            lambda p: holm(p.to_numpy())
        )
    else:
        out["p_holm"] = holm(out["p_value"].to_numpy())
    col = metric_col if metric_col in out.columns else "metric"
    metrics = out[col] if col in out.columns else [None] * len(out)
    out["verdict"] = [
        decide(
            c,
            outcome=_outcome(outcome, metric),
            margin=m,
            claimed_sign=s,
            alpha=alpha,
            p_holm=p,
            inside_margin=inside_margin,
        ).verdict
        for c, m, s, p, metric in zip(
            out["_contrast"], out["margin"], out["claimed_sign"], out["p_holm"], metrics
        )
    ]
    cols = [c for c in out.columns if c not in ("_contrast", "p_holm", "verdict")]
    at = cols.index("p_value") + 1
    return out[cols[:at] + ["p_holm", "verdict"] + cols[at:]]


def _outcome(outcome, metric) -> Outcome:
    """The declared outcome of a contrast on ``metric``: one for all, by metric, or continuous."""
    if outcome is None:
        return Outcome()
    if isinstance(outcome, Outcome):
        return outcome
    return outcome.get(metric, Outcome())
