"""Corpora that cannot give a meaningful run are refused by the task's check (before any run folder),
naming the key, the file and what to do; invalid UTF-8 is replaced and counted in both corpus tasks;
damaged GPT-2 tokenizer files and damaged caches are named or rebuilt."""

from __future__ import annotations

import codecs
import errno
import json
import logging
import os
import random
from pathlib import Path

import pytest

from ssa_repro.core.atomic import StorageError
from ssa_repro.data import childes, corpus
from ssa_repro.data.paths import CorpusError
from ssa_repro.tasks import build_task
from ssa_repro.training.validate import problems
from tests.conftest import HAVE_SHARED_DATA, SHARED_DATA, TINY, make_cfg, run_script

DOC = "the cat sat on the mat and looked at the dog . a dog ran in the park with a red ball ."


def snapshot(folder: Path) -> dict:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ task=lm
def lm_root(tmp_path: Path, train: bytes, valid: bytes | None = None) -> Path:
    root = tmp_path / "data"
    (root / "lm").mkdir(parents=True)
    (root / "lm" / "train.txt").write_bytes(train)
    for name in ("valid", "test"):
        (root / "lm" / f"{name}.txt").write_bytes((DOC + "\n").encode() if valid is None else valid)
    return root


def lm_cfg(root: Path, tmp_path: Path, *extra: str):
    return make_cfg(
        "experiment=lm_small",
        f"data.root={root}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "task.context=8",
        "task.bpe_vocab=300",
        "model.vocab_size=300",
        "model.max_positions=8",
        "train.batch_size=2",
        "logger.mode=disabled",
        *extra,
        tiny=False,
    )


def docs(n: int) -> bytes:
    return "\n\n".join(f"{DOC} {i}" for i in range(n)).encode() + b"\n"


@pytest.mark.parametrize("content, what", [(b"", "0 bytes, 0 lines"), (b"\n  \n\t\n\n", "7 bytes, 4 lines")])
def test_lm_empty_or_blank_corpus_is_refused(tmp_path, content, what):
    root = lm_root(tmp_path, content)
    before = snapshot(tmp_path)
    found = problems(lm_cfg(root, tmp_path))
    train = root / "lm" / "train.txt"
    assert [p for p in found if "task.train_file" in p] == [
        f"task.train_file=lm/train.txt: {train} holds no text ({what}, all blank); put documents separated "
        "by blank lines in it, or point task.train_file / data.root at another corpus"
    ]
    assert snapshot(tmp_path) == before  # nothing written: no cache, no folder


def test_lm_corpus_too_small_to_hold_out_a_document(tmp_path):
    root = lm_root(tmp_path, docs(3))
    [msg] = problems(lm_cfg(root, tmp_path, "task.heldout_every=10"))
    assert msg.startswith(f"task.train_file=lm/train.txt: {root / 'lm' / 'train.txt'} holds 3 documents")
    assert "fewer than task.heldout_every=10" in msg and "scored on 0 tokens" in msg
    assert "set task.heldout_every between 2 and 3, or 0" in msg
    assert problems(lm_cfg(root, tmp_path, "task.heldout_every=0")) == []
    assert problems(lm_cfg(root, tmp_path, "task.heldout_every=3")) == []
    [msg] = problems(lm_cfg(lm_root(tmp_path / "one", docs(1)), tmp_path, "task.heldout_every=2"))
    assert "holds 1 document (separated" in msg and "set task.heldout_every=0" in msg


def test_lm_empty_evaluation_file_is_refused(tmp_path):
    root = lm_root(tmp_path, docs(30), valid=b"\n\n")
    found = problems(lm_cfg(root, tmp_path, "task.heldout_every=10"))
    assert f"task.valid_file=lm/valid.txt: {root / 'lm' / 'valid.txt'} holds no text" in found[0]
    assert len(found) == 2 and "task.test_file=lm/test.txt" in found[1]


def test_lm_invalid_utf8_is_replaced_counted_and_located(tmp_path, caplog):
    body = docs(30)
    at = body.index(b"park")
    root = lm_root(tmp_path, body[:at] + b"\xff\xfe" + body[at:])
    cfg = lm_cfg(root, tmp_path, "task.heldout_every=10")
    assert problems(cfg) == []  # not refused: replaced (as documented in data/corpus.py)
    with caplog.at_level(logging.INFO, logger="ssa_repro.data"):
        meta = build_task(cfg.task).corpus("train").meta
    assert meta["invalid_utf8"] == 2 and meta["first_invalid_utf8_byte"] == at
    assert f"2 invalid UTF-8 sequences replaced by U+FFFD (the first at byte {at})" in caplog.text


def undecodable_bytes(raw: bytes) -> int:
    """Bytes Python's UTF-8 decoder cannot decode, counted by its own error handler (a reference
    independent of data/corpus.py's arithmetic)."""
    seen = []

    def count(err):
        seen.append(err.end - err.start)
        return "", err.end

    codecs.register_error("count_undecodable", count)
    raw.decode("utf-8", errors="count_undecodable")
    return sum(seen)


