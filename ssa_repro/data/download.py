"""Fetch the files the corpus tasks read into ``data.root`` (``scripts/get_data.py``).

The manifest (``ssa_repro/data/manifest.yaml``) lists each file: its path under ``data.root``, its group
(``childes``, ``zorro``, ``lm``, ``lm_eval``, ``tokenizers``), sha256, size in bytes, licence, and the URL
of its public upstream copy, or none for a file this project derived. A derived file names its public
inputs and the function of :mod:`ssa_repro.data.derive` that builds it: the inputs are fetched into a
cache (``--cache-dir``, ``$SSA_DATA_CACHE``, else ``~/.cache/ssa_repro/sources``) the same way, the file
is built, and it takes its name only when its size and sha256 are the manifest's. A mirror of the whole
layout (``base_url``) serves every file instead. A file is fetched to ``<name>.part`` beside its final
place (resuming with an HTTP ``Range`` request where an earlier attempt stopped), and renamed to its
final name only once its size and sha256 match the manifest: a failed, partial or wrong download or
derivation never sits where a task reads. No name a task reads ends in ``.part`` (Zorro's reader globs
``*.txt``).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tqdm import tqdm

from ssa_repro.core import atomic
from ssa_repro.data.derive import DeriveError, derive
from ssa_repro.data.paths import resolve_root

MANIFEST = Path(__file__).with_name("manifest.yaml")
CHUNK = 1 << 16  # bytes per read


class DownloadError(RuntimeError):
    """A file could not be fetched (HTTP error, checksum mismatch, short body); the message names it."""


class Unreachable(DownloadError):
    """No connection to the source at all (no network, DNS failure, refused, timed out)."""


class InputsMissing(DownloadError):
    """A derived file's inputs could not all be fetched; ``missing`` holds (name, source, why)."""

    def __init__(self, message: str, missing: list[tuple[str, Source, str]], unreachable: bool):
        super().__init__(message)
        self.missing, self.unreachable = missing, unreachable


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


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def source(entry: Entry, base_url: str | None) -> str | None:
    """Where to fetch ``entry``: ``<base_url>/<path>`` from a mirror, else its upstream URL (or None)."""
    return f"{base_url.rstrip('/')}/{entry.path}" if base_url else entry.url


