"""Tokenised corpora as memory-mapped arrays, cached in ``data.cache_dir``.

``documents_corpus``: a text file of documents separated by blank lines (``lm/train.txt``). Each
document is encoded and followed by ``<|endoftext|>``; every ``heldout_every``-th document (the last
of each group of that many) goes to a held-out split instead of the training split (0: none), so
the model can be scored in-domain as well as on WikiText.

``stream_corpus``: a whole file as one token stream, ``<|endoftext|>`` first (``lm/valid.txt``,
``lm/test.txt``), optionally detokenised first (WikiText's `` @-@ ``, split punctuation, ...; the
rules of lm-eval's ``wikitext`` task).

Bytes that are not valid UTF-8 are replaced by U+FFFD and counted (with the byte offset of the first
one, so it can be found), not refused: one stray byte in a 20 MB corpus should not stop a run, and
the count in the log says how much was replaced. A file of which more than ``MAX_UNDECODABLE`` (1%) of
the bytes are not UTF-8 is refused (:class:`~ssa_repro.data.paths.CorpusError` naming the file and the
share): it is another encoding or not text at all, and training on it would learn replacement
characters (the masked LM's corpus is read the same way,
:mod:`ssa_repro.data.childes`). Empty (or whitespace-only) lines are counted (in a document file they
separate documents; runs of them never make empty documents). The counts are in ``meta.json`` beside
the arrays and in the run's log. :func:`scan` gives the same counts without tokenising, for the
config checks that refuse an empty corpus, or one too small to hold out a document, before a run
folder exists.

Arrays are uint16 when the vocabulary fits, else uint32, written atomically
(:mod:`ssa_repro.core.atomic`: a temporary name per process, then a rename; ``meta.json`` last, its
presence marks a complete entry), so a killed run never leaves half a corpus in the cache and two
processes tokenising the same file at once do not mix their bytes. A cache entry found damaged
(unreadable ``meta.json``, an array of the wrong size) is logged and rebuilt. A full disk while
writing the cache is a :class:`~ssa_repro.core.atomic.StorageError` naming the file and
``data.cache_dir``. The cache key covers the file (path, size, mtime), the tokeniser's exact
vocabulary and the settings.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ssa_repro.core import atomic
from ssa_repro.data.paths import CorpusError
from ssa_repro.data.tokenizer import TextTokenizer, file_key

log = logging.getLogger("ssa_repro.data")

VERSION = 1
MAX_UNDECODABLE = 0.01  # the share of a corpus file's bytes that may be invalid UTF-8 (replaced)
CACHE_HINT = "data.cache_dir=<another folder>"


@dataclass
class Corpus:
    """One split: ``tokens`` (a read-only memmap) and the counts from reading its file."""

    name: str
    tokens: np.ndarray
    meta: dict

    def __len__(self) -> int:
        return len(self.tokens)


def decode(raw: bytes, path: Path | None = None) -> tuple[str, int, int | None]:
    """UTF-8 text with invalid bytes replaced by U+FFFD: (text, sequences replaced, byte offset of the
    first one or None). With ``path`` (a corpus file), more than ``MAX_UNDECODABLE`` of the bytes not
    UTF-8 is a :class:`CorpusError` naming the file and the share."""
    try:
        return raw.decode("utf-8"), 0, None
    except UnicodeDecodeError as e:
        first = e.start
    text = raw.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - raw.count("\ufffd".encode())  # replacements made, not ones in the file
    # each replacement re-encodes to 3 bytes; every other character to the bytes it was read from
    undecodable = len(raw) - (len(text.encode()) - 3 * bad)
    if path is not None and undecodable > MAX_UNDECODABLE * len(raw):
        raise CorpusError(
            f"{path}: {undecodable / len(raw):.0%} of its bytes ({undecodable} of {len(raw)}, the first at "
            f"byte {first}) are not UTF-8, more than the {MAX_UNDECODABLE:.0%} a corpus may hold (they would "
            "be trained on as replacement characters): it is another encoding or not text; convert it "
            "(e.g. iconv -f latin1 -t utf-8) or point the task's corpus key / data.root at another file"
        )
    return text, bad, first


def read_text(path: Path) -> tuple[str, dict]:
    """The file as text (LF line ends) with counts: bytes, invalid UTF-8 sequences (replaced) and the
    byte offset of the first, lines, empty lines."""
    raw = Path(path).read_bytes()
    text, bad, first = decode(raw, path)
    text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    empty = sum(1 for line in lines if not line.strip())
    return text, {
        "bytes": len(raw),
        "invalid_utf8": bad,
        "first_invalid_utf8_byte": first,
        "lines": len(lines),
        "empty_lines": empty,
    }


def scan(path: Path) -> dict:
    """The counts of :func:`read_text` plus ``documents`` (blank-line separated, none empty), without
    tokenising: for config checks (an empty corpus, too few documents to hold one out). Remembered per
    file version (path, size, mtime) within the process, so a sweep checking many jobs reads it once."""
    return dict(_scan(file_key(path)))


@functools.lru_cache(maxsize=32)
def _scan(key: tuple) -> dict:
    text, meta = read_text(Path(key[0]))
    meta["documents"] = len(split_documents(text))
    return meta


def describe_invalid(meta: dict) -> str:
    """``", 2 invalid UTF-8 sequences replaced (the first at byte 1234)"`` or ``""``."""
    if not meta.get("invalid_utf8"):
        return ""
    first = meta.get("first_invalid_utf8_byte")
    at = f" (the first at byte {first})" if first is not None else ""
    return f", {meta['invalid_utf8']} invalid UTF-8 sequences replaced by U+FFFD{at}"


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
    dtype = _dtype(vocab_size)
    for name, ids in arrays.items():
        arr = np.asarray(ids, dtype=dtype)
        with atomic.atomic_file(folder / f"{name}.bin", hint=CACHE_HINT) as f:
            arr.tofile(f)
        meta.setdefault("splits", {})[name] = {"tokens": len(arr)}
    meta["dtype"] = np.dtype(dtype).name
    atomic.write_json(folder / "meta.json", meta, hint=CACHE_HINT)  # last: marks a complete entry


def _complete(folder: Path, names: tuple[str, ...]) -> bool:
    """Whether the cache entry in ``folder`` is whole: ``meta.json`` readable and every array of the
    size it records. A damaged entry (a disk error, a hand edit) is logged and will be rebuilt."""
    if not (folder / "meta.json").exists():
        return False
    try:
        meta = atomic.read_json(folder / "meta.json", "a tokenised-corpus cache entry")
        size = np.dtype(meta["dtype"]).itemsize
        for name in names:
            n = int(meta["splits"][name]["tokens"])
            if n and (folder / f"{name}.bin").stat().st_size != n * size:
                raise ValueError(f"{name}.bin does not hold the {n} tokens meta.json records")
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("corpus cache %s is damaged (%s); tokenising again", folder, e)
        return False
    return True


def _open(folder: Path, name: str) -> Corpus:
    meta = atomic.read_json(folder / "meta.json", "a tokenised-corpus cache entry")
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
    try:
        return json.loads(f.read_text()) if f.exists() else None
    except (OSError, ValueError):  # a damaged entry: as if absent (it is rebuilt when used)
        return None


def documents_corpus(
    path: Path, tokenizer: TextTokenizer, cache_dir: Path, heldout_every: int = 0
) -> tuple[Corpus, Corpus]:
    """(train, heldout) splits of a blank-line-separated document file."""
    settings = {"kind": "documents", "heldout_every": heldout_every}
    folder = _cache_folder(cache_dir, path, tokenizer, settings)
    if not _complete(folder, ("train", "heldout")):
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
            "tokenised %s: %d documents (%d held out), %d + %d tokens; %d empty lines%s; cached in %s",
            path,
            len(docs),
            n_held,
            len(train),
            len(held),
            meta["empty_lines"],
            describe_invalid(meta) or ", no invalid UTF-8",
            folder,
        )
    return _open(folder, "train"), _open(folder, "heldout")


def _held(i: int, every: int) -> bool:
    return every > 0 and i % every == every - 1


def stream_corpus(path: Path, tokenizer: TextTokenizer, cache_dir: Path, detokenize: bool = False) -> Corpus:
    """The whole file as one stream: ``<|endoftext|>`` then its tokens."""
    settings = {"kind": "stream", "detokenize": detokenize}
    folder = _cache_folder(cache_dir, path, tokenizer, settings)
    if not _complete(folder, ("stream",)):
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
        log.info("tokenised %s: %d tokens%s", path, len(ids), describe_invalid(meta))
    return _open(folder, "stream")
