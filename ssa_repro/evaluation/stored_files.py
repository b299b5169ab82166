"""Reading the files an evaluation stored, and what is done with one that is damaged.

Every stored file is written atomically (``ssa_repro/core/atomic.py``), so a damaged one comes from
outside the framework: a disk or copy fault, a file cut off by a tool that is not atomic, a hand edit.
Such a file is never read as if it were whole. :func:`read_part` and :func:`read_protocol` check it and
raise :class:`DamagedFile`, whose message names the file, says what it is and what to do.

What counts as damage in a part (``parts/<table>-<time>-<pid>-<n>.csv``, the rows of complete cells):
bytes that are not UTF-8; no newline at the end (``DataFrame.to_csv`` ends every row with one, so a
file without it was cut mid-row); a row whose number of fields differs from the header's (pandas would
fill the missing ones with NaN and read a cut row as a cell); no header or no ``step`` column, or a
``step`` that is not a whole number. In a ``protocol.json``: bytes that are not UTF-8, text that is not
JSON, or JSON without the evaluation's name, id and settings.

A damaged file is set aside (:func:`set_aside`): moved, never deleted, to ``<protocol>/damaged/``
beside a note (``<name>.txt``) saying when, why and what was done, so it can be looked at or restored
by hand.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import logging
import os
from pathlib import Path

import pandas as pd

from ssa_repro.core.atomic import write_text

log = logging.getLogger("ssa_repro.evaluate")

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
