"""Tasks, chosen by name (``task=linear|every|some|lm|mlm`` and Garg et al.'s function classes)."""

from ssa_repro.tasks import functions, linear, lm, mlm, quantifier  # noqa: F401  (fill the registry)
from ssa_repro.tasks.base import Batch, Stage, Task
from ssa_repro.tasks.registry import TASKS


def build_task(cfg) -> Task:
    return TASKS.get(cfg.name)(cfg)


__all__ = ["TASKS", "Batch", "Stage", "Task", "build_task"]
