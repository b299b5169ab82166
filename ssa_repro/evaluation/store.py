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

Damaged files (``ssa_repro/evaluation/stored_files.py`` says what counts) never stop a command and are
never read as if whole. An evaluation (:meth:`Store.repair`, under the folder's lock) moves a damaged
part aside to ``<protocol id>/damaged/`` with a note, together with the parts written in the same call,
so that their cells count as missing and are computed again; it rewrites a damaged ``protocol.json``
from its own settings, whose hash is the folder's name (the damaged one is moved aside too), and refuses
a readable one that does not hash to its folder (:class:`StoreError`). Readers that write nothing
(compare, the study's report) leave the files where they are and say, once per file, which cells they
leave out and how to get them back. The derived files are never read: each evaluation redraws them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import itertools
import json
import os
import re
from pathlib import Path

import pandas as pd

from ssa_repro.core.atomic import atomic_path, write_json
from ssa_repro.core.locks import FileLock
from ssa_repro.core.rundir import RunDir
from ssa_repro.evaluation.stored_files import DamagedFile, read_part, read_protocol, set_aside, warn_once

PROTOCOL_FILE = "protocol.json"
PARTS = "parts"
_counter = itertools.count()
_PART = re.compile(r"^(?P<table>.+)-(?P<call>\d{8}T\d{12}-\d+)-\d+\.csv$")  # <table>-<time>-<pid>-<n>.csv


class StoreError(ValueError):
    """A protocol folder whose ``protocol.json`` cannot be used for this evaluation (the message names
    the file and what to do)."""


def protocol_id(protocol: dict) -> str:
    """An 8-hex-digit hash of the protocol's canonical JSON (sorted keys): equal settings, equal id."""
    text = json.dumps(protocol, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _key_frame(frame: pd.DataFrame, coords: list[str]) -> pd.DataFrame:
    """The cell key columns (coordinates + step) with NaN made comparable."""
    cols = [c for c in [*coords, "step"] if c in frame]
    return frame[cols].astype(object).where(frame[cols].notna(), "∅")


class Store:
    """The stored results of one protocol of one run. ``repair``: damaged parts found while reading
    are moved aside (the evaluating process); otherwise they are left where they are and named once."""

    def __init__(
        self,
        run_dir: str | Path,
        name: str,
        protocol: dict,
        coords: list[str],
        repair: bool = False,
        pid: str | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.name = name
        self.protocol = protocol
        self.coords = list(coords)
        self.id = pid or protocol_id(protocol)  # (a stored folder keeps its name)
        self.dir = RunDir(self.run_dir).eval_dir / name / self.id
        self.repair_parts = repair
        self._frames: dict[Path, pd.DataFrame] = {}  # parts are never rewritten: read each once

    # ------------------------------------------------------------------ writing
    def _info(self) -> dict:
        return {"evaluation": self.name, "id": self.id, "protocol": self.protocol, "coords": self.coords}

    def ensure(self) -> None:
        """Create the folder and its protocol.json (once: a whole one is never rewritten). A damaged one
        is moved aside and written again from these settings (their hash is the folder's name); a whole
        one with other settings is refused (:class:`StoreError`)."""
        (self.dir / PARTS).mkdir(parents=True, exist_ok=True)
        path = self.dir / PROTOCOL_FILE
        if path.exists():
            try:
                found = read_protocol(path)
            except DamagedFile as e:
                done = f"{PROTOCOL_FILE} was written again from the settings of the evaluation that found it"
                aside = set_aside(path, self.dir, e.why, done)
                warn_once(
                    f"{e}; moved to {aside}; written again from this evaluation's settings (id {self.id})"
                )
            else:
                if _canonical(found) != _canonical(self._info()):
                    raise StoreError(
                        f"{path} holds other settings than the evaluation stored in its folder "
                        f"({self.name} {self.id}: the folder name is the hash of the settings), so the "
                        "cells beside it cannot be told apart from this evaluation's; it was edited or "
                        f"copied there by hand: move the folder {self.dir} away (nothing in it is deleted "
                        "by this framework) and evaluate again"
                    )
                return
        write_json(path, self._info())

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
        with FileLock(self.dir / ".lock"):
            yield

    def repair(self) -> list[Path]:
        """Check the protocol folder before an evaluation (under its lock): ``protocol.json`` as in
        :meth:`ensure`; every damaged part moved aside with the parts written in the same call (their
        cells then count as missing and are computed again). Returns where the moved parts went."""
        damaged: dict[Path, DamagedFile] = {}
        with self.locked():
            parts = sorted((self.dir / PARTS).glob("*.csv"))
            for path in parts:
                try:
                    self._frame(path)
                except FileNotFoundError:  # moved aside by another process first
                    continue
                except DamagedFile as e:
                    damaged[path] = e
            calls = {_call(p) for p in damaged}
            moved = []
            for path in parts:
                if _call(path) not in calls:
                    continue
                e = damaged.get(path)
                why = e.why if e else f"written in the same call as the damaged {_names(damaged, path)}"
                done = "its cells count as missing: the evaluation that found it computes them again"
                moved.append(set_aside(path, self.dir, why, done))
                self._frames.pop(path, None)
        for e in damaged.values():
            warn_once(
                f"{e}; moved to {self.dir / 'damaged'} (with the parts written with it, a note beside "
                "each); their cells are computed again"
            )
        return moved

    # ------------------------------------------------------------------ reading
    def parts(self, table: str = "results") -> list[Path]:
        """The part files of ``table`` in the order they were written."""
        return sorted((self.dir / PARTS).glob(f"{table}-*.csv"), key=lambda p: p.name[len(table) + 1 :])

    def _frame(self, path: Path) -> pd.DataFrame:
        if path not in self._frames:
            self._frames[path] = read_part(path, need_step=path.name.startswith("results-"))
        return self._frames[path]

    def read(self, table: str = "results", run_id: str | None = None) -> pd.DataFrame:
        """Every stored row of ``table``; for each cell (coordinates + step), only the rows of the newest
        part that holds it (a recomputed cell replaces the old one in what is read). A damaged part is
        left out, named once (moved aside when ``repair``, see :meth:`repair`). With ``run_id``, only
        rows of that model (and rows of older code, which carry no identity)."""
        frames = []
        for i, path in enumerate(self.parts(table)):
            try:
                frame = self._frame(path)
            except FileNotFoundError:  # moved aside by another process's repair
                continue
            except DamagedFile as e:
                if self.repair_parts:
                    self.repair()
                    return self.read(table, run_id)
                warn_once(
                    f"{e}; its cells are left out: `python evaluate.py run_dir={self.run_dir} "
                    f"eval={self.name}` with the settings of {self.dir / PROTOCOL_FILE} moves it aside "
                    "and computes them again"
                )
                continue
            frames.append(frame.assign(_part=i))
        if not frames:
            return pd.DataFrame()
        frame = pd.concat(frames, ignore_index=True)
        if run_id is not None and "run_id" in frame:
            frame = frame[frame["run_id"].isna() | (frame["run_id"] == run_id)]
        keys = _key_frame(frame, self.coords)
        if len(keys.columns):
            newest = frame.groupby([keys[c] for c in keys.columns], sort=False)["_part"].transform("max")
            frame = frame[frame["_part"] == newest]
        return frame.drop(columns="_part").reset_index(drop=True)

    def present(self, step: int, run_id: str | None = None) -> set[tuple]:
        """The cells (tuples of coordinate values, NaN as '∅') stored for checkpoint ``step`` (of the
        model ``run_id``, see :meth:`read`)."""
        frame = self.read("results", run_id)
        if frame.empty or "step" not in frame:
            return set()
        frame = frame[frame["step"] == step]
        return set(map(tuple, _key_frame(frame, self.coords).drop(columns="step").itertuples(index=False)))

    def cell_key(self, cell: dict) -> tuple:
        return tuple(
            "∅" if cell.get(c) is None or cell.get(c) != cell.get(c) else cell[c] for c in self.coords
        )


def _canonical(info: dict) -> str:
    """The JSON text ``protocol.json`` holds for ``info`` (as written: numpy scalars as numbers)."""
    plain = json.loads(json.dumps({k: info.get(k) for k in ("evaluation", "protocol")}, default=_plain_value))
    return json.dumps(plain, sort_keys=True)


def _plain_value(value):
    return value.item() if hasattr(value, "item") else str(value)


def _call(path: Path) -> str:
    """The evaluation call that wrote a part (its time and pid); a file not named as parts are: itself."""
    m = _PART.match(path.name)
    return m["call"] if m else path.name


def _names(damaged: dict, path: Path) -> str:
    return ", ".join(p.name for p in damaged if _call(p) == _call(path))


def stored(run_dir: str | Path, name: str | None = None) -> list[Store]:
    """Every protocol stored in ``run_dir`` (of evaluation ``name``), as stores to read. A damaged
    ``protocol.json`` is named (once) and its protocol left out: the evaluation with its settings writes
    it again."""
    out = []
    pattern = f"{name}/*/{PROTOCOL_FILE}" if name else f"*/*/{PROTOCOL_FILE}"
    for path in sorted(RunDir(run_dir).eval_dir.glob(pattern)):
        try:
            info = read_protocol(path)
        except DamagedFile as e:
            warn_once(
                f"{e}; the cells beside it are left out until `python evaluate.py run_dir={run_dir} "
                f"eval={path.parent.parent.name}` with the same settings (their hash is "
                f"{path.parent.name}) writes it again"
            )
            continue
        if info["evaluation"] != path.parent.parent.name:
            warn_once(
                f"{path} names evaluation {info['evaluation']!r} but lies in eval/{path.parent.parent.name}/ "
                f"(moved there by hand?); its cells are left out: move the folder to eval/{info['evaluation']}/"
            )
            continue
        out.append(
            Store(run_dir, info["evaluation"], info["protocol"], info.get("coords", []), pid=path.parent.name)
        )
    return out
