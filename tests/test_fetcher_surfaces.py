"""The data fetcher (scripts/get_data.py) under bad input and faults (issue 41's fetcher part, issue 42's
reachability check): a root that is a file or cannot be written, a malformed --base-url, a full disk while
deriving, a captive portal's web page, an unreachable or silent host — each named in one line, nothing
half-written kept, no large download before the sources are known to answer. Local servers on 127.0.0.1
only, every call bounded by a timeout."""

from __future__ import annotations

import errno
import http.server
import os
import socket
import threading

import pytest

from ssa_repro.data import download as D
from ssa_repro.data.download import Entry, Manifest
from tests.test_get_data import GOOD, Server, entry, manifest, run, sha

PORTAL = b"<!DOCTYPE html>\n<html><head><title>Log in to the Wi-Fi</title></head><body>...</body></html>\n"


def test_a_root_that_is_a_file_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "data").write_text("")
    rc = D.main(["--root", str(tmp_path / "data"), "--only", "tokenizers", "--no-progress"])
    err = capsys.readouterr().err
    assert (
        rc == 2
        and err
        == f"Error: --root {tmp_path / 'data'} is a file, not a folder; allowed: a folder (created if missing)\n"
    )
    with pytest.raises(D.BadInput, match=r"data is a file, not a folder"):  # a folder below a file too
        run(tmp_path / "data" / "sub", manifest(entry("a.txt", "http://127.0.0.1:9/a")))


@pytest.mark.skipif(os.geteuid() == 0, reason="permissions do not stop root; the write path is tested below")
def test_a_read_only_root_is_refused_before_any_download(tmp_path):
    (tmp_path / "ro").mkdir(mode=0o555)
    with pytest.raises(D.BadInput, match=r"ro is not writable by this user"):
        run(tmp_path / "ro", manifest(entry("a.txt", "http://127.0.0.1:9/a")))


def test_a_folder_that_refuses_writes_stops_the_run_in_one_line(tmp_path, monkeypatch):
    """As on a read-only or full file system: the first write fails, the run stops there (every later
    file would fail the same way) with the storage error's words, and nothing is left behind."""
    s = Server({"/a.txt": GOOD, "/b.txt": GOOD})
    try:
        real_open = open

        def refusing(path, *a, **k):
            if str(path).startswith(str(tmp_path / "data")):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, *a, **k)

        monkeypatch.setattr("builtins.open", refusing)
        rc, out = run(
            tmp_path / "data",
            manifest(entry("x/a.txt", s.url + "/a.txt"), entry("x/b.txt", s.url + "/b.txt")),
        )
        gets = [p for p, _ in s.log]
    finally:
        s.close()
    assert rc == 1
    stop = [line for line in out.splitlines() if line.startswith("stopped: ")]
    assert len(stop) == 1 and "not writable by this user" in stop[0] and "a.txt.part" in stop[0]
    assert gets == ["/a.txt"]  # b was not tried
    assert not [p for p in (tmp_path / "data").rglob("*") if p.is_file()]


def test_a_full_disk_while_deriving_stops_with_one_line_and_no_partial_file(tmp_path, monkeypatch):
    names = next(e for e in D.load_manifest().files if e.path == "zorro/names.tsv")  # no inputs: no network
    real_write = os.write

    def full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path / "data")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    rc, out = run(tmp_path / "data", Manifest(None, {"zorro": {"licence": "MIT"}}, [names]))
    assert rc == 1
    stop = [line for line in out.splitlines() if line.startswith("stopped: ")]
    assert len(stop) == 1 and "no space left on device while writing" in stop[0] and "names.tsv" in stop[0]
    assert "--root <another folder>" in stop[0]
    assert not [p for p in (tmp_path / "data").rglob("*") if p.is_file()]  # no temporary file either


@pytest.mark.parametrize(
    "url",
    [
        "htp://mirror.example/data",
        "http://",
        "mirror.example/data",
        "http://host:port/x",
        "ftp://h/x",
        "http://a b/",
    ],
)
def test_a_malformed_base_url_is_refused_in_one_line(tmp_path, capsys, url):
    rc = D.main(["--root", str(tmp_path), "--only", "tokenizers", "--base-url", url, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"Error: --base-url {url!r} is not")
    assert "allowed: http(s)://host[:port]/path" in err
    assert list(tmp_path.iterdir()) == []  # nothing made


class Portal:
    """A captive portal: every GET and HEAD answers 200 with its login page."""

    def __init__(self, content_type="text/html; charset=utf-8"):
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(PORTAL)))
                self.end_headers()

            def do_GET(self):
                self.do_HEAD()
                self.wfile.write(PORTAL)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "application/octet-stream"])
