"""One writer per run folder: an ``flock`` on ``<run_dir>/.lock``, exclusive for training, shared for
evaluations.

``RunLock(run_dir, "train")`` (exclusive) refuses while any other process holds the folder;
``RunLock(run_dir, "evaluate", shared=True)`` lets several evaluations of one run write at once (each
writes its own files) and refuses while a training holds it. Locks are taken without waiting: a refused
writer gets :class:`RunLocked` at once, naming the holders (pid, host, command line, start time, role)
from small per-holder records ``<run_dir>/.lock.d/<pid>.json`` (written atomically, removed on release;
records of dead processes are ignored and cleaned up).

Guarantees and why:

- **A killed run never blocks its resume.** The lock is held by an open file description; the kernel
  drops it when the process dies, however it dies (SIGKILL included). Only its record may stay, and a
  record whose pid is dead (or whose pid now belongs to a process started later) is ignored.
- **Re-entrant within a process.** ``flock`` locks belong to open file descriptions, so a second
  ``open`` + ``flock`` in the same process would refuse itself. Locks of one folder in one process
  therefore share one descriptor: asking again for a lock the process holds is granted at once (a
  shared lock inside an exclusive one — the end-of-run evaluation inside the trainer — or another
  exclusive one). The kernel lock is exclusive while any of the process's holds is exclusive.
- **Downgrade** (:meth:`RunLock.downgrade`): exclusive -> shared in place (training, then its own
  evaluation, while other evaluations may start). On Linux the kernel swaps the lock type under one
  spinlock, so no other writer can get in between. Upgrading shared -> exclusive is refused: ``flock``
  converts by dropping the old lock first, so a refused upgrade would lose the shared one.
- **The lock files are not run outputs**: ``.lock`` (empty, never deleted — deleting a lock file
  while another process is about to lock it would give two holders) and ``.lock.d/`` are hidden;
  nothing that lists or compares outputs should count them.
- Forked children share the parent's lock (same descriptor) until they exit; the per-process bookkeeping
  is not inherited (a child that asks for the lock goes to the kernel like any other process).

The ``flock`` calls are core/locks.py's (the one module that locks files; why not ``filelock``: there).
Platforms: as core/locks.py says; on macOS process start times are not available, so a record is
judged stale by its pid alone. Where the file system refuses ``flock`` altogether (``ENOLCK``,
``EOPNOTSUPP``, ...), the lock logs a warning and the work goes on unlocked (``RunLock.supported`` is
False) rather than refusing to train.

A refusal is one line: the folder, the lock refused, each holder (:func:`describe`, control characters
of its command line escaped) and what to do (``hint``: ``use another folder (hydra.run.dir=...)``
unless the caller says what its command can change).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ssa_repro.core import locks
from ssa_repro.core.atomic import StorageError, pid_alive, storage_message, write_json

log = logging.getLogger("ssa_repro.runlock")

LOCK_FILE = ".lock"
RECORDS = ".lock.d"
HIDDEN = (LOCK_FILE, RECORDS)  # names that are never run outputs
HINT = "use another folder (hydra.run.dir=...)"  # what a refused writer can do, besides waiting


class RunLocked(RuntimeError):
    """The run folder is held by another writer; the message (one line) names the holders and what to
    do. ``holders``: their records; ``who``: them in words, one line."""

    def __init__(self, message: str, holders: list[dict]):
        super().__init__(message)
        self.holders = holders
        self.who = describe_all(holders)


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux ``/proc``), to tell a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _command_line() -> list[str]:
    """This process's full command line (``/proc/self/cmdline`` on Linux, else the interpreter + argv)."""
    try:
        raw = Path("/proc/self/cmdline").read_bytes()
        if raw:
            return [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]
    except OSError:
        pass
    return [sys.executable, *sys.argv]


def _started_iso(ticks: int | None) -> str | None:
    """A start time in clock ticks since boot as an ISO time (Linux), or None."""
    if ticks is None:
        return None
    try:
        btime = next(
            int(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines() if x.startswith("btime")
        )
        seconds = btime + ticks / os.sysconf("SC_CLK_TCK")
        return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="seconds")
    except (OSError, ValueError, StopIteration):
        return None


