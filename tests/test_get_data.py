"""scripts/get_data.py end to end against a local HTTP server on 127.0.0.1 (never the internet): a good
file, a redirect, a bad checksum, a transfer cut mid-body then resumed with Range, a 404, no server."""

from __future__ import annotations

import hashlib
import http.server
import threading

import pytest

from ssa_repro.data import download as D
from ssa_repro.data.download import Entry, Manifest, get_data
from ssa_repro.data.tokenizer import GPT2_FILES
from ssa_repro.evaluation.multiple_choice import TASKS
from ssa_repro.tasks.lm import LMTaskConfig
from ssa_repro.tasks.mlm import MLMTaskConfig
from tests.conftest import HAVE_SHARED_DATA, ROOT, SHARED_DATA

GOOD = b"the cat sat on the mat .\n" * 400  # 10,000 bytes
OTHER = b"a dog ran .\n" * 300


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


class Server:
    """Serves ``files`` (path -> bytes) with Range support; ``cut`` paths send half the body, once, then
    close; ``moved`` paths redirect (302); anything else is a 404. ``log`` records (path, Range)."""

    def __init__(self, files, cut=(), moved=None):
        self.files, self.cut, self.moved, self.log = files, set(cut), moved or {}, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                outer.log.append((self.path, rng))
                if self.path in outer.moved:
                    self.send_response(302)
                    self.send_header("Location", outer.moved[self.path])
                    self.end_headers()
                    return
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
                self.send_response(206 if rng else 200)
                if rng:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                if self.path in outer.cut:  # announce the whole body, send half, hang up
                    outer.cut.discard(self.path)
                    self.wfile.write(body[start : start + (len(body) - start) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[start:])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server(
        {"/good.txt": GOOD, "/bad.txt": OTHER, "/cut.txt": GOOD, "/final.txt": GOOD, "/mirror/a/b.txt": GOOD},
        cut={"/cut.txt"},
        moved={"/old.txt": "/final.txt"},
    )
    yield s
    s.close()


def manifest(*entries) -> Manifest:
    return Manifest(
        None, {"g": {"licence": "MIT (test)", "cite": ""}, "h": {"licence": "CC0"}}, list(entries)
    )


def entry(path, url, body=GOOD, group="g") -> Entry:
    return Entry(path=path, group=group, sha256=sha(body), bytes=len(body), url=url)


def run(root, m, **kw):
    lines = []
    rc = get_data(root, manifest=m, progress=False, say=lines.append, timeout=5, **kw)
    return rc, "\n".join(lines)


def test_good_file_and_redirect_land_checked(server, tmp_path):
    m = manifest(entry("x/good.txt", server.url + "/good.txt"), entry("x/moved.txt", server.url + "/old.txt"))
    rc, out = run(tmp_path, m)
    assert rc == 0, out
    assert (tmp_path / "x/good.txt").read_bytes() == GOOD
    assert (tmp_path / "x/moved.txt").read_bytes() == GOOD
    assert ("/final.txt", None) in server.log  # followed the redirect
    assert "licence MIT (test)" in out
    n = len(server.log)
    rc, out = run(tmp_path, m)  # in place and matching: nothing fetched again
    assert rc == 0 and len(server.log) == n and out.count("ok ") == 2


def test_bad_checksum_leaves_no_file(server, tmp_path):
    m = manifest(Entry("x/bad.txt", "g", sha(GOOD), len(OTHER), server.url + "/bad.txt"))
    rc, out = run(tmp_path, m)
    assert rc == 1
    assert f"sha256 {sha(OTHER)}" in out and f"sha256 {sha(GOOD)}" in out
    assert not (tmp_path / "x/bad.txt").exists() and not (tmp_path / "x/bad.txt.part").exists()


def test_interrupted_transfer_resumes_with_range(server, tmp_path):
    m = manifest(entry("x/cut.txt", server.url + "/cut.txt"))
    rc, out = run(tmp_path, m)
    assert rc == 1 and "run again to resume" in out
    part = tmp_path / "x/cut.txt.part"
    assert not (tmp_path / "x/cut.txt").exists()  # never under the name a task reads
    assert part.read_bytes() == GOOD[: len(GOOD) // 2]
    rc, out = run(tmp_path, m)
    assert rc == 0, out
    assert server.log[-1] == ("/cut.txt", f"bytes={len(GOOD) // 2}-")  # asked only for the rest
    assert (tmp_path / "x/cut.txt").read_bytes() == GOOD and not part.exists()


def test_a_damaged_file_in_place_is_fetched_again(server, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x/good.txt").write_bytes(GOOD[:-1] + b"!")
    rc, out = run(tmp_path, manifest(entry("x/good.txt", server.url + "/good.txt")))
    assert rc == 0 and "differs x/good.txt" in out
    assert (tmp_path / "x/good.txt").read_bytes() == GOOD


def test_404_and_no_source_name_the_files_to_place_by_hand(server, tmp_path):
    m = manifest(entry("x/gone.txt", server.url + "/gone.txt"), entry("x/derived.txt", None))
    rc, out = run(tmp_path, m)
    assert rc == 1
    assert "HTTP 404" in out and "x/gone.txt" in out
    assert "x/derived.txt" in out and "no public upstream copy" in out and "Place them by hand" in out
    assert not (tmp_path / "x/gone.txt").exists()


def test_unreachable_says_so(tmp_path):
    s = Server({})
    url = s.url
    s.close()  # nothing listens there now: connection refused
    rc, out = run(tmp_path, manifest(entry("x/a.txt", url + "/a.txt")))
    assert (
        rc == 1
        and "no network connection" in out
        and f"x/a.txt  {len(GOOD)} bytes  sha256 {sha(GOOD)}" in out
    )


def test_base_url_mirror_serves_every_file_and_only_selects_groups(server, tmp_path):
    m = manifest(entry("a/b.txt", None), entry("c/d.txt", server.url + "/nowhere", group="h"))
    rc, out = run(tmp_path, m, only=["g"], base_url=server.url + "/mirror")
    assert rc == 0, out
    assert (tmp_path / "a/b.txt").read_bytes() == GOOD and not (tmp_path / "c").exists()
    assert "CC0" not in out  # the licences printed are those of the groups fetched
    with pytest.raises(ValueError, match="--only nope: no such group; allowed: g, h"):
        run(tmp_path, m, only=["nope"])


def test_the_script_runs(server, tmp_path, monkeypatch, capsys):
    """scripts/get_data.py's entry with the repository's manifest, every file from a local mirror that
    has none of them: each is reported missing (HTTP 404), nothing is left under the data root."""
    root = tmp_path / "data"
    argv = ["--root", str(root), "--only", "tokenizers", "--base-url", server.url, "--no-progress"]
    rc = D.main([*argv, "--cache-dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert rc == 1 and "tokenizers/gpt2/vocab.bpe" in out and "HTTP 404" in out
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.skipif(not HAVE_SHARED_DATA, reason=f"no offline data at {SHARED_DATA}")
def test_the_manifest_matches_the_offline_copy():
    m = D.load_manifest()
    for e in m.files:
        p = SHARED_DATA / e.path
        assert p.stat().st_size == e.bytes, e.path
        assert D.sha256_of(p) == e.sha256, e.path
    on_disk = {str(p.relative_to(SHARED_DATA)) for p in SHARED_DATA.rglob("*") if p.is_file()} - {"README.md"}
    assert on_disk == {e.path for e in m.files}


def test_the_manifest_covers_what_the_tasks_read():
    paths = {e.path for e in D.load_manifest().files}
    lm = LMTaskConfig()
    wanted = {*GPT2_FILES, lm.train_file, lm.valid_file, lm.test_file, MLMTaskConfig().corpus}
    wanted |= {spec.file for spec in TASKS.values()}
    assert wanted <= paths, wanted - paths
    assert sum(p.startswith("zorro/") and p.endswith(".txt") for p in paths) == 23
    assert (ROOT / "scripts/get_data.py").exists()


# ------------------------------------------------------------------------------------ derived files
# A derived file is built from its public inputs (fetched into the cache like any download) by its
# function in ssa_repro/data/derive.py, and takes its name only when its sha256 is the manifest's.

PIQA_SRC = b'{"choices": ["a", "b"], "gold": 1, "query": "Question: dresser\\n"}\n'
PIQA_OUT = b'{"goal": "dresser", "sol1": "a", "sol2": "b", "label": 1, "idx": 0}\n'


@pytest.fixture
def inputs_server():
    s = Server({"/piqa.jsonl": PIQA_SRC, "/cut/piqa.jsonl": PIQA_SRC}, cut={"/cut/piqa.jsonl"})
    yield s
    s.close()


def derived_manifest(url, out=PIQA_OUT, src=PIQA_SRC) -> Manifest:
    return Manifest(
        None,
        {"g": {"licence": "MIT (test)"}},
        [Entry("x/piqa.jsonl", "g", sha(out), len(out), None, derive="piqa", inputs=("up/piqa.jsonl",))],
        {"up/piqa.jsonl": D.Source(url, sha(src), len(src))},
    )


def test_a_derived_file_is_built_from_its_fetched_inputs(inputs_server, tmp_path):
    m = derived_manifest(inputs_server.url + "/piqa.jsonl")
    rc, out = run(tmp_path / "data", m, cache=tmp_path / "cache")
    assert rc == 0, out
    assert (tmp_path / "data/x/piqa.jsonl").read_bytes() == PIQA_OUT
    assert (tmp_path / "cache/up/piqa.jsonl").read_bytes() == PIQA_SRC  # the input, kept in the cache
    assert "fetched input up/piqa.jsonl" in out and "derived x/piqa.jsonl (piqa" in out
    (tmp_path / "data/x/piqa.jsonl").write_bytes(b"damaged\n")
    n = len(inputs_server.log)
    rc, out = run(tmp_path / "data", m, cache=tmp_path / "cache")
    assert rc == 0 and "differs x/piqa.jsonl (size or sha256): building it again" in out
    assert len(inputs_server.log) == n  # the cached input, checked, is used again
    assert (tmp_path / "data/x/piqa.jsonl").read_bytes() == PIQA_OUT


def test_an_interrupted_input_resumes(inputs_server, tmp_path):
    m = derived_manifest(inputs_server.url + "/cut/piqa.jsonl")
    rc, out = run(tmp_path / "data", m, cache=tmp_path / "cache")
    assert rc == 1 and "run again to resume" in out and not (tmp_path / "data/x").exists()
    rc, out = run(tmp_path / "data", m, cache=tmp_path / "cache")
    assert rc == 0, out
    assert inputs_server.log[-1] == ("/cut/piqa.jsonl", f"bytes={len(PIQA_SRC) // 2}-")
    assert (tmp_path / "data/x/piqa.jsonl").read_bytes() == PIQA_OUT


def test_a_derived_result_with_another_sha256_is_not_left_where_tasks_read(inputs_server, tmp_path):
    m = derived_manifest(inputs_server.url + "/piqa.jsonl", out=PIQA_OUT.replace(b"dresser", b"table"))
    rc, out = run(tmp_path / "data", m, cache=tmp_path / "cache")
    assert rc == 1
    assert f"piqa built {len(PIQA_OUT)} bytes with sha256 {sha(PIQA_OUT)}" in out
    assert not [p for p in (tmp_path / "data").rglob("*") if p.is_file()]  # nothing, not even a temporary
    assert (tmp_path / "cache/mismatch/x/piqa.jsonl").read_bytes() == PIQA_OUT  # kept aside to compare


def test_unreachable_inputs_name_the_file_the_inputs_and_where_to_put_them(tmp_path):
    s = Server({})
    url = s.url
    s.close()  # connection refused
    m = derived_manifest(url + "/piqa.jsonl")
    cache = tmp_path / "cache"
    rc, out = run(tmp_path / "data", m, cache=cache)
    assert rc == 1 and "no network connection" in out
    assert f"x/piqa.jsonl  {len(PIQA_OUT)} bytes" in out and "derived by piqa" in out
    assert f"place them by hand under {cache}" in out
    assert f"{cache / 'up/piqa.jsonl'}  {len(PIQA_SRC)} bytes  sha256 {sha(PIQA_SRC)}" in out
    assert f"cannot reach {url}/piqa.jsonl" in out
    assert not (tmp_path / "data/x/piqa.jsonl").exists()
    (cache / "up").mkdir(parents=True)
    (cache / "up/piqa.jsonl").write_bytes(PIQA_SRC)  # placed by hand: no network needed now
    rc, out = run(tmp_path / "data", m, cache=cache)
    assert rc == 0, out
    assert (tmp_path / "data/x/piqa.jsonl").read_bytes() == PIQA_OUT


def test_a_derived_file_without_inputs_and_the_cache_option(tmp_path, monkeypatch):
    names = D.load_manifest().files
    entry = next(e for e in names if e.path == "zorro/names.tsv")
    monkeypatch.setenv("SSA_DATA_CACHE", str(tmp_path / "env-cache"))
    assert D.default_cache() == tmp_path / "env-cache"
    rc, out = run(tmp_path, Manifest(None, {"zorro": {"licence": "MIT"}}, [entry]))
    assert rc == 0, out
    assert sha((tmp_path / "zorro/names.tsv").read_bytes()) == entry.sha256


def test_a_mirror_serves_derived_files_without_deriving(server, tmp_path):
    m = Manifest(
        None,
        {"g": {"licence": "MIT"}},
        [Entry("a/b.txt", "g", sha(GOOD), len(GOOD), None, derive="piqa", inputs=("nowhere",))],
        {"nowhere": D.Source(server.url + "/missing", sha(b""), 1)},
    )
    rc, out = run(tmp_path, m, base_url=server.url + "/mirror")
    assert rc == 0, out
    assert (tmp_path / "a/b.txt").read_bytes() == GOOD and "/missing" not in str(server.log)


def test_a_manifest_naming_an_unlisted_input_is_refused(tmp_path):
    (tmp_path / "m.yaml").write_text(
        "base_url: null\ngroups: {g: {licence: x}}\ninputs: {}\n"
        "files:\n- {path: a, group: g, sha256: s, bytes: 1, url: null, derive: piqa, inputs: [up/x]}\n"
    )
    with pytest.raises(ValueError, match="a names inputs not listed under inputs: up/x"):
        D.load_manifest(tmp_path / "m.yaml")
