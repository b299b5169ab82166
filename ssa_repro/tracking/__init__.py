"""Weights & Biases tracking: offline without a byte on the network, runs tables that answer the question.

Everything W&B goes through this package, beside the training and the evaluations whose results it logs
(it imports only ``core``): ``environment`` (wandb's variables, start-up checks), ``tracker`` (the run:
:class:`Tracker`), ``tables`` (headline numbers, grids, charts). ``wandb`` is imported lazily, after
:func:`configure_environment`.

API::

    configure_environment(mode) -> str                   # before wandb is imported; idempotent
    check(logger_cfg) -> list[str]                       # bad WANDB_MODE, online without key/network
    check_online(logger_cfg, timeout=5.0, hint=None) -> list[str]   # the online part of check
    name_problems(logger_cfg) -> list[str]               # tags, project, entity that wandb.init refuses
    training_headline(final_loss=, parameters=, steps_per_sec=, wall_time_s=, scorer_stats=) -> dict
    grid_headline(frame, grid, name) -> dict             # an evaluation grid's mean and worst cell
    Tracker.for_training / for_evaluation / off          # the run (tracker.py has its methods and keys)
"""

from ssa_repro.tracking.environment import (
    DEFAULT_BASE_URL,
    MODES,
    TAG_LEN,
    check,
    check_online,
    configure_environment,
    name_problems,
)
from ssa_repro.tracking.tables import grid_headline, training_headline
from ssa_repro.tracking.tracker import Tracker, TrackingError

__all__ = [
    "DEFAULT_BASE_URL",
    "MODES",
    "TAG_LEN",
    "Tracker",
    "TrackingError",
    "check",
    "check_online",
    "configure_environment",
    "grid_headline",
    "name_problems",
    "training_headline",
]
