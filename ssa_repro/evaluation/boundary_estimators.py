"""The boundary evaluation's estimators (evaluation/boundary.py): from the query predictions of every
prompt to the range a model cannot leave.

Estimators (all on the query predictions, per predictor; ``all`` pools both prompt sets)
--------------------------------------------------------------------------------------
- Boundaries: lower = the (1 - ``quantile``) and upper = the ``quantile`` (default 0.995) empirical
  quantiles of y_hat over the prompts (numpy's linear interpolation). Reported beside the same
  quantiles of y_true on those prompts (what an unbounded predictor would reach) and of y under the
  training distribution (``train_low``, ``train_high``: y = a·x + b with a, b, x drawn independently
  from the task's distributions, ``n_train_samples`` draws, the marginal law of every training target).
- Saturation points, one per side (s = +1 for y_true > 0, s = -1 for y_true < 0): take the prompts of
  that side, m = |y_true|, e = |y_hat - y_true|. Cut [0, the 99.9% quantile of m] into ``n_bins`` equal
  bins (prompts beyond are left out) and keep the bins with at least ``min_count`` prompts. For each kept
  bin k: m_k = median of m, and excess_k = median of e - (``rel_tol`` · m_k + ``abs_tol``). A bin fails when
  excess_k > 0. The saturation magnitude is where the final run of failing bins starts: with k* the first
  kept bin such that it and every kept bin after it fail, the zero of excess interpolated linearly
  between (m_{k*-1}, excess_{k*-1}) and (m_{k*}, excess_{k*}); 0 when every kept bin fails; NaN (not
  reached in the tested range) when the last kept bin does not fail, or the side has under ``min_count``
  prompts. Reported as s · magnitude (``saturation_neg`` <= 0 <= ``saturation_pos``). Medians make it
  robust to outlying prompts; requiring every later bin to fail ignores isolated failures (e.g. near
  y = 0, where a relative tolerance is tiny). Example: y_hat = clip(y_true, -7, 9) with abs_tol = 0 gives
  |y - 9| > rel_tol·y past y = 9 / (1 - rel_tol), i.e. 10 and -7.78 for rel_tol = 0.1.

- Plateau, one per side (``plateau_share``): among the prompts beyond the training range of y (y_true >
  ``train_high``, or < ``train_low``), ``slope_pos`` / ``slope_neg`` is the least-squares slope of
  y_hat on y_true (1: the model extrapolates; 0: a plateau), and ``plateau_pos`` / ``plateau_neg`` the
  mean y_hat over the outermost ``plateau_share`` of them (the largest |y_true|): the saturation level.
  Both with a 95% interval, cluster-robust over contexts (a context of the query sweep is seen at every
  x_q; statsmodels OLS with ``cov_type="cluster"``); NaN with fewer than ``min_count`` prompts.
- The read-out bound (:func:`readout_bound`, from the checkpoint): the model ends in a LayerNorm and a
  linear read-out, ŷ = w·LN(h) + b_out, LN(h) = γ ⊙ z + β with z = (h − mean h)/√(var h + ε). z has
  zero mean and ‖z‖² = C·var/(var + ε) < C over the C features, so with u = w ⊙ γ and c = w·β + b_out,
  ŷ − c = u·z = (u − ū1)·z and |ŷ − c| < √C‖u − ū1‖ = r (Cauchy–Schwarz; approached by h ∝ u − ū1 as
  |h| grows). So every input gives ŷ in (``bound_low``, ``bound_high``) = (c − r, c + r), a bound of the
  architecture whatever attention does; ``bound_abs`` = √C‖u‖ + |c| >= max(|c ± r|) is the looser
  form. The last LayerNorm is the final one (``ln_f``) for pre-LN, the last block's ``ln_2`` (``ln_1``
  without an MLP) for post-LN; a pre-LN model without its final LayerNorm (``model.final_ln=false``)
  has no such bound (none reported).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ssa_repro.core import distributions as D
from ssa_repro.evaluation.sampling import cell_generator

PREDICTORS = ("model", "least_squares")
BOUND_KEYS = ("bound_low", "bound_high", "bound_abs")
PLATEAU_KEYS = ("slope_neg", "slope_pos", "plateau_neg", "plateau_pos")


def training_range(task_cfg, n: int, quantile: float, seed: int) -> dict[str, float]:
    """(1 - quantile) and quantile of y = a·x + b (train_low, train_high) and of x (x_train_low,
    x_train_high) under the training distributions, from n independent draws of a, b and x."""
    g = cell_generator(seed, -1.0)
    a = D.sample(task_cfg.a_dist, (n,), g, "cpu").double()
    b = D.sample(task_cfg.b_dist, (n,), g, "cpu").double()
    x = D.sample(task_cfg.x_dist, (n,), g, "cpu").double()
    lo, hi = np.quantile((a * x + b).numpy(), [1 - quantile, quantile])
    x_lo, x_hi = np.quantile(x.numpy(), [1 - quantile, quantile])
    return {
        "train_low": float(lo),
        "train_high": float(hi),
        "x_train_low": float(x_lo),
        "x_train_high": float(x_hi),
    }


def boundaries(y_hat, quantile: float = 0.995) -> tuple[float, float]:
    """Lower and upper boundary: the (1 - quantile) and quantile empirical quantiles of the predictions."""
    lo, hi = np.quantile(np.asarray(y_hat, dtype=float), [1 - quantile, quantile])
    return float(lo), float(hi)


def _saturation_magnitude(mag, err, rel_tol, abs_tol, n_bins, min_count) -> float:
    if len(mag) < min_count:
        return math.nan
    top = float(np.quantile(mag, 0.999))
    if top <= 0:
        return math.nan
    keep = mag <= top
    mag, err = mag[keep], err[keep]
    edges = np.linspace(0.0, top, n_bins + 1)
    idx = np.clip(np.searchsorted(edges, mag, side="right") - 1, 0, n_bins - 1)
    lows, m, excess = [], [], []
    for k in range(n_bins):
        sel = idx == k
        if sel.sum() < min_count:
            continue
        mk = float(np.median(mag[sel]))
        lows.append(edges[k])
        m.append(mk)
        excess.append(float(np.median(err[sel])) - (rel_tol * mk + abs_tol))
    if not excess or excess[-1] <= 0:
        return math.nan
    k = len(excess) - 1
    while k > 0 and excess[k - 1] > 0:
        k -= 1
    if k == 0:
        return float(lows[0])
    e0, e1 = excess[k - 1], excess[k]
    return float(m[k - 1] + (m[k] - m[k - 1]) * (-e0) / (e1 - e0))


def saturation_points(
    y_true, y_hat, rel_tol: float = 0.1, abs_tol: float = 0.1, n_bins: int = 40, min_count: int = 20
) -> tuple[float, float]:
    """(negative, positive) saturation points: see the module docstring for the estimator."""
    y_true, y_hat = np.asarray(y_true, dtype=float), np.asarray(y_hat, dtype=float)
    err = np.abs(y_hat - y_true)
    out = []
    for sign in (-1.0, 1.0):
        side = sign * y_true > 0
        s = _saturation_magnitude(np.abs(y_true[side]), err[side], rel_tol, abs_tol, n_bins, min_count)
        out.append(sign * s + 0.0 if not math.isnan(s) else math.nan)  # + 0.0: no -0.0
    return out[0], out[1]


def last_layernorm(model) -> torch.nn.LayerNorm | None:
    """The LayerNorm whose output the read-out reads: ``ln_f`` (pre-LN), the last block's ``ln_2``, or
    ``ln_1`` without an MLP (post-LN); None when there is none (``model.final_ln=false``)."""
    if getattr(model, "final_ln", False):
        return model.ln_f
    if getattr(model, "post_ln", False) and len(model.blocks):
        last = model.blocks[-1]
        return last.ln_2 if last.mlp is not None else last.ln_1
    return None


@torch.no_grad()
def readout_bound(model) -> dict[str, float] | None:
    """The interval every prediction lies in, from the weights (see the module docstring): ``bound_low``,
    ``bound_high`` (c ∓ r, tight) and ``bound_abs`` (√C‖w ⊙ γ‖ + |c|); None without a last LayerNorm."""
    ln = last_layernorm(model)
    read_out = getattr(model, "read_out", None)
    if ln is None or read_out is None:
        return None
    w = read_out.weight[0].double()  # [C]
    u = w * ln.weight.double()  # [C]
    c = float(w @ ln.bias.double() + read_out.bias.double()[0])
    root_c = math.sqrt(u.numel())
    r = root_c * float((u - u.mean()).norm())
    return {"bound_low": c - r, "bound_high": c + r, "bound_abs": root_c * float(u.norm()) + abs(c)}


def _cluster_fit(x: np.ndarray | None, y: np.ndarray, groups: np.ndarray) -> tuple[float, float, float]:
    """OLS of y on [1, x] (or on 1 alone) with a cluster-robust 95% interval: (estimate, low, high) of
    the slope (or of the mean)."""
    # imported here: statsmodels' regression costs ~1 s of imports, which every training process (its
    # end-of-run evaluation imports this module) would pay for an evaluation it rarely runs
    from statsmodels.regression.linear_model import OLS
    from statsmodels.tools.tools import add_constant

    design = np.ones((len(y), 1)) if x is None else add_constant(x, has_constant="add")
    n_groups = len(np.unique(groups))
    cov = {"cov_type": "cluster", "cov_kwds": {"groups": groups}} if n_groups > 1 else {}
    fit = OLS(y, design).fit(**cov)
    k = design.shape[1] - 1
    lo, hi = fit.conf_int(0.05)[k]
    return float(fit.params[k]), float(lo), float(hi)


def plateau(y_true, y_hat, groups, cut: float, side: float, share: float, min_count: int) -> dict:
    """One side's plateau estimate (see the module docstring): slope beyond ``cut`` (the training
    range's edge on that side, ``side`` = ±1) and the mean prediction over the outermost ``share`` of
    those prompts, each (value, low, high), and the number of prompts beyond ``cut``."""
    y_true, y_hat = np.asarray(y_true, dtype=float), np.asarray(y_hat, dtype=float)
    groups = np.asarray(groups)
    beyond = side * y_true > side * cut
    nan3 = (math.nan, math.nan, math.nan)
    out = {"n_beyond": int(beyond.sum()), "slope": nan3, "plateau": nan3}
    if beyond.sum() < max(min_count, 3):
        return out
    yt, yh, gr = y_true[beyond], y_hat[beyond], groups[beyond]
    out["slope"] = _cluster_fit(yt, yh, gr)
    outer = side * yt >= np.quantile(side * yt, 1 - share)
    if outer.sum() >= max(min_count, 2):
        out["plateau"] = _cluster_fit(None, yh[outer], gr[outer])
    return out


def plateau_columns(frame: pd.DataFrame, p: str, train: dict, cfg) -> dict[str, float]:
    """Both sides' plateau estimates of predictor ``p`` on ``frame`` as flat columns."""
    flat = frame.reset_index(drop=True)  # clusters: a context (a prompt of the scaled sets) per prompt set
    groups = flat.groupby([flat.variant, flat.sigma_f.fillna(-1.0), flat.function], sort=False).ngroup()
    frame = flat
    out = {}
    for name, side, cut in (("neg", -1.0, train["train_low"]), ("pos", 1.0, train["train_high"])):
        est = plateau(frame.y_true, frame[f"pred_{p}"], groups, cut, side, cfg.plateau_share, cfg.min_count)
        out[f"n_beyond_{name}"] = est["n_beyond"]
        for key in ("slope", "plateau"):
            v, lo, hi = est[key]
            out.update({f"{key}_{name}": v, f"{key}_{name}_low": lo, f"{key}_{name}_high": hi})
    return out


