"""Byte-level BPE tokenisers: one trained on a corpus with HF ``tokenizers`` (cached), or GPT-2's own.

``train_bpe`` is BabyBERTa's recipe (byte-level BPE with a prefix space) and the small-LM default; the
result is cached as ``<cache_dir>/bpe_<hash>.json``, keyed by the corpus file's size and mtime and the
settings, so a second run loads it in milliseconds. The cache file is written atomically (a
temporary name per process, then a rename: a killed run or two runs training the same tokenizer at
once never leave half a file); a cached file that cannot be read is logged and trained again. Invalid
UTF-8 in the training text is replaced by U+FFFD, as the corpora are read. GPT-2's own BPE is
:class:`ssa_repro.data.tokenizer.GPT2Tokenizer`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from ssa_repro.core import atomic

log = logging.getLogger("ssa_repro.data")


def train_bpe(
    files: list[Path],
    vocab_size: int,
    cache_dir: Path,
    special_tokens: tuple[str, ...] = ("<|endoftext|>",),
    lowercase: bool = False,
    max_lines: int | None = None,
) -> Tokenizer:
    """A byte-level BPE of ``vocab_size`` tokens trained on ``files`` (first ``max_lines`` lines of
    each, if given); special tokens get the first ids, in the order given."""
    key = json.dumps(
        {
            "files": [
                (str(Path(f).resolve()), Path(f).stat().st_size, Path(f).stat().st_mtime_ns) for f in files
            ],
            "vocab_size": vocab_size,
            "special": list(special_tokens),
            "lowercase": lowercase,
            "max_lines": max_lines,
        },
        sort_keys=True,
    )
    path = Path(cache_dir) / f"bpe_{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.exists():
        try:
            return Tokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001  (tokenizers raises plain Exception)
            log.warning("tokenizer cache %s cannot be read (%s); training it again", path, e)
    tok = Tokenizer(models.BPE())
    if lowercase:
        from tokenizers import normalizers

        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def lines():
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as fh:
                for i, line in enumerate(fh):
                    if max_lines is not None and i >= max_lines:
                        break
                    yield line

    tok.train_from_iterator(lines(), trainer=trainer)
    with atomic.atomic_path(path, hint="data.cache_dir=<another folder>") as tmp:
        tok.save(str(tmp))
    return tok
