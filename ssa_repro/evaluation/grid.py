"""The shift grid of an in-context-learning task: error on σ × length (quantifiers, the paper's figure 4)
or σ_F × σ_I (linear functions, figure 3), with the task's baselines on the same prompts.

The task declares the grid (``tasks.base.Grid``): its shift axes (``sigma_x``: x ~ N(0, σ);
``sigma_f``: the function's parameters ~ N(0, σ_F)), the heat map's layout, its metrics and the values
of the paper's protocol and of the end-of-run preset (``preset: paper | quick``). A cell is
(σ_F,) σ, length. Each cell holds ``n_samples`` × ``batch_size`` prompts drawn by the task's own sampler
(``task.draw`` with the cell's shift) from a generator seeded by (seed, the cell's σ's, length), so a
cell has the same prompts in every grid, run and device. Per prompt, the task's metrics from prediction
``skip_first`` on (``task.prompt_metrics``); per cell, their mean with an interval that respects the
metric's range (``intervals.summarize``).

``reuse_draws``: the same draws from the training distribution for every σ of a length, scaled (x by
σ, the function by σ_F): labels stay the same across σ and only magnitudes change (the public code's
quantifier protocol, hence the paper figure's). ``nested``: a causal model's predictions on the first L
examples of a prompt are exactly its predictions for that L-example prompt, and the first L numbers of
an i.i.d. prompt are an i.i.d. L-number prompt; so one pass over prompts of the protocol's longest
length (``nested_length``, part of the protocol) scores every length, about sum(lengths)/max(lengths)
times less work (10× on the paper's grid). The cells of one σ then share prompts: a row's errors are
correlated (and sequence errors cannot fall with length). Balanced tasks are drawn per cell (balancing
depends on the length), so ``nested`` is exact only for unbalanced ones and is ignored for the others.

Tables: ``results`` (cell × predictor × metric) and ``by_position`` (the per-position metric at the
longest length of each call, per σ: the accuracy curves). Every ``results`` row also carries the run's
training length (``train_length``: the curriculum's length at the last training step,
:func:`training_length`) and the cell's ``region`` (:func:`region`): ``in_distribution`` (the training
σ's, length <= train_length), ``sigma_shift`` (another σ at training lengths), ``length_shift`` (the
training σ's, longer prompts) or ``both_shift``, so σ shift and length shift are read apart.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from ssa_repro.core import plotting
from ssa_repro.evaluation import checks
from ssa_repro.evaluation.inference import predict, predict_batches
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.models.positions import position_limit, without_table
from ssa_repro.stats.intervals import summarize
from ssa_repro.tasks.base import Grid, Prompts
from ssa_repro.tasks.baselines import BASELINES
from ssa_repro.tasks.baselines import problems as baseline_problems
from ssa_repro.tasks.curriculum import n_points

REGIONS = ("in_distribution", "sigma_shift", "length_shift", "both_shift")

log = logging.getLogger("ssa_repro.evaluate")

PRESETS = ("paper", "quick")
AXIS_LABELS = {
    "sigma_x": "σ of test inputs, x ~ N(0, σ)",
    "sigma_f": "σ_F of the function, a, b ~ N(0, σ_F)",
    "length": "prompt length (examples)",
}


@dataclass
class GridConfig(EvalConfig):
    """Null values come from the task's declared grid (``preset``: its paper protocol or the
    end-of-run one); ``lengths`` left null there means the run's ``curriculum.end``."""

    name: str = "grid"
    preset: str = "paper"  # paper | quick: where null values below come from
    sigmas: list[float] | None = None  # σ of the test inputs, x ~ N(0, σ)
    sigmas_f: list[float] | None = None  # σ_F of the function (linear); null: the same as sigmas
    lengths: list[int] | None = None  # examples per prompt
    n_samples: int | None = None  # batches per cell
    batch_size: int | None = None  # prompts per batch
    # metrics count predictions from this index on; null: the task's grid's (Grid.skip_first: 3 for the
    # in-context tasks, whose first predictions see too few examples to determine the answer; 0 for the
    # token tasks, whose every scored token is determined by its prompt)
    skip_first: int | None = None
    seed: int = 1234
    reuse_draws: bool = False  # true: the same draws scaled by every σ (the public code's quantifier grid)
    nested: bool | None = None  # score every length on prefixes of the longest prompts; null: the preset's
    baselines: list[str] | None = None  # null: the task's baselines


