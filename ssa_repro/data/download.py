"""Fetch the files the corpus tasks read into ``data.root`` (``scripts/get_data.py``).

The manifest (:mod:`ssa_repro.data.manifest`) lists each file, its checksum and its public upstream
copy; a derived file names its public inputs and the function of :mod:`ssa_repro.data.derive` that
builds it: the inputs are fetched into a cache (``--cache-dir``, ``$SSA_DATA_CACHE``, else
``~/.cache/ssa_repro/sources``) the same way, the file is built, and it takes its name only when its
size and sha256 are the manifest's. A mirror of the whole layout (``base_url``) serves every file
instead. Every download is :func:`ssa_repro.data.transfer.fetch`'s: checked, resumable, never leaving
a partial or wrong file (or a captive portal's page) where a task reads.

Before any work: the root (not a file, writable) and ``--base-url`` (an http(s) URL with a host) are
checked, and every source host is asked once (a ``HEAD`` with a short timeout,
:func:`~ssa_repro.data.transfer.reachable`), so a file whose source cannot be reached is named at once
and none of its inputs is downloaded. A full disk or a read-only folder stops the run with one line
naming the file (core/atomic.py's words).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path

from ssa_repro.core import atomic
from ssa_repro.data.derive import DeriveError, derive
from ssa_repro.data.manifest import Entry, Manifest, Source, default_cache, load_manifest, source
from ssa_repro.data.paths import resolve_root
from ssa_repro.data.transfer import (
    PROBE_TIMEOUT,
    DownloadError,
    Unreachable,
    fetch,
    host_of,
    reachable,
    sha256_of,
)


class BadInput(ValueError):
    """A bad argument (root, ``--base-url``), refused before any work; the message is one line."""


class InputsMissing(DownloadError):
    """A derived file's inputs could not all be fetched; ``missing`` holds (name, source, why)."""

    def __init__(self, message: str, missing: list[tuple[str, Source, str]], unreachable: bool):
        super().__init__(message)
        self.missing, self.unreachable = missing, unreachable


