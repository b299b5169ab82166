"""Where evaluation results live: cells that accumulate, are written atomically and never lost.

An evaluation's *protocol* is its name and every setting that is not a grid axis (prompts per cell,
seed, skip_first, the resolved prompt length of a deviant grid, ...), plus the evaluator's version.
Results with the same protocol can be pooled cell by cell; another protocol is stored beside them:

    <run_dir>/eval/<evaluation>/<protocol id>/
        protocol.json          the protocol (written once; its hash is the folder name)
        parts/<table>-<UTC time>-<pid>-<n>.csv
                               what one evaluation call computed: complete cells only, one file per
                               table, written to a temporary name and renamed (atomic), never rewritten
        results.csv, <table>.csv, figures, summary.json
                               drawn from all stored cells (rewritten atomically after each call)

A cell is a point of the grid (its coordinate columns, e.g. ``sigma_x``, ``length``) at a checkpoint
``step``. A later evaluation with the same protocol reuses the cells already stored and computes only
the missing ones; ``eval.force=true`` computes them again into new parts, and readers keep, for each
cell, the rows of its newest part (older parts stay on disk: nothing is deleted). Several processes may
evaluate one run at once (a joblib multirun): each writes its own parts, and the derived files are
redrawn under an exclusive lock on the protocol folder, each time from every part present, so the last
writer's figures hold every job's cells.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import itertools
import json
import os
from pathlib import Path

import pandas as pd

from ssa_repro.core.atomic import atomic_path, write_json
from ssa_repro.core.rundir import RunDir

PROTOCOL_FILE = "protocol.json"
PARTS = "parts"
_counter = itertools.count()


def protocol_id(protocol: dict) -> str:
    """An 8-hex-digit hash of the protocol's canonical JSON (sorted keys): equal settings, equal id."""
    text = json.dumps(protocol, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _key_frame(frame: pd.DataFrame, coords: list[str]) -> pd.DataFrame:
    """The cell key columns (coordinates + step) with NaN made comparable."""
    cols = [c for c in [*coords, "step"] if c in frame]
    return frame[cols].astype(object).where(frame[cols].notna(), "∅")


class Store:
    """The stored results of one protocol of one run."""

    def __init__(self, run_dir: str | Path, name: str, protocol: dict, coords: list[str]):
        self.run_dir = Path(run_dir)
        self.name = name
        self.protocol = protocol
        self.coords = list(coords)
        self.id = protocol_id(protocol)
        self.dir = RunDir(self.run_dir).eval_dir / name / self.id

    # ------------------------------------------------------------------ writing
    def ensure(self) -> None:
        """Create the folder and its protocol.json (once; an existing one is never rewritten)."""
        (self.dir / PARTS).mkdir(parents=True, exist_ok=True)
        path = self.dir / PROTOCOL_FILE
        if not path.exists():
            info = {"evaluation": self.name, "id": self.id, "protocol": self.protocol, "coords": self.coords}
            write_json(path, info)

    def write(self, tables: dict[str, pd.DataFrame]) -> list[Path]:
        """One new part per non-empty table (complete cells only). Returns the files written."""
        self.ensure()
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        out = []
        for table, frame in tables.items():
            if frame is None or frame.empty:
                continue
            path = self.dir / PARTS / f"{table}-{stamp}-{os.getpid()}-{next(_counter):04d}.csv"
            with atomic_path(path) as tmp:
                frame.to_csv(tmp, index=False)
            out.append(path)
        return out

    @contextlib.contextmanager
    def locked(self):
        """An exclusive lock on the protocol folder (blocking): for redrawing the derived files."""
        self.ensure()
        with open(self.dir / ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ------------------------------------------------------------------ reading
    def parts(self, table: str = "results") -> list[Path]:
        """The part files of ``table`` in the order they were written."""
        return sorted((self.dir / PARTS).glob(f"{table}-*.csv"), key=lambda p: p.name[len(table) + 1 :])

    def read(self, table: str = "results") -> pd.DataFrame:
        """Every stored row of ``table``; for each cell (coordinates + step), only the rows of the newest
        part that holds it (a recomputed cell replaces the old one in what is read)."""
        frames = []
        for i, path in enumerate(self.parts(table)):
            frame = pd.read_csv(path)
            frames.append(frame.assign(_part=i))
        if not frames:
            return pd.DataFrame()
        frame = pd.concat(frames, ignore_index=True)
        keys = _key_frame(frame, self.coords)
        if len(keys.columns):
            newest = frame.groupby([keys[c] for c in keys.columns], sort=False)["_part"].transform("max")
            frame = frame[frame["_part"] == newest]
        return frame.drop(columns="_part").reset_index(drop=True)

    def present(self, step: int) -> set[tuple]:
        """The cells (tuples of coordinate values, NaN as '∅') stored for checkpoint ``step``."""
        frame = self.read("results")
        if frame.empty or "step" not in frame:
            return set()
        frame = frame[frame["step"] == step]
        return set(map(tuple, _key_frame(frame, self.coords).drop(columns="step").itertuples(index=False)))

    def cell_key(self, cell: dict) -> tuple:
        return tuple(
            "∅" if cell.get(c) is None or cell.get(c) != cell.get(c) else cell[c] for c in self.coords
        )


def stored(run_dir: str | Path, name: str | None = None) -> list[Store]:
    """Every protocol stored in ``run_dir`` (of evaluation ``name``), as stores to read."""
    out = []
    pattern = f"{name}/*/{PROTOCOL_FILE}" if name else f"*/*/{PROTOCOL_FILE}"
    for path in sorted(RunDir(run_dir).eval_dir.glob(pattern)):
        info = json.loads(path.read_text())
        out.append(Store(run_dir, info["evaluation"], info["protocol"], info.get("coords", [])))
    return out
