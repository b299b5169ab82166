"""File locks: the one module that locks files (``flock``), for every lock in the package.

One mechanism, BSD ``flock`` on an open file description: the kernel drops the lock when the
description is closed or its process dies, however it dies (SIGKILL included), so a killed holder
never blocks the next one. Two descriptions refuse each other even in one process. Its users:

- :class:`FileLock`, an exclusive lock on a lock file (created if missing), waiting without limit
  (``timeout=None``), up to ``timeout`` seconds, or not at all (``timeout=0``), then
  :class:`LockTimeout`: the result store's protocol-folder lock (evaluation/store.py, waits) and a sweep
  job's GPU lock (jobs/devices.py, ``timeout=0``: the next GPU is tried instead).
- :func:`lock_fd` on a descriptor the caller opened: the append lock of ``atomic.append_line`` (the
  descriptor it appends through, so no lock file beside each log) and the run lock
  (core/runlock.py: exclusive for training, shared for evaluations, and the downgrade exclusive ->
  shared in place, which Linux performs under one spinlock, so no other writer gets in between).
- :func:`unsupported`: whether an ``OSError`` says the file system cannot ``flock`` at all (the run
  lock then warns and goes on; see core/runlock.py).

Why not the ``filelock`` library (4.3.1 checked): its ``FileLock``/``UnixFileLock`` takes only
``LOCK_EX`` on a descriptor it opens itself, and its ``ReadWriteLock`` is SQLite-based and refuses a
downgrade (write -> read) outright. A shared lock, and a downgrade without a gap, need
``flock(LOCK_SH)`` on the same open file description as the exclusive lock, so filelock cannot hold
even the exclusive half of the run lock; and two lock mechanisms would be two sets of semantics to keep
in mind. What filelock would add beyond this module (Windows) this project does not run on.

Platforms: Linux and macOS have the same ``flock`` semantics. NFS: Linux emulates ``flock`` with NFS
byte-range locks, which hold across clients only when the lock service runs and the mount does not say
``local_lock=flock``/``local_lock=all``/``nolock``. Lustre needs the ``flock`` mount option.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

_BUSY = {errno.EWOULDBLOCK, errno.EAGAIN}
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", -1)}


class LockTimeout(TimeoutError):
    """Another process held the lock file for longer than the timeout (the message names the file)."""

    def __init__(self, path: str | os.PathLike, timeout: float):
        waited = "at once (timeout 0)" if timeout == 0 else f"within {timeout:g} s"
        super().__init__(f"{path} is locked by another process; not acquired {waited}")
        self.path = Path(path)
        self.timeout = timeout


def lock_fd(fd: int, shared: bool = False, wait: bool = True) -> bool:
    """Lock the open file description ``fd`` shared (``LOCK_SH``) or exclusive (``LOCK_EX``).

    ``wait``: block until granted; else return False at once when another description holds a
    conflicting lock. A lock this description already holds is converted in place (exclusive ->
    shared never waits). Any other failure (the file system cannot lock: :func:`unsupported`) raises
    the ``OSError``."""
    op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, op if wait else op | fcntl.LOCK_NB)
    except OSError as e:
        if not wait and e.errno in _BUSY:
            return False
        raise
    return True


def unsupported(e: OSError) -> bool:
    """Whether ``e`` says the file system does not support ``flock`` (ENOLCK, EOPNOTSUPP, ...)."""
    return e.errno in _UNSUPPORTED


class FileLock:
    """An exclusive lock on ``path`` (created if missing; its folder must exist), held from
    :meth:`acquire` until :meth:`release`, the end of a ``with`` block, or the process's death.

    ``timeout``: None waits as long as it takes; 0 tries once; t > 0 retries every ``poll`` seconds
    for t seconds. Not re-entrant: acquiring a held instance again is an error (a second instance on the
    same path, in this process or another, waits or times out)."""

    def __init__(self, path: str | os.PathLike, timeout: float | None = None, poll: float = 0.05):
        if timeout is not None and timeout < 0:
            raise ValueError(f"FileLock({path}): timeout must be None (wait) or >= 0 seconds, not {timeout}")
        self.path = Path(path)
        self.timeout = timeout
        self.poll = poll
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> FileLock:
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: this FileLock is already held")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if self.timeout is None:
                lock_fd(fd)
            else:
                deadline = time.monotonic() + self.timeout
                while not lock_fd(fd, wait=False):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LockTimeout(self.path, self.timeout)
                    time.sleep(min(self.poll, left))
        except BaseException:  # a timeout, an interrupt while waiting: nothing stays open
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (closing the descriptor drops it); a lock not held is left alone."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = ["FileLock", "LockTimeout", "lock_fd", "unsupported"]
