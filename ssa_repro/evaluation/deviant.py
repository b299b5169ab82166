"""Deviant prompts: in-distribution numbers plus k values of magnitude M (the paper's figure 2).

A cell (M, k) holds ``n_samples`` × ``batch_size`` prompts of ``length`` examples drawn with the task's
own sampler and training distributions (prompts fresh per cell, from a seed derived from (seed, M, k,
length, sign)). In each prompt k distinct example positions, chosen uniformly, get their input x
*replaced* by ±M (``sign``: positive, negative or random per value), so the prompt keeps its length.
The answers are then recomputed from the modified inputs, and the tokens rebuilt with them (with
labels in context the y tokens change too) by the task's own labelling of the new inputs: quantifiers
relabel from the new xs; a linear prompt keeps its function, so y = a·M + b at the modified positions
(untouched pairs are the same numbers as before).

Metrics per cell (long form, one row per metric):
  quantifiers  ``sequence_error`` (any wrong sign from ``skip_first`` on), ``token_error``, and
               ``follows_largest``: over the predictions strictly after the first inserted position,
               the share whose sign equals the model's prediction sign at the largest inserted element
               (largest value, earliest on ties), read at every x token even with ``supervise=last``.
               The same share computed on the true labels (``predictor=labels``) is what a perfect model
               scores: the finding is a model near 1 where the labels are not. Read it beside
               ``error_at_inserted`` (with ``supervise=all``): the sign error of the predictions at the
               inserted positions themselves, whatever ``skip_first`` (a model can follow its own wrong
               answer at the deviant value).
  linear       ``mse`` from ``skip_first`` on; ``mse_untouched``: the same without the inserted
               positions (the damage the deviant values do to the other predictions); ``mse_inserted``:
               at the inserted positions only (whatever ``skip_first``; boundary values show here).
  attention    in the last attention layer, for the queries at x tokens strictly after the first
               inserted position: the weight put on the inserted x tokens (``attention_on_inserted``
               averaged over heads, ``attention_on_inserted_max_head`` the largest head), and the share
               uniform attention would give them, #inserted visible / #visible (``uniform_share``).
Each value is a mean over prompts with a 95% interval (prompts where nothing follows the first inserted
position have no value for the query-based metrics and are left out of their ``n_samples``).

``detail: true`` (the falsifying protocol; off by default, so today's tables are unchanged) adds
  errors apart  quantifiers (``supervise=all``): ``error_elsewhere``, the sign error at the positions
               not inserted from ``skip_first`` on, and ``error_after_inserted``, the same at the
               positions strictly after the first inserted one (beside ``error_at_inserted``: a *local*
               failure errs at the inserted token and not after it; the paper's whole-sequence
               following errs after it too); linear: ``mse_after_inserted`` likewise.
  ``attention`` table: for every attention layer (``layer``, 1-based) the weight on the inserted
               tokens with the same queries, per ``head``: ``mean`` (heads averaged), ``max`` (the most
               attending head per prompt) and each head ``0``, ``1``, ...; ``metric`` is
               ``attention_on_inserted``, or ``uniform_share`` (``head`` = ``uniform``).

The sign decides whether following the largest element is wrong (:func:`adverse_sign`): for "every", a
+M value answers "true" at itself, which later labels contradict wherever an earlier or later number is
negative; a -M value makes every later label false, so following it is right. For "some" it is the
other way round (-M adverse, +M the control: labels follow a +M exactly). Evaluate both signs (two
protocols): the labels' own ``follows_largest`` is exactly 1 under the control sign.

Prompts and metrics: evaluation/deviant_cells.py; figures: evaluation/deviant_figures.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ssa_repro.core import plotting
from ssa_repro.core.enums import value_of
from ssa_repro.evaluation import checks
from ssa_repro.evaluation.deviant_cells import Sign, adverse_sign, deviant_tables, draw_insertions, insert
from ssa_repro.evaluation.deviant_figures import (
    example_figure,
    follows_figure,
    layers_figure,
    lines_figure,
    share_figure,
)
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator

log = logging.getLogger("ssa_repro.evaluate")


@dataclass
class DeviantConfig(EvalConfig):
    """k values of magnitude M put into in-distribution prompts, on an M × k grid."""

    name: str = "deviant"
    magnitudes: list[float] = field(default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0])
    counts: list[int] = field(default_factory=lambda: [1, 2, 4])  # k, inserted values per prompt
    sign: Sign = Sign.positive  # of the inserted values: positive | negative | random (each ±1)
    length: int | None = None  # examples per prompt; null = the run's curriculum.end
    n_samples: int = 20  # batches per cell
    batch_size: int = 64
    skip_first: int = 3
    seed: int = 1234
    detail: bool = False  # the errors apart and every layer's and head's attention (the attention table)


@EVALUATORS.register("deviant", schema=DeviantConfig)
class Deviant(Evaluator):
    name = "deviant"
    axes = ("magnitudes", "counts")
    fills_length = "length"
    coords = ("M", "k")

    @classmethod
    def applies_to(cls, task) -> bool:
        """In-context tasks of one number per example (a grid, no token vocabulary, no vector inputs):
        a deviant x is inserted among them."""
        return (
            task.evaluation is not None
            and task.evaluation.grid is not None
            and not task.tokens
            and not task.vector_inputs
        )

    def check(self) -> list[str]:
        cfg = self.cfg
        n = cfg.length
        out = checks.prompt_length(n, self.task.stride(), self.run_cfg.model)
        if not 0 <= cfg.skip_first < max(n, 1):
            out.append(f"eval.skip_first={cfg.skip_first} must be in [0, {n}) (eval.length={n})")
        top = n - max(cfg.skip_first, 1)
        if not cfg.counts or min(cfg.counts) < 1 or max(cfg.counts) > top:
            out.append(
                f"eval.counts={list(cfg.counts)} must be a non-empty list of values in [1, {top}] "
                f"(eval.length={n} minus eval.skip_first={cfg.skip_first})"
            )
        out += checks.positive_values("magnitudes", cfg.magnitudes)
        if value_of(cfg.sign) not in Sign.__members__:
            out.append(
                f"eval.sign={value_of(cfg.sign)!r} is not allowed; allowed: {', '.join(Sign.__members__)}"
            )
        if cfg.n_samples < 1:
            out.append(f"eval.n_samples={cfg.n_samples} must be >= 1")
        if cfg.batch_size < 1:
            out.append(f"eval.batch_size={cfg.batch_size} must be >= 1")
        return out

    def cells(self) -> list[dict]:
        return [{"M": float(m), "k": int(k)} for k in self.cfg.counts for m in self.cfg.magnitudes]

    def compute(self, run, cells, progress):
        c = self.cfg
        log.info(
            "deviant: %d cells × %d prompts of %d examples, sign %s, on %s",
            len(cells),
            c.n_samples * c.batch_size,
            c.length,
            value_of(c.sign),
            run.device,
        )
        for cell in cells:
            tables = deviant_tables(
                run.model,
                run.task,
                cell,
                sign=c.sign,
                length=c.length,
                n_samples=c.n_samples,
                batch_size=c.batch_size,
                skip_first=c.skip_first,
                seed=c.seed,
                device=run.device,
                base=run.labels,
                detail=bool(c.detail),
            )
            yield {name: pd.DataFrame(rows) for name, rows in tables.items()}
            progress.update(1)
        if (
            plotting.enabled()
            and any(b.attn is not None for b in run.model.blocks)
            and getattr(self, "out_dir", None)
        ):
            self.example(run)

    def example(self, run) -> list[Path]:
        """One prompt of the cell (largest M, smallest k), last-layer attention before and after."""
        c = self.cfg
        m, k, n = max(c.magnitudes), min(c.counts), c.length
        g = cell_generator(c.seed, m, k, n, list(Sign).index(Sign(value_of(c.sign))))
        clean = run.task.sample(c.batch_size, n, g, "cpu")
        positions, values = draw_insertions(g, c.batch_size, n, k, m, c.sign)
        dev = insert(run.task, clean, positions, values)
        marks = sorted((positions[0] * run.task.stride()).tolist())
        return example_figure(
            run,
            run.task,
            clean,
            dev,
            marks,
            f"{run.title} · step {run.step}\nexample prompt: x at example(s) {sorted(positions[0].tolist())} "
            f"(0-based) replaced by {', '.join(f'{v:g}' for v in values[0].tolist())}",
            self.out_dir / "example_attention",
        )

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        if not plotting.enabled():  # figures off (plotting.saving): none is built; this draw writes no table
            return []
        grid, c = frames["results"], self.cfg
        quant = self.task.classification
        main = "sequence_error" if quant else "mse"
        mine = grid[grid.predictor == "model"]
        sign, n = value_of(c.sign), c.length
        figs = plotting.heatmap(
            mine[mine.metric == main],
            "M",
            "k",
            f"{title}\n{main.replace('_', ' ')}, {n} examples with\nk inserted values ({sign}) of magnitude M",
            out_dir / f"{main}_grid",
            log=not quant,
            xlabel="k (inserted values per prompt)",
            ylabel="M (magnitude of the inserted values)",
        )
        have_attn = "attention_on_inserted" in set(mine.metric)
        if have_attn:
            figs += share_figure(
                mine,
                f"{title}\nlast-layer attention on the inserted tokens (solid) vs uniform share (dashed)",
                out_dir / "attention_on_inserted",
            )
        if quant:
            figs += follows_figure(
                grid[grid.metric == "follows_largest"],
                f"{title}\npredictions following the prediction at the largest inserted element",
                out_dir / "follows_largest",
            )
        apart = [
            m
            for m in ("error_at_inserted", "error_after_inserted", "error_elsewhere")
            if m in set(mine.metric)
        ]
        if len(apart) > 1:
            figs += lines_figure(
                mine[mine.metric.isin(apart)],
                "metric",
                f"{title}\nsign error at the inserted tokens vs after them vs elsewhere ({sign})",
                out_dir / "errors_apart",
                "sign error rate",
            )
        attn = frames.get("attention", pd.DataFrame())
        if len(attn):
            figs += layers_figure(attn, f"{title}\nattention on the inserted tokens, every layer ({sign})",
                                  out_dir / "attention_by_layer")  # fmt: skip
        return figs

    def tables(self) -> tuple[str, ...]:
        return ("results", "attention")

    def covers(self, table: str, cells: list[dict]) -> list[dict]:
        """``attention``: every cell with ``detail`` on a model with attention (none else); ``results``:
        every cell."""
        maps = self.cfg.detail and self.run_cfg.model.name != "ff_only"
        return list(cells) if table != "attention" or maps else []

    def heatmap(self) -> dict | None:
        return {"rows": "M", "cols": "k", "metric": "sequence_error" if self.task.classification else "mse"}

    def summarize(self, frames) -> dict:
        grid = frames["results"]
        main = "sequence_error" if self.task.classification else "mse"

        def table(metric, predictor="model"):
            d = grid[(grid.metric == metric) & (grid.predictor == predictor)]
            return {f"k={k}": dict(zip(g.M.tolist(), g.value.tolist())) for k, g in d.groupby("k")}

        sign, adverse = value_of(self.cfg.sign), adverse_sign(self.task)
        summary = {
            "metric": main,
            "length": self.cfg.length,
            "sign": sign,
            "adverse_sign": adverse,
            # following the inserted value's answer is wrong (the falsifying sign) or right (the control)
            "following_is": None
            if adverse is None or sign == "random"
            else ("wrong" if sign == adverse else "right"),
            main: table(main),
        }
        for metric in (
            "follows_largest",
            "error_at_inserted",
            "error_after_inserted",
            "error_elsewhere",
            "mse_after_inserted",
            "attention_on_inserted",
            "uniform_share",
            "mse_untouched",
            "mse_inserted",
        ):
            if metric in set(grid.metric):
                summary[metric] = table(metric)
        if self.task.classification:
            summary["labels_follows_largest"] = table("follows_largest", "labels")
        attn = frames.get("attention", pd.DataFrame())
        if len(attn):  # {layer: {mean | max: {k: {M: value}}}}
            on = attn[attn.metric == "attention_on_inserted"]
            summary["attention_by_layer"] = {
                f"layer={layer}": {
                    head: {f"k={k}": dict(zip(g.M.tolist(), g.value.tolist())) for k, g in h.groupby("k")}
                    for head, h in part[part["head"].astype(str).isin(["mean", "max"])].groupby(
                        part["head"].astype(str)
                    )
                }
                for layer, part in on.groupby("layer")
            }
        return summary
