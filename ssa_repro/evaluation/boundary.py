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

Estimators: evaluation/boundary_estimators.py (its docstring gives the maths: boundaries,
saturation points, plateau, read-out bound). Figures: evaluation/boundary_figures.py.

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

from ssa_repro.core import plotting
from ssa_repro.core.atomic import atomic_path
from ssa_repro.evaluation.boundary_estimators import (
    BOUND_KEYS,
    PLATEAU_KEYS,
    PREDICTORS,
    binned_rows,
    boundary_rows,
    median_stat,
    readout_bound,
    stored_bound,
    training_range,
)
from ssa_repro.evaluation.boundary_figures import plot_boundary, plot_functions
from ssa_repro.evaluation.inference import predict
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.models.positions import position_limit
from ssa_repro.tasks.base import Batch, Prompts
from ssa_repro.tasks.baselines import least_squares
from ssa_repro.tasks.linear import LinearTask

log = logging.getLogger("ssa_repro.evaluate")


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


# ---------------------------------------------------------------- evaluation


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
