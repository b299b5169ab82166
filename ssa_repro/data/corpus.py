"""Tokenised corpora as memory-mapped arrays, cached in ``data.cache_dir``.

``documents_corpus``: a text file of documents separated by blank lines (``lm/train.txt``). Each
document is encoded and followed by ``<|endoftext|>``; every ``heldout_every``-th document (the last
of each group of that many) goes to a held-out split instead of the training split (0: none), so
the model can be scored in-domain as well as on WikiText.

``stream_corpus``: a whole file as one token stream, ``<|endoftext|>`` first (``lm/valid.txt``,
``lm/test.txt``), optionally detokenised first (WikiText's `` @-@ ``, split punctuation, ...; the
rules of lm-eval's ``wikitext`` task).

Bytes that are not valid UTF-8 are replaced by U+FFFD and counted; empty (or whitespace-only) lines
are counted (in a document file they separate documents; runs of them never make empty documents).
The counts are in ``meta.json`` beside the arrays and in the run's log. Arrays are uint16 when the
vocabulary fits, else uint32, written to a temporary name and renamed, so a killed run never leaves
half a corpus in the cache. The cache key covers the file (path, size, mtime), the tokeniser's exact
vocabulary and the settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ssa_repro.data.tokenizer import TextTokenizer, file_key

log = logging.getLogger("ssa_repro.data")

VERSION = 1


@dataclass
class Corpus:
    """One split: ``tokens`` (a read-only memmap) and the counts from reading its file."""

    name: str
    tokens: np.ndarray
    meta: dict

    def __len__(self) -> int:
        return len(self.tokens)


def read_text(path: Path) -> tuple[str, dict]:
    """The file as text (LF line ends) with counts: bytes, invalid UTF-8 sequences, lines, empty lines."""
    raw = Path(path).read_bytes()
    text = raw.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - raw.count("\ufffd".encode())  # replacements made, not ones in the file
    text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    empty = sum(1 for line in lines if not line.strip())
    return text, {"bytes": len(raw), "invalid_utf8": bad, "lines": len(lines), "empty_lines": empty}


def split_documents(text: str) -> list[str]:
    """Documents separated by one or more empty (or whitespace-only) lines; none of them empty."""
    docs, cur = [], []
    for line in text.split("\n"):
        if line.strip():
            cur.append(line)
        elif cur:
            docs.append("\n".join(cur))
            cur = []
    if cur:
        docs.append("\n".join(cur))
    return docs


def wikitext_detokenize(s: str) -> str:
    """Undo WikiText's tokenisation (the same rules as lm-eval's ``wikitext`` task)."""
    s = s.replace("s '", "s'")
    s = re.sub(r"/' [0-9]/", r"/'[0-9]/", s)
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    for p in (":", ";", ".", "!", "?", ","):
        s = s.replace(f" {p} ", f"{p} ")
    s = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", s)
    s = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", s)
    s = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", s)
    s = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', s)
    s = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", s)
    s = s.replace("= = = =", "====").replace("= = =", "===").replace("= =", "==")
    s = s.replace(" " + chr(176) + " ", chr(176))
    s = s.replace(" \n", "\n").replace("\n ", "\n")
    s = s.replace(" N ", " 1 ").replace(" 's", "'s")
    return s


def _dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 2**16 else np.uint32


def _cache_folder(cache_dir: Path, path: Path, tokenizer: TextTokenizer, settings: dict) -> Path:
    key = json.dumps(
        {"file": file_key(path), "tok": tokenizer.fingerprint, "v": VERSION, **settings}, sort_keys=True
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(cache_dir) / "corpus" / f"{Path(path).stem}_{digest}"


def _write(folder: Path, arrays: dict[str, list[int]], meta: dict, vocab_size: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    dtype = _dtype(vocab_size)
    for name, ids in arrays.items():
        arr = np.asarray(ids, dtype=dtype)
        tmp = folder / f"{name}.bin.tmp"
        arr.tofile(tmp)
        tmp.replace(folder / f"{name}.bin")
        meta.setdefault("splits", {})[name] = {"tokens": len(arr)}
    meta["dtype"] = np.dtype(dtype).name
    tmp = folder / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    tmp.replace(folder / "meta.json")  # written last: its presence marks a complete cache entry


def _open(folder: Path, name: str) -> Corpus:
    meta = json.loads((folder / "meta.json").read_text())
    n = meta["splits"][name]["tokens"]
    path = folder / f"{name}.bin"
    if n == 0:
        tokens = np.zeros(0, dtype=meta["dtype"])
    else:
        tokens = np.memmap(path, dtype=meta["dtype"], mode="r", shape=(n,))
    return Corpus(name, tokens, meta)


def cached_meta(path: Path, tokenizer_fingerprint: str, cache_dir: Path, settings: dict) -> dict | None:
    """The counts of a corpus already in the cache (for cheap config checks), or None."""

    class _T:
        fingerprint = tokenizer_fingerprint

    folder = _cache_folder(cache_dir, path, _T, settings)  # type: ignore[arg-type]
    f = folder / "meta.json"
    return json.loads(f.read_text()) if f.exists() else None


def documents_corpus(
    path: Path, tokenizer: TextTokenizer, cache_dir: Path, heldout_every: int = 0
) -> tuple[Corpus, Corpus]:
    """(train, heldout) splits of a blank-line-separated document file."""
    settings = {"kind": "documents", "heldout_every": heldout_every}
    folder = _cache_folder(cache_dir, path, tokenizer, settings)
    if not (folder / "meta.json").exists():
        text, meta = read_text(path)
        docs = split_documents(text)
        encoded = tokenizer.encode_batch(docs)
        train, held = [], []
        n_held = 0
        for i, ids in enumerate(encoded):
            is_held = heldout_every > 0 and i % heldout_every == heldout_every - 1
            n_held += is_held
            (held if is_held else train).extend([*ids, tokenizer.eot_id])
        meta.update(
            file=str(path),
            tokenizer=tokenizer.fingerprint,
            documents=len(docs),
            heldout_documents=n_held,
            **settings,
        )
        meta["words"] = {
            "train": sum(len(d.split()) for i, d in enumerate(docs) if not _held(i, heldout_every)),
            "heldout": sum(len(d.split()) for i, d in enumerate(docs) if _held(i, heldout_every)),
        }
        meta["text_bytes"] = {
            "train": sum(len(d.encode()) for i, d in enumerate(docs) if not _held(i, heldout_every)),
            "heldout": sum(len(d.encode()) for i, d in enumerate(docs) if _held(i, heldout_every)),
        }
        _write(folder, {"train": train, "heldout": held}, meta, tokenizer.vocab_size)
        log.info(
            "tokenised %s: %d documents (%d held out), %d + %d tokens; %d empty lines, %d invalid UTF-8 "
            "sequences replaced; cached in %s",
            path,
            len(docs),
            n_held,
            len(train),
            len(held),
            meta["empty_lines"],
            meta["invalid_utf8"],
            folder,
        )
    return _open(folder, "train"), _open(folder, "heldout")


def _held(i: int, every: int) -> bool:
    return every > 0 and i % every == every - 1


def stream_corpus(path: Path, tokenizer: TextTokenizer, cache_dir: Path, detokenize: bool = False) -> Corpus:
    """The whole file as one stream: ``<|endoftext|>`` then its tokens."""
    settings = {"kind": "stream", "detokenize": detokenize}
    folder = _cache_folder(cache_dir, path, tokenizer, settings)
    if not (folder / "meta.json").exists():
        text, meta = read_text(path)
        if detokenize:
            text = wikitext_detokenize(text)
        ids = [tokenizer.eot_id, *tokenizer.encode(text)]
        meta.update(
            file=str(path),
            tokenizer=tokenizer.fingerprint,
            words={"stream": len(text.split())},
            text_bytes={"stream": len(text.encode())},
            **settings,
        )
        _write(folder, {"stream": ids}, meta, tokenizer.vocab_size)
        log.info("tokenised %s: %d tokens (%d invalid UTF-8 sequences)", path, len(ids), meta["invalid_utf8"])
    return _open(folder, "stream")
