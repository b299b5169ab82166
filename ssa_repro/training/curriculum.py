"""Curriculum on the number of in-context examples, and (Garg et al.) on the input dimensions.

n(step) = min(end, start + inc · ⌊step / interval⌋), or ``end`` throughout when disabled. It is a pure
function of the step, so a resumed run is at the same point of the curriculum without extra state.
Paper/public code: 11 -> 41 by +2 every 2,000 steps.

dims(step) = min(task.n_dims, dims_start + dims_inc · ⌊step / dims_interval⌋) active input coordinates
(the others are 0, as Garg's ``n_dims_truncated``), when ``dims_start`` > 0; Garg: 5 -> 20 by +1 every
2,000 steps. Only tasks with vector inputs use it.
"""

from __future__ import annotations

from ssa_repro.tasks import Stage


def stage(cfg, step: int) -> Stage:
    """Where the curriculum stands at ``step``: examples per prompt and active input dimensions."""
    return Stage(n_points(cfg, step), n_dims(cfg, step))


def n_points(cfg, step: int) -> int:
    if not cfg.enabled:
        return int(cfg.end)
    return int(min(cfg.end, cfg.start + cfg.inc * (step // cfg.interval)))


def n_dims(cfg, step: int) -> int | None:
    """Active input dimensions at ``step``, or None (all of them) when the dimension curriculum is off;
    the task caps it at its ``n_dims``."""
    start = int(cfg.dims_start)
    if not cfg.enabled or start <= 0:
        return None
    return start + int(cfg.dims_inc) * (step // int(cfg.dims_interval))
