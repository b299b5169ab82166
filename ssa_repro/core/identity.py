"""Which run folders hold the same run: a copy (``cp -a``, another disk) is one run, never two seeds.

A run's identity is its run id (``run_id.txt``, a uuid written at its first start and kept in its
checkpoints and stored cells), the hash of its ``config.yaml`` and the hash of its last checkpoint.
Two folders with the same run id hold one model: a copy (the same config and checkpoint), or a copy
trained on or changed since (another checkpoint); folders of older code without a run id are the same
run when their config and checkpoint are equal. Every place that pools runs as seeds (compare, the
study's index, the W&B evaluation runs) asks :func:`same_runs` here and refuses or flags what it finds.

Checkpoints are hashed only where the run ids (or, without them, the configs) already agree: a
study's hundred runs cost a hundred small file reads, not a hundred checkpoint reads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ssa_repro.core.rundir import RunDir

_CHUNK = 1 << 20


def file_hash(path: Path) -> str | None:
    """The first 16 hex digits of the sha256 of a file's bytes; None when it is absent or unreadable."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class RunIdentity:
    """A run folder's identity: run id, config hash and last checkpoint hash (None where absent)."""

    path: Path
    run_id: str | None
    config: str | None
    checkpoint: str | None = None

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "config_sha256": self.config, "checkpoint_sha256": self.checkpoint}


def run_identity(path: str | Path, checkpoint: bool = True) -> RunIdentity:
    """The identity of the run folder ``path`` (``checkpoint=False``: without hashing the checkpoint)."""
    run = RunDir(path)
    last = file_hash(run.last_checkpoint) if checkpoint else None
    return RunIdentity(Path(path), run.identity(), file_hash(run.config_file), last)


@dataclass(frozen=True)
class SameRun:
    """Folders that hold one run: ``copies`` when config and checkpoint are equal too, else one run
    at different points (a copy trained on, or changed)."""

    paths: tuple[Path, ...]
    run_id: str | None
    copies: bool

    def describe(self) -> str:
        names = ", ".join(str(p) for p in self.paths)
        who = f"run id {self.run_id}" if self.run_id else "no run id (older code), the same config.yaml"
        if self.copies:
            return f"{names} are copies of one run ({who}, the same config.yaml and last checkpoint)"
        return (
            f"{names} hold one run ({who}) at different points: a copy trained on or changed since "
            "(another config.yaml or last checkpoint)"
        )


def same_runs(paths) -> list[SameRun]:
    """The groups of folders among ``paths`` that hold the same run (see the module's docstring); empty
    when every folder is its own run. The same folder given twice (one path resolved) counts too."""
    light = [run_identity(p, checkpoint=False) for p in paths]
    by_key: dict[tuple, list[RunIdentity]] = {}
    for ident in light:
        key = ("id", ident.run_id) if ident.run_id else ("config", ident.config)
        if key[1] is not None:
            by_key.setdefault(key, []).append(ident)
    found = []
    for (kind, _), group in by_key.items():
        if len(group) < 2:
            continue
        full = [run_identity(i.path) for i in group]
        if kind == "config":  # older code: one run only where the checkpoints are equal (and present)
            for ckpt in {i.checkpoint for i in full if i.checkpoint}:
                same = tuple(i.path for i in full if i.checkpoint == ckpt)
                if len(same) > 1:
                    found.append(SameRun(same, None, True))
            continue
        copies = len({(i.config, i.checkpoint) for i in full}) == 1
        found.append(SameRun(tuple(i.path for i in full), full[0].run_id, copies))
    return found


def same_runs_message(found: list[SameRun], what: str) -> str:
    """One refusal (or warning) naming every group: ``what`` says where they were to be pooled."""
    lines = [
        f"{what}: {len(found)} run(s) given more than once, which would count one model as several seeds:"
    ]
    lines += [f"  - {s.describe()}" for s in found]
    lines.append("give each run once (keep one folder of each; a copy is the same model, not another seed)")
    return "\n".join(lines)