def random_bytes(n: int) -> bytes:
    return random.Random(0).randbytes(n)


@pytest.mark.parametrize("kind", ["lm", "mlm"])
def test_a_corpus_that_is_mostly_not_utf8_is_refused_naming_the_file_and_the_share(tmp_path, kind):
    raw = random_bytes(6000)  # a binary file given as a corpus
    if kind == "lm":
        root = lm_root(tmp_path, raw)
        path, cfg = root / "lm" / "train.txt", lm_cfg(root, tmp_path)
    else:
        root = mlm_root(tmp_path, raw)
        path, cfg = root / "childes" / "small.txt", make_cfg(*mlm_overrides(root))
    before = snapshot(tmp_path)
    bad = undecodable_bytes(raw)
    [msg] = [p for p in problems(cfg) if str(path) in p]
    assert msg.startswith(
        f"{path}: {bad / len(raw):.0%} of its bytes ({bad} of {len(raw)}, the first at byte"
    )
    assert "more than the 1% a corpus may hold" in msg and "iconv" in msg
    assert snapshot(tmp_path) == before  # nothing written: no cache


def test_the_share_of_invalid_utf8_is_counted_in_bytes():
    for raw in (random_bytes(3000), b"ok \xff\xfe\xc3\x28 \xe2\x82 end", "é\ufffd".encode() + b"\xff"):
        text, replaced, _ = corpus.decode(raw)
        assert len(raw) - (len(text.encode()) - 3 * replaced) == undecodable_bytes(raw)
    ok = b"a" * 99 + b"\xff"  # exactly 1%: replaced, not refused
    assert corpus.decode(ok, Path("x.txt"))[1] == 1
    with pytest.raises(CorpusError, match="x.txt: 2% of its bytes"):
        corpus.decode(ok + b"\xff", Path("x.txt"))


def test_lm_damaged_cache_is_rebuilt_and_a_full_cache_disk_names_data_cache_dir(
    tmp_path, monkeypatch, caplog
):
    root = lm_root(tmp_path, docs(30))
    cfg = lm_cfg(root, tmp_path, "task.heldout_every=10")
    n = len(build_task(cfg.task).corpus("train"))
    [meta] = (tmp_path / "cache" / "corpus").glob("train_*/meta.json")
    meta.write_text('{"splits": {"train": {"tok')  # cut short
    with caplog.at_level(logging.WARNING, logger="ssa_repro.data"):
        assert len(build_task(cfg.task).corpus("train")) == n
    assert "is damaged" in caplog.text and json.loads(meta.read_text())["documents"] == 30
    meta.unlink()
    real = os.write

    def full(fd, data):
        real(fd, bytes(data)[:1])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(
        StorageError, match=r"no space left on device while writing .*meta\.json.*data\.cache_dir="
    ):
        build_task(cfg.task).corpus("train")
    monkeypatch.undo()
    assert not list((tmp_path / "cache").rglob(".*.tmp*"))


# ------------------------------------------------------------------ GPT-2 tokenizer files
def test_damaged_gpt2_files_are_named_never_download(tmp_path):
    from ssa_repro.data.tokenizer import GPT2Tokenizer, gpt2_file_problems

    root = lm_root(tmp_path, docs(200))
    gpt2 = root / "tokenizers" / "gpt2"
    gpt2.mkdir(parents=True)
    if HAVE_SHARED_DATA:  # a real vocab.bpe and a truncated real encoder.json
        (gpt2 / "vocab.bpe").write_bytes((SHARED_DATA / "tokenizers/gpt2/vocab.bpe").read_bytes())
        (gpt2 / "encoder.json").write_bytes(
            (SHARED_DATA / "tokenizers/gpt2/encoder.json").read_bytes()[:5000]
        )
    else:
        (gpt2 / "vocab.bpe").write_text("#version: 0.2\n")
        (gpt2 / "encoder.json").write_text('{"!": 0, "\\"": 1')
    found = gpt2_file_problems(root)
    (encoder,) = [f for f in found if f.startswith(f"{gpt2 / 'encoder.json'} is damaged: its sha256 is ")]
    assert "the offline GPT-2 tokenizer files" in encoder and "restore them" in encoder
    assert len(found) == (1 if HAVE_SHARED_DATA else 2)  # without the real files vocab.bpe is damaged too
    cfg = lm_cfg(root, tmp_path, "task.tokenizer=gpt2", "model.vocab_size=50257", "task.heldout_every=10")
    text = "\n".join(problems(cfg))
    assert "encoder.json is damaged" in text and "download" not in text.lower()
    with pytest.raises(CorpusError, match="encoder.json is damaged"):
        GPT2Tokenizer(root)


# ------------------------------------------------------------------ task=mlm
def mlm_root(tmp_path: Path, corpus: bytes) -> Path:
    root = tmp_path / "data"
    (root / "childes").mkdir(parents=True)
    (root / "childes" / "small.txt").write_bytes(corpus)
    return root