def training_length(run_cfg) -> int:
    """The longest prompt (examples) a run trained on: the curriculum's length at its last step
    (``curriculum.end`` once reached; ``end`` throughout without a curriculum)."""
    return n_points(run_cfg.curriculum, max(int(run_cfg.train.steps) - 1, 0))


def region(cell: dict, train_length: int, train_sigmas: dict[str, float]) -> str:
    """Which shift a grid cell applies: ``in_distribution``, ``sigma_shift`` (σ's other than the training
    ones, at lengths <= ``train_length``), ``length_shift`` (the training σ's, longer prompts) or
    ``both_shift``. ``train_sigmas``: the task's (``task.train_sigmas()``), per axis in ``cell``."""
    at_sigma = all(
        abs(float(cell[a]) - float(v)) <= 1e-9 * max(1.0, abs(v))
        for a, v in train_sigmas.items()
        if a in cell
    )
    at_length = int(cell["length"]) <= int(train_length)
    return REGIONS[(not at_sigma) + 2 * (not at_length)]


def scale(prompts: Prompts, shift: dict) -> Prompts:
    """The same prompts with x multiplied by σ and the function's parameters by σ_F (reuse_draws)."""
    factor = shift.get("sigma_f", 1.0)
    return Prompts(prompts.xs * shift.get("sigma_x", 1.0), {k: v * factor for k, v in prompts.params.items()})


