"""Config schemas (dataclasses) stored in Hydra's ConfigStore.

The run's schema is :mod:`ssa_repro.core.schema` (the run folder type reads saved configs over it); task,
scorer and evaluation schemas sit beside their component (``ssa_repro/tasks/linear.py``, ...) and are
stored from the registries; the end-of-run evaluation block is below. Each YAML option in ``conf/``
extends one schema (``defaults: [/schema/<group>/<x>@_here_]``), so a mistyped key fails when the config
is composed, with the key and the schema named; enum fields (``task.supervise``, ``device``, ...) reject
bad values with the allowed ones listed. Schemas live under
``schema/`` so that ``scorer=glob(*)`` sweeps only the real options. Checks a schema cannot express
(std > 0, lengths that fit the model, ...) are in :mod:`ssa_repro.training.validate`.
"""

from __future__ import annotations

import copy
import functools
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import MISSING, DictConfig
from omegaconf.errors import OmegaConfBaseException

from ssa_repro import resolvers  # noqa: F401  (the resolvers conf/ uses: ssa_job_dir, ssa_eval_sweep_dir)
from ssa_repro.core.schema import (
    CurriculumConfig,
    EvaluateRootConfig,
    LoggerConfig,
    ModelConfig,
    RootConfig,
    TrainConfig,
)
from ssa_repro.evaluation import EVALUATORS
from ssa_repro.evaluation.runner import QuickConfig
from ssa_repro.scorers import SCORERS, Scorer, build_scorer
from ssa_repro.tasks import TASKS


@dataclass
class EvaluationConfig(QuickConfig):
    """The evaluations at the end of training: ``eval=quick`` with the keys below (the task's quick
    grid where they are null; set ``sigmas``/``lengths`` to give every job of a sweep one fixed grid),
    then each evaluation named in ``also`` with its defaults. Results are stored as ``evaluate.py``'s."""

    enabled: bool = True
    also: list[str] = field(default_factory=list)  # e.g. [default] (the paper grid), [deviant, boundary]


@dataclass
class TrainRootConfig(RootConfig):
    """``python train.py``'s schema: RootConfig with the end-of-run evaluation block typed."""

    evaluation: EvaluationConfig = MISSING


