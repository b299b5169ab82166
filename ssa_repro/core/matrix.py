"""A study group's matrix: the cells (seed, task, scorer, arch, train_sigma) its jobs train.

A group (``conf/study/<name>.yaml``, ``groups.<name>``) names four axes — ``tasks``, ``scorers``,
``archs``, ``train_sigma`` — and its ``seeds`` (else the study's); every combination is a cell. Its
optional ``more`` lists sub-matrices run at more seeds: each entry gives ``seeds`` and any of the axes as
a subset of the group's (an axis it leaves out is the group's whole axis). A primary endpoint's cells get
the seeds their power analysis asks for without multiplying the rest of the group (icl_cpu: every_num
under post-LN at 30 seeds, the other architectures at 8). The study engine (studies/study.py plans,
studies/engine.py runs) and its report's missing-job count (reports/paired.py) read the same cells here.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

AXES = ("tasks", "scorers", "archs", "train_sigma")
"""A group's axes, in the order its cells are listed within one seed."""


def group_cells(group: Mapping, seeds: Sequence[int]) -> list[tuple]:
    """The group's cells as (seed, task, scorer, arch, train_sigma), seed-major (every cell of seed 0,
    then of seed 1, …: a study stopped part-way has whole paired sets for its first seeds) and within a
    seed in the group's axis order; the group's product over its seeds (``group["seeds"]``, else
    ``seeds``) joined with each ``more`` entry's, each cell once."""
    axes = [list(group[a]) for a in AXES]
    cells = set(itertools.product(group.get("seeds") or seeds, *axes))
    for entry in group.get("more") or ():
        sub = [list(entry.get(a) or group[a]) for a in AXES]
        cells |= set(itertools.product(entry["seeds"], *sub))
    position = [{v: i for i, v in enumerate(axis)} for axis in axes]
    return sorted(cells, key=lambda c: (c[0], *(p[v] for p, v in zip(position, c[1:], strict=True))))
