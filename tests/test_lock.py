"""lock.txt and scripts/lock.py: the environment is the lock; drift is named package by package."""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.lockdrift import lock


def write(tmp_path, text):
    p = tmp_path / "lock.txt"
    p.write_text(textwrap.dedent(text))
    return p


@pytest.mark.skipif(
    os.environ.get("SSA_LATEST") == "1",
    reason="make test-latest: the newest versions, not the lock (diff above)",
)
def test_the_suites_environment_is_the_lock():
    """make install checks this too; a test makes a hand-changed .venv visible in the suite's log."""
    assert lock.drift() == [], lock.describe(lock.drift())


def test_markers_choose_the_line_for_this_interpreter(tmp_path):
    p = write(
        tmp_path,
        """\
        # header
        numpy==1.0.0 ; python_full_version < '3.0'
        numpy==9.9.9 ; python_full_version >= '3.0'
            # via somebody
        Jinja2==3.1.0
        nvidia-cublas==13.1 ; sys_platform == 'nowhere'
        """,
    )
    assert lock.locked_versions(p) == {"numpy": "9.9.9", "jinja2": "3.1.0"}


def test_drift_names_each_package_that_moved(tmp_path, monkeypatch):
    p = write(tmp_path, "torch==2.13.0\ntransformers==5.24.0\nnumpy==2.4.6\n")
    monkeypatch.setattr(
        lock,
        "installed_versions",
        lambda: {
            "nvidia-cublas-cu12": "12.8",  # another CUDA build's own dependency: torch's choice
            "torch": "2.13.0+cpu",
            "transformers": "5.25.0",
            "numpy": "2.4.6",
            "newpkg": "1.0",
            "pip": "26",
        },
    )
    monkeypatch.setattr(lock, "brought_by", lambda root="torch": {"nvidia-cublas-cu12"})
    rows = lock.drift(p)
    # torch's local label (+cpu) is the build, not the version; pip is never locked
    assert rows == [("newpkg", None, "1.0"), ("transformers", "5.24.0", "5.25.0")]
    text = lock.moved(["transformers"], path=p)
    assert "transformers 5.24.0 (lock) -> 5.25.0 (installed)" in text and "newpkg" not in text
    assert "project's code" in lock.moved(["numpy"], path=p)


def test_a_malformed_line_is_refused_naming_it(tmp_path):
    p = write(tmp_path, "numpy>=2\n")
    with pytest.raises(SystemExit, match=r"lock.txt:1: not a `name==version"):
        lock.read_lock(p)


def test_the_lock_starts_at_the_lowest_supported_python():
    assert lock.lowest_python() == "3.10"
    text = lock.LOCK.read_text()
    assert "python_full_version < '3.11'" in text  # resolved for 3.10 too, not only this interpreter


def test_a_failing_published_number_says_which_package_moved(monkeypatch):
    from tests.lockdrift import says_what_moved

    monkeypatch.setattr(lock, "drift", lambda path=lock.LOCK: [("torch", "2.13.0", "2.14.1")])
    with pytest.raises(
        AssertionError, match=r"(?s)value 1 != 2\n.*torch 2.13.0 \(lock\) -> 2.14.1 \(installed\)"
    ):
        with says_what_moved("torch"):
            assert 1 == 2, "value 1 != 2"
