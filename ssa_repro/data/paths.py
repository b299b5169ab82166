"""Where the offline data lives, and the error a user sees when a file is not there."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout (for an editable install)


class DataFileError(FileNotFoundError):
    """A data file is missing; the message names it and says how to point the config at it."""


class CorpusError(ValueError):
    """A data file that exists but cannot be used: empty, too small for the settings, or damaged. The
    message names the file, the config key and what to do."""


def resolve_root(root: str | os.PathLike) -> Path:
    """``data.root`` as an absolute path: absolute as given; relative to the working directory when it
    exists there, else relative to the repository (so ``../shared/data`` works from any folder)."""
    p = Path(os.path.expanduser(str(root)))
    if p.is_absolute():
        return p
    return p.resolve() if p.exists() else (REPO / p).resolve()


def data_file(root: str | os.PathLike, relative: str) -> Path:
    """The file ``relative`` under ``data.root``; raises :class:`DataFileError` if it is missing."""
    base = resolve_root(root)
    path = base / relative
    if not path.is_file():
        raise DataFileError(
            f"data file not found: {path}\n"
            f"  data.root={root!s} resolves to {base}{_what_is(base, relative)}"
            + "\n  point the config at the folder holding it: data.root=/path/to/data "
            "(or set SSA_DATA_ROOT); nothing is downloaded at run time"
        )
    return path


def _what_is(base: Path, relative: str) -> str:
    """What stands where the folder or the file should be, when it is not simply missing: data.root
    a file, a folder this user cannot read, or the file's own path a folder."""
    if base.is_file():
        return " (which is a file, not a folder: allowed, a folder holding the data)"
    if not base.exists():
        return " (which does not exist)"
    if not os.access(base, os.R_OK | os.X_OK):
        return " (a folder this user cannot read: fix its permissions)"
    if (base / relative).is_dir():
        return f" (where {relative} is a folder, not a file)"
    return ""