def _alive(record: dict) -> bool:
    """Whether the process a record describes still runs (records from another host count as alive)."""
    if record.get("host") != socket.gethostname():
        return True
    pid = int(record.get("pid", -1))
    if not pid_alive(pid):
        return False
    started = record.get("process_start")
    return started is None or _process_start(pid) in (None, started)


def holders(run_dir: str | os.PathLike) -> list[dict]:
    """The records of the processes that hold (or held, if they died without cleaning up: those are
    left out) the run folder's lock, oldest first."""
    folder = Path(run_dir) / RECORDS
    out = []
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(p.read_text())
        except (OSError, ValueError):  # being written or removed this instant
            continue
        if isinstance(record, dict) and _alive(record):
            out.append(record)
    return sorted(out, key=lambda r: r.get("acquired", ""))


def describe(record: dict) -> str:
    """One holder in words, on one line: role, pid, host, start time, command line (newlines and other
    control characters in it escaped, ``\\n``, so a ``python -c`` holder stays on one line)."""
    cmd = " ".join(record.get("argv") or [])
    cmd = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cmd)
    if len(cmd) > 300:
        cmd = cmd[:297] + "..."
    roles = ", ".join(record.get("roles") or []) or "?"
    return (
        f"{roles} ({record.get('mode', '?')} lock), pid {record.get('pid')} on {record.get('host')}, "
        f"started {record.get('process_started') or '?'}, holding since {record.get('acquired')}: {cmd}"
    )


def describe_all(records: list[dict]) -> str:
    """Holders in words, on one line (``; `` between them)."""
    return "; ".join(describe(r) for r in records) or (
        "another process (no record of which: it may be on another machine, or still starting)"
    )


@dataclass
class _Held:
    """This process's hold on one folder: one descriptor, the kernel lock mode, the RunLock objects."""

    fd: int
    shared: bool  # the kernel lock's mode
    locks: list = field(default_factory=list)
    pid: int = field(default_factory=os.getpid)
    acquired: str | None = None


_HELD: dict[str, _Held] = {}  # lock file path -> this process's hold
_GUARD = threading.RLock()