def mlm_overrides(root: Path, *extra: str) -> list[str]:
    return [
        "task=mlm",
        "model=encoder",
        f"data.root={root}",
        f"data.cache_dir={root.parent / 'cache'}",
        "task.corpus=childes/small.txt",
        "task.max_lines=null",
        "task.vocab_size=300",
        "model.vocab_size=300",
        "task.max_length=16",
        "model.max_positions=16",
        "task.heldout_every=10",
        "task.quick_zorro_pairs=0",
        *extra,
    ]


def utterances(n: int, words: int = 3) -> bytes:
    return "".join(" ".join(["dog"] * words) + f" {i}\n" for i in range(n)).encode()


@pytest.mark.parametrize("content", [b"", b"\n\n   \n"], ids=["empty", "blank"])
def test_mlm_corpus_without_utterances_is_refused(tmp_path, content):
    root = mlm_root(tmp_path, content)
    before = snapshot(tmp_path)
    [msg] = problems(make_cfg(*mlm_overrides(root)))
    assert msg == (
        f"task.corpus: {root / 'childes' / 'small.txt'} gives nothing to train on: it holds no utterance: it is "
        "empty or only blank lines; put one utterance per line in it, or point task.corpus / data.root at "
        "another corpus"
    )
    assert snapshot(tmp_path) == before


def test_mlm_corpus_whose_utterances_are_all_too_long_is_refused(tmp_path):
    root = mlm_root(tmp_path, utterances(30, words=20))
    [msg] = problems(make_cfg(*mlm_overrides(root)))
    assert "all 30 of its utterances are longer than task.max_length=16 tokens" in msg
    assert "raise task.max_length (and model.max_positions)" in msg
    assert problems(make_cfg(*mlm_overrides(root, "task.max_length=64", "model.max_positions=64"))) == []


def test_mlm_corpus_too_small_to_hold_out_an_utterance(tmp_path):
    root = mlm_root(tmp_path, utterances(4))
    [msg] = problems(make_cfg(*mlm_overrides(root)))
    assert "holds 4 utterances, fewer than task.heldout_every=10" in msg
    assert "set task.heldout_every between 2 and 4, or 0" in msg
    assert problems(make_cfg(*mlm_overrides(root, "task.heldout_every=0"))) == []


def test_mlm_invalid_utf8_is_replaced_and_counted_like_lm(tmp_path, caplog):
    body = utterances(40)
    root = mlm_root(tmp_path, body[:20] + b"\xc3\x28" + body[20:])  # an invalid two-byte sequence
    cfg = make_cfg(*mlm_overrides(root))
    assert problems(cfg) == []
    stats = childes.scan_lines(root / "childes" / "small.txt")
    assert (stats["invalid_utf8"], stats["first_invalid_utf8_byte"], stats["utterances"]) == (1, 20, 40)
    with caplog.at_level(logging.WARNING, logger="ssa_repro.data"):
        assert len(build_task(cfg.task).corpus) == 40
    assert "1 invalid UTF-8 sequences replaced by U+FFFD (the first at byte 20)" in caplog.text


def test_encode_corpus_refuses_an_empty_result_and_rebuilds_a_damaged_cache(tmp_path, caplog):
    corpus = mlm_root(tmp_path, utterances(20)) / "childes" / "small.txt"
    tok = childes.tokenizer_for(corpus, 300, tmp_path / "cache", None)
    with pytest.raises(CorpusError, match="all 20 of its utterances are longer than task.max_length=3"):
        childes.encode_corpus(corpus, tok, tmp_path / "cache", None, 3)
    n = len(childes.encode_corpus(corpus, tok, tmp_path / "cache", None, 16))
    for npz in (tmp_path / "cache").glob("childes_*.npz"):
        npz.write_bytes(npz.read_bytes()[:50])  # truncated
    with caplog.at_level(logging.WARNING, logger="ssa_repro.data"):
        assert len(childes.encode_corpus(corpus, tok, tmp_path / "cache", None, 16)) == n
    assert "cannot be read" in caplog.text
    for bpe in (tmp_path / "cache").glob("bpe_*.json"):
        bpe.write_text('{"version": "1.0", "trunc')
    with caplog.at_level(logging.WARNING, logger="ssa_repro.data"):
        again = childes.tokenizer_for(corpus, 300, tmp_path / "cache", None)
    assert again.to_str() == tok.to_str() and "training it again" in caplog.text
    assert not list((tmp_path / "cache").glob(".*.tmp*"))


@pytest.mark.slow
def test_train_py_with_an_empty_mlm_corpus_stops_before_the_run_folder(tmp_path):
    root = mlm_root(tmp_path, b"")
    run = tmp_path / "run"
    tiny = [a for a in TINY if not a.startswith(("model.max_positions", "curriculum", "evaluation.lengths"))]
    proc = run_script("train.py", *tiny, *mlm_overrides(root), f"hydra.run.dir={run}")
    assert proc.returncode == 1
    assert "gives nothing to train on: it holds no utterance" in proc.stderr
    assert "Traceback" not in proc.stderr and "ZeroDivisionError" not in proc.stderr
    assert not run.exists()
