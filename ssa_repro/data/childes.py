"""Child-directed speech for the BabyBERTa-style masked LM (``task=mlm``): tokeniser and utterances.

BabyBERTa's recipe (phueb/BabyBERTa): a byte-level BPE with a prefix space trained on the corpus
itself (8192 tokens), RoBERTa's special tokens, one utterance per sequence wrapped as
``<s> ... </s>``, utterances longer than the maximum length (special tokens included) left out rather
than truncated. The tokeniser comes from :func:`ssa_repro.data.bpe.train_bpe` (cached under
``data.cache_dir``); the encoded corpus is cached beside it as ``.npz`` (flat ids + offsets), written
atomically; a cached file that cannot be read is logged and rebuilt.

Bytes that are not valid UTF-8 are replaced by U+FFFD and counted, as for the LM corpora
(:mod:`ssa_repro.data.corpus`); the count and the byte offset of the first are logged. A corpus that
yields no utterance (empty, only blank lines, or every utterance longer than ``task.max_length``) is a
:class:`~ssa_repro.data.paths.CorpusError` naming the file and the keys; :func:`scan_lines` gives the
counts the config check needs to refuse it before a run folder exists.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ssa_repro.core import atomic
from ssa_repro.data.bpe import train_bpe
from ssa_repro.data.corpus import decode, describe_invalid
from ssa_repro.data.paths import CorpusError
from ssa_repro.data.tokenizer import file_key

log = logging.getLogger("ssa_repro.data")

# RoBERTa's order and ids: <s>=0, <pad>=1, </s>=2, <unk>=3, <mask>=4; ordinary tokens start at 5.
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
BOS, PAD, EOS, UNK, MASK = range(5)
N_SPECIAL = len(SPECIAL_TOKENS)


def read_lines(path: Path, max_lines: int | None = None) -> list[str]:
    """Non-empty lines (stripped), the first ``max_lines`` lines of the file if given; invalid UTF-8
    is replaced by U+FFFD (and logged with its count and first offset)."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh):
            if max_lines is not None and i >= max_lines:
                break
            line = line.strip()
            if line:
                out.append(line)
    stats = scan_lines(path, max_lines)
    if stats["invalid_utf8"]:
        log.warning("%s%s", path, describe_invalid(stats))
    return out


def scan_lines(path: Path, max_lines: int | None = None) -> dict:
    """Counts over the lines :func:`read_lines` reads, without tokenising (for config checks):
    ``lines`` read, ``utterances`` (non-empty ones), ``shortest_bytes`` (UTF-8 bytes of the shortest
    utterance, None if there is none), ``invalid_utf8`` (sequences replaced) and
    ``first_invalid_utf8_byte`` (over the whole file). Remembered per file version within the process."""
    return dict(_scan_lines(file_key(path), max_lines))


@functools.lru_cache(maxsize=32)
def _scan_lines(key: tuple, max_lines: int | None) -> dict:
    path = Path(key[0])
    raw = path.read_bytes()
    text, replaced, first = decode(raw, path)  # invalid UTF-8 counted (and its share checked) over the file
    n_lines = utterances = 0
    shortest = None
    for i, line in enumerate(io.StringIO(text, newline=None)):  # the lines open() gives read_lines
        if max_lines is not None and i >= max_lines:
            break
        n_lines += 1
        line = line.strip()
        if line:
            utterances += 1
            size = len(line.encode())
            shortest = size if shortest is None else min(shortest, size)
    return {
        "lines": n_lines,
        "utterances": utterances,
        "shortest_bytes": shortest,
        "invalid_utf8": replaced,
        "first_invalid_utf8_byte": first,
    }


def tokenizer_for(corpus: Path, vocab_size: int, cache_dir: Path, max_lines: int | None) -> Tokenizer:
    """The corpus's byte-level BPE (prefix space, RoBERTa specials first); cached."""
    tok = train_bpe([corpus], vocab_size, cache_dir, special_tokens=SPECIAL_TOKENS, max_lines=max_lines)
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i, f"special token {name} should have id {i}"
    return tok


def encode(tok: Tokenizer, sentences: list[str]) -> list[list[int]]:
    """``<s> ids </s>`` for each sentence (the tokeniser adds no specials itself)."""
    return [[BOS, *e.ids, EOS] for e in tok.encode_batch(sentences, add_special_tokens=False)]


@dataclass
class EncodedCorpus:
    """Utterances as token ids (with ``<s>``/``</s>``): sentence i is ``ids[offsets[i]:offsets[i+1]]``."""

    ids: np.ndarray  # [N_tokens] int32
    offsets: np.ndarray  # [N + 1] int64
    n_dropped: int  # utterances longer than max_length

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sentence(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]


def _tokenizer_key(tok: Tokenizer) -> str:
    return hashlib.sha256(tok.to_str().encode()).hexdigest()[:16]


def encode_corpus(
    corpus: Path, tok: Tokenizer, cache_dir: Path, max_lines: int | None, max_length: int
) -> EncodedCorpus:
    """Every utterance encoded; those over ``max_length`` tokens (specials included) dropped. Cached."""
    st = Path(corpus).stat()
    key = json.dumps(
        [str(Path(corpus).resolve()), st.st_size, st.st_mtime_ns, _tokenizer_key(tok), max_lines, max_length]
    )
    path = Path(cache_dir) / f"childes_{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
    out = None
    if path.exists():
        try:
            with np.load(path) as z:
                out = EncodedCorpus(z["ids"], z["offsets"], int(z["n_dropped"]))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            log.warning("corpus cache %s cannot be read (%s); encoding the corpus again", path, e)
    if out is None:
        seqs = encode(tok, read_lines(corpus, max_lines))
        kept = [s for s in seqs if len(s) <= max_length]
        lengths = np.array([len(s) for s in kept], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        ids = np.fromiter((t for s in kept for t in s), dtype=np.int32, count=int(offsets[-1]))
        out = EncodedCorpus(ids, offsets, len(seqs) - len(kept))
        with atomic.atomic_file(path, hint="data.cache_dir=<another folder>") as f:
            np.savez(f, ids=out.ids, offsets=out.offsets, n_dropped=out.n_dropped)
    if len(out) == 0:
        raise CorpusError(no_utterance_message(corpus, max_lines, max_length, out.n_dropped))
    return out


def no_utterance_message(corpus: Path, max_lines: int | None, max_length: int, n_dropped: int) -> str:
    """Why a corpus gives no utterance to train on, naming the file, the keys and what to do."""
    within = f" (within the first task.max_lines={max_lines} lines)" if max_lines is not None else ""
    if n_dropped:
        why = (
            f"all {n_dropped} of its utterances{within} are longer than task.max_length={max_length} tokens "
            "(with <s> and </s>); raise task.max_length (and model.max_positions)"
        )
    else:
        why = f"it holds no utterance{within}: it is empty or only blank lines; put one utterance per line in it"
    return f"task.corpus: {corpus} gives nothing to train on: {why}, or point task.corpus / data.root at another corpus"
