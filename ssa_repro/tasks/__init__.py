"""Tasks, chosen by name (``task=linear|every|some|lm|mlm``, Garg et al.'s function classes, and the
length-generalisation token tasks ``mqar|flip_flop|copy|counting``)."""

from ssa_repro.tasks import (  # noqa: F401  (fill the registry)
    copy,
    counting,
    flip_flop,
    functions,
    linear,
    lm,
    mlm,
    mqar,
    quantifier,
)
from ssa_repro.tasks.base import Batch, Stage, Task
from ssa_repro.tasks.registry import TASKS


def build_task(cfg) -> Task:
    return TASKS.get(cfg.name)(cfg)


__all__ = ["TASKS", "Batch", "Stage", "Task", "build_task"]
