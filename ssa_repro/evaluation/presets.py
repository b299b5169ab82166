"""The presets ``eval=default`` and ``eval=quick``: names for an evaluation that the run's task chooses.

    concrete(cfg, task) -> (evaluation config, problems)

``default`` is the task's declared default evaluation (``Evaluation.default``: its paper protocol; the
grid's keys such as ``eval.sigmas`` apply to it directly), ``quick`` its end-of-run evaluation
(``Task.quick_evaluation``: what every training ends with). Both resolve to a concrete evaluation
(``grid``, ``lm``, ``zorro``, ...) before an evaluator is built; the preset's name is kept in the rows
(``preset`` column) for finding them again. A preset is no evaluator: its schema is an option of the
``eval`` config group (``EVALUATORS.schemas``, which ``ssa_repro/config.py`` stores), never a
registered evaluator (``EVALUATORS.names()``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import get_type_hints

from omegaconf import OmegaConf

from ssa_repro.evaluation.grid import GridConfig
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig


@dataclass
class DefaultConfig(GridConfig):
    """``eval=default``: the task's default evaluation. For grid tasks every grid key applies."""

    name: str = "default"


QUICK_KEYS = ("sigmas", "sigmas_f", "lengths", "n_samples", "batch_size", "skip_first", "seed", "nested")
_GRID_TYPES = get_type_hints(GridConfig)
QuickConfig = dataclasses.make_dataclass(
    "QuickConfig",
    [("name", str, dataclasses.field(default="quick"))]
    + [
        (f.name, _GRID_TYPES[f.name], dataclasses.field(default=f.default))
        for f in dataclasses.fields(GridConfig)
        if f.name in QUICK_KEYS
    ],
    bases=(EvalConfig,),
)
QuickConfig.__module__ = __name__
QuickConfig.__doc__ = """``eval=quick``: the task's end-of-run evaluation. For grid tasks these keys are
the grid's (``GridConfig``: the same types and defaults), their nulls the task's quick grid
(``Grid.quick``); set them to evaluate every run of a sweep on one fixed grid."""

PRESETS: dict[str, type] = {"default": DefaultConfig, "quick": QuickConfig}
EVALUATORS.schemas.update(PRESETS)  # options of eval= beside the evaluators' (no evaluator of their own)


def concrete(cfg, task) -> tuple[object, list[str]]:
    """The concrete evaluation config behind ``cfg`` when it names a preset (else ``cfg`` itself), and
    the problems found on the way. Keys given to the preset apply where the target's schema has them."""
    if cfg.name not in PRESETS:
        return cfg, []
    declared = getattr(task, "evaluation", None)
    if declared is None:
        return cfg, [
            f"task {task.cfg.name!r} declares no evaluation (Task.evaluation), so eval={cfg.name} "
            "has nothing to run"
        ]
    if cfg.name == "default":
        target, settings = declared.default, {}
    else:
        target, settings = task.quick_evaluation()
    schema = EVALUATORS.schemas[target]
    given = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    own = {k: v for k, v in given.items() if k not in ("name", "force")}
    if set(own) <= set(_keys(schema)):  # the preset's keys are the target's (its schema composes them)
        merged = {**settings, **{k: v for k, v in own.items() if v is not None}}
    else:
        defaults = OmegaConf.to_container(OmegaConf.structured(DefaultConfig), enum_to_str=True)
        changed = [k for k in own if k != "figures" and given[k] != defaults.get(k)]
        if changed and cfg.name == "default":  # (quick's grid keys do not apply to corpus tasks)
            return cfg, [
                f"eval.{', eval.'.join(changed)} belong to the grid evaluation; task {task.cfg.name}'s "
                f"default evaluation is eval={target} (its keys: {', '.join(_keys(schema))})"
            ]
        merged = dict(settings)
    out = OmegaConf.merge(
        OmegaConf.structured(schema), {**merged, "force": bool(cfg.force), "figures": bool(cfg.figures)}
    )
    return out, []


def _keys(schema) -> list[str]:
    return [k for k in schema.__dataclass_fields__ if k not in ("name", "force")]
