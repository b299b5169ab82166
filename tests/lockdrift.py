"""Which installed packages differ from lock.txt, for the messages of tests of published numbers.

A test of a number the project publishes (a study report regenerated from its CSVs, the evaluation
regression values, the transformers table) adds :func:`moved` to its assertion message: under the lock
it says the change is in the project's code; under newer versions (``make test-latest``) it names the
packages that moved. The logic is scripts/lock.py's (loaded from its file: scripts/ is no package).
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "ssa_lock", Path(__file__).resolve().parents[1] / "scripts" / "lock.py"
)
lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lock)
moved = lock.moved


@contextlib.contextmanager
def says_what_moved(*packages: str):
    """Re-raise an AssertionError inside with :func:`moved` (of ``packages``, else every package)
    appended: a published number that changed says whether a package moved or the project's code."""
    try:
        yield
    except AssertionError as e:
        raise AssertionError(f"{e}\n{moved(list(packages))}") from e
