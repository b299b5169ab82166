"""Writes that are all or nothing, storage errors in words, and readers that name a damaged file.

Every writer here writes to a temporary file in the target's own folder, named ``.<name>.tmp<pid>``,
flushes and ``fsync``s it, then ``os.replace``s it onto the target (and ``fsync``s the folder, so the
rename survives a power cut on file systems that honour it). ``os.replace`` within one folder is atomic
on POSIX file systems: a reader sees the old file or the new one, never a mixture, and a process killed
at any moment leaves the target as it was. On any failure (an exception, ``KeyboardInterrupt``,
``SystemExit`` from a signal handler) the temporary file is removed before the error propagates. Only a
process killed outright (SIGKILL, power loss) can leave ``.<name>.tmp<pid>`` behind; its pid names the
dead writer, and :func:`clean_leftovers` removes such files.

Storage failures are raised as :class:`StorageError` (an ``OSError``, so ``except OSError`` still
catches them) whose message names the file and what to do: a full disk (``ENOSPC``, also ``EDQUOT``),
a read-only file system (``EROFS``), a folder without write permission (``EACCES``/``EPERM``), the
process's file-size limit (``EFBIG``, ``ulimit -f``). Writers that fail without an ``OSError`` of their
own (``torch.save`` reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc:...]
unexpected pos``) are diagnosed from the error chain, the message, the free space left on the file
system and the file-size limit; an error that is not about storage (a value that cannot be pickled) is
re-raised unchanged.

Within one process, two writers of the same path at the same time would share the temporary name:
serialise them (across processes, :mod:`ssa_repro.core.runlock` keeps one writer per run folder).

Readers (:func:`read_json`, :func:`read_yaml`) raise :class:`ConfigFileError` naming the file, the line
and what to do when it is empty, truncated or not parsable; a missing file stays ``FileNotFoundError``.

Why no library: ``atomicwrites`` is archived (2022) and ``tempfile``'s random names drop the writer's pid
that :func:`clean_leftovers` needs to tell a dead writer's file from a live one. :func:`append_line`
locks the descriptor it appends through (no extra file beside each log) with core/locks.py, the one
module that locks files. What remains is the standard library (``os.replace``, ``fsync``) plus the
error wording, which no library gives.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ssa_repro.core.locks import lock_fd

DEFAULT_HINT = "hydra.run.dir=<another folder>"  # what to change, named in storage errors
# what the running command can change instead, where that is not hydra.run.dir (storage_advice)
_ADVICE: contextvars.ContextVar[str] = contextvars.ContextVar("storage_advice", default=DEFAULT_HINT)


@contextlib.contextmanager
def storage_advice(hint: str) -> Iterator[None]:
    """Within the block, storage errors of writers given no hint of their own name ``hint`` as what to
    change (``evaluate.py`` writes into the run folder: ``hydra.run.dir`` only moves its log folder)."""
    token = _ADVICE.set(hint)
    try:
        yield
    finally:
        _ADVICE.reset(token)


def _advice(hint: str) -> str:
    return _ADVICE.get() if hint == DEFAULT_HINT else hint


TMP_RE = re.compile(r"^\.(?P<name>.+)\.tmp(?P<pid>\d+)$")
NEARLY_FULL = 1 << 20  # bytes free under which an unexplained write failure is taken for a full disk


class StorageError(OSError):
    """A write failed because of the storage (full, read-only, not writable, file-size limit). The
    message names the file and what to do; ``errno`` and ``filename`` are set as for an ``OSError``."""

    def __init__(self, err: int | None, message: str, filename: str):
        super().__init__(err, message, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigFileError(ValueError):
    """A file that exists but cannot be read as what it should be (empty, truncated, not parsable);
    the message names the file, where it breaks, and what to do."""


# ------------------------------------------------------------------ storage errors in words
def _free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _fmt_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def storage_message(err: int | None, path: str | os.PathLike, hint: str = DEFAULT_HINT) -> str | None:
    """The words for a storage errno while writing ``path`` (None if ``err`` is not a storage error)."""
    path = Path(path)
    folder = path.parent
    hint = _advice(hint)
    if err in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        free = _free_bytes(folder)
        what = "no space left on device" if err == errno.ENOSPC else "disk quota exceeded"
        left = f" ({_fmt_bytes(free)} free there now)" if free is not None else ""
        return f"{what} while writing {path}{left}; free space or choose another folder ({hint})"
    if err == errno.EROFS:
        return f"{folder} is on a read-only file system: cannot write {path.name}; choose a writable folder ({hint})"
    if err in (errno.EACCES, errno.EPERM):
        return (
            f"{folder} is read-only / not writable by this user (permission denied writing {path.name}); "
            f"fix its permissions or choose another folder ({hint})"
        )
    if err == errno.EFBIG:
        return (
            f"file size limit reached while writing {path} (the process's `ulimit -f`, or the file "
            f"system's largest file); raise the limit or choose another folder ({hint})"
        )
    return None


def unwritable(folder: str | os.PathLike) -> str | None:
    """Why this process cannot create files in the existing ``folder`` (a read-only file system, or
    no write permission for this user), in the words :func:`storage_message` gives a failed write;
    None when it can. Checked before any work (a superuser's ``os.access`` answers "not writable" on a
    read-only mount too, so the file system's flag is read first)."""
    folder = Path(folder)
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return f"{folder} is on a read-only file system"
    except OSError:  # pragma: no cover (a folder that vanished: the access check answers)
        pass
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is read-only / not writable by this user (permission denied)"
    return None


_WORDS = {  # strerror texts found in messages of writers that do not raise OSError themselves
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": getattr(errno, "EDQUOT", errno.ENOSPC),
    "Read-only file system": errno.EROFS,
    "Permission denied": errno.EACCES,
    "File too large": errno.EFBIG,
}


def _diagnose(exc: BaseException, path: Path, written: int | None) -> int | None:
    """The storage errno behind ``exc`` raised while writing ``path`` (``written``: bytes the temporary
    file reached), or None when the failure is not about storage."""
    seen, e = set(), exc
    while e is not None and id(e) not in seen:  # the exception and its causes / contexts
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None and storage_message(e.errno, path):
            return e.errno
        for words, err in _WORDS.items():
            if words in str(e):
                return err
        e = e.__cause__ or e.__context__
    if not isinstance(exc, (RuntimeError, OSError)):
        return None  # interrupts, pickling and programming errors are not storage failures
    free = _free_bytes(path.parent)
    if free is not None and free < NEARLY_FULL:
        return errno.ENOSPC
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and written is not None and written >= limit:
            return errno.EFBIG
    except (ImportError, OSError, ValueError):  # pragma: no cover  (not POSIX)
        pass
    return None


def _raise_storage(exc: BaseException, path: Path, hint: str, err: int | None) -> None:
    """Raise :class:`StorageError` from ``exc`` if it is a storage failure (``err``, from
    :func:`_diagnose`) or another ``OSError``; return otherwise (the caller re-raises ``exc``)."""
    if isinstance(exc, StorageError):
        raise exc
    if err is None:
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
            # another OSError (EIO, ENAMETOOLONG, ...): keep its errno, say which file
            raise StorageError(
                exc.errno, f"cannot write {path}: {exc.strerror or exc}; {_advice(hint)}", str(path)
            ) from exc
        return
    raise StorageError(err, storage_message(err, path, hint) or "", str(path)) from exc


# ------------------------------------------------------------------ atomic writers
def tmp_name(path: str | os.PathLike) -> Path:
    """The temporary name this process writes ``path`` under: ``.<name>.tmp<pid>`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover  (platforms that cannot open folders)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover  (file systems that do not support it)
        pass
    finally:
        os.close(fd)


def _size(p: Path) -> int | None:
    try:
        return p.stat().st_size
    except OSError:
        return None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, hint: str = DEFAULT_HINT) -> Iterator[Path]:
    """A temporary path for writers that take a file name (``savefig``, ``torch.save``, ``to_csv``):
    ``with atomic_path(p) as tmp: fig.savefig(tmp, format="png")``. When the block ends normally the
    file is ``fsync``ed and renamed onto ``path``; if it raises, the temporary file is removed and a
    storage failure becomes :class:`StorageError`. The folder is created if needed. (Writers that choose
    the format from the suffix need it given explicitly: the temporary name ends in ``.tmp<pid>``.)"""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        with open(tmp, "rb+") as f:  # the data on disk before the rename makes it visible
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as e:
        err = _diagnose(e, path, _size(tmp))  # before the temporary file frees its space
        _unlink(tmp)
        _raise_storage(e, path, hint, err)
        raise


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike, mode: str = "wb", hint: str = DEFAULT_HINT, **open_kw
) -> Iterator[IO]:
    """An open temporary file for writers that take a file object (``np.savez``, ``json.dump``); renamed
    onto ``path`` when the block ends normally, removed if it raises (see :func:`atomic_path`)."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_file writes a whole file: mode must start with 'w', not {mode!r}")
    with atomic_path(path, hint) as tmp:
        with open(tmp, mode, **open_kw) as f:
            yield f
            f.flush()