def register_configs() -> None:
    """Store every schema; idempotent, called on import."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainRootConfig)
    cs.store(name="evaluate_schema", node=EvaluateRootConfig)
    for group, registry in (("task", TASKS), ("scorer", SCORERS), ("eval", EVALUATORS)):
        for name, schema in registry.schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=schema)
    cs.store(group="schema/model", name="base", node=ModelConfig)
    cs.store(group="schema/train", name="base", node=TrainConfig)
    cs.store(group="schema/curriculum", name="base", node=CurriculumConfig)
    cs.store(group="schema/evaluation", name="base", node=EvaluationConfig)
    cs.store(group="schema/logger", name="base", node=LoggerConfig)


register_configs()

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def compose_cached(
    overrides: Sequence[str], config_name: str = "train", conf_dir: Path = CONF_DIR
) -> DictConfig:
    """``compose(config_name, overrides)`` from ``conf_dir``: Hydra's composition, by Hydra's own code,
    at a hundredth of its cost after the first call (a copy each call).

    Hydra composes in two steps (``ConfigLoaderImpl._load_configuration_impl``): the overrides that
    choose config-group options (``task=every``, ``hydra/launcher=joblib``) build the defaults list
    whose files are merged; then the others, its "config overrides" (``train.steps=9``, ``+key=1``,
    ``++key=2``, ``~key``), are applied to the merged config by
    ``ConfigLoaderImpl._apply_overrides_to_config``. Here the first step is Hydra's ``compose`` of the
    group choices alone, once per process and choice while the files under ``conf_dir`` are unchanged
    (their names, sizes and modification times: an edited file composes anew), and the second is the
    same Hydra function applied to a copy, the overrides split as Hydra splits them (a key that names
    a config group, not with a dict value). A refusal is Hydra's, with its message. A sweep
    (``seed=0,1``) or a package (``@``) goes through Hydra's whole compose, which refuses or places it.
    icl_cpu's 44 settings cost 16 composes (~0.3 s each: one per choice of groups) and 44 copies (~7 ms
    each); tests/test_config.py checks the result against ``compose`` for tricky override sets. The key
    is the files, not Hydra's in-memory ConfigStore: a schema registered or removed in this process
    after a compose (the tests' toy components) does not recompose what was cached. On a miss it uses
    ``initialize_config_dir``, so it cannot be called while another Hydra app holds Hydra's global
    state."""
    state = _conf_state(Path(conf_dir))
    parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
    if any(o.is_sweep_override() or o.package is not None for o in parsed):
        return copy.deepcopy(_composed(str(conf_dir), config_name, tuple(overrides), state))
    groups, values = [], []
    for o in parsed:
        key = o.key_or_group
        if key.startswith("hydra") or (
            not isinstance(o.value(), dict) and _is_group(str(conf_dir), key, state)
        ):
            groups.append(o.input_line)
        else:
            values.append(o)
    cfg = copy.deepcopy(_composed(str(conf_dir), config_name, tuple(groups), state))
    try:  # Hydra's second step, Hydra's own function
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    except OmegaConfBaseException as e:  # as Hydra's load_configuration raises it
        raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from e
    return cfg


def _conf_state(conf_dir: Path) -> tuple:
    """What composing reads from ``conf_dir``: each file's path, size and modification time."""
    out = []
    for path in sorted(conf_dir.rglob("*")):
        if path.is_file():
            st = path.stat()
            out.append((str(path), st.st_size, st.st_mtime_ns))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _composed(conf_dir: str, config_name: str, overrides: tuple[str, ...], state: tuple) -> DictConfig:
    """(``state``: :func:`_conf_state`, part of the key.)"""
    with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
        return compose(config_name, overrides=list(overrides))


def _is_group(conf_dir: str, key: str, state: tuple) -> bool:
    """Whether Hydra reads ``key=...`` as a config-group choice (``task``, ``hydra/launcher``) rather than
    a value, as Hydra's defaults list decides (its repository's ``group_exists``)."""
    return key.strip("/") in _groups(conf_dir, state)


@functools.lru_cache(maxsize=16)
def _groups(conf_dir: str, state: tuple) -> frozenset[str]:
    """Every config group's path under ``conf_dir`` and Hydra's own (``task``, ``hydra/launcher``,
    ``schema/task``): the public ``ConfigLoader.list_groups``, walked from the root once per state."""
    out, todo = set(), [""]
    with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        while todo:
            parent = todo.pop()
            for name in loader.list_groups(parent):
                path = f"{parent}/{name}" if parent else name
                out.add(path)
                todo.append(path)
    return frozenset(out)


def scorer_options(conf_dir: Path = CONF_DIR) -> list[str]:
    """The YAML option names in conf/scorer (file stems), sorted."""
    return sorted(p.stem for p in (Path(conf_dir) / "scorer").glob("*.yaml"))


def load_scorer(
    option: str, n_head: int = 8, max_positions: int = 256, overrides: Sequence[str] = ()
) -> Scorer:
    """Build the scorer of YAML option ``option`` (``conf/scorer/<option>.yaml``) as training would.

    The full training config is composed (so presets, interpolations such as CosFormer's
    ``m: ${model.max_positions}`` and schema checks apply) with ``model.n_embd=256``; ``overrides``
    adds more (e.g. ``["scorer.heads=[average]"]``). Composed through :func:`compose_cached`, once per
    option and ``overrides``: ``n_head`` and ``max_positions`` are set on the copy (the same config as
    composing with them, interpolations being resolved on use; tests/test_scorer_report.py checks it).
    """
    cfg = compose_cached([f"scorer={option}", "model.n_embd=256", *overrides])
    for key, value in (("n_head", n_head), ("max_positions", max_positions)):
        # an override of it (model.<key>=, +model.<key>=, ++model.<key>=) wins, as before
        if not any(re.match(rf"\+{{0,2}}model\.{key}=", o) for o in overrides):
            cfg.model[key] = int(value)
    return build_scorer(cfg.scorer, n_head, n_embd=cfg.model.n_embd)