def part_name(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def fetch(url: str, dest: Path, sha256: str, size: int, progress: bool = True, timeout: float = 30.0) -> None:
    """Download ``url`` to ``dest`` via ``dest.part``, resuming a partial ``.part`` with ``Range``.

    Raises :class:`Unreachable` when no connection can be made, :class:`DownloadError` for an HTTP
    error, a body shorter than announced (``.part`` is kept, and the next call resumes it) or a wrong
    sha256 or size (``.part`` is deleted). ``dest`` appears only when everything matched.
    """
    part = part_name(dest)
    have = part.stat().st_size if part.exists() else 0
    if have >= size:  # a full-size .part was already checked and failed, or is stale: start again
        part.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # follows redirects, keeping Range
    except urllib.error.HTTPError as e:
        raise DownloadError(f"{dest.name}: HTTP {e.code} {e.reason} from {url}") from e
    except (TimeoutError, urllib.error.URLError, ConnectionError) as e:
        raise Unreachable(f"{dest.name}: cannot reach {url} ({getattr(e, 'reason', e)})") from e
    dest.parent.mkdir(parents=True, exist_ok=True)
    with response:
        if have and response.status != 206:  # the server ignored Range: it sends the whole file
            have = 0
        with (
            open(part, "ab" if have else "wb") as out,
            tqdm(
                total=size, initial=have, unit="B", unit_scale=True, desc=dest.name, disable=not progress
            ) as bar,
        ):
            try:
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    bar.update(len(block))
            except (TimeoutError, http.client.IncompleteRead, ConnectionError) as e:
                raise DownloadError(
                    f"{dest.name}: transfer from {url} stopped after {out.tell()} of {size} bytes "
                    f"({type(e).__name__}); run again to resume from {part}"
                ) from e
            out.flush()
            os.fsync(out.fileno())
    got = part.stat().st_size
    if got < size:
        raise DownloadError(
            f"{dest.name}: got {got} of {size} bytes from {url}; run again to resume from {part}"
        )
    digest = sha256_of(part)
    if got != size or digest != sha256:
        part.unlink()
        raise DownloadError(
            f"{dest.name}: {url} gave {got} bytes with sha256 {digest}; the manifest says {size} bytes, "
            f"sha256 {sha256} (deleted; the source changed, or a mirror serves another version)"
        )
    os.replace(part, dest)


def _in_place(path: Path, sha256: str, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size and sha256_of(path) == sha256


def build(
    entry: Entry,
    manifest: Manifest,
    root: Path,
    cache: Path,
    progress: bool = True,
    timeout: float = 30.0,
    say: Callable[[str], None] = print,
) -> None:
    """Build the derived file ``entry`` under ``root`` from its inputs (fetched into ``cache`` when
    missing there or differing from the manifest) with its ``derive`` function.

    Raises :class:`InputsMissing` when an input could not be fetched (every input is tried, so one run
    names them all), :class:`~ssa_repro.data.derive.DeriveError` when the derivation cannot run, and
    :class:`DownloadError` when the result's size or sha256 is not the manifest's: then nothing is
    written under ``root`` (the result is kept as ``<cache>/mismatch/<path>`` to compare). The file is
    written atomically, so ``root/<path>`` is absent or complete.
    """
    paths, missing, unreachable = [], [], False
    for name in entry.inputs:
        src = manifest.inputs[name]
        p = cache / name
        paths.append(p)
        if _in_place(p, src.sha256, src.bytes):
            continue
        try:
            fetch(src.url, p, src.sha256, src.bytes, progress=progress, timeout=timeout)
            say(f"fetched input {name}")
        except Unreachable as err:
            unreachable = True
            missing.append((name, src, str(err)))
        except DownloadError as err:
            missing.append((name, src, str(err)))
    if missing:
        raise InputsMissing(
            f"{entry.path}: {len(missing)} of its {len(entry.inputs)} inputs could not be fetched",
            missing,
            unreachable,
        )
    data = derive(entry.derive, paths)
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != entry.bytes or digest != entry.sha256:
        kept = atomic.write_bytes(cache / "mismatch" / entry.path, data, hint="--cache-dir <another folder>")
        raise DownloadError(
            f"{entry.path}: {entry.derive} built {len(data)} bytes with sha256 {digest} from its inputs; the "
            f"manifest says {entry.bytes} bytes, sha256 {entry.sha256} (not written; the result is kept at "
            f"{kept} to compare: another version of a package the derivation uses, or a changed rule)"
        )
    atomic.write_bytes(root / entry.path, data, hint="--root <another folder>")


def _place_inputs_by_hand(err: InputsMissing, entry: Entry, cache: Path) -> str:
    lines = [
        f"derived by {entry.derive} (ssa_repro/data/derive.py) from public inputs not all fetched; place "
        f"them by hand under {cache} (each is checked by size and sha256), then run again:"
    ]
    for name, src, why in err.missing:
        lines.append(f"        {cache / name}  {src.bytes} bytes  sha256 {src.sha256}\n          {why}")
    return "\n".join(lines)


def get_data(
    root: str | os.PathLike,
    only: Iterable[str] | None = None,
    base_url: str | None = None,
    manifest: Manifest | None = None,
    progress: bool = True,
    say: Callable[[str], None] = print,
    timeout: float = 30.0,
    cache: str | os.PathLike | None = None,
) -> int:
    """Fetch (or build from their inputs, for derived files) every selected file missing from ``root``
    or differing from the manifest; 0 when all are in place afterwards, else 1 (with the files, or the
    inputs, to place by hand named)."""
    manifest = manifest or load_manifest()
    entries = manifest.select(only)  # refuses an unknown group before any work
    base_url = base_url or os.environ.get("SSA_DATA_URL") or manifest.base_url
    root = resolve_root(root)
    cache = Path(os.path.expanduser(str(cache))).resolve() if cache else default_cache()
    say(f"data.root: {root}")
    for group in dict.fromkeys(e.group for e in entries):
        info = manifest.groups[group]
        say(f"  {group}: licence {info['licence']}" + (f"; cite {info['cite']}" if info.get("cite") else ""))
    missing: list[tuple[Entry, str]] = []  # (entry, why)
    unreachable = False
    for e in entries:
        dest = root / e.path
        if dest.is_file() and dest.stat().st_size == e.bytes and sha256_of(dest) == e.sha256:
            say(f"ok      {e.path}")
            continue
        if dest.exists():
            say(f"differs {e.path} (size or sha256): {'building' if e.derive else 'fetching'} it again")
        url = source(e, base_url)
        if url is None and e.derive:
            try:
                build(e, manifest, root, cache, progress=progress, timeout=timeout, say=say)
                say(f"derived {e.path} ({e.derive}, {len(e.inputs)} input(s); sha256 matches)")
            except InputsMissing as err:
                unreachable |= err.unreachable
                missing.append((e, _place_inputs_by_hand(err, e, cache)))
            except (DownloadError, DeriveError) as err:
                missing.append((e, str(err)))
            continue
        if url is None:
            missing.append((e, "no public upstream copy (" + (e.note or "derived") + ")"))
            continue
        try:
            fetch(url, dest, e.sha256, e.bytes, progress=progress, timeout=timeout)
            say(f"fetched {e.path}")
        except Unreachable as err:
            unreachable = True
            missing.append((e, str(err)))
        except DownloadError as err:
            missing.append((e, str(err)))
    if not missing:
        say(f"all {len(entries)} files in place under {root}")
        return 0
    if unreachable:
        say("no network connection to the sources (or they are down).")
    say(
        f"{len(missing)} file(s) still missing. Place them by hand under {root} (same names; each is "
        "checked by size and sha256 on the next run), or pass --base-url with a mirror of the layout:"
    )
    for e, why in missing:
        say(f"  {e.path}  {e.bytes} bytes  sha256 {e.sha256}\n      {why}")
    return 1


def main(argv: list[str] | None = None) -> int:
    manifest = load_manifest()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.environ.get("SSA_DATA_ROOT", "../shared/data"),
                        help="data.root (default: $SSA_DATA_ROOT or ../shared/data)")  # fmt: skip
    parser.add_argument("--only", nargs="+", choices=list(manifest.groups), help="only these groups")
    parser.add_argument(
        "--base-url", help="a mirror serving <base-url>/<path> for every file ($SSA_DATA_URL)"
    )
    parser.add_argument(
        "--cache-dir",
        help="where the inputs of derived files are kept ($SSA_DATA_CACHE, else ~/.cache/ssa_repro/sources)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    return get_data(
        args.root, args.only, args.base_url, manifest, progress=not args.no_progress, cache=args.cache_dir
    )