def median_stat(v) -> dict:
    """Median with a 95% distribution-free interval (order statistics) and the quartiles."""
    v = np.sort(np.asarray(v, dtype=float))
    n = len(v)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    q25, med, q75 = np.quantile(v, [0.25, 0.5, 0.75])
    return {
        "value": float(med),
        "n_samples": n,
        "ci_low": float(v[lo]),
        "ci_high": float(v[hi]),
        "q25": float(q25),
        "q75": float(q75),
    }


def binned_rows(frame: pd.DataFrame, n_bins: int, min_count: int, base: dict) -> list[dict]:
    """Median prediction and abs_error per y_true bin (equal bins over its 0.1–99.9% quantiles)."""
    lo, hi = np.quantile(frame.y_true, [0.001, 0.999])
    edges = np.linspace(lo, hi, n_bins + 1)
    rows = []
    for k in range(n_bins):
        last = k == n_bins - 1
        sel = (frame.y_true >= edges[k]) & (
            (frame.y_true <= edges[k + 1]) if last else (frame.y_true < edges[k + 1])
        )
        part = frame[sel]
        if len(part) < min_count:
            continue
        cell = {**base, "y_bin_low": edges[k], "y_bin_high": edges[k + 1], "y_true": part.y_true.median()}
        for p in PREDICTORS:
            rows.append({**cell, "predictor": p, "metric": "prediction", **median_stat(part[f"pred_{p}"])})
            rows.append(
                {
                    **cell,
                    "predictor": p,
                    "metric": "abs_error",
                    **median_stat((part[f"pred_{p}"] - part.y_true).abs()),
                }
            )
    return rows


