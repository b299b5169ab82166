"""Curriculum on the number of in-context examples.

n(step) = min(end, start + inc · ⌊step / interval⌋), or ``end`` throughout when disabled. It is a pure
function of the step, so a resumed run is at the same point of the curriculum without extra state.
Paper/public code: 11 -> 41 by +2 every 2,000 steps.
"""

from __future__ import annotations


def n_points(cfg, step: int) -> int:
    if not cfg.enabled:
        return int(cfg.end)
    return int(min(cfg.end, cfg.start + cfg.inc * (step // cfg.interval)))
