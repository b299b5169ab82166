"""Boundary values (Naim & Asher 2024; the paper's figures 1 and 9): the range a linear model cannot leave.

A model trained on f(x) = a·x + b with a, b, x from the training distributions learns to predict well
inside the range of y it saw; asked for f(x_q) far outside it, its prediction stays below an upper and
above a lower boundary ("values that the model fails to exceed during inference"). This evaluation
measures that range and estimates the boundaries.

Protocol
--------
Every prompt has ``n_points`` examples (default: the run's ``curriculum.end``); the prediction read is the
one for the LAST example (the query), at its x token, so the model sees ``n_points - 1`` examples and the
query input x_q. Two prompt sets:

- ``query_sweep``: ``n_functions`` contexts, each a function a ~ task.a_dist, b ~ task.b_dist and
  ``n_points`` inputs x ~ task.x_dist (the training distributions). Every context is evaluated at every
  query input of the grid ``query_x`` (default ``linspace(-x_max, x_max, n_query)``, x_max = 20,
  81 points): the last x is replaced by x_q and its y set to a·x_q + b. The in-context examples are
  untouched (in distribution), so f(x_q) sweeps far outside the training range of y, and the same
  context is seen at every x_q (``n_functions × len(query_x)`` prompts). The query input itself is
  out of distribution too once |x_q| passes the training inputs (±2.6 for N(0, 1)), so failures here
  can start at moderate |y_true| (small a, large x_q); the ``scaled_f`` set separates the two.
- ``scaled_f``: for each σ_F in ``sigmas_f`` (default 1, 5, 10), ``n_scaled`` prompts with
  a, b ~ N(0, σ_F) and every x (context and query) ~ task.x_dist: large outputs in the context too.

Prompts are drawn on the CPU from generators seeded by (``seed``, the set's coordinates), so every
model is scored on exactly the same prompts. For each prompt: the true value y_true = a·x_q + b, the
model's prediction y_hat, and least squares with intercept fit to the ``n_points - 1`` context examples
(baselines.least_squares), which reproduces y_true up to float error (a reference with no boundary).

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

Tables (``<run_dir>/eval/boundary/``)
-------------------------------------
Every table starts with the run labels (task, scorer, model, seed, step) and n_points.

- ``results.csv``: predictor (model | least_squares), variant (query_sweep | scaled_f),
  sigma_f (NaN for query_sweep), the y_true bin (y_bin_low, y_bin_high, y_true = median in the bin;
  ``n_bins`` equal bins over the 0.1–99.9% quantiles of the variant's y_true; bins with fewer than
  ``min_count`` prompts are left out), metric (prediction: median
  y_hat; abs_error: median |y_hat - y_true|), value, n_samples, ci_low/ci_high (95% distribution-free
  interval of the median from order statistics) and q25/q75 (the interquartile range).
- ``by_query_x.csv``: the same statistics of abs_error for the query sweep, per query_x.
- ``boundary.csv``: per predictor and prompt set (all | query_sweep | sigma_f=...): lower, upper,
  saturation_neg, saturation_pos, y_true_low/y_true_high, train_low/train_high (y in training) and
  x_train_low/x_train_high (the same quantiles of x in training), n_samples; the plateau (slope_neg,
  slope_pos, plateau_neg, plateau_pos, each with _low/_high interval columns and the n_beyond_neg /
  n_beyond_pos prompts they use) and the read-out bound (bound_low, bound_high, bound_abs; NaN for a
  model without one). The ``results`` rows of each cell hold the same per prompt set (metrics
  ``slope_*``, ``plateau_*`` with ci_low/ci_high, ``bound_*``).
- ``predictions.csv``: every prompt (variant, sigma_f, function, query_x, a, b, y_true, pred_model,
  pred_least_squares), from which the figures can be re-made.

Figures: ``boundary.png``/``.pdf`` (y_hat against y_true per prompt set: prompts as dots, binned median
and IQR band, identity line, estimated boundaries, training range shaded, saturation points) and
``functions.png``/``.pdf`` (prediction along x_q for a few fixed contexts, against the true line).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ssa_repro.core import distributions as D
from ssa_repro.core import plotting
from ssa_repro.core.atomic import atomic_path
from ssa_repro.evaluation.inference import predict
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.models.positions import position_limit
from ssa_repro.tasks.base import Batch, Prompts
from ssa_repro.tasks.baselines import least_squares
from ssa_repro.tasks.linear import LinearTask

log = logging.getLogger("ssa_repro.evaluate")

PREDICTORS = ("model", "least_squares")
BOUND_KEYS = ("bound_low", "bound_high", "bound_abs")
PLATEAU_KEYS = ("slope_neg", "slope_pos", "plateau_neg", "plateau_pos")


# ---------------------------------------------------------------- prompts


def with_query(prompts: Prompts, query_x) -> tuple[Prompts, torch.Tensor]:
    """Every context at every query input: [F·Q] prompts, function-major, the last x set to x_q (the
    function of each prompt kept). Returns the prompts and the query values [F·Q]."""
    xs = prompts.xs
    q = torch.as_tensor(query_x, dtype=xs.dtype)
    n_f, n = xs.shape
    xs_q = xs[:, None, :].expand(n_f, len(q), n).clone()
    xs_q[:, :, -1] = q
    params = {k: v.repeat_interleave(len(q), 0) for k, v in prompts.params.items()}
    return Prompts(xs_q.reshape(n_f * len(q), n), params), q.repeat(n_f)


@torch.no_grad()
def query_predictions(model, batch: Batch, device, batch_size: int) -> dict[str, np.ndarray]:
    """Model and least-squares predictions for the last example of every prompt (float64 arrays),
    as columns ``pred_model`` and ``pred_least_squares``."""
    outs = []
    for i in range(0, batch.tokens.shape[0], batch_size):
        part = Batch(
            batch.tokens[i : i + batch_size],
            batch.targets[i : i + batch_size],
            batch.pred_idx,
            batch.xs[i : i + batch_size],
        ).to(device)
        outs.append(predict(model, part)[:, -1].cpu())
    ls = least_squares(batch.xs, batch.targets)[:, -1]
    return {"pred_model": torch.cat(outs).double().numpy(), "pred_least_squares": ls.double().numpy()}


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


# ---------------------------------------------------------------- estimators


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


# ---------------------------------------------------------------- evaluation


def query_grid(cfg) -> list[float]:
    if cfg.query_x:
        return [float(v) for v in cfg.query_x]
    return [float(v) for v in np.linspace(-cfg.x_max, cfg.x_max, cfg.n_query)]


def collect_set(model, task, cfg, n_points: int, device, variant: str, sigma_f: float) -> pd.DataFrame:
    """One row per prompt of one prompt set (``query_sweep``, or ``scaled_f`` at σ_F): coordinates, a,
    b, y_true and the predictions of the model and of least squares."""
    if variant == "query_sweep":
        q = query_grid(cfg)
        g = cell_generator(cfg.seed, 0.0, n_points)
        prompts, xq = with_query(task.draw(cfg.n_functions, n_points, g, "cpu"), q)
        function = np.arange(len(xq)) // len(q)
    else:
        g = cell_generator(cfg.seed, float(sigma_f), n_points)
        prompts = task.draw(cfg.n_scaled, n_points, g, "cpu", {"sigma_f": float(sigma_f)})
        xq, function = prompts.xs[:, -1], np.arange(cfg.n_scaled)
    batch = task.build(prompts)
    return pd.DataFrame(
        {
            "variant": variant,
            "sigma_f": math.nan if variant == "query_sweep" else float(sigma_f),
            "function": function,
            "query_x": xq.double().numpy(),
            "a": prompts.params["a"][:, 0].double().numpy(),
            "b": prompts.params["b"][:, 0].double().numpy(),
            "y_true": batch.targets[:, -1].double().numpy(),
            **query_predictions(model, batch, device, cfg.batch_size),
        }
    )


@dataclass
class BoundaryConfig(EvalConfig):
    """Query inputs swept to ±20 and functions scaled by σ_F; boundaries at the 0.5% / 99.5% quantiles."""

    name: str = "boundary"
    n_points: int | None = None  # examples per prompt, the query included; null = the run's curriculum.end
    x_max: float = 20.0  # query inputs linspace(-x_max, x_max, n_query), unless query_x is given
    n_query: int = 81
    query_x: list[float] | None = None  # explicit query inputs (overrides x_max / n_query)
    n_functions: int = 100  # contexts, each evaluated at every query input
    sigmas_f: list[float] = field(default_factory=lambda: [1.0, 5.0, 10.0])  # a, b ~ N(0, σ_F)
    n_scaled: int = 1000  # prompts per σ_F (0: no scaled prompts)
    quantile: float = 0.995  # boundaries: the (1 - q) and q quantiles of the predictions
    rel_tol: float = 0.1  # saturation: median |error| > rel_tol·|y_true| + abs_tol
    abs_tol: float = 0.1
    n_bins: int = 40
    min_count: int = 20  # bins with fewer prompts are ignored
    n_train_samples: int = 200_000  # draws of y under the training distribution for its range
    batch_size: int = 1000
    seed: int = 1234
    plateau_share: float = (
        0.1  # plateau level: mean ŷ over this outermost share of the prompts beyond training
    )


@EVALUATORS.register("boundary", schema=BoundaryConfig)
class Boundary(Evaluator):
    """Cells are the prompt sets: the query sweep, and each σ_F of the scaled functions."""

    name = "boundary"
    axes = ("sigmas_f",)
    fills_length = "n_points"
    coords = ("variant", "sigma_f")

    @classmethod
    def applies_to(cls, task) -> bool:
        """The scalar linear task (a ~ a_dist, b ~ b_dist: a least-squares fit is the reference)."""
        return issubclass(task, LinearTask)

    def check(self) -> list[str]:
        cfg, out = self.cfg, []
        n = cfg.n_points
        if n < 3:
            out.append(f"eval.n_points={n} must be >= 3 (least squares needs 2 examples before the query)")
        limit = position_limit(self.run_cfg.model)  # None: the scheme has no table, any length
        if limit is not None and self.task.n_tokens(n) > limit:
            out.append(
                f"eval.n_points={n} needs {self.task.n_tokens(n)} tokens, more than model.max_positions={limit}"
            )
        if cfg.query_x is None:
            if not cfg.x_max > 0:
                out.append(f"eval.x_max={cfg.x_max} must be > 0")
            if cfg.n_query < 2:
                out.append(f"eval.n_query={cfg.n_query} must be >= 2")
        elif len(cfg.query_x) == 0:
            out.append("eval.query_x=[] must be null or a non-empty list")
        if any(s <= 0 for s in cfg.sigmas_f):
            out.append(f"eval.sigmas_f={list(cfg.sigmas_f)} must hold values > 0")
        if not 0.5 < cfg.quantile < 1:
            out.append(f"eval.quantile={cfg.quantile} must be in (0.5, 1)")
        if not cfg.rel_tol > 0:
            out.append(f"eval.rel_tol={cfg.rel_tol} must be > 0")
        if cfg.abs_tol < 0:
            out.append(f"eval.abs_tol={cfg.abs_tol} must be >= 0")
        for key in ("n_functions", "batch_size", "min_count"):
            if cfg[key] < 1:
                out.append(f"eval.{key}={cfg[key]} must be >= 1")
        if cfg.n_scaled < 0:
            out.append(f"eval.n_scaled={cfg.n_scaled} must be >= 0")
        if cfg.n_bins < 2:
            out.append(f"eval.n_bins={cfg.n_bins} must be >= 2")
        if not 0 < cfg.plateau_share <= 1:
            out.append(f"eval.plateau_share={cfg.plateau_share} must be in (0, 1]")
        if cfg.n_train_samples < 1000:
            out.append(f"eval.n_train_samples={cfg.n_train_samples} must be >= 1000")
        return out

    def cells(self) -> list[dict]:
        sets = [{"variant": "query_sweep", "sigma_f": math.nan}]
        if self.cfg.n_scaled > 0:
            sets += [{"variant": "scaled_f", "sigma_f": float(s)} for s in self.cfg.sigmas_f]
        return sets

    def tables(self) -> tuple[str, ...]:
        return ("results", "predictions")

    def _train(self) -> dict[str, float]:
        return training_range(self.task.cfg, self.cfg.n_train_samples, self.cfg.quantile, self.cfg.seed)

    def compute(self, run, cells, progress):
        cfg, n = self.cfg, self.cfg.n_points
        q = query_grid(cfg)
        log.info(
            "boundary: %d contexts × %d query inputs in [%g, %g] and %d prompts per σ_F in %s, %d examples, on %s",
            cfg.n_functions,
            len(q),
            min(q),
            max(q),
            cfg.n_scaled,
            list(cfg.sigmas_f),
            n,
            run.device,
        )
        labels = {**run.labels, "n_points": n}
        train = self._train()
        bound = readout_bound(run.model)
        log.info("boundary: read-out bound from the checkpoint %s", bound or "none (no last LayerNorm)")
        for cell in cells:
            frame = collect_set(run.model, run.task, cfg, n, run.device, cell["variant"], cell["sigma_f"])
            wide = boundary_rows(
                frame, cfg, train, labels, sets=[(None, cell["sigma_f"], frame)], bound=bound
            )
            keys = ("lower", "upper", "saturation_neg", "saturation_pos", "y_true_low", "y_true_high")
            rows = [
                {
                    **labels,
                    **cell,
                    "predictor": r["predictor"],
                    "metric": k,
                    "value": r[k],
                    "n_samples": r["n_samples"],
                    "ci_low": r.get(f"{k}_low", math.nan),
                    "ci_high": r.get(f"{k}_high", math.nan),
                }
                for r in wide
                for k in (*keys, *PLATEAU_KEYS, *(BOUND_KEYS if bound and r["predictor"] == "model" else ()))
            ]
            predictions = pd.concat([pd.DataFrame([labels] * len(frame)), frame], axis=1)
            yield {"results": pd.DataFrame(rows), "predictions": predictions}
            progress.update(1)

    def _derived(self, frames) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
        """(binned, by query x, boundary, training range) of ``frames``; :meth:`draw` and :meth:`summarize`
        ask for the same frames one after the other (runner.redraw): computed once for that dict."""
        memo = getattr(self, "_derived_memo", None)
        if memo is not None and memo[0] is frames:  # the very dict object (kept, so its id is not reused)
            return memo[1]
        out = self._derive(frames)
        self._derived_memo = (frames, out)
        return out

    def _derive(self, frames) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
        cfg = self.cfg
        pred = frames["predictions"]
        labels = {
            k: pred[k].iloc[0] for k in ("task", "scorer", "model", "seed", "step", "n_points") if k in pred
        }
        train = self._train()
        rows = []
        for (variant, sf), part in pred.groupby(["variant", pred.sigma_f.fillna(-1.0)], sort=False):
            rows += binned_rows(
                part,
                cfg.n_bins,
                cfg.min_count,
                {**labels, "variant": variant, "sigma_f": math.nan if sf == -1.0 else float(sf)},
            )
        by_x = []
        sweep = pred[pred.variant == "query_sweep"]
        for xq, part in sweep.groupby("query_x"):
            for p in PREDICTORS:
                by_x.append(
                    {
                        **labels,
                        "predictor": p,
                        "variant": "query_sweep",
                        "query_x": xq,
                        "metric": "abs_error",
                        **median_stat((part[f"pred_{p}"] - part.y_true).abs()),
                    }
                )
        bound = pd.DataFrame(boundary_rows(pred, cfg, train, labels, bound=stored_bound(frames["results"])))
        return pd.DataFrame(rows), pd.DataFrame(by_x), bound, train

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        binned, by_x, bound, _ = self._derived(frames)
        for name, frame in (("binned", binned), ("by_query_x", by_x), ("boundary", bound)):
            with atomic_path(out_dir / f"{name}.csv") as tmp:
                frame.to_csv(tmp, index=False)
        if not plotting.enabled():  # figures off (plotting.saving): the tables above, no figure built
            return []
        figs = plot_boundary(frames["predictions"], binned, bound, title, out_dir / "boundary")
        figs += plot_functions(frames["predictions"], bound, title, out_dir / "functions")
        return figs

    def summarize(self, frames) -> dict:
        _, _, bound, train = self._derived(frames)
        q = query_grid(self.cfg)

        def pick(p, name="all"):
            r = bound[(bound.predictor == p) & (bound.prompts == name)].iloc[0]
            keys = ("lower", "upper", "saturation_neg", "saturation_pos", "y_true_low", "y_true_high")
            keys += tuple(f"{k}{end}" for k in PLATEAU_KEYS for end in ("", "_low", "_high"))
            return {k: None if math.isnan(r[k]) else float(r[k]) for k in keys}  # JSON: null, not NaN

        summary = {
            "n_points": self.cfg.n_points,
            "query_x": {"min": min(q), "max": max(q), "n": len(q)},
            "n_prompts": len(frames["predictions"]),
            "quantile": self.cfg.quantile,
            "train_range": [train["train_low"], train["train_high"]],
            "boundary": {p: pick(p) for p in PREDICTORS},
            "readout_bound": stored_bound(frames["results"]),  # null: no last LayerNorm (or older cells)
            "plateau_share": self.cfg.plateau_share,
            "tables": ["binned.csv", "by_query_x.csv", "boundary.csv", "predictions.csv"],
        }
        m = summary["boundary"]["model"]
        log.info(
            "boundary: model range [%.3g, %.3g] (saturation %s / %s) vs training y range [%.3g, %.3g]",
            m["lower"],
            m["upper"],
            m["saturation_neg"],
            m["saturation_pos"],
            train["train_low"],
            train["train_high"],
        )
        return summary


# ---------------------------------------------------------------- figures


def stored_bound(results: pd.DataFrame) -> dict[str, float] | None:
    """The read-out bound stored with the cells (None: the model has none, or older cells lack it)."""
    if results is None or results.empty:
        return None
    mine = results[(results.predictor == "model") & results.metric.isin(BOUND_KEYS)]
    if mine.empty:
        return None
    return {k: float(mine.loc[mine.metric == k, "value"].iloc[0]) for k in BOUND_KEYS}


def _decorate(ax, b: pd.Series, show_sat: bool = True) -> None:
    """Training range (shaded), estimated boundaries (red) and saturation points (dotted)."""
    pct = f"{(1 - b['quantile']) * 100:g}–{b['quantile'] * 100:g}%"
    ax.axhspan(
        b.train_low, b.train_high, color="tab:green", alpha=0.15, lw=0, label=f"y range in training ({pct})"
    )
    for v, lab in ((b.upper, f"estimated boundaries ({pct} of ŷ, all prompts)"), (b.lower, None)):
        ax.axhline(v, color="tab:red", lw=1.3, ls="--", label=lab)
    if "bound_high" in b and not math.isnan(b.bound_high):
        lab = "read-out bound (last LayerNorm and read-out)"
        for v in (b.bound_low, b.bound_high):
            ax.axhline(v, color="black", lw=1.0, ls="-.", label=lab)
            lab = None
    if show_sat:
        lab = "saturation points (all prompts)"
        for v in (b.saturation_neg, b.saturation_pos):
            if not math.isnan(v):
                ax.axvline(v, color="0.35", lw=1, ls=":", label=lab)
                lab = None


def plot_boundary(pred: pd.DataFrame, results: pd.DataFrame, bound: pd.DataFrame, title: str, path: Path):
    """y_hat against y_true, one panel per prompt set. Writes PNG and PDF, returns their paths."""
    sets = [("query_sweep", math.nan)] + [
        ("scaled_f", s) for s in sorted(pred.loc[pred.variant == "scaled_f", "sigma_f"].unique())
    ]
    ncol = min(2, len(sets))
    nrow = -(-len(sets) // ncol)
    width = 5.6 * ncol if ncol > 1 else 7.2
    plt = plotting.plt
    fig, axes = plt.subplots(
        nrow, ncol, figsize=(width, 4.6 * nrow + 1.2), squeeze=False, layout="constrained"
    )
    b_all = bound[(bound.predictor == "model") & (bound.prompts == "all")].iloc[0]
    # one y scale for every panel: the predictions (0.1–99.9%), boundaries and training range, padded
    ymin, ymax = np.quantile(pred.pred_model, [0.001, 0.999])
    ymin, ymax = min(ymin, b_all.lower, b_all.train_low), max(ymax, b_all.upper, b_all.train_high)
    pad = 0.35 * max(ymax - ymin, 1e-6)
    for ax, (variant, sf) in zip(axes.flat, sets):
        is_sweep = variant == "query_sweep"
        sel = (pred.variant == variant) & (pred.sigma_f.isna() if is_sweep else pred.sigma_f == sf)
        part = pred[sel]
        res = results[
            (results.variant == variant)
            & (results.sigma_f.isna() if is_sweep else results.sigma_f == sf)
            & (results.predictor == "model")
            & (results.metric == "prediction")
        ].sort_values("y_true")
        ax.scatter(
            part.y_true,
            part.pred_model,
            s=4,
            alpha=0.18,
            color="tab:blue",
            lw=0,
            rasterized=True,
            label="prompts",
        )
        ax.fill_between(
            res.y_true, res.q25, res.q75, color="tab:blue", alpha=0.3, lw=0, label="model: IQR per bin"
        )
        ax.plot(res.y_true, res.value, color="navy", lw=1.8, label="model: median per bin")
        lo, hi = np.quantile(part.y_true, [0.001, 0.999])
        ax.plot(
            [lo, hi], [lo, hi], color="black", lw=1, ls="-", alpha=0.7, label="ŷ = true value (least squares)"
        )
        _decorate(ax, b_all)
        ax.set_xlim(lo, hi)
        ax.set_ylim(ymin - pad, ymax + pad)
        if is_sweep:
            xq = pred.loc[sel, "query_x"]
            ax.set_title(
                f"query input x_q swept over [{xq.min():g}, {xq.max():g}]\n(a, b, context x as in training)",
                fontsize=9,
            )
        else:
            ax.set_title(f"a, b ~ N(0, {sf:g}²), x as in training", fontsize=9)
        ax.set_xlabel("true value f(x_q) = a·x_q + b")
        ax.set_ylabel("model prediction ŷ")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(sets) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for h in handles:
        if hasattr(h, "set_alpha") and h.get_label() == "prompts":
            h.set_alpha(0.6)
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=4 if ncol > 1 else 2,
        fontsize=8,
        frameon=False,
        markerscale=3,
    )
    sat = ", ".join(f"{v:.3g}" for v in (b_all.saturation_neg, b_all.saturation_pos))
    fig.suptitle(
        f"{title}\nboundary values: the model stays in [{b_all.lower:.3g}, {b_all.upper:.3g}] "
        f"({(1 - b_all['quantile']) * 100:g}% / {b_all['quantile'] * 100:g}% quantiles of ŷ over all prompts)\n"
        f"y in training: [{b_all.train_low:.3g}, {b_all.train_high:.3g}]; saturation points: {sat}",
        fontsize=9,
    )
    return plotting.save(fig, path)


def plot_functions(pred: pd.DataFrame, bound: pd.DataFrame, title: str, path: Path, n_show: int = 4):
    """Prediction along the query input for a few fixed contexts, against the true line."""
    sweep = pred[pred.variant == "query_sweep"]
    per_f = sweep.groupby("function")[["a", "b"]].first()
    # contexts with slopes spread over the range: those closest to evenly spaced quantiles of a
    targets = np.quantile(per_f.a, np.linspace(0.1, 0.9, n_show)) if len(per_f) > n_show else per_f.a.values
    chosen = []
    for t in targets:
        rest = per_f.drop(index=chosen)
        if len(rest):
            chosen.append((rest.a - t).abs().idxmin())
    b_all = bound[(bound.predictor == "model") & (bound.prompts == "all")].iloc[0]
    n_ctx = f"{int(pred.n_points.iloc[0]) - 1}" if "n_points" in pred else "n - 1"
    plt = plotting.plt
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, f in enumerate(chosen):
        part = sweep[sweep.function == f].sort_values("query_x")
        c = colors[i % len(colors)]
        a, b = per_f.loc[f, "a"], per_f.loc[f, "b"]
        ax.plot(part.query_x, part.y_true, color=c, lw=1, ls="--", alpha=0.8)
        ax.plot(
            part.query_x,
            part.pred_model,
            color=c,
            lw=1.6,
            marker="o",
            ms=2.5,
            label=f"a = {a:.2f}, b = {b:.2f}",
        )
    _decorate(ax, b_all, show_sat=False)
    ax.axvspan(
        b_all.x_train_low, b_all.x_train_high, color="0.5", alpha=0.12, lw=0, label="x range in training"
    )
    y = sweep[sweep.function.isin(chosen)]
    ymin, ymax = y.pred_model.min(), y.pred_model.max()
    span = max(ymax - ymin, b_all.upper - b_all.lower, 1e-6)
    ax.set_ylim(
        min(ymin, b_all.lower, b_all.train_low) - 0.6 * span,
        max(ymax, b_all.upper, b_all.train_high) + 0.6 * span,
    )
    ax.plot([], [], color="0.3", ls="--", lw=1, label="true f(x_q) (dashed)")
    ax.set_xlabel("query input x_q")
    ax.set_ylabel("prediction ŷ (solid) and true value (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.set_title(
        f"{title}\nsingle functions (same {n_ctx} in-context examples at every x_q): "
        "the prediction never leaves the boundaries",
        fontsize=9,
    )
    fig.tight_layout()
    return plotting.save(fig, path)
