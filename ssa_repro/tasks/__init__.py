"""In-context-learning tasks, chosen by name (``task=linear|every|some``)."""

from ssa_repro.tasks import linear, lm, mlm, quantifier  # noqa: F401  (fill the registry; mlm: BabyBERTa, lm: GPT-2-style LM)
from ssa_repro.tasks.base import Batch, Task
from ssa_repro.tasks.registry import TASKS


def build_task(cfg) -> Task:
    return TASKS.get(cfg.name)(cfg)


__all__ = ["TASKS", "Batch", "Task", "build_task"]