def write_bytes(path: str | os.PathLike, data: bytes, hint: str = DEFAULT_HINT) -> Path:
    """Write ``data`` to ``path`` atomically (all or nothing); returns ``path``."""
    with atomic_path(path, hint) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, hint: str = DEFAULT_HINT, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (all or nothing); returns ``path``."""
    return write_bytes(path, text.encode(encoding), hint)


def write_json(
    path: str | os.PathLike, obj: Any, hint: str = DEFAULT_HINT, indent: int = 2, **dumps_kw
) -> Path:
    """``obj`` as JSON (indented, one trailing newline) to ``path`` atomically. The text is made before
    the file is touched, so an object that cannot be serialised leaves ``path`` as it was. numpy scalars
    and paths are written as plain numbers and strings."""
    return write_text(path, json_text(obj, indent, **dumps_kw), hint)


def json_text(obj: Any, indent: int = 2, **dumps_kw) -> str:
    """The text :func:`write_json` writes for ``obj`` (to compare with a file before rewriting it)."""
    dumps_kw.setdefault("default", _plain)
    return json.dumps(obj, indent=indent, **dumps_kw) + "\n"


def _plain(value):
    """JSON for the values tables and summaries hold besides plain Python (numpy scalars, paths)."""
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def append_line(path: str | os.PathLike, line: str, hint: str = DEFAULT_HINT, fsync: bool = True) -> None:
    """Append one line (a newline is added if missing) to ``path`` with a single ``write`` on a file
    opened with ``O_APPEND``, then ``fsync``.

    Guarantee, for one writer per file (the run lock's job): after a crash the file holds every line
    whose call returned, in order, and at most one incomplete last line (from a write cut by a kill or
    a full disk), which readers of JSONL skip. A line is never glued onto such a torn line: if the file
    does not end with a newline, one is written first. A failed write (disk full, file-size limit) is
    cut back to the file's previous length (and times) where possible and raised as :class:`StorageError`.
    Appenders in several processes take turns (an ``flock`` on the file for the length of one append),
    so their lines never interleave; the lock is released when the call returns or the process dies.
    NFS does not promise ``O_APPEND`` atomicity, nor ``flock`` across machines on every mount."""
    path = Path(path)
    data = (line if line.endswith("\n") else line + "\n").encode()
    fd = None
    start = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        lock_fd(fd)  # appenders take turns: the check below sees whole lines
        st = os.fstat(fd)
        start = st.st_size
        if start and os.pread(fd, 1, start - 1) != b"\n":  # a torn last line: end it first
            data = b"\n" + data
        n = os.write(fd, data)
        if n != len(data):  # a short write to a regular file: the device is full or the limit reached
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if fsync:
            os.fsync(fd)
    except BaseException as e:
        if fd is not None and start is not None and isinstance(e, OSError):
            with contextlib.suppress(OSError, NotImplementedError):
                os.ftruncate(fd, start)
                os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))  # as it was, times included
        if isinstance(e, OSError):
            _raise_storage(e, path, hint, _diagnose(e, path, None))
        raise
    finally:
        if fd is not None:
            os.close(fd)


# ------------------------------------------------------------------ leftovers of killed writes
def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (another user's counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:  # pragma: no cover
        return False
    return True


def clean_leftovers(folder: str | os.PathLike, recursive: bool = True) -> list[Path]:
    """Remove the temporary files (``.<name>.tmp<pid>``) of writes whose process is dead, in ``folder``
    and (``recursive``) its subfolders; return what was removed (for a log line). Files of live
    processes (a write in progress) and of this process are left alone. Pids are only meaningful on
    this machine: call it while holding the folder's exclusive run lock when the folder is shared
    between machines (the lock says no other writer is at work there)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    walk = os.walk(folder) if recursive else [(str(folder), [], os.listdir(folder))]
    for base, _dirs, files in walk:
        for name in files:
            m = TMP_RE.match(name)
            if not m:
                continue
            pid = int(m.group("pid"))
            if pid == os.getpid() or pid_alive(pid):
                continue
            p = Path(base) / name
            if _unlink(p):
                removed.append(p)
    return sorted(removed)


def _unlink(p: Path) -> bool:
    try:
        os.unlink(p)
        return True
    except FileNotFoundError:
        return False
    except OSError:  # a read-only folder: nothing was written there either
        return False


# ------------------------------------------------------------------ readers that name the file
def _describe(path: Path, what: str | None) -> str:
    return f"{path} ({what})" if what else str(path)


def _read(path: Path, what: str | None) -> str:
    raw = path.read_bytes()  # FileNotFoundError stays as it is (it names the file)
    if not raw.strip():
        raise ConfigFileError(
            f"{_describe(path, what)} is empty ({len(raw)} bytes): a write was cut short; delete it or "
            "restore it"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigFileError(
            f"{_describe(path, what)} is not UTF-8 text (byte {e.start}: {raw[e.start : e.start + 1]!r}); "
            "delete it or restore it"
        ) from None


def read_json(path: str | os.PathLike, what: str | None = None) -> Any:
    """The JSON in ``path``; :class:`ConfigFileError` naming the file and line when it is empty,
    truncated or not JSON (``what`` says what the file is, e.g. "the run's summary")."""
    path = Path(path)
    text = _read(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigFileError(
            f"{_describe(path, what)} is not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}; "
            "it may be truncated; delete it or restore it"
        ) from None


def read_yaml(path: str | os.PathLike, what: str | None = None) -> Any:
    """The YAML in ``path`` as plain Python (``${...}`` interpolations stay strings, as OmegaConf keeps
    them); :class:`ConfigFileError` naming the file and line when it is empty or not YAML. A YAML file
    cut at a line boundary can still parse: callers check the keys they need."""
    import yaml

    path = Path(path)
    text = _read(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigFileError(
            f"{_describe(path, what)} is not valid YAML{where}: {problem}; it may be truncated; delete it "
            "or restore it"
        ) from None


__all__ = [
    "StorageError",
    "ConfigFileError",
    "atomic_path",
    "atomic_file",
    "write_bytes",
    "write_text",
    "write_json",
    "append_line",
    "clean_leftovers",
    "pid_alive",
    "read_json",
    "read_yaml",
    "storage_message",
    "tmp_name",
]
