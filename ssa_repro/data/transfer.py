"""One checked, resumable HTTP download (:func:`fetch`) and the reachability probe (:func:`reachable`).

A file is fetched to ``<name>.part`` beside its final place (resuming with an HTTP ``Range`` request
where an earlier attempt stopped), and renamed to its final name only once its size and sha256 match
what the caller expects: a failed, partial or wrong download never sits where a task reads. No name a
task reads ends in ``.part`` (Zorro's reader globs ``*.txt``). A server that answers with a web page
(``text/html``, or a body starting ``<html``/``<!doctype``: a captive portal or a proxy's login page) is
never kept as a partial download: it is discarded and said; "run again to resume" is advised only for a
``.part`` that is the start of the right file as far as can be told (not a web page, not longer than
the expected size, a server that announced that size). A full disk or a read-only folder is a
:class:`~ssa_repro.core.atomic.StorageError` naming the file (core/atomic.py's words).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tqdm import tqdm

from ssa_repro.core import atomic

CHUNK = 1 << 16  # bytes per read
PROBE_TIMEOUT = 10.0  # seconds for the reachability check of one host
HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<?xml version")  # lower-cased, after whitespace


class DownloadError(RuntimeError):
    """A file could not be fetched (HTTP error, checksum mismatch, short body); the message names it."""


class Unreachable(DownloadError):
    """No connection to the source at all (no network, DNS failure, refused, timed out)."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def part_name(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def looks_like_html(head: bytes) -> bool:
    """Whether a body starts like a web page (``<!doctype html``, ``<html``, …; case and leading
    whitespace ignored). No manifest file is HTML."""
    start = head.lstrip()[:64].lower()
    return start.startswith(HTML_STARTS[:3]) or (
        start.startswith(HTML_STARTS[3]) and b"<html" in head.lower()
    )


def _web_page(dest: Path, url: str, why: str) -> DownloadError:
    return DownloadError(
        f"{dest.name}: the server at {url} answered with a web page ({why}), not the file: a captive "
        "portal or a proxy's login page? Log in (or use another network, or --base-url with a mirror), "
        "then run again; nothing was kept"
    )


def fetch(url: str, dest: Path, sha256: str, size: int, progress: bool = True, timeout: float = 30.0) -> None:
    """Download ``url`` to ``dest`` via ``dest.part``, resuming a partial ``.part`` with ``Range``.

    Raises :class:`Unreachable` when no connection can be made, :class:`DownloadError` for an HTTP
    error, a web page instead of the file (nothing kept), a body shorter than announced (``.part`` is
    kept, and the next call resumes it) or a wrong sha256 or size (``.part`` is deleted). ``dest``
    appears only when everything matched. A ``.part`` that is a web page (kept by an older version) is
    discarded before resuming.
    """
    part = part_name(dest)
    have = part.stat().st_size if part.exists() else 0
    if have and looks_like_html(_head(part)):
        part.unlink()  # a portal's page kept by an earlier version: never resumed
        have = 0
    if have >= size:  # a full-size .part was already checked and failed, or is stale: start again
        part.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # follows redirects, keeping Range
    except urllib.error.HTTPError as e:
        raise DownloadError(f"{dest.name}: HTTP {e.code} {e.reason} from {url}") from e
    except (TimeoutError, urllib.error.URLError, ConnectionError, http.client.HTTPException) as e:
        raise Unreachable(f"{dest.name}: cannot reach {url} ({getattr(e, 'reason', e)})") from e
    with response:
        kind = response.headers.get_content_type() if response.headers.get("Content-Type") else ""
        if kind in ("text/html", "application/xhtml+xml"):
            raise _web_page(dest, url, f"Content-Type {kind}")
        if have and response.status != 206:  # the server ignored Range: it sends the whole file
            have = 0
        first = response.read(CHUNK)
        if not have and looks_like_html(first):
            raise _web_page(dest, url, "its body starts like HTML")
        announced = _announced_total(response, have)
        if announced is not None and announced != size:
            raise DownloadError(
                f"{dest.name}: {url} announced {announced} bytes, the manifest says {size}: another file "
                "(or a proxy's answer); nothing was kept"
            )
        _receive(response, first, part, have, size, dest, url, progress)
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


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(512)


def _announced_total(response, have: int) -> int | None:
    """The whole file's size the server announced (``Content-Range``'s total on a 206, else
    ``have`` + ``Content-Length``), or None where it announced none."""
    rng = response.headers.get("Content-Range", "")
    if response.status == 206 and "/" in rng and rng.rsplit("/", 1)[1].strip().isdigit():
        return int(rng.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return have + int(length) if length and length.strip().isdigit() else None


def _receive(
    response, first: bytes, part: Path, have: int, size: int, dest: Path, url: str, progress: bool
) -> None:
    """Append the body (``first`` already read) to ``part``; a storage failure is a
    :class:`~ssa_repro.core.atomic.StorageError` naming the file."""
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
        with (
            open(part, "ab" if have else "wb") as out,
            tqdm(
                total=size, initial=have, unit="B", unit_scale=True, desc=dest.name, disable=not progress
            ) as bar,
        ):
            try:
                block = first
                while block:
                    out.write(block)
                    bar.update(len(block))
                    block = response.read(CHUNK)
            except (TimeoutError, http.client.IncompleteRead, ConnectionError) as e:
                out.flush()
                raise DownloadError(
                    f"{dest.name}: transfer from {url} stopped after {out.tell()} of {size} bytes "
                    f"({type(e).__name__}); run again to resume from {part}"
                ) from e
            out.flush()
            os.fsync(out.fileno())
    except OSError as e:
        words = atomic.storage_message(e.errno, part, hint="--root or --cache-dir <another folder>")
        if words is None:
            raise
        raise atomic.StorageError(e.errno, words, str(part)) from e


def reachable(url: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when the host of ``url`` answers (any HTTP status: the host is there), else why not. One
    ``HEAD`` request with ``timeout``: nothing is downloaded."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (TimeoutError, urllib.error.URLError, ConnectionError, http.client.HTTPException, ValueError) as e:
        return str(getattr(e, "reason", e))


def host_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