def test_a_captive_portals_page_is_discarded_and_named_not_kept_to_resume(tmp_path, content_type):
    """Behind a captive portal the page used to be kept as x.part with "run again to resume"; the next
    run failed the same way. Now it is named a web page (by its type, or its first bytes) and dropped."""
    p = Portal(content_type)
    try:
        for _ in range(2):
            rc, out = run(tmp_path, manifest(entry("x/a.txt", p.url + "/a.txt")))
            assert rc == 1 and "answered with a web page" in out and "captive portal" in out
            assert "run again to resume" not in out
            assert not (tmp_path / "x/a.txt.part").exists() and not (tmp_path / "x/a.txt").exists()
    finally:
        p.close()


def test_a_portal_page_left_as_a_partial_download_is_not_resumed(tmp_path):
    """A .part holding a web page (left by an earlier version) is discarded, and the file fetched whole
    without a Range request: resuming it would have appended the file to the page."""
    s = Server({"/a.txt": GOOD})
    try:
        (tmp_path / "x").mkdir()
        (tmp_path / "x/a.txt.part").write_bytes(PORTAL)
        rc, out = run(tmp_path, manifest(entry("x/a.txt", s.url + "/a.txt")))
        assert rc == 0, out
        assert s.log == [("/a.txt", None)]  # no Range
        assert (tmp_path / "x/a.txt").read_bytes() == GOOD
    finally:
        s.close()


def test_a_body_of_another_size_is_not_kept_as_a_partial(tmp_path):
    """A server (or proxy) announcing another size than the manifest's is not sending the file: nothing
    is kept and resuming is not advised."""
    s = Server({"/a.txt": GOOD[:100]})
    try:
        rc, out = run(tmp_path, manifest(entry("x/a.txt", s.url + "/a.txt")))
    finally:
        s.close()
    assert rc == 1 and f"announced 100 bytes, the manifest says {len(GOOD)}" in out
    assert "resume" not in out and not (tmp_path / "x/a.txt.part").exists()


@pytest.fixture(params=["refused", "silent"])
def dead_host(request):
    """A host that cannot be reached: nothing listening (refused), or one that accepts the connection
    and never answers (a black-holing proxy: only the timeout ends the wait)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    if request.param == "silent":
        sock.listen(8)  # connections complete in the backlog; nothing is ever read or answered
    # else bound and not listening: a connection is refused, and the port stays ours (a closed one could be
    # taken by another worker's server under pytest-xdist)
    yield url, "timed out" if request.param == "silent" else "refused"
    sock.close()


def test_sources_are_checked_before_any_large_download(tmp_path, dead_host):
    """Issue 42: with no --only, a 28 MB wheel was downloaded before the other sources were found
    unreachable. Now every host is asked first (HEAD, with a timeout), and a derived file whose inputs
    are not all reachable downloads none of them; the reachable file is fetched, with a progress line."""
    dead_url, why = dead_host
    s = Server({"/wheel.whl": GOOD, "/other.txt": GOOD})
    out_entry = Entry("x/piqa.jsonl", "g", sha(b"x"), 1, None, derive="piqa", inputs=("wheel", "zip"))
    m = Manifest(
        None,
        {"g": {"licence": "MIT"}},
        [out_entry, entry("x/other.txt", s.url + "/other.txt")],
        {
            "wheel": D.Source(s.url + "/wheel.whl", sha(GOOD), len(GOOD)),
            "zip": D.Source(dead_url + "/z.zip", sha(b"z"), 1),
        },
    )
    try:
        lines = []
        rc = D.get_data(
            tmp_path / "data",
            manifest=m,
            progress=False,
            say=lines.append,
            timeout=1,
            cache=tmp_path / "cache",
        )
    finally:
        s.close()
    out = "\n".join(lines)
    assert rc == 1, out
    assert s.log == [("/other.txt", None)]  # the wheel was never downloaded
    assert not (tmp_path / "cache").exists()
    assert f"cannot reach {dead_url}" in out and why in out and "no network connection" in out
    assert f"checking 2 source host(s): {s.url}, {dead_url}" in out
    assert f"fetching x/other.txt ({len(GOOD):,} bytes) from {s.url}" in out
    assert (
        "wheel: not downloaded (another input's host cannot be reached, so x/piqa.jsonl could not be built)"
        in out
    )


def test_reachable_counts_any_http_answer_and_nothing_else():
    s = Server({"/a.txt": GOOD})  # answers HEAD with 501: the host is there
    try:
        assert D.reachable(s.url + "/a.txt", 2) is None and s.log == []  # HEAD only: no GET
    finally:
        s.close()
    assert "refused" in D.reachable(s.url + "/a.txt", 2)
