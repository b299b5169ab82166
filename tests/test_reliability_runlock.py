"""core/runlock.py: one writer per run folder, with real processes: a second writer is refused at once
naming the holder, evaluations share, SIGKILL frees the lock, re-entrancy and downgrade in one process.
core/locks.py: the file lock with its timeout, and that no other module of the package locks files."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ssa_repro.core import locks, runlock
from ssa_repro.core.locks import FileLock, LockTimeout
from ssa_repro.core.runlock import RunLock, RunLocked
from tests.conftest import ROOT
from tests.test_layers import PACKAGE, imports, module_name


def holder(
    run_dir: Path, role: str = "train", shared: bool = False, then: str = "", take: str = ""
) -> subprocess.Popen:
    """A child process that takes the lock (or runs ``take``), prints "held", then sleeps (or runs
    ``then``)."""
    take = take or f"RunLock({str(run_dir)!r}, {role!r}, shared={shared}).acquire()"
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from ssa_repro.core.locks import FileLock
        from ssa_repro.core.runlock import RunLock
        lock = {take}
        print("held", flush=True)
        {then or "time.sleep(120)"}
        print("done", flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_a_second_training_is_refused_at_once_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    proc = holder(run)
    try:
        t0 = time.perf_counter()
        with pytest.raises(RunLocked) as e:
            RunLock(run, "train").acquire()
        assert time.perf_counter() - t0 < 20  # refused, not waiting for the holder (which never lets go)
        msg = str(e.value)
        assert f"{run} is in use" in msg and f"pid {proc.pid}" in msg and f"kill {proc.pid}" in msg
        assert "train (exclusive lock)" in msg and "-c" in msg  # role and command line
        assert msg.endswith("or use another folder (hydra.run.dir=...).")  # the default hint
        assert "\n" not in msg and "\\nimport sys" in msg  # one line: the child's code escaped
        assert [h["pid"] for h in e.value.holders] == [proc.pid]
        assert "\n" not in e.value.who and f"pid {proc.pid}" in e.value.who
        with pytest.raises(RunLocked) as e:
            RunLock(run, "study x", hint="use another --root").acquire()
        assert str(e.value).endswith(f"stop it (kill {proc.pid}), or use another --root.")
        with pytest.raises(RunLocked, match="a shared \\(evaluation\\) lock for 'evaluate' was refused"):
            RunLock(run, "evaluate", shared=True).acquire()  # no evaluation while it trains
    finally:
        stop(proc)


def test_sigkill_frees_the_lock_and_its_stale_record_is_ignored(tmp_path):
    run = tmp_path / "run"
    proc = holder(run)
    record = run / runlock.RECORDS / f"{proc.pid}.json"
    assert json.loads(record.read_text())["roles"] == ["train"]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert record.exists() and runlock.holders(run) == []  # left behind, but dead: ignored
    with RunLock(run, "train") as lock:  # the resume is not blocked
        assert lock.held and not record.exists()  # the exclusive holder cleans stale records
        assert [h["pid"] for h in runlock.holders(run)] == [os.getpid()]
    assert runlock.holders(run) == []
    assert sorted(p.name for p in run.iterdir()) == [".lock", ".lock.d"]  # hidden, empty: no outputs
    assert list((run / runlock.RECORDS).iterdir()) == []


def test_evaluations_share_and_keep_training_out(tmp_path):
    run = tmp_path / "run"
    a = holder(run, "evaluate:zorro", shared=True)
    b = holder(run, "evaluate:lm", shared=True)
    try:
        with RunLock(run, "evaluate:quick", shared=True):
            assert {h["pid"] for h in runlock.holders(run)} == {a.pid, b.pid, os.getpid()}
        with pytest.raises(RunLocked) as e:
            RunLock(run, "train").acquire()
        assert f"pid {a.pid}" in str(e.value) and f"pid {b.pid}" in str(e.value)
        assert "evaluate:zorro (shared lock)" in str(e.value)
    finally:
        stop(a)
        stop(b)
    with RunLock(run, "train"):
        pass


def test_reentrant_in_one_process_and_downgrade(tmp_path):
    run = tmp_path / "run"
    train = RunLock(run, "train").acquire()
    with RunLock(run, "evaluate:quick", shared=True):  # the end-of-run evaluation inside the trainer
        with RunLock(run, "train"):  # the same process again: granted
            pass
        record = json.loads((run / runlock.RECORDS / f"{os.getpid()}.json").read_text())
        assert record["mode"] == "exclusive" and record["roles"] == ["train", "evaluate:quick"]
    proc = None
    try:
        train.downgrade("train+evaluate")
        proc = holder(run, "evaluate:zorro", shared=True)  # another evaluation may now start
        code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from ssa_repro.core.runlock import RunLock; "
        code += f"RunLock({str(run)!r}, 'train').acquire()"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and "train+evaluate (shared lock)" in out.stderr  # a training may not
        assert f"pid {os.getpid()}" in out.stderr and f"pid {proc.pid}" in out.stderr
    finally:
        train.release()
        if proc:
            stop(proc)
    with RunLock(run, "train"):
        pass


def test_shared_then_exclusive_in_one_process_is_refused_clearly(tmp_path):
    with RunLock(tmp_path, "evaluate", shared=True):
        with pytest.raises(
            RunLocked, match="this process holds a shared lock .* release the shared lock first"
        ):
            RunLock(tmp_path, "train").acquire()
    with RunLock(tmp_path, "train"):
        pass


def test_released_when_the_holder_exits_or_releases(tmp_path):
    run = tmp_path / "run"
    proc = holder(run, then="lock.release()")
    try:
        assert proc.stdout.readline().strip() == "done"
        with RunLock(run, "train"):
            pass
    finally:
        stop(proc)


def test_a_pid_reused_by_another_process_is_not_a_holder(tmp_path):
    run = tmp_path / "run"
    (run / runlock.RECORDS).mkdir(parents=True)
    fake = {"pid": os.getpid(), "host": os.uname().nodename, "process_start": 1, "roles": ["train"]}
    (run / runlock.RECORDS / "999999.json").write_text(json.dumps(fake))
    assert runlock.holders(run) == []  # our pid, but another start time: not the process that wrote it


def test_unsupported_file_system_warns_and_goes_on(tmp_path, monkeypatch, caplog):
    def flock(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", flock)
    lock = RunLock(tmp_path, "train").acquire()
    assert lock.held and not lock.supported
    assert "does not support flock" in caplog.text
    lock.release()


def test_a_folder_that_cannot_be_written_is_a_storage_error(tmp_path, monkeypatch):
    from ssa_repro.core.atomic import StorageError

    def mkdir(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(StorageError, match="read-only file system: cannot write .lock"):
        RunLock(tmp_path / "run", "train").acquire()


def test_describe_escapes_control_characters():
    record = {"roles": ["train"], "mode": "exclusive", "pid": 7, "host": "h", "acquired": "t"}
    record["argv"] = ["python", "-c", "import sys\nprint(1)\tx"]
    assert runlock.describe(record).endswith(": python -c import sys\\nprint(1)\\tx")
    assert runlock.describe_all([record, record]).count("; ") == 1
    assert runlock.describe_all([]).startswith("another process (no record of which")


def test_file_lock_waits_times_out_or_refuses_at_once(tmp_path):
    path = tmp_path / "gpu0.lock"
    proc = holder(tmp_path, take=f"FileLock({str(path)!r}).acquire()", then="time.sleep(1.0); lock.release()")
    try:
        t0 = time.monotonic()
        with pytest.raises(LockTimeout, match=f"{path} is locked by another process; not acquired at once"):
            FileLock(path, timeout=0).acquire()
        with pytest.raises(LockTimeout, match="not acquired within 0.2 s"):
            FileLock(path, timeout=0.2).acquire()
        assert 0.2 <= time.monotonic() - t0 < 0.9  # the child lets go after 1 s
        with FileLock(path) as lock:  # waits for the child's release
            assert lock.held and time.monotonic() - t0 >= 0.9
            assert proc.stdout.readline().strip() == "done"
            with pytest.raises(LockTimeout):  # a second description in this process is refused too
                FileLock(path, timeout=0).acquire()
            with pytest.raises(RuntimeError, match="already held"):
                lock.acquire()
        assert not lock.held
        with FileLock(path, timeout=0):  # released on leaving the block
            pass
    finally:
        stop(proc)
    with pytest.raises(ValueError, match="timeout must be None .* not -1"):
        FileLock(path, timeout=-1)


def test_file_lock_is_dropped_when_its_holder_is_killed(tmp_path):
    path = tmp_path / "store.lock"
    proc = holder(tmp_path, take=f"FileLock({str(path)!r}).acquire()")
    with pytest.raises(LockTimeout):
        FileLock(path, timeout=0).acquire()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with FileLock(path, timeout=0):
        pass


def test_lock_fd_shared_exclusive_and_conversion(tmp_path):
    path = tmp_path / "f"
    a, b = (os.open(path, os.O_RDWR | os.O_CREAT) for _ in range(2))  # two open file descriptions
    try:
        assert locks.lock_fd(a, shared=True, wait=False) and locks.lock_fd(b, shared=True, wait=False)
        assert not locks.lock_fd(a, wait=False)  # no exclusive beside another's shared lock
        os.close(b)
        b = os.open(path, os.O_RDWR)
        assert locks.lock_fd(a, wait=False)  # alone now: converted to exclusive
        assert not locks.lock_fd(b, shared=True, wait=False)
        assert locks.lock_fd(a, shared=True)  # downgrade in place: never waits
        assert locks.lock_fd(b, shared=True, wait=False)
    finally:
        os.close(a)
        os.close(b)


def test_only_core_locks_touches_fcntl_or_filelock():
    """One locking mechanism: every other module locks through ssa_repro/core/locks.py."""
    lockers = {
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        for module, _, _, _ in imports(p)
        if module.split(".")[0] in ("fcntl", "filelock")
    }
    assert lockers == {"ssa_repro.core.locks"}