class RunLock:
    """A hold on ``run_dir`` for ``role`` ("train", "evaluate:zorro", ...), exclusive unless ``shared``.

    ``with RunLock(run_dir, "train"):`` or ``lock = RunLock(...).acquire()`` ... ``lock.release()``.
    Acquiring creates ``run_dir`` if needed (call it once the config is known to be good, before the
    first output is written). Raises :class:`RunLocked` at once when another process holds the folder
    in a conflicting mode; its message ends with ``hint``, what the refused command can do besides
    waiting or stopping the holder."""

    def __init__(
        self, run_dir: str | os.PathLike, role: str = "train", shared: bool = False, hint: str = HINT
    ):
        self.run_dir = Path(run_dir)
        self.role = role
        self.shared = shared
        self.hint = hint
        self.held = False
        self.supported = True

    @property
    def path(self) -> Path:
        return self.run_dir / LOCK_FILE

    def _key(self) -> str:
        return os.path.realpath(self.path)

    # ------------------------------------------------------------------ acquire / release
    def _open(self) -> int:
        """The lock file's descriptor (the folder and file are created if needed); a folder that cannot
        be written is a :class:`StorageError` in words."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            words = storage_message(e.errno, self.path)
            if words is None:
                raise
            raise StorageError(e.errno, words, str(self.path)) from e

    def acquire(self) -> RunLock:
        if self.held:
            return self
        with _GUARD:
            key = self._key()
            held = _HELD.get(key)
            if held is not None and held.pid != os.getpid():  # inherited through fork: not ours
                _HELD.pop(key)
                held = None
            if held is not None:
                if not self.shared and held.shared:
                    raise RunLocked(
                        f"{self.run_dir}: this process holds a shared lock ({self._roles(held)}) and asks "
                        f"for an exclusive one ({self.role}); release the shared lock first (flock cannot "
                        "upgrade without letting go)",
                        [],
                    )
                held.locks.append(self)
                self.held = True
                self._write_record(held)
                return self
            fd = self._open()
            try:
                granted = locks.lock_fd(fd, shared=self.shared, wait=False)
            except OSError as e:
                os.close(fd)
                if locks.unsupported(e):
                    log.warning(
                        "%s: the file system does not support flock (%s); going on without a run lock, "
                        "so nothing stops two writers in this folder",
                        self.path,
                        os.strerror(e.errno),
                    )
                    self.supported = False
                    self.held = True
                    return self
                raise
            if not granted:
                os.close(fd)
                raise self._refusal()
            held = _HELD[key] = _Held(fd, self.shared, [self])
            self.held = True
            self._clean_records(exclusive=not self.shared)
            self._write_record(held)
            return self

    def release(self) -> None:
        """Give up this hold; the kernel lock goes with the process's last hold on the folder."""
        if not self.held:
            return
        self.held = False
        if not self.supported:
            return
        with _GUARD:
            key = self._key()
            held = _HELD.get(key)
            if held is None or self not in held.locks:
                return
            held.locks.remove(self)
            if not held.locks:
                _HELD.pop(key)
                self._record_path().unlink(missing_ok=True)
                os.close(held.fd)  # drops the flock
                return
            if not held.shared and all(lock.shared for lock in held.locks):
                locks.lock_fd(held.fd, shared=True)  # never waits: nobody else holds it now
                held.shared = True
            self._write_record(held)

    def downgrade(self, role: str | None = None) -> None:
        """Exclusive -> shared (and optionally a new role, e.g. "train+evaluate"): other evaluations may
        now start; trainings stay refused. The process's kernel lock becomes shared once none of its
        holds on the folder is exclusive."""
        if not self.held:
            raise RuntimeError(f"{self.run_dir}: downgrade of a lock that is not held")
        self.shared = True
        if role is not None:
            self.role = role
        if not self.supported:
            return
        with _GUARD:
            held = _HELD[self._key()]
            if not held.shared and all(lock.shared for lock in held.locks):
                locks.lock_fd(held.fd, shared=True)  # in place, no gap (core/locks.py)
                held.shared = True
            self._write_record(held)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    # ------------------------------------------------------------------ records
    def _record_path(self) -> Path:
        return self.run_dir / RECORDS / f"{os.getpid()}.json"

    @staticmethod
    def _roles(held: _Held) -> str:
        return ", ".join(dict.fromkeys(lock.role for lock in held.locks))

    def _write_record(self, held: _Held) -> None:
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "argv": _command_line(),
            "process_start": _process_start(os.getpid()),
            "acquired": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "mode": "shared" if held.shared else "exclusive",
            "roles": list(dict.fromkeys(lock.role for lock in held.locks)),
        }
        if held.acquired is None:
            held.acquired = record["acquired"]
        record["acquired"] = held.acquired  # the first acquisition of this process's hold
        record["process_started"] = _started_iso(record["process_start"])
        try:
            write_json(self._record_path(), record, hint="the run folder must be writable")
        except OSError as e:  # the record is for messages only: the kernel lock is what counts
            log.warning("could not write the run-lock record %s: %s", self._record_path(), e)

    def _clean_records(self, exclusive: bool) -> None:
        """Remove the records of dead holders (all others' when we hold the folder exclusively: a live
        holder would hold the lock)."""
        folder = self.run_dir / RECORDS
        if not folder.is_dir():
            return
        for p in folder.glob("*.json"):
            if p.stem == str(os.getpid()):
                continue
            try:
                record = json.loads(p.read_text())
                stale = exclusive or not _alive(record)
            except (OSError, ValueError):
                stale = exclusive
            if stale:
                p.unlink(missing_ok=True)

    def _refusal(self) -> RunLocked:
        found: list[dict] = []
        for _ in range(20):  # a holder that has just taken the lock writes its record within moments
            found = holders(self.run_dir)
            if found:
                break
            time.sleep(0.01)
        mine = "an exclusive (training)" if not self.shared else "a shared (evaluation)"
        pids = " ".join(str(r["pid"]) for r in found if r.get("host") == socket.gethostname())
        stop = f"stop it (kill {pids}), " if pids else "stop it, "
        return RunLocked(
            f"{self.run_dir} is in use: {mine} lock for {self.role!r} was refused; held by "
            f"{describe_all(found)}. Wait for it to finish, {stop}or {self.hint}.",
            found,
        )


__all__ = [
    "RunLock",
    "RunLocked",
    "holders",
    "describe",
    "describe_all",
    "HINT",
    "HIDDEN",
    "LOCK_FILE",
    "RECORDS",
]