@EVALUATORS.register("grid", schema=GridConfig)
class GridEvaluation(Evaluator):
    name = "grid"
    axes = ("sigmas", "sigmas_f", "lengths")
    fills_length = "lengths"

    @classmethod
    def applies_to(cls, task) -> bool:
        """Tasks that declare a grid (``Evaluation.grid``: the in-context tasks)."""
        return task.evaluation is not None and task.evaluation.grid is not None

    def __init__(self, cfg, run_cfg, task):
        super().__init__(cfg, run_cfg, task)
        self.spec = task.evaluation.grid if task.evaluation is not None else None
        self.coords = (*self.spec.axes, "length") if self.spec else ("length",)

    # ------------------------------------------------------------------ config
    def resolve(self) -> None:
        c, spec = self.cfg, self.spec
        if spec is None or c.preset not in PRESETS:
            return
        preset = getattr(spec, c.preset)
        for key in ("sigmas", "lengths", "n_samples", "batch_size"):
            if c[key] is None:
                c[key] = preset.get(key)
        if c.skip_first is None:
            c.skip_first = spec.skip_first
        super().resolve()  # lengths: [curriculum.end] where the preset has none
        if "sigma_f" in spec.axes and c.sigmas_f is None:
            c.sigmas_f = list(c.sigmas)
        if c.nested is None:
            c.nested = bool(preset.get("nested", False))
        if c.baselines is None:
            c.baselines = list(spec.baselines)

    def protocol(self) -> dict:
        out = super().protocol()
        out["nested_length"] = max(self.cfg.lengths) if self.nested else None
        return out

    @property
    def nested(self) -> bool:
        return bool(self.cfg.nested) and not getattr(self.task, "balanced", False)

    def check(self) -> list[str]:
        c, out = self.cfg, []
        if c.preset not in PRESETS:
            out.append(f"eval.preset={c.preset!r} is not allowed; allowed: {', '.join(PRESETS)}")
            return out
        out += checks.positive_values("sigmas", c.sigmas, _list(c.sigmas))
        if "sigma_f" in self.spec.axes:
            out += checks.positive_values("sigmas_f", c.sigmas_f, _list(c.sigmas_f))
        elif c.sigmas_f is not None:
            out.append(
                f"eval.sigmas_f applies to tasks that draw a function per prompt; task {self.task.cfg.name} "
                f"has the axes {', '.join(self.spec.axes)} (use eval.sigmas)"
            )
        if not c.lengths or min(c.lengths) < 1:
            out.append(f"eval.lengths={_list(c.lengths)} must be a non-empty list of values >= 1")
        else:
            # only a scheme with a table (model.pos=learned) limits the prompt; the others take any length
            limit = position_limit(self.run_cfg.model)
            too_long = [n for n in c.lengths if limit is not None and self.task.n_tokens(n) > limit]
            if too_long:
                out.append(
                    f"eval.lengths {too_long} need up to {self.task.n_tokens(max(too_long))} tokens, more than "
                    f"model.max_positions={limit} (the table of model.pos=learned); raise "
                    f"model.max_positions or use a scheme without a table (model.pos={'|'.join(without_table())})"
                )
            if c.sigmas and min(c.sigmas) > 0:  # what the task's sampler would refuse while drawing
                out += self.task.grid_problems(c.sigmas, c.lengths)
        for key in ("n_samples", "batch_size"):
            if c[key] < 1:
                out.append(f"eval.{key}={c[key]} must be >= 1")
        if c.skip_first is None:  # no declared grid to take it from (resolve): the in-context default
            c.skip_first = Grid.skip_first
        if c.skip_first < 0:
            out.append(f"eval.skip_first={c.skip_first} must be >= 0")
        elif c.skip_first and self.task.tokens:
            # a token task's scored predictions are few and each is determined by its prompt (counting
            # scores one per prompt: skipping 3 left none, and every error read 0)
            out.append(
                f"eval.skip_first={c.skip_first}: task {self.task.cfg.name} scores every determined token "
                "of a prompt (a token task); use eval.skip_first=0"
            )
        elif c.lengths and self.task.n_predictions(max(c.lengths)) > 1:
            # (one prediction per prompt whatever its length, supervise=last: that one counts)
            scored = self.task.n_predictions(min(c.lengths))
            if c.skip_first >= scored:
                out.append(
                    f"eval.skip_first={c.skip_first} must be < the shortest of eval.lengths={_list(c.lengths)} "
                    f"(its prompts have {scored} predictions: none of them would be scored)"
                )
        out += baseline_problems(c.baselines, bool(self.task.classification), tokens=self.task.tokens)
        if c.nested and not self.run_cfg.model.causal:
            out.append("eval.nested=true needs a causal model (model.causal=true): use eval.nested=false")
        return out

    # ------------------------------------------------------------------ cells
    def _sigma_points(self) -> list[dict]:
        """Every combination of the shift axes' values: [{"sigma_f": .., "sigma_x": ..}, ...]."""
        values = {"sigma_x": list(self.cfg.sigmas), "sigma_f": list(self.cfg.sigmas_f or [])}
        axes = self.spec.axes
        return [dict(zip(axes, map(float, v))) for v in itertools.product(*(values[a] for a in axes))]

    def cells(self) -> list[dict]:
        return [{**s, "length": int(n)} for n in self.cfg.lengths for s in self._sigma_points()]

    def _generator(self, shift: dict, length: int) -> torch.Generator:
        keys = [0.0 if self.cfg.reuse_draws else shift[a] for a in self.spec.axes]
        return cell_generator(self.cfg.seed, *keys, length)

    def _prompts(self, shift: dict, length: int) -> list:
        """The cell's batches on the CPU (drawn there: the same on every device)."""
        g = self._generator(shift, length)
        out = []
        for _ in range(self.cfg.n_samples):
            if self.cfg.reuse_draws:
                prompts = scale(self.task.draw(self.cfg.batch_size, length, g, "cpu"), shift)
            else:
                prompts = self.task.draw(self.cfg.batch_size, length, g, "cpu", shift)
            out.append(self.task.build(prompts))
        return out

    # ------------------------------------------------------------------ compute
    def _rows(self, cell: dict, per_prompt: dict[str, dict[str, list]], base: dict) -> list[dict]:
        kinds = {m.name: m.kind for m in self.spec.metrics}
        train = training_length(self.run_cfg)
        base = {**base, "train_length": train, "region": region(cell, train, self.task.train_sigmas())}
        rows = []
        for predictor, metrics in per_prompt.items():
            for metric, values in metrics.items():
                v = torch.cat(values).double().cpu().numpy()
                rows.append(
                    {**base, **cell, "predictor": predictor, "metric": metric, **summarize(v, kinds[metric])}
                )
        return rows

    def _position_rows(self, shift: dict, length: int, errs: dict[str, list], base: dict) -> list[dict]:
        metric = self.spec.by_position
        kind = next(m.kind for m in self.spec.metrics if m.name == metric) if metric else "real"
        rows = []
        for predictor, values in errs.items():
            err = torch.cat(values).double().cpu().numpy()  # [N, P]
            for p in range(err.shape[1]):
                rows.append(
                    {
                        **base,
                        **shift,
                        "length": length,
                        "position": p + 1,
                        "predictor": predictor,
                        "metric": metric,
                        **summarize(err[:, p], kind),
                    }
                )
        return rows

    def _score(self, batch, pred) -> dict[str, dict[str, torch.Tensor]]:
        """{predictor: {metric: [B]}} for the model and each baseline on one batch."""
        out = {"model": self.task.prompt_metrics(pred, batch, self.cfg.skip_first)}
        for name in self.cfg.baselines:
            guess = BASELINES[name](batch.xs, batch.ys).to(pred.device)[
                :, batch.pred_idx // self.task.stride()
            ]
            out[name] = self.task.prompt_metrics(guess, batch, self.cfg.skip_first)
        return out

    def _position_errors(self, batch, pred) -> dict[str, torch.Tensor]:
        out = {"model": self.task.error(pred, batch.targets)}
        for name in self.cfg.baselines:
            guess = BASELINES[name](batch.xs, batch.ys).to(pred.device)[
                :, batch.pred_idx // self.task.stride()
            ]
            out[name] = self.task.error(guess, batch.targets)
        return out

    def compute(self, run, cells, progress):
        base = run.labels
        by_sigma: dict[tuple, list[int]] = {}
        for cell in cells:
            shift = {a: cell[a] for a in self.spec.axes}
            by_sigma.setdefault(tuple(shift.items()), []).append(int(cell["length"]))
        if self.nested:
            for key, lengths in by_sigma.items():
                yield self._nested(run, dict(key), sorted(lengths), base)
                progress.update(len(lengths))
            return
        lengths = sorted({n for ls in by_sigma.values() for n in ls})
        for n in lengths:
            shifts = [dict(k) for k, ls in by_sigma.items() if n in ls]
            batches = {i: self._prompts(s, n) for i, s in enumerate(shifts)}
            flat = [b.to(run.device) for bs in batches.values() for b in bs]
            preds = iter(predict_batches(run.model, flat))
            flat = iter(flat)
            rows, pos_rows = [], []
            for i, shift in enumerate(shifts):
                per: dict[str, dict[str, list]] = {}
                errs: dict[str, list] = {}
                for _ in batches[i]:
                    batch, pred = next(flat), next(preds)
                    for predictor, metrics in self._score(batch, pred).items():
                        for metric, v in metrics.items():
                            per.setdefault(predictor, {}).setdefault(metric, []).append(v)
                    if n == max(by_sigma[tuple(shift.items())]) and self.spec.by_position:
                        for predictor, e in self._position_errors(batch, pred).items():
                            errs.setdefault(predictor, []).append(e)
                rows += self._rows({**shift, "length": n}, per, base)
                if errs:
                    pos_rows += self._position_rows(shift, n, errs, base)
            yield {"results": pd.DataFrame(rows), "by_position": pd.DataFrame(pos_rows)}
            progress.update(len(shifts))

    def _nested(self, run, shift: dict, lengths: list[int], base: dict) -> dict[str, pd.DataFrame]:
        """Every length of one σ from prefixes of prompts of ``nested_length`` examples."""
        longest = max(self.cfg.lengths)
        stride = self.task.stride()
        per = {n: {} for n in lengths}
        errs: dict[str, list] = {}
        for batch in self._prompts(shift, longest):
            full = type(batch)(
                batch.tokens, batch.ys, self.task.example_tokens(longest), batch.xs, batch.ys, batch.params
            )
            pred_all = predict(run.model, full.to(run.device))  # [B, longest]: at every x token
            for n in lengths:
                prefix = self.task.build(Prompts(batch.xs[:, :n], batch.params)).to(run.device)
                pred = pred_all[:, prefix.pred_idx // stride]
                for predictor, metrics in self._score(prefix, pred).items():
                    for metric, v in metrics.items():
                        per[n].setdefault(predictor, {}).setdefault(metric, []).append(v)
                if n == max(lengths) and self.spec.by_position:
                    for predictor, e in self._position_errors(prefix, pred).items():
                        errs.setdefault(predictor, []).append(e)
        rows = [r for n in lengths for r in self._rows({**shift, "length": n}, per[n], base)]
        pos_rows = self._position_rows(shift, max(lengths), errs, base) if errs else []
        return {"results": pd.DataFrame(rows), "by_position": pd.DataFrame(pos_rows)}

    def tables(self) -> tuple[str, ...]:
        return ("results", "by_position")

    def covers(self, table: str, cells: list[dict]) -> list[dict]:
        """``by_position``: the longest cell of each shift (σ, ...), where the spec has a per-position
        metric (what :meth:`compute` writes rows of); ``results``: every cell."""
        if table != "by_position":
            return list(cells)
        if not self.spec.by_position:
            return []
        longest: dict[tuple, dict] = {}
        for cell in cells:
            key = tuple(cell[a] for a in self.spec.axes)
            if key not in longest or int(cell["length"]) > int(longest[key]["length"]):
                longest[key] = cell
        return list(longest.values())

    def heatmap(self) -> dict | None:
        return {"rows": self.spec.rows, "cols": self.spec.cols, "metric": self.spec.headline}

    # ------------------------------------------------------------------ figures and summary
    def _model(self, frames, metric=None) -> pd.DataFrame:
        r = frames["results"]
        return r[(r.predictor == "model") & (r.metric == (metric or self.spec.headline))]

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        spec, c = self.spec, self.cfg
        metric = next(m for m in spec.metrics if m.name == spec.headline)
        mine = self._model(frames)
        others = [a for a in self.coords if a not in (spec.rows, spec.cols) and mine[a].nunique() > 1]
        prompts = f"{int(c.n_samples) * int(c.batch_size)} prompts per cell"
        draws = "same draws scaled per σ" if c.reuse_draws else "fresh draws per σ"
        nested = ", nested lengths" if self.nested else ""
        figs = plotting.heatmap(
            mine,
            spec.rows,
            spec.cols,
            f"{title}\n{spec.headline.replace('_', ' ')}, {prompts}, {draws}{nested}",
            out_dir / f"{spec.headline}_grid",
            log=metric.log_scale,
            xlabel=AXIS_LABELS.get(spec.cols, spec.cols),
            ylabel=AXIS_LABELS.get(spec.rows, spec.rows),
            facet=others[0] if others else None,
        )
        pos = frames.get("by_position", pd.DataFrame())
        if len(pos):
            sig = self.task.train_sigmas()
            in_dist = pos
            for a in spec.axes:
                vals = sorted(pos[a].unique())
                target = sig.get(a, vals[0])
                in_dist = in_dist[in_dist[a] == min(vals, key=lambda v: abs(v - target))]
            longest = in_dist.length.max()
            shown = in_dist[in_dist.length == longest]
            if metric.log_scale:
                figs.extend(
                    plotting.curves(
                        shown,
                        "position",
                        "predictor",
                        f"{title}\n{spec.by_position} by position, in distribution, {int(longest)} examples",
                        out_dir / f"{spec.by_position}_by_position",
                        logy=True,
                        xlabel="prediction index (examples seen + 1)",
                    )
                )
            else:
                sigmas = sorted(pos.sigma_x.unique())
                picked = sorted({sigmas[round(i * (len(sigmas) - 1) / 5)] for i in range(6)})
                acc = pos[(pos.predictor == "model") & pos.sigma_x.isin(picked)]
                acc = acc[acc.length == acc.length.max()].assign(
                    value=lambda f: 1 - f["value"], metric="accuracy"
                )
                figs.extend(
                    plotting.curves(
                        acc,
                        "position",
                        "sigma_x",
                        f"{title}\naccuracy by position, prompts of {int(acc.length.max())} examples",
                        out_dir / "accuracy_by_position",
                        xlabel="prediction index",
                    )
                )
        return figs

    def summarize(self, frames) -> dict:
        """Headline numbers from every stored cell: the grid's mean and worst cell, and in distribution
        (the cells at the training σ's, averaged over lengths), for the model and each baseline."""
        spec = self.spec
        res = frames["results"]
        res = res[res.metric == spec.headline]
        sig = self.task.train_sigmas()
        out = {"metric": spec.headline, "cells": int((res.predictor == "model").sum())}
        mine = res[res.predictor == "model"]
        if mine.empty:
            return out
        worst = mine.loc[mine["value"].idxmax()]
        out["mean"] = float(mine["value"].mean())
        out["worst"] = float(worst["value"])
        out["worst_cell"] = {a: float(worst[a]) for a in self.coords}
        near = res
        for a in spec.axes:
            vals = sorted(mine[a].unique())
            target = sig.get(a, vals[0])
            near = near[near[a] == min(vals, key=lambda v: abs(v - target))]
        out["in_distribution"] = {p: float(g["value"].mean()) for p, g in near.groupby("predictor")}
        out["in_distribution_cells"] = {a: float(near[a].iloc[0]) for a in spec.axes} if len(near) else {}
        # the shifts apart (cells of older parts lack the columns: derived here from the run's config)
        train = training_length(self.run_cfg)
        regions = res.apply(lambda r: region(r, train, sig), axis=1)
        out["train_length"] = train
        out["by_region"] = {  # {predictor: {region: mean over its cells, metric × cells}}
            p: {reg: float(g["value"].mean()) for reg, g in part.groupby(regions[part.index])}
            for p, part in res.groupby("predictor")
        }
        return out


def _list(v) -> str:
    return "null" if v is None else str(list(v))


__all__ = ["GridConfig", "GridEvaluation"]