def boundary_rows(
    frame: pd.DataFrame, cfg, train: dict[str, float], base: dict, sets=None, bound: dict | None = None
) -> list[dict]:
    """One row per predictor and prompt set with the boundaries, saturation points and plateau (sets:
    every prompt set in ``frame`` and ``all`` of them pooled, unless given as (name, σ_F, frame)
    triples), and the read-out ``bound`` (NaN where None)."""
    bound = bound or dict.fromkeys(BOUND_KEYS, math.nan)
    if sets is None:
        sets = [("all", math.nan, frame), ("query_sweep", math.nan, frame[frame.variant == "query_sweep"])]
        for sf in sorted(frame.loc[frame.variant == "scaled_f", "sigma_f"].unique()):
            part = frame[(frame.variant == "scaled_f") & (frame.sigma_f == float(sf))]
            sets.append((f"sigma_f={sf:g}", float(sf), part))
    rows = []
    for name, sf, part in sets:
        if part.empty:
            continue
        yt_lo, yt_hi = boundaries(part.y_true, cfg.quantile)
        for p in PREDICTORS:
            lo, hi = boundaries(part[f"pred_{p}"], cfg.quantile)
            s_neg, s_pos = saturation_points(
                part.y_true, part[f"pred_{p}"], cfg.rel_tol, cfg.abs_tol, cfg.n_bins, cfg.min_count
            )
            rows.append(
                {
                    **base,
                    "predictor": p,
                    "prompts": name,
                    "sigma_f": sf,
                    "quantile": cfg.quantile,
                    "lower": lo,
                    "upper": hi,
                    "saturation_neg": s_neg,
                    "saturation_pos": s_pos,
                    "y_true_low": yt_lo,
                    "y_true_high": yt_hi,
                    **train,
                    "n_samples": len(part),
                    **plateau_columns(part, p, train, cfg),
                    **(bound if p == "model" else dict.fromkeys(BOUND_KEYS, math.nan)),
                }
            )
    return rows


def stored_bound(results: pd.DataFrame) -> dict[str, float] | None:
    """The read-out bound stored with the cells (None: the model has none, or older cells lack it)."""
    if results is None or results.empty:
        return None
    mine = results[(results.predictor == "model") & results.metric.isin(BOUND_KEYS)]
    if mine.empty:
        return None
    return {k: float(mine.loc[mine.metric == k, "value"].iloc[0]) for k in BOUND_KEYS}
