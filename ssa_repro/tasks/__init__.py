"""Tasks, chosen by name (``task=linear|every|some|lm|mlm``, Garg et al.'s function classes, and the
length-generalisation token tasks ``mqar|flip_flop|copy|counting``).

Every public module of this package is imported below, and a task's module registers it in ``TASKS``
when imported (base.py, baselines.py, ... register nothing): a new task needs no line here. An optional
dependency is imported inside the function that uses it, never at a module's top.
"""

import importlib
import pkgutil

from ssa_repro.tasks.base import Batch, Stage, Task
from ssa_repro.tasks.registry import TASKS


def build_task(cfg) -> Task:
    return TASKS.get(cfg.name)(cfg)


for _module in pkgutil.iter_modules(__path__):  # fill the registry (sorted by name)
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["TASKS", "Batch", "Stage", "Task", "build_task"]
