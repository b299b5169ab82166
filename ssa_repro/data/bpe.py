"""Byte-level BPE tokenisers: one trained on a corpus with HF ``tokenizers`` (cached), or GPT-2's own.

``train_bpe`` is BabyBERTa's recipe (byte-level BPE with a prefix space) and the small-LM default; the
result is cached as ``<cache_dir>/bpe_<hash>.json``, keyed by the corpus file's size and mtime and the
settings, so a second run loads it in milliseconds. ``gpt2_bpe`` reads the exact GPT-2 files
(``tokenizers/gpt2/encoder.json`` + ``vocab.bpe``) offline.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers


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
        return Tokenizer.from_file(str(path))
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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    tmp.replace(path)  # atomic: a killed run never leaves half a tokenizer in the cache
    return tok
