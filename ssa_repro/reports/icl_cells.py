"""The in-context-learning report's per-seed values (conf/study/icl_cpu.yaml and its children), read from
a study's index and its runs' stored cells.

Per-seed values (``reports/paired.py``; one row per job × predictor × metric × cell summary):

- ``grid``: quantifier grid: the mean over each shift ``region`` (``region=in_distribution`` …, from the
  rows' ``region``, which the grid evaluator derives from the run's training length and σ), over the
  training lengths at every σ (``train_lengths sigma=σ``: the σ shift apart from length shift), and
  every cell (``sigma=σ length=L``; the model only); sequence and token error; the label-rule baselines
  beside the model. Linear grid: every cell ``sigma_f=σ_F sigma_x=σ`` for the model, zero and least
  squares (``sigma_x=1`` per σ_F is the paper's table 1).
- ``deviant``: every cell ``sign=± M=M k=k`` of every metric (model, and the labels' own
  ``follows_largest``), and per attention layer the heads' mean and the most attending head.
- ``boundary``: the boundary table's estimates per prompt set (``prompts=…``) for the model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssa_repro.reports import paired
from ssa_repro.reports.icl_frame import ERRORS, GRID_KINDS, KNOWN_GROUPS, REGIONS, _g


def _model_or_one_baseline(c: pd.DataFrame) -> np.ndarray:
    """The model's rows, and the baselines' of one job only (core softmax, its first seed; in a study
    without core, softmax of the first other group's first architecture and seed): a baseline
    sees the same prompts in every run (they depend on the evaluation's seed and the training length,
    not the run), so one copy is all there is (and the per-seed files stay small)."""
    model = (c.predictor == "model").to_numpy()
    groups = ["core"] if (c.group == "core").any() else sorted(set(c.group) - set(KNOWN_GROUPS))
    ref = c[c.group.isin(groups[:1]) & (c.scorer == "softmax")]
    if ref.empty:
        return model
    arch, seed = sorted(ref.arch)[0], ref.seed.min()
    first = c.group.isin(groups[:1]) & (c.scorer == "softmax") & (c.arch == arch) & (c.seed == seed)
    return model | first.to_numpy()


def grid_parts(index: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows of the grids (see the module)."""
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("grid_quantifier")):
        c = paired.read_cells(index, key)
        if c.empty or "region" not in c:
            continue
        c = c[c.metric.isin(ERRORS) & _model_or_one_baseline(c)]
        for r in REGIONS:  # the model and the baselines, both errors
            out.append(paired.reduce(c, c.region == r, f"region={r}"))
        c = c[(c.predictor == "model")]  # below: the model only (keeps the files small)
        at_train = c.length <= c.train_length
        for s in sorted(c.sigma_x.unique()):
            out.append(paired.reduce(c, at_train & np.isclose(c.sigma_x, s), f"train_lengths sigma={_g(s)}"))
        m = c[c.metric == "sequence_error"]
        out.append(
            m.assign(summary=[f"sigma={_g(s)} length={int(n)}" for s, n in zip(m.sigma_x, m.length)])[
                paired.PER_SEED_COLUMNS
            ]
        )
        if "train_length" in m:  # the length curve at σ = 1 (the paper's premise: longer prompts, same σ)
            out.append(length_rows(m[np.isclose(m.sigma_x, 1.0)]))
    for key in sorted(k for k in set(index.evaluation) if k.startswith("grid_linear")):
        c = paired.read_cells(index, key)
        if c.empty:
            continue
        c = c[(c.metric == "mse") & _model_or_one_baseline(c)]
        several = c.length.nunique() > 1  # a length grid (length_cpu): σ_F × σ_x at the training length only
        at = c[c.length == c.train_length] if several else c
        out.append(
            at.assign(summary=[f"sigma_f={_g(f)} sigma_x={_g(x)}" for f, x in zip(at.sigma_f, at.sigma_x)])[
                paired.PER_SEED_COLUMNS
            ]
        )
        if several:
            out.append(length_rows(c[np.isclose(c.sigma_f, 1.0)]))
    # a length task's own grid (grid_mqar, grid_counting, …): token and sequence error per length
    for key in sorted(
        k for k in set(index.evaluation) if k.startswith("grid_") and not k.startswith(GRID_KINDS)
    ):
        c = paired.read_cells(index, key)
        if not c.empty:
            out.append(length_rows(c[c.metric.isin(ERRORS) & _model_or_one_baseline(c)]))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