def check_base_url(base_url: str | None) -> None:
    """``--base-url`` is an ``http://`` or ``https://`` URL with a host (a mirror of the layout)."""
    if base_url is None:
        return
    try:
        parts = urllib.parse.urlsplit(base_url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError as e:
        raise BadInput(
            f"--base-url {base_url!r} is not a URL ({e}); allowed: http(s)://host[:port]/path"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or " " in base_url:
        raise BadInput(
            f"--base-url {base_url!r} is not an http(s) URL with a host; allowed: http(s)://host[:port]/path "
            "(a mirror serving <base-url>/<path> for every file)"
        )


def check_root(root: Path) -> None:
    """The data root is a folder (or can be made one) this user can write; else one line."""
    check_folder("--root", root)


def check_folder(option: str, folder: Path) -> None:
    """``folder`` (given by ``option``) is a folder, or can be made one, that this process can write
    (:func:`ssa_repro.core.atomic.unwritable`: a read-only file system, or no permission); else one
    line naming the option, the folder and what is allowed, before any download."""
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"{option} {folder} is a file, not a folder; allowed: a folder (created if missing)")
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise BadInput(f"{option} {folder}: {existing} is a file, not a folder; allowed: a folder")
    why = atomic.unwritable(existing) if existing is not None else None
    if why:
        raise BadInput(f"{option} {folder}: {why}; allowed: a writable folder")


def check_cache(todo: list[Entry], manifest: Manifest, cache: Path) -> None:
    """The cache (``--cache-dir``) is checked as the root is, where a derived file to build needs an
    input it does not hold yet (a cache that is only read needs no write access)."""
    fetch = [
        n
        for e in todo
        if e.derive
        for n in e.inputs
        if n in manifest.inputs
        and not _in_place(cache / n, manifest.inputs[n].sha256, manifest.inputs[n].bytes)
    ]
    if fetch:
        check_folder("--cache-dir", cache)


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
        say(f"fetching input {name} ({src.bytes:,} bytes) from {host_of(src.url)}")
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
    check_base_url(base_url)
    root = resolve_root(root)
    check_root(root)
    cache = Path(os.path.expanduser(str(cache))).resolve() if cache else default_cache()
    say(f"data.root: {root}")
    for group in dict.fromkeys(e.group for e in entries):
        info = manifest.groups[group]
        say(f"  {group}: licence {info['licence']}" + (f"; cite {info['cite']}" if info.get("cite") else ""))
    todo = [e for e in entries if not _in_place(root / e.path, e.sha256, e.bytes)]
    check_cache(todo, manifest, cache)
    down = _unreachable_hosts(todo, manifest, base_url, cache, timeout, say)
    missing: list[tuple[Entry, str]] = []  # (entry, why)
    unreachable = bool(down)
    try:
        for e in entries:
            if e not in todo:
                say(f"ok      {e.path}")
                continue
            blocked = sorted({h for h in _hosts(e, manifest, base_url, cache) if h in down})
            if blocked:  # nothing of it is downloaded: the file could not be completed
                missing.append((e, _blocked(e, manifest, base_url, cache, down)))
                continue
            why = _one(e, manifest, root, cache, base_url, progress, timeout, say)
            if why is not None:
                unreachable |= why[1]
                missing.append((e, why[0]))
    except atomic.StorageError as err:  # a full disk or a read-only folder: every later file would fail too
        say(f"stopped: {err}")
        return 1
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


def _blocked(e: Entry, manifest: Manifest, base_url: str | None, cache: Path, down: dict[str, str]) -> str:
    """Why ``e`` was not attempted: its source hosts that cannot be reached (for a derived file, every
    input still to fetch, with where to place it by hand)."""
    url = source(e, base_url)
    if url is not None:
        return f"{e.path}: cannot reach {url} ({down[host_of(url)]}); not downloaded"
    todo = [
        (n, manifest.inputs[n])
        for n in e.inputs
        if host_of(manifest.inputs[n].url) in _hosts(e, manifest, base_url, cache)
    ]
    reasons = [
        (
            n,
            src,
            f"{n}: cannot reach {src.url} ({down[host_of(src.url)]})"
            if host_of(src.url) in down
            else f"{n}: not downloaded (another input's host cannot be reached, so {e.path} could not be built)",
        )
        for n, src in todo
    ]
    err = InputsMissing(f"{e.path}: inputs not fetched", reasons, True)
    return _place_inputs_by_hand(err, e, cache)


def _hosts(e: Entry, manifest: Manifest, base_url: str | None, cache: Path) -> set[str]:
    """The hosts entry ``e`` still needs (a derived file's inputs not yet in the cache)."""
    url = source(e, base_url)
    if url is not None:
        return {host_of(url)}
    out = set()
    for name in e.inputs if e.derive else ():
        src = manifest.inputs[name]
        if not _in_place(cache / name, src.sha256, src.bytes):
            out.add(host_of(src.url))
    return out


def _unreachable_hosts(
    todo: list[Entry], manifest: Manifest, base_url: str | None, cache: Path, timeout: float, say
) -> dict[str, str]:
    """Ask every source host the files to fetch need, once, before any download: host -> why it cannot
    be reached (only those)."""
    urls: dict[str, str] = {}  # host -> one URL on it to ask
    for e in todo:
        url = source(e, base_url)
        cands = (
            [url]
            if url
            else [
                manifest.inputs[n].url
                for n in e.inputs
                if host_of(manifest.inputs[n].url) in _hosts(e, manifest, base_url, cache)
            ]
        )
        for u in cands:
            urls.setdefault(host_of(u), u)
    if urls:
        say(f"checking {len(urls)} source host(s): {', '.join(urls)}")
    down = {}
    for host, url in urls.items():
        why = reachable(url, min(timeout, PROBE_TIMEOUT))
        if why is not None:
            down[host] = why
            say(f"  cannot reach {host} ({why})")
    return down


def _one(e: Entry, manifest, root, cache, base_url, progress, timeout, say) -> tuple[str, bool] | None:
    """Fetch or build one entry; None when it is in place, else (why not, whether unreachable)."""
    dest = root / e.path
    if dest.exists():
        say(f"differs {e.path} (size or sha256): {'building' if e.derive else 'fetching'} it again")
    url = source(e, base_url)
    if url is None and e.derive:
        try:
            build(e, manifest, root, cache, progress=progress, timeout=timeout, say=say)
            say(f"derived {e.path} ({e.derive}, {len(e.inputs)} input(s); sha256 matches)")
        except InputsMissing as err:
            return _place_inputs_by_hand(err, e, cache), err.unreachable
        except (DownloadError, DeriveError) as err:
            return str(err), False
        return None
    if url is None:
        return "no public upstream copy (" + (e.note or "derived") + ")", False
    say(f"fetching {e.path} ({e.bytes:,} bytes) from {host_of(url)}")
    try:
        fetch(url, dest, e.sha256, e.bytes, progress=progress, timeout=timeout)
        say(f"fetched {e.path}")
    except Unreachable as err:
        return str(err), True
    except DownloadError as err:
        return str(err), False
    return None


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
    try:
        return get_data(
            args.root, args.only, args.base_url, manifest, progress=not args.no_progress, cache=args.cache_dir
        )
    except BadInput as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
