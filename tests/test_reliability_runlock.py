"""core/runlock.py: one writer per run folder, with real processes: a second writer is refused at once
naming the holder, evaluations share, SIGKILL frees the lock, re-entrancy and downgrade in one process."""

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

from ssa_repro.core import runlock
from ssa_repro.core.runlock import RunLock, RunLocked
from tests.conftest import ROOT


def holder(run_dir: Path, role: str = "train", shared: bool = False, then: str = "") -> subprocess.Popen:
    """A child process that takes the lock, prints "held", then sleeps (or runs ``then``)."""
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from ssa_repro.core.runlock import RunLock
        lock = RunLock({str(run_dir)!r}, {role!r}, shared={shared}).acquire()
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
        assert "hydra.run.dir=" in msg
        assert [h["pid"] for h in e.value.holders] == [proc.pid]
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
