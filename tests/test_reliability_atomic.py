"""core/atomic.py and checkpoints written through it: all-or-nothing writes, storage errors in words,
no temporary file left behind, leftovers of killed writers cleaned, readers that name a damaged file."""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ssa_repro.core import atomic, checkpoint
from ssa_repro.core.atomic import ConfigFileError, StorageError
from tests.conftest import ROOT


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` (hidden ones included) with its bytes and mtime."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def failing_write(err: int):
    """An ``os.write`` that writes a few bytes, then fails with ``err`` (as a full disk does)."""
    real = os.write

    def write(fd, data):
        real(fd, bytes(data)[:3])
        raise OSError(err, os.strerror(err))

    return write


# ------------------------------------------------------------------ writers
def test_writers_replace_whole_files(tmp_path):
    p = tmp_path / "sub" / "config.yaml"
    atomic.write_text(p, "a: 1\n")
    assert p.read_text() == "a: 1\n"
    atomic.write_json(tmp_path / "s.json", {"x": [1, 2]})
    assert json.loads((tmp_path / "s.json").read_text()) == {"x": [1, 2]}
    atomic.write_bytes(p, b"b: 2\n")
    assert p.read_bytes() == b"b: 2\n"
    with atomic.atomic_path(tmp_path / "fig.png") as tmp:
        assert tmp.name == f".fig.png.tmp{os.getpid()}" and tmp.parent == tmp_path
        tmp.write_bytes(b"png")
    with atomic.atomic_file(tmp_path / "a.npz") as f:
        f.write(b"npz")
    assert (tmp_path / "fig.png").read_bytes() == b"png" and (tmp_path / "a.npz").read_bytes() == b"npz"
    assert not list(tmp_path.rglob(".*.tmp*"))


@pytest.mark.parametrize(
    "err, words",
    [
        (errno.ENOSPC, "no space left on device while writing {path}"),
        (errno.EROFS, "{folder} is on a read-only file system"),
        (errno.EACCES, "{folder} is read-only / not writable"),
        (errno.EFBIG, "file size limit reached while writing {path}"),
    ],
)
def test_storage_errors_in_words_and_nothing_changed(tmp_path, monkeypatch, err, words):
    target = tmp_path / "summary.json"
    atomic.write_json(target, {"old": True})
    before = snapshot(tmp_path)
    monkeypatch.setattr(os, "write", failing_write(err))
    with pytest.raises(StorageError) as e:
        atomic.write_json(target, {"new": True})
    monkeypatch.undo()
    assert e.value.errno == err and e.value.filename == str(target)
    assert words.format(path=target, folder=tmp_path) in str(e.value)
    assert "hydra.run.dir=" in str(e.value)  # what to do
    assert isinstance(e.value, OSError)  # `except OSError` still catches it
    assert snapshot(tmp_path) == before  # the old file untouched, no temporary file


def test_a_failing_writer_leaves_nothing(tmp_path):
    target = tmp_path / "grid.csv"
    target.write_text("old\n")
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="not storage"):
        with atomic.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise ValueError("not storage")  # re-raised as it is
    with pytest.raises(KeyboardInterrupt):
        with atomic.atomic_file(target) as f:
            f.write(b"half")
            raise KeyboardInterrupt  # a Ctrl-C mid-write
    with pytest.raises(TypeError):
        atomic.write_json(target, {"x": object()})  # not serialisable: the file is not even opened
    assert snapshot(tmp_path) == before


def test_an_unrelated_oserror_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "write", failing_write(errno.EIO))
    with pytest.raises(StorageError, match=r"cannot write .*x\.txt: Input/output error") as e:
        atomic.write_text(tmp_path / "x.txt", "x")
    assert e.value.errno == errno.EIO


# ------------------------------------------------------------------ real file systems
@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 256 KiB tmpfs (needs root and mount rights; skipped otherwise)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        gc.collect()
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_for_real_torch_save_and_appends(tiny_tmpfs):
    ckpt = tiny_tmpfs / "checkpoints" / "last.pt"
    checkpoint.save(ckpt, {"step": 1, "w": torch.zeros(10)})
    metrics = tiny_tmpfs / "metrics.jsonl"
    atomic.append_line(metrics, json.dumps({"step": 1}))
    before = snapshot(tiny_tmpfs)
    with pytest.raises(StorageError, match=r"no space left on device while writing .*last\.pt") as e:
        checkpoint.save(ckpt, {"step": 2, "w": torch.zeros(200_000)})  # 800 kB into 256 KiB
    assert "enforce fail" not in str(e.value)
    with pytest.raises(StorageError, match="no space left on device while writing .*metrics.jsonl"):
        atomic.append_line(metrics, "x" * 400_000)
    assert snapshot(tiny_tmpfs) == before  # old checkpoint and metrics intact, no temporary file
    assert checkpoint.load(ckpt)["step"] == 1
    del e  # its traceback holds torch's file writer, whose open file keeps the tmpfs busy
    gc.collect()


def test_read_only_file_system_for_real(tiny_tmpfs):
    (tiny_tmpfs / "config.yaml").write_text("a: 1\n")
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True)
    before = snapshot(tiny_tmpfs)
    with pytest.raises(
        StorageError, match=f"{tiny_tmpfs} is on a read-only file system: cannot write config"
    ):
        atomic.write_text(tiny_tmpfs / "config.yaml", "a: 2\n")
    with pytest.raises(StorageError, match="read-only file system: cannot write train.log"):
        atomic.append_line(tiny_tmpfs / "train.log", "line")
    assert snapshot(tiny_tmpfs) == before


def test_file_size_limit_for_real(tmp_path):
    """RLIMIT_FSIZE in a child process (SIGXFSZ ignored, so writes fail with EFBIG)."""
    code = textwrap.dedent(
        f"""
        import resource, signal, sys, torch
        sys.path.insert(0, {str(ROOT)!r})
        from ssa_repro.core import checkpoint
        from ssa_repro.core.atomic import StorageError
        checkpoint.save({str(tmp_path / "last.pt")!r}, {{"step": 1}})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
        try:
            checkpoint.save({str(tmp_path / "last.pt")!r}, {{"step": 2, "w": torch.zeros(100_000)}})
        except StorageError as e:
            print("StorageError", e.errno, e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (
        f"StorageError {errno.EFBIG} file size limit reached while writing {tmp_path / 'last.pt'}"
        in out.stdout
    )
    assert checkpoint.load(tmp_path / "last.pt")["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


# ------------------------------------------------------------------ checkpoints
def test_checkpoint_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    ckpt = tmp_path / "checkpoints" / "last.pt"
    checkpoint.save(ckpt, {"step": 1})
    before = snapshot(tmp_path)

    def torch_save_on_a_full_disk(obj, f, *a, **k):
        Path(f).write_bytes(b"PK partial")
        raise RuntimeError(
            "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
        ) from OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", torch_save_on_a_full_disk)
    with pytest.raises(StorageError) as e:
        checkpoint.save(ckpt, {"step": 2})
    monkeypatch.undo()
    assert e.value.errno == errno.ENOSPC
    assert str(e.value).startswith(f"no space left on device while writing {ckpt}")
    assert snapshot(tmp_path) == before
    assert checkpoint.load(ckpt)["step"] == 1


def test_checkpoint_records_threads_and_warns_on_another_count(tmp_path):
    ckpt = tmp_path / "last.pt"
    checkpoint.save(ckpt, {"step": 1})
    state = checkpoint.load(ckpt)
    assert state["threads"]["torch"] == torch.get_num_threads()
    assert set(state["threads"]) == {"torch", "interop", "OMP_NUM_THREADS", "MKL_NUM_THREADS"}
    assert checkpoint.thread_mismatch(state) is None
    state["threads"] = {"torch": torch.get_num_threads() + 1, "OMP_NUM_THREADS": "3"}
    msg = checkpoint.thread_mismatch(state)
    assert f"written with {torch.get_num_threads() + 1} CPU threads (OMP_NUM_THREADS=3)" in msg
    assert f"OMP_NUM_THREADS={torch.get_num_threads() + 1}" in msg and "4e-3" in msg
    assert checkpoint.thread_mismatch(state, "cuda") is None  # CPU threads do not change CUDA numbers
    assert checkpoint.thread_mismatch({"step": 1}) is None  # older checkpoints have no record


# ------------------------------------------------------------------ appends
def test_append_line_ends_a_torn_line_and_fails_cleanly(tmp_path, monkeypatch):
    p = tmp_path / "metrics.jsonl"
    atomic.append_line(p, '{"step": 1}')
    with open(p, "a") as f:
        f.write('{"step": 2, "lo')  # a writer killed mid-line
    atomic.append_line(p, '{"step": 3}')
    assert p.read_text().splitlines() == ['{"step": 1}', '{"step": 2, "lo', '{"step": 3}']
    before = p.read_bytes()
    monkeypatch.setattr(os, "write", failing_write(errno.ENOSPC))
    with pytest.raises(StorageError, match="no space left on device while writing .*metrics.jsonl"):
        atomic.append_line(p, '{"step": 4}')
    monkeypatch.undo()
    assert p.read_bytes() == before  # the partial write was cut back


def test_append_line_from_two_processes_never_interleaves(tmp_path):
    p = tmp_path / "log.jsonl"
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from ssa_repro.core.atomic import append_line\n"
        f"for i in range(300): append_line({str(p)!r}, sys.argv[1] * 5000 + str(i), fsync=False)"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, c]) for c in "ab"]
    assert all(proc.wait(timeout=120) == 0 for proc in procs)
    lines = p.read_text().splitlines()
    assert len(lines) == 600
    assert all(line.rstrip("0123456789") in ("a" * 5000, "b" * 5000) for line in lines)


# ------------------------------------------------------------------ leftovers
def test_clean_leftovers_removes_only_dead_writers(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "checkpoints").mkdir()
        killed = tmp_path / "checkpoints" / f".last.pt.tmp{dead.pid}"
        killed.write_bytes(b"x" * 1000)
        busy = tmp_path / f".summary.json.tmp{alive.pid}"
        busy.write_text("{")
        mine = tmp_path / f".config.yaml.tmp{os.getpid()}"
        mine.write_text("a")
        other = tmp_path / ".hidden.tmpfile"
        other.write_text("not ours")
        assert atomic.clean_leftovers(tmp_path, recursive=False) == []  # the dead one is one level down
        assert atomic.clean_leftovers(tmp_path) == [killed]
        assert busy.exists() and mine.exists() and other.exists() and not killed.exists()
    finally:
        alive.kill()
        alive.wait()
    assert atomic.clean_leftovers(tmp_path) == [busy]
    assert atomic.clean_leftovers(tmp_path / "nowhere") == []


def test_a_sigkilled_checkpoint_write_leaves_a_temp_file_that_is_cleaned(tmp_path):
    """The fault campaign's case: a killed write leaves `.last.pt.tmp<pid>`; clean_leftovers removes it."""
    code = textwrap.dedent(
        f"""
        import os, sys, torch
        sys.path.insert(0, {str(ROOT)!r})
        from ssa_repro.core import checkpoint
        def save(obj, f, *a, **k):
            open(f, "wb").write(b"x" * 1000)
            os.kill(os.getpid(), 9)
        torch.save = save
        checkpoint.save({str(tmp_path / "last.pt")!r}, {{"step": 1}})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    assert proc.wait(timeout=120) == -signal.SIGKILL
    left = tmp_path / f".last.pt.tmp{proc.pid}"
    assert list(tmp_path.iterdir()) == [left]
    assert atomic.clean_leftovers(tmp_path) == [left] and not list(tmp_path.iterdir())


# ------------------------------------------------------------------ readers
@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "is empty (0 bytes): a write was cut short"),
        (b'{"steps": 10, "final_lo', "is not valid JSON (line 1, column"),
        (b'{"a": 1}\n\xff', "is not UTF-8 text (byte 9"),
    ],
)
def test_read_json_names_the_damaged_file(tmp_path, content, words):
    p = tmp_path / "summary.json"
    p.write_bytes(content)
    with pytest.raises(ConfigFileError) as e:
        atomic.read_json(p, "the run's summary")
    assert str(e.value).startswith(f"{p} (the run's summary) ")
    assert words in str(e.value) and "delete it or restore it" in str(e.value)


def test_read_yaml(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text("model:\n  n_embd: 16\n  name: ${x}\n")
    assert atomic.read_yaml(p) == {"model": {"n_embd": 16, "name": "${x}"}}
    p.write_text("model:\n  n_embd: [16,\n")
    with pytest.raises(ConfigFileError, match=r"config.yaml is not valid YAML \(line 3, column 1\)"):
        atomic.read_yaml(p)
    p.write_text("")
    with pytest.raises(ConfigFileError, match="is empty"):
        atomic.read_yaml(p)
    with pytest.raises(FileNotFoundError):
        atomic.read_yaml(tmp_path / "missing.yaml")


def test_core_imports_no_other_ssa_repro_package():
    for name in ("atomic", "runlock"):
        text = (ROOT / "ssa_repro" / "core" / f"{name}.py").read_text()
        imports = [
            line for line in text.splitlines() if line.startswith(("from ssa_repro", "import ssa_repro"))
        ]
        assert all(line.startswith("from ssa_repro.core") for line in imports), imports
