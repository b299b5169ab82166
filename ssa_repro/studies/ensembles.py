"""A study's jobs that differ only in the seed, trained first as seed ensembles (one stacked model per
group: ssa_repro/training/ensemble.py), before the job loop evaluates them as separately trained runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

from joblib import Parallel, delayed

from ssa_repro.jobs.devices import job_device
from ssa_repro.studies.progress import workers_stop_on_sigterm
from ssa_repro.studies.study import Job, compose
from ssa_repro.training import ensemble

log = logging.getLogger("ssa_repro.study")


def train_ensembles(name: str, root: Path, todo: list[Job], n_jobs: int = 1) -> None:
    """Train the study's jobs that differ only in the seed as seed ensembles (one stacked model per group,
    ssa_repro/training/ensemble.py; split by what fits in memory), ``n_jobs`` at a time (each in its own
    process with its share of the CPU cores and its GPU, as the job loop's jobs: on one GPU side by side
    they are slower each, faster together), with a progress line per ensemble; the job loop
    (studies/engine.py) then finds them finished and evaluates them as it does separately trained runs. A group
    that cannot be stacked (its scorer, the mlm task) and a seed or an ensemble that fails are left to
    the job loop, which trains them one process per job as before."""
    cfgs = [compose(job) for job in todo]
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(ensemble.group_key(cfg), []).append(i)
    stack = []
    for members in groups.values():
        why, _ = ensemble.stack_problem(cfgs[members[0]])
        if len(members) < 2 or why:
            if why:
                log.info("study %s: %s keeps one process per job (%s)", name, todo[members[0]].name, why)
            continue
        stack.append(members)
    # ensembles side by side share the device's memory (one GPU, or the CPU's): at most `side` at a time
    side = max(1, min(n_jobs, len(stack)))
    share = ensemble.MEMORY_SHARE / side
    # A group's seeds stay in one ensemble (split only by memory): every ensemble runs all the steps, so
    # the wall time is steps / an ensemble's steps per second, which more processes on one GPU lower.
    # Measured on an H200 at 4L/64 (docs/results/, the third GPU check): one ensemble of 30 seeds
    # ran at 20-22 steps/s (its whole call), 16 side by side of 2-4 seeds at 16.4 each.
    chunks = []
    for members in stack:
        size = max(1, ensemble.seeds_that_fit(cfgs[members[0]], share=share))
        chunks += [members[i : i + size] for i in range(0, len(members), size)]
    n_par = max(1, min(side, len(chunks)))
    work = []
    for n, chunk in enumerate(chunks, 1):
        first = todo[chunk[0]]
        what = (
            f"{first.group}/{first.name} × {len(chunk)} seeds ({', '.join(str(todo[i].seed) for i in chunk)})"
        )
        dirs = [root / "runs" / todo[i].group / todo[i].name for i in chunk]
        work.append(delayed(_train_chunk)(name, n, len(chunks), what, [cfgs[i] for i in chunk], dirs, n_par))
    if work:
        log.info("study %s: %d seed ensembles, %d at a time", name, len(chunks), n_par)
        with workers_stop_on_sigterm():
            try:
                Parallel(n_jobs=n_par, backend="loky", verbose=0)(work)
            except Exception as e:  # noqa: BLE001  (a worker killed: out of memory, a fatal CUDA error)
                log.warning(
                    "study %s: the seed ensembles stopped (%s: %s); the jobs they did not finish train alone",
                    name,
                    type(e).__name__,
                    e,
                )


def _train_chunk(name: str, n: int, total: int, what: str, cfgs: list, dirs: list, n_par: int) -> None:
    """One seed ensemble, placed as job ``n - 1`` of ``n_par`` parallel ones (:func:`job_device`); its
    failure is logged, not raised (the job loop then trains its jobs alone and reports theirs)."""
    root, handler, level = logging.getLogger(), None, logging.getLogger().level
    if not root.handlers:  # a worker process: the progress lines as the study's own, for this call only
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s] %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    try:
        log.info("study %s: seed ensemble %d of %d: %s", name, n, total, what)
        with job_device(n - 1, n_par, cfgs[0].device):
            ensemble.train_ensemble(cfgs, dirs)
    except Exception as e:  # noqa: BLE001  (the job loop trains these jobs alone, and reports theirs)
        log.warning(
            "study %s: seed ensemble %d failed (%s: %s); its jobs train alone", name, n, type(e).__name__, e
        )
    finally:
        if handler is not None:  # loky reuses the worker for the job loop's jobs: leave it as found
            root.removeHandler(handler)
            root.setLevel(level)
