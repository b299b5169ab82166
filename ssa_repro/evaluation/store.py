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
                               drawn from all stored cells (rewritten atomically after each call,
                               where their bytes change: :meth:`Store.write_derived`)
        .drawn.json            which parts (and title) the figures were drawn from: whether to draw
                               them again (:meth:`Store.drawn`, :meth:`Store.record_drawn`)

A cell is a point of the grid (its coordinate columns, e.g. ``sigma_x``, ``length``) at a checkpoint
``step``. A later evaluation with the same protocol reuses the cells already stored and computes only
the missing ones; ``eval.force=true`` computes them again into new parts, and readers keep, for each
cell, the rows of its newest part (older parts stay on disk: nothing is deleted). Several processes may
evaluate one run at once (a joblib multirun): each writes its own parts, and the derived files are
redrawn under an exclusive lock on the protocol folder, each time from every part present, so the last
writer's figures hold every job's cells.

Damaged files never stop a command and are never read as if whole. Every stored file is written
atomically (``ssa_repro/core/atomic.py``), so a damaged one comes from outside the framework (a disk or
copy fault, a tool that is not atomic, a hand edit). In a part: bytes that are not UTF-8; no newline at
the end (``DataFrame.to_csv`` ends every row with one, so a file without it was cut mid-row); a row
whose number of fields differs from the header's (pandas would fill the missing ones with NaN and read
a cut row as a cell); no header or no ``step`` column, or a ``step`` that is not a whole number. In a
``protocol.json``: bytes that are not UTF-8, text that is not JSON, or JSON without the evaluation's
name, id and settings (:func:`read_part`, :func:`read_protocol`: :class:`DamagedFile` names the file,
what it is and what to do). An evaluation (:meth:`Store.repair`, under the folder's lock) moves a
damaged part aside (:func:`set_aside`: moved, never deleted) to ``<protocol id>/damaged/`` with a note
saying when, why and what was done, together with the parts written in the same call, so that their
cells count as missing and are computed again; it rewrites a damaged ``protocol.json``
from its own settings, whose hash is the folder's name (the damaged one is moved aside too), and refuses
a readable one that does not hash to its folder (:class:`StoreError`). Readers that write nothing
(compare, the study's report) leave the files where they are and say, once per file, which cells they
leave out and how to get them back. The derived files are never read: each evaluation redraws them.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import hashlib
import io
import itertools
import json
import logging
import os
import re
from pathlib import Path

import pandas as pd

from ssa_repro.core.atomic import atomic_path, clean_leftovers, write_bytes, write_json, write_text
from ssa_repro.core.locks import FileLock
from ssa_repro.core.rundir import RunDir

log = logging.getLogger("ssa_repro.evaluate")

PROTOCOL_FILE = "protocol.json"
PARTS = "parts"
DRAWN = ".drawn.json"  # which parts (and title) the figures were drawn from: whether to draw again
_counter = itertools.count()
_PART = re.compile(r"^(?P<table>.+)-(?P<call>\d{8}T\d{12}-\d+)-\d+\.csv$")  # <table>-<time>-<pid>-<n>.csv


class StoreError(ValueError):
    """A protocol folder whose ``protocol.json`` cannot be used for this evaluation (the message names
    the file and what to do)."""


# ------------------------------------------------------------------ damaged files
DAMAGED = "damaged"  # the folder, inside a protocol's folder, that damaged files are moved to
_said: set[str] = set()  # warnings already given by this process (each damaged file is named once)


class DamagedFile(ValueError):
    """A stored file that cannot be read as what it should be; the message names it, says what it is,
    what is wrong and what to do."""

    def __init__(self, path: Path, what: str, why: str, todo: str = ""):
        self.path, self.what, self.why, self.todo = Path(path), what, why, todo
        super().__init__(f"{path} ({what}) is damaged: {why}" + (f"; {todo}" if todo else ""))


def warn_once(message: str) -> None:
    """A warning, given once per process (a store is read several times by one command)."""
    if message not in _said:
        _said.add(message)
        log.warning("%s", message)


def _text(path: Path, what: str) -> str:
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DamagedFile(path, what, f"byte {e.start} of {len(raw)} is not UTF-8 text") from None


def read_part(path: Path, need_step: bool = True, what: str = "a part of the stored cells") -> pd.DataFrame:
    """The rows of one part file, checked whole (see the module's docstring; ``need_step``: a ``step``
    column is required, as in every ``results`` part); :class:`DamagedFile` otherwise."""
    text = _text(path, what)
    if not text.strip():
        raise DamagedFile(path, what, f"it is empty ({len(text)} bytes)")
    if not text.endswith("\n"):
        raise DamagedFile(path, what, "it ends mid-row (no newline at the end): it was cut off")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    header = rows[0]
    bad = next((i for i, r in enumerate(rows[1:], start=2) if len(r) != len(header)), None)
    if bad is not None:
        raise DamagedFile(
            path, what, f"line {bad} has {len(rows[bad - 1])} fields where the header has {len(header)}"
        )
    if need_step and "step" not in header:
        raise DamagedFile(path, what, f"its header has no step column (it reads {','.join(header)[:200]!r})")
    try:
        frame = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as e:
        raise DamagedFile(path, what, f"not a CSV table ({str(e).splitlines()[0]})") from None
    step = pd.to_numeric(frame.get("step", pd.Series(dtype=float)), errors="coerce")
    if step.isna().any() or (step != step.round()).any():
        raise DamagedFile(path, what, "its step column holds a value that is not a whole number")
    return frame


def read_protocol(path: Path) -> dict:
    """A protocol folder's ``protocol.json`` (evaluation, id, protocol, coords), checked; raises
    :class:`DamagedFile` if it is not whole."""
    what = "the settings of the stored cells beside it"
    text = _text(path, what)
    try:
        info = json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedFile(path, what, f"not JSON ({e.msg}: line {e.lineno} column {e.colno})") from None
    if not isinstance(info, dict) or not {"evaluation", "protocol"} <= set(info):
        raise DamagedFile(path, what, "it does not hold the evaluation's name and protocol")
    if not isinstance(info["protocol"], dict) or not isinstance(info.get("coords", []), list):
        raise DamagedFile(path, what, "its protocol is not a mapping or its coords not a list")
    return info


def set_aside(path: Path, folder: Path, why: str, done: str) -> Path:
    """Move ``path`` into ``folder/damaged/`` (never deleted; a name already there gets the time added)
    with a note ``<name>.txt`` (when, why, what was done); returns where it went. A file another
    process moved first is left to it."""
    aside = Path(folder) / DAMAGED
    aside.mkdir(parents=True, exist_ok=True)
    target = aside / path.name
    if target.exists():
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        target = aside / f"{path.stem}-{stamp}{path.suffix}"
    try:
        os.rename(path, target)  # same file system (inside the protocol folder): atomic
    except FileNotFoundError:
        return target
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write_text(
        target.with_name(target.name + ".txt"),
        f"moved here from {path} at {when} (UTC)\nwhy: {why}\n{done}\n",
    )
    return target


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
        # ``results`` last: its part is what makes a cell count as stored (:meth:`present`), so a call
        # killed between its parts leaves cells that are computed again, never cells half-kept
        for table, frame in sorted(tables.items(), key=lambda kv: kv[0] == "results"):
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
            # temporary files of writers that died mid-write (a kill): their pid is checked, a live
            # writer's file is left alone (:func:`~ssa_repro.core.atomic.clean_leftovers`)
            for p in clean_leftovers(self.dir):
                log.info("removed %s, left by a killed write (its process is gone)", p)
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
                f"{e}; moved to {self.dir / DAMAGED} (with the parts written with it, a note beside "
                "each); their cells are computed again"
            )
        return moved

    # ------------------------------------------------------------------ derived files
    def write_derived(self, name: str, data: bytes) -> None:
        """A derived file (a table, ``summary.json``) written where its bytes differ from the file's (a
        damaged one is replaced, an unchanged one left as it is)."""
        path = self.dir / name
        try:
            if path.read_bytes() == data:
                return
        except OSError:
            pass
        write_bytes(path, data)

    def _drawing_key(self, title: str) -> str:
        """A hash of the title and the names of the parts present (a part is never rewritten: new cells,
        recomputed cells and parts moved aside all change the names)."""
        names = sorted(p.name for p in (self.dir / PARTS).glob("*.csv"))
        return hashlib.sha256(json.dumps([title, names]).encode()).hexdigest()

    def drawn(self, title: str) -> list[str] | None:
        """The figures' names if they were drawn from the parts present and all exist; else None."""
        try:
            info = json.loads((self.dir / DRAWN).read_text())
            figures = [str(f) for f in info["figures"]]
            current = info["key"] == self._drawing_key(title)
        except (OSError, ValueError, KeyError, TypeError):  # none yet, or damaged: draw
            return None
        whole = all(_nonempty(self.dir / f) for f in figures)  # an emptied figure is drawn again
        return figures if current and whole else None

    def record_drawn(self, title: str, figures: list[str]) -> None:
        """Say which parts (and title) ``figures`` were drawn from."""
        write_json(self.dir / DRAWN, {"key": self._drawing_key(title), "figures": figures})

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

    def present(self, step: int, run_id: str | None = None, table: str = "results") -> set[tuple]:
        """The cells (tuples of coordinate values, NaN as '∅') stored for checkpoint ``step`` (of the
        model ``run_id``, see :meth:`read`) in ``table`` (``results``: the cells that count as stored;
        another table: the cells it holds rows of, to check that it covers what it should)."""
        frame = self.read(table, run_id)
        if frame.empty or "step" not in frame:
            return set()
        frame = frame[frame["step"] == step]
        return set(map(tuple, _key_frame(frame, self.coords).drop(columns="step").itertuples(index=False)))

    def cell_key(self, cell: dict) -> tuple:
        return tuple(
            "∅" if cell.get(c) is None or cell.get(c) != cell.get(c) else cell[c] for c in self.coords
        )


def _nonempty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


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
