"""Evaluations by name (``eval=...``): each registers an :class:`Evaluator` with its config schema.

An evaluator is built for one run (``Evaluator(cfg, run_cfg, task)``, from the run's config alone,
before any model is loaded) and says:

  ``axes``            config keys whose values are cells (``sigmas``, ``lengths``, ...): they are not
                      part of the protocol, so evaluations that differ only there pool their cells
  ``coords``          the columns that identify a cell in its tables (``sigma_x``, ``length``, ...)
  ``fills_length``    the key whose null is the run's longest training prompt (``curriculum.end``;
                      a one-element list where the key is an axis); ``resolve()`` fills it and
                      further nulls an evaluator knows (called first)
  ``applies_to(task)`` whether it can evaluate a task at all, from what the task is and can do
                      (a task class; its grid, its family): the evaluator says where it applies, so a
                      new evaluator touches no task (``applicable(task)`` lists the names)
  ``check()``         everything wrong with the config for this run, before any work; ``problems()``
                      asks :meth:`applies_to` first
  ``cells()``         the cells the config asks for (dicts of coordinate values)
  ``compute(run, cells, progress)``
                      yields tables (``{"results": frame, ...}``) holding complete cells, so an
                      interrupted evaluation keeps what it finished; ``results`` is long form: one row
                      per cell × predictor × metric with value, n_samples, ci_low, ci_high
  ``draw(frames, title, out_dir)``, ``summarize(frames)``
                      figures and headline numbers from every stored cell of the protocol

The runner (runner.py) does the rest: the store, the lock, progress and timing. The presets
``eval=default`` and ``eval=quick`` are no evaluators: each names, through the run's task, one of them
(presets.py); their schemas are options of the ``eval`` config group beside the evaluators'
(``EVALUATORS.schemas``), never registered items (``EVALUATORS.names()`` lists evaluators only).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from ssa_repro.core.registry import Registry
from ssa_repro.tasks import Task

EVALUATORS: Registry = Registry("evaluation")


@dataclass
class EvalConfig:
    name: str = "default"
    force: bool = False  # compute every asked-for cell again (new parts; the old ones stay on disk)
    figures: bool = True  # false: tables and summary only, no figure files (not part of the protocol)


class Evaluator:
    name: str = ""
    version: int = 1  # bump when the computation changes: older cells then belong to another protocol
    axes: tuple[str, ...] = ()
    coords: tuple[str, ...] = ()
    fills_length: str | None = None

    def __init__(self, cfg, run_cfg, task):
        self.cfg = cfg
        self.run_cfg = run_cfg
        self.task = task

    def resolve(self) -> None:
        """Fill the config's nulls from the run (``fills_length``: null = ``curriculum.end``)."""
        key = self.fills_length
        if key is not None and self.cfg[key] is None:
            end = int(self.run_cfg.curriculum.end)
            self.cfg[key] = [end] if key in self.axes else end

    @classmethod
    def applies_to(cls, task: type[Task]) -> bool:
        """Whether this evaluation can run on runs of ``task`` (a task class: callers without a run
        ask too); an evaluator that applies to none says so by not overriding this."""
        return False

    def problems(self) -> list[str]:
        """Why this evaluation cannot run on this run: it does not apply to the task (said alone), or
        what :meth:`check` finds."""
        return not_applicable(self.task, self.name) or self.check()

    def check(self) -> list[str]:
        """Problems with the config's values for this run (each naming key, value, what is allowed)."""
        return []

    def protocol(self) -> dict:
        """Every setting but the axes (and ``name``, ``force``, ``preset``), and the version."""
        settings = OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True)
        drop = {"name", "force", "preset", "figures", *self.axes}
        return {"version": self.version, **{k: v for k, v in settings.items() if k not in drop}}

    def cells(self) -> list[dict]:
        return [{}]

    def compute(self, run, cells: list[dict], progress) -> Iterator[dict[str, pd.DataFrame]]:
        raise NotImplementedError

    def draw(self, frames: dict[str, pd.DataFrame], title: str, out_dir: Path) -> list[Path]:
        return []

    def summarize(self, frames: dict[str, pd.DataFrame]) -> dict:
        return {}

    def heatmap(self) -> dict | None:
        """The heat map's layout ``{"rows", "cols", "metric"}`` of the ``results`` table, if it has one
        (for dashboards and comparisons)."""
        return None

    def tables(self) -> tuple[str, ...]:
        """The tables ``compute`` writes (``results`` first)."""
        return ("results",)

    def covers(self, table: str, cells: list[dict]) -> list[dict]:
        """The cells of ``cells`` that ``table`` holds rows of once they are computed (every one by
        default; an evaluator whose table has rows for some cells only says which). Each evaluation
        checks its stored tables against this and computes again the cells a table is short of (a
        call killed between writing its parts: ``runner.short_cells``)."""
        return list(cells)


def applicable(task: Task | type[Task]) -> list[str]:
    """The evaluations (registered names, sorted) that apply to ``task`` (an instance or its class)."""
    kind = task if isinstance(task, type) else type(task)
    return [n for n in EVALUATORS.names() if EVALUATORS.get(n).applies_to(kind)]


def not_applicable(task: Task, name: str) -> list[str]:
    """Problems when evaluation ``name`` does not apply to ``task`` (naming those that do)."""
    if getattr(task, "evaluation", None) is None:
        return [f"task {task.cfg.name!r} declares no evaluation (Task.evaluation): it cannot be evaluated"]
    if not EVALUATORS.get(name).applies_to(type(task)):
        return [
            f"eval={name} does not apply to task={task.cfg.name}; this task supports: "
            + ", ".join(applicable(task))
        ]
    return []
