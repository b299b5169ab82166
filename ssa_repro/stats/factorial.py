"""The 2 × 2 factorial paired by seed (docs/statistics.md): e.g. layer norm (post-LN a0, pre-LN a1) ×
scorer (softmax b0, SSA b1), every cell trained from the same seeds. Per seed s, with y_ij(s) the cell
(A = i, B = j)'s value on the contrast scale,

    main effect of A:  d_A(s)  = (y_11 + y_10)/2 − (y_01 + y_00)/2
    main effect of B:  d_B(s)  = (y_11 + y_01)/2 − (y_10 + y_00)/2
    interaction A × B: d_AB(s) = (y_11 − y_10) − (y_01 − y_00)      (B's effect under a1 minus under a0)

and each is a paired contrast of two per-seed combinations of the cells, so its estimate is the mean
of the d(s), its interval the seed bootstrap and its p-value the exact sign-flip test
(:func:`~ssa_repro.stats.paired.paired_contrast`). On a balanced design these estimates are the OLS
coefficients of y ~ seed + x_A + x_B + x_A·x_B with x coded ±1/2 (tests/test_stats_factorial.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ssa_repro.stats.paired import FLOOR, SCALES, Contrast, _check_choice, holm, paired_contrast

EFFECTS = ("A", "B", "AxB")
CELLS = ((0, 0), (0, 1), (1, 0), (1, 1))


def factorial_2x2(
    cells: Mapping[tuple[int, int], Sequence[float]], *, scale: str = "identity", floor: float = FLOOR, **kw
) -> dict[str, Contrast]:
    """The main effects and the interaction of a 2 × 2 design paired by seed: ``cells[(i, j)]`` holds
    the per-seed values ``[seeds]`` of A = i, B = j (i, j ∈ {0, 1}; row s of every cell from seed s).
    ``scale="log"`` takes log(max(y, floor)) first (a ratio of MSEs). Returns {"A", "B", "AxB"} →
    :class:`Contrast` (keywords of :func:`paired_contrast`: ``n_boot``, ``seed``, ``level``,
    ``alternative``, ``expand``)."""
    _check_choice("scale", scale, SCALES)
    missing = [c for c in CELLS if c not in cells]
    if missing or len(cells) != 4:
        raise ValueError(
            f"cells must have exactly the keys {list(CELLS)}; missing {missing}, got {list(cells)}"
        )
    y = {c: np.asarray(cells[c], dtype=float) for c in CELLS}
    shapes = {c: v.shape for c, v in y.items()}
    if len(set(shapes.values())) != 1 or y[(0, 0)].ndim != 1 or y[(0, 0)].size == 0:
        raise ValueError(f"each cell must be [seeds], the same seeds in all four; got shapes {shapes}")
    if scale == "log":
        y = {c: np.log(np.maximum(v, floor)) for c, v in y.items()}
    # each effect as b − a of two per-seed combinations of cells
    pairs = {
        "A": ((y[0, 1] + y[0, 0]) / 2, (y[1, 1] + y[1, 0]) / 2),
        "B": ((y[1, 0] + y[0, 0]) / 2, (y[1, 1] + y[0, 1]) / 2),
        "AxB": (y[1, 0] + y[0, 1], y[1, 1] + y[0, 0]),
    }
    out = {}
    for name, (a, b) in pairs.items():
        c = paired_contrast(a, b, **kw)
        out[name] = Contrast(c.estimate, c.low, c.high, c.p_value, c.n_seeds, c.per_seed, scale, c.level)
    return out


def factorial_table(
    df: pd.DataFrame,
    factor_a: str,
    levels_a: Sequence,
    factor_b: str,
    levels_b: Sequence,
    *,
    value: str = "value",
    seed_col: str = "seed",
    scale: str = "identity",
    **kw,
) -> pd.DataFrame:
    """:func:`factorial_2x2` from per-seed records (one row per seed × A level × B level): ``levels_a``
    = (a0, a1), ``levels_b`` = (b0, b1), the second level of each the "1". Seeds without all four cells
    are left out (listed in ``dropped_seeds``). One row per effect: ``effect``, ``estimate``, ``low``,
    ``high``, ``p_value`` (sign flip), ``p_holm`` (Holm over the three), ``n_seeds``, ``per_seed``,
    ``dropped_seeds``."""
    missing = [c for c in (factor_a, factor_b, value, seed_col) if c not in df.columns]
    if missing:
        raise ValueError(
            f"factorial_table: column(s) {missing} not in the frame (columns: {list(df.columns)})"
        )
    for col, levels in ((factor_a, levels_a), (factor_b, levels_b)):
        if len(levels) != 2:
            raise ValueError(f"levels of {col!r} must be two (level 0, level 1), got {list(levels)}")
        absent = [lv for lv in levels if lv not in set(df[col])]
        if absent:
            raise ValueError(f"{col!r} has no rows at {absent}; it has {sorted(set(df[col]), key=str)}")
    sub = df[df[factor_a].isin(levels_a) & df[factor_b].isin(levels_b)]
    keys = [seed_col, factor_a, factor_b]
    dup = sub.duplicated(keys, keep=False)
    if dup.any():
        raise ValueError(
            f"factorial_table: {int(dup.sum())} rows share {keys} (one value per seed and cell), e.g. "
            f"{sub.loc[dup, keys].head(3).to_dict('records')}"
        )
    wide = sub.pivot_table(index=seed_col, columns=[factor_a, factor_b], values=value, aggfunc="first")
    cols = [(levels_a[i], levels_b[j]) for i, j in CELLS]
    wide = wide.reindex(columns=pd.MultiIndex.from_tuples(cols))
    ok = wide.notna().all(axis=1)
    dropped = tuple(s for s in wide.index if not ok[s])
    w = wide[ok]
    if len(w) == 0:
        raise ValueError(f"factorial_table: no seed has all four cells {cols}")
    res = factorial_2x2({c: w[col].to_numpy() for c, col in zip(CELLS, cols)}, scale=scale, **kw)
    out = pd.DataFrame(
        [
            {
                "effect": name,
                "estimate": c.estimate,
                "low": c.low,
                "high": c.high,
                "p_value": c.p_value,
                "n_seeds": c.n_seeds,
                "per_seed": c.per_seed,
                "dropped_seeds": dropped,
            }
            for name, c in res.items()
        ]
    )
    out.insert(5, "p_holm", holm(out["p_value"].to_numpy()))
    return out