def length_rows(c: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows of a length curve: summary ``sigma_x=<σ> length=<n> ratio=<n / training length>``, one
    per cell (the ratio from the run's own training length, ``train_length``: never assumed)."""
    c = c[c.sigma_x.notna()] if "sigma_x" in c else c.assign(sigma_x=1.0)
    ratio = c.length.astype(float) / c.train_length.astype(float)
    summary = [
        f"sigma_x={_g(s)} length={int(n)} ratio={r:.3g}" for s, n, r in zip(c.sigma_x, c.length, ratio)
    ]
    return c.assign(summary=summary)[paired.PER_SEED_COLUMNS]


DEVIANT_METRICS = (
    "sequence_error",
    "error_at_inserted",
    "error_after_inserted",
    "error_elsewhere",
    "follows_largest",
    "attention_on_inserted",
    "attention_on_inserted_max_head",
    "uniform_share",
    "mse",
    "mse_inserted",
    "mse_untouched",
    "mse_after_inserted",
)


def deviant_parts(index: pd.DataFrame) -> pd.DataFrame:
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("deviant")):
        c = paired.read_cells(index, key)
        if not c.empty:
            c = c[c.predictor.isin(["model", "labels"]) & c.metric.isin(DEVIANT_METRICS)]
            c = c[(c.k == 1) | c.metric.isin(["sequence_error", "mse"])]  # k > 1: the M × k figure's metric
            out.append(
                c.assign(summary=[f"sign={s} M={_g(m)} k={int(k)}" for s, m, k in zip(c.sign, c.M, c.k)])[
                    paired.PER_SEED_COLUMNS
                ]
            )
        a = paired.read_cells(index, key, "attention")
        if not a.empty and "layer" in a:
            # every layer, the heads' mean and the most attending head, k = 1 (the files stay small)
            a = a[a["head"].astype(str).isin(["mean", "max"]) & (a.k == 1)].assign(predictor="model")
            out.append(
                a.assign(
                    summary=[
                        f"layer={int(layer)} head={h} sign={s} M={_g(m)} k={int(k)}"
                        for layer, h, s, m, k in zip(a.layer, a["head"], a.sign, a.M, a.k)
                    ]
                )[paired.PER_SEED_COLUMNS]
            )
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


BOUNDARY_METRICS = (
    "lower",
    "upper",
    "y_true_low",
    "y_true_high",
    "train_low",
    "train_high",
    "saturation_neg",
    "saturation_pos",
    "slope_neg",
    "slope_pos",
    "plateau_neg",
    "plateau_pos",
    "bound_low",
    "bound_high",
    "bound_abs",
)
"""The boundary table's estimates exported per seed (evaluation/boundary.py: quantiles of ŷ, y_true and
training y; saturation points; the plateau's slope and level beyond the training range; the read-out
bound from the checkpoint's last LayerNorm, NaN without one)."""


def boundary_parts(index: pd.DataFrame) -> pd.DataFrame:
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("boundary")):
        c = paired.read_cells(index, key, "boundary")
        if c.empty:
            continue
        c = c[c.predictor.isin(["model", "least_squares"])]  # least squares: no boundary, slope 1
        metrics = [m for m in BOUNDARY_METRICS if m in c.columns]
        long = c.melt(
            id_vars=[*paired.JOB_COLUMNS, "evaluation", "predictor", "prompts"],
            value_vars=metrics,
            var_name="metric",
            value_name="value",
        )
        # the query sweep in full; the σ_F sets' boundaries; least squares only where the boundary claim
        # compares with it (the files stay small)
        sweep = long.prompts == "query_sweep"
        keep = (long.predictor == "model") & (sweep | long.metric.isin(["lower", "upper", "y_true_high"]))
        keep |= sweep & long.metric.isin(["upper", "slope_pos"])
        long = long[keep & (long.prompts != "all")]
        out.append(long.assign(summary="prompts=" + long.prompts.astype(str))[paired.PER_SEED_COLUMNS])
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


def scale_parts(index: pd.DataFrame) -> pd.DataFrame:
    """eval=scale (evaluation/scale.py): the rms reaching each site, summary ``site=<s> layer=<l>
    sigma_x=<σ>``, metric ``rms``."""
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("scale")):
        c = paired.read_cells(index, key)
        if not c.empty:
            summary = [
                f"site={s} layer={int(n)} sigma_x={_g(x)}" for s, n, x in zip(c.site, c.layer, c.sigma_x)
            ]
            out.append(c.assign(summary=summary)[paired.PER_SEED_COLUMNS])
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


def recall_parts(index: pd.DataFrame) -> pd.DataFrame:
    """eval=recall (evaluation/recall.py): attention on the queried pair and entropy per layer, summary
    ``pairs=<n> layer=<l>`` for the model and ``pairs=<n> uniform`` for uniform attention's reference."""
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("recall")):
        c = paired.read_cells(index, key)
        if c.empty:
            continue
        c = c[(c.predictor == "model") | _model_or_one_baseline(c)]
        where = ["uniform" if pd.isna(n) else f"layer={int(n)}" for n in c.layer]
        summary = [f"pairs={int(n)} {w}" for n, w in zip(c.length, where)]
        out.append(c.assign(summary=summary)[paired.PER_SEED_COLUMNS])
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


def per_seed(index: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {
        "grid": grid_parts(index),
        "deviant": deviant_parts(index),
        "boundary": boundary_parts(index),
        "scale": scale_parts(index),  # written only where a study runs eval=scale (an empty part is not)
        "recall": recall_parts(index),  # likewise eval=recall (MQAR)
    }
