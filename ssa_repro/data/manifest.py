"""The data manifest (``ssa_repro/data/manifest.yaml``): what ``scripts/get_data.py`` places under ``data.root``.

Each file has its path under ``data.root``, its group (``childes``, ``zorro``, ``lm``, ``lm_eval``,
``tokenizers``), sha256, size in bytes, licence, and the URL of its public upstream copy, or none for a
file this project derived. A derived file names its public inputs (``inputs:``, each a :class:`Source`)
and the function of :mod:`ssa_repro.data.derive` that builds it. ``base_url`` names a mirror of the
whole layout, which then serves every file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

MANIFEST = Path(__file__).with_name("manifest.yaml")


@dataclass(frozen=True)
class Source:
    """A public input of a derived file, fetched into the cache as ``<cache>/<name>``."""

    url: str
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Entry:
    path: str  # under data.root
    group: str
    sha256: str
    bytes: int
    url: str | None  # the public upstream copy, byte for byte; None for a derived file
    note: str = ""
    derive: str | None = None  # the function of ssa_repro.data.derive that builds a derived file
    inputs: tuple[str, ...] = ()  # the names (Manifest.inputs) of its inputs, in the function's order


@dataclass(frozen=True)
class Manifest:
    base_url: str | None
    groups: dict[str, dict[str, str]]  # group -> {licence, cite}
    files: list[Entry]
    inputs: dict[str, Source] = field(default_factory=dict)  # name -> public input of derived files

    def select(self, only: Iterable[str] | None) -> list[Entry]:
        """The entries of the groups in ``only`` (all when None); an unknown group is refused."""
        if not only:
            return list(self.files)
        unknown = sorted(set(only) - set(self.groups))
        if unknown:
            raise ValueError(f"--only {' '.join(unknown)}: no such group; allowed: {', '.join(self.groups)}")
        return [e for e in self.files if e.group in set(only)]


def load_manifest(path: str | os.PathLike = MANIFEST) -> Manifest:
    doc = yaml.safe_load(Path(path).read_text())
    files = [Entry(**{**f, "inputs": tuple(f.get("inputs") or ())}) for f in doc["files"]]
    inputs = {name: Source(**spec) for name, spec in (doc.get("inputs") or {}).items()}
    for e in files:
        unknown = [name for name in e.inputs if name not in inputs]
        if unknown:
            raise ValueError(f"{path}: {e.path} names inputs not listed under inputs: {', '.join(unknown)}")
    return Manifest(doc.get("base_url"), doc["groups"], files, inputs)


def default_cache() -> Path:
    """Where derived files' inputs are kept: ``$SSA_DATA_CACHE``, else ``$XDG_CACHE_HOME`` (or
    ``~/.cache``) ``/ssa_repro/sources``."""
    if os.environ.get("SSA_DATA_CACHE"):
        return Path(os.path.expanduser(os.environ["SSA_DATA_CACHE"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ssa_repro" / "sources"


def source(entry: Entry, base_url: str | None) -> str | None:
    """Where to fetch ``entry``: ``<base_url>/<path>`` from a mirror, else its upstream URL (or None)."""
    return f"{base_url.rstrip('/')}/{entry.path}" if base_url else entry.url
