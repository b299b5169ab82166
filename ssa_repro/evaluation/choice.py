"""Which of a study's evaluations run on a job: one rule, read by the study engine (``studies/study.py``'s
``evaluations``, which ``studies/engine.py`` runs) and by the reports (``reports/icl_cells.py``,
``reports/kinds/early.py``, which say what is missing), so that what a report expects is what the engine did.

A study's ``evaluations`` map a key to an evaluator's settings (``name`` and its keys). An evaluation
runs on a job of task ``t`` (a registered task name) in group ``g`` when

- the evaluator applies to ``t`` (:func:`~ssa_repro.evaluation.registry.applicable`);
- for a grid (a key ``grid_*``): the key is the task's own ``grid_<t>`` where the study has one (the
  length tasks), else it starts with ``grid_quantifier`` or ``grid_linear`` by the task's kind;
- its ``tasks`` (registered names), where the study sets them, name ``t`` (``eval=lm`` has ``tasks`` of
  its own, its LM-eval tasks: there they restrict nothing);
- its ``groups``, where set, name ``g``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ssa_repro.evaluation.registry import EVALUATORS, applicable
from ssa_repro.tasks.registry import TASKS

STUDY_KEYS = ("tasks", "groups", "steps")  # an evaluation's keys that the study reads, not the evaluator


def study_keys(name: str) -> tuple[str, ...]:
    """The study's own keys of evaluator ``name``'s settings: :data:`STUDY_KEYS` less the evaluator's own
    (``eval=lm`` has ``tasks``, its LM-eval tasks)."""
    own = EVALUATORS.schemas[name].__dataclass_fields__
    return tuple(k for k in STUDY_KEYS if k not in own)


def chosen(evaluations: Mapping, task_name: str, group: str | None = None) -> list[str]:
    """The keys of ``evaluations`` (a study's, key → settings) that run on a job of the registered task
    ``task_name`` in ``group`` (None: any group), in the study's order; [] for a task not registered."""
    if task_name not in TASKS:
        return []
    task = TASKS.get(task_name)
    supports = applicable(task)
    own = f"grid_{task_name}"
    kind = own if own in evaluations else ("grid_quantifier" if task.classification else "grid_linear")
    out = []
    for key, settings in evaluations.items():
        name = settings.get("name")
        if name not in supports:
            continue
        if str(key).startswith("grid_") and not str(key).startswith(kind):
            continue
        mine = study_keys(name)
        tasks, groups = settings.get("tasks"), settings.get("groups")
        if "tasks" in mine and tasks is not None and task_name not in tasks:
            continue
        if group is not None and groups is not None and group not in groups:
            continue
        out.append(str(key))
    return out
