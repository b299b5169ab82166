"""Fetch the files the corpus tasks read into ``data.root`` (``scripts/get_data.py``).

The manifest (``ssa_repro/data/manifest.yaml``) lists each file: its path under ``data.root``, its group
(``childes``, ``zorro``, ``lm``, ``lm_eval``, ``tokenizers``), sha256, size in bytes, licence, and the URL
of its public upstream copy, or none for a file this project derived (then only a mirror of the whole
layout, ``base_url``, serves it). A file is fetched to ``<name>.part`` beside its final place
(resuming with an HTTP ``Range`` request where an earlier attempt stopped), and renamed to its final name
only once its size and sha256 match the manifest: a failed, partial or wrong download never sits where a
task reads. No name a task reads ends in ``.part`` (Zorro's reader globs ``*.txt``).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from tqdm import tqdm

from ssa_repro.data.paths import resolve_root

MANIFEST = Path(__file__).with_name("manifest.yaml")
CHUNK = 1 << 16  # bytes per read


class DownloadError(RuntimeError):
    """A file could not be fetched (HTTP error, checksum mismatch, short body); the message names it."""


class Unreachable(DownloadError):
    """No connection to the source at all (no network, DNS failure, refused, timed out)."""


@dataclass(frozen=True)
class Entry:
    path: str  # under data.root
    group: str
    sha256: str
    bytes: int
    url: str | None  # the public upstream copy, byte for byte; None for a derived file
    note: str = ""


@dataclass(frozen=True)
class Manifest:
    base_url: str | None
    groups: dict[str, dict[str, str]]  # group -> {licence, cite}
    files: list[Entry]

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
    return Manifest(doc.get("base_url"), doc["groups"], [Entry(**f) for f in doc["files"]])


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


def get_data(
    root: str | os.PathLike,
    only: Iterable[str] | None = None,
    base_url: str | None = None,
    manifest: Manifest | None = None,
    progress: bool = True,
    say: Callable[[str], None] = print,
    timeout: float = 30.0,
) -> int:
    """Fetch every selected file missing from ``root`` or differing from the manifest; 0 when all are
    in place afterwards, else 1 (with the files to place by hand named)."""
    manifest = manifest or load_manifest()
    entries = manifest.select(only)  # refuses an unknown group before any work
    base_url = base_url or os.environ.get("SSA_DATA_URL") or manifest.base_url
    root = resolve_root(root)
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
            say(f"differs {e.path} (size or sha256): fetching it again")
        url = source(e, base_url)
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
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    return get_data(args.root, args.only, args.base_url, manifest, progress=not args.no_progress)
