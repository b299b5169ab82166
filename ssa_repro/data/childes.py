"""Child-directed speech for the BabyBERTa-style masked LM (``task=mlm``): tokeniser and utterances.

BabyBERTa's recipe (phueb/BabyBERTa): a byte-level BPE with a prefix space trained on the corpus
itself (8192 tokens), RoBERTa's special tokens, one utterance per sequence wrapped as
``<s> ... </s>``, utterances longer than the maximum length (special tokens included) left out rather
than truncated. The tokeniser comes from :func:`ssa_repro.data.bpe.train_bpe` (cached under
``data.cache_dir``); the encoded corpus is cached beside it as ``.npz`` (flat ids + offsets).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ssa_repro.data.bpe import train_bpe

# RoBERTa's order and ids: <s>=0, <pad>=1, </s>=2, <unk>=3, <mask>=4; ordinary tokens start at 5.
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
BOS, PAD, EOS, UNK, MASK = range(5)
N_SPECIAL = len(SPECIAL_TOKENS)


def read_lines(path: Path, max_lines: int | None = None) -> list[str]:
    """Non-empty lines (stripped), the first ``max_lines`` lines of the file if given."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if max_lines is not None and i >= max_lines:
                break
            line = line.strip()
            if line:
                out.append(line)
    return out


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
    if path.exists():
        z = np.load(path)
        return EncodedCorpus(z["ids"], z["offsets"], int(z["n_dropped"]))
    seqs = encode(tok, read_lines(corpus, max_lines))
    kept = [s for s in seqs if len(s) <= max_length]
    lengths = np.array([len(s) for s in kept], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = np.fromiter((t for s in kept for t in s), dtype=np.int32, count=int(offsets[-1]))
    out = EncodedCorpus(ids, offsets, len(seqs) - len(kept))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, ids=out.ids, offsets=out.offsets, n_dropped=out.n_dropped)
    tmp.replace(path)
    return out
