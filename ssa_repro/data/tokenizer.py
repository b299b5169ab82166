"""Text tokenisers for ``task=lm``: GPT-2's exact BPE (tiktoken, from the offline files) or a byte-level
BPE trained on the training text with HF ``tokenizers`` (:func:`ssa_repro.data.bpe.train_bpe`).

Both are wrapped as :class:`TextTokenizer` (``encode``, ``encode_batch``, ``decode``, ``vocab_size``,
``eot_id``, ``fingerprint``), so corpora, the model's vocabulary and the evaluations do not care
which one a run uses. ``<|endoftext|>`` separates documents in both (GPT-2: id 50256; trained BPE: id 0).

GPT-2: ``tokenizers/gpt2/encoder.json`` + ``vocab.bpe`` under ``data.root`` are read with
``tiktoken.load.data_gym_to_mergeable_bpe_ranks`` and GPT-2's pre-tokeniser pattern; nothing is
downloaded ("hello world" -> [31373, 995], tested). Both files are first checked against the sha256
values tiktoken expects (:func:`gpt2_file_problems`, also run by the config check before a run folder
exists): a truncated or edited file is a :class:`~ssa_repro.data.paths.CorpusError` naming it and
saying the offline tokenizer files are damaged, instead of tiktoken's "corrupted download, please try
again" (nothing here downloads).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from ssa_repro.core.enums import value_of
from ssa_repro.data.bpe import train_bpe
from ssa_repro.data.paths import CorpusError, DataFileError, data_file, resolve_root

EOT = "<|endoftext|>"
GPT2_FILES = ("tokenizers/gpt2/encoder.json", "tokenizers/gpt2/vocab.bpe")
GPT2_HASHES = {  # the sha256 values tiktoken checks for its "gpt2" encoding
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
GPT2_VOCAB = 50257


class TextTokenizer:
    """text <-> ids; ``fingerprint`` identifies the exact vocabulary (for cache keys)."""

    name: str
    vocab_size: int
    eot_id: int
    fingerprint: str

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        raise NotImplementedError


class GPT2Tokenizer(TextTokenizer):
    name = "gpt2"

    def __init__(self, root):
        import tiktoken
        import tiktoken.load
        from tiktoken_ext.openai_public import r50k_pat_str

        enc_json, vocab_bpe = (data_file(root, rel) for rel in GPT2_FILES)
        damaged = gpt2_file_problems(root)
        if damaged:
            raise CorpusError("\n".join(damaged))
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=str(vocab_bpe),
            encoder_json_file=str(enc_json),
            vocab_bpe_hash=GPT2_HASHES["vocab.bpe"],
            encoder_json_hash=GPT2_HASHES["encoder.json"],
        )
        self.enc = tiktoken.Encoding(
            name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={EOT: 50256}
        )
        self.vocab_size = self.enc.n_vocab
        self.eot_id = self.enc.eot_token
        self.fingerprint = "gpt2-r50k"

    def encode(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.enc.encode_ordinary_batch(texts, num_threads=2)

    def decode(self, ids) -> str:
        return self.enc.decode(list(ids))


class HFTokenizer(TextTokenizer):
    """A HF ``tokenizers.Tokenizer`` (the trained byte-level BPE: prefix space, ``<|endoftext|>`` = 0)."""

    name = "bpe"

    def __init__(self, tok, fingerprint: str):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        eot = tok.token_to_id(EOT)
        if eot is None:
            raise ValueError(f"tokenizer has no {EOT} token")
        self.eot_id = eot
        self.fingerprint = fingerprint

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)


def build_tokenizer(task_cfg, data_cfg) -> TextTokenizer:
    """The run's tokeniser: ``task.tokenizer=gpt2`` (the shared GPT-2 files) or ``bpe`` (trained on
    ``task.train_file`` with ``task.bpe_vocab`` tokens, cached in ``data.cache_dir``)."""
    kind = value_of(task_cfg.tokenizer)
    if kind == "gpt2":
        return GPT2Tokenizer(data_cfg.root)

    train = data_file(data_cfg.root, task_cfg.train_file)
    tok = train_bpe([train], task_cfg.bpe_vocab, resolve_root(data_cfg.cache_dir), special_tokens=(EOT,))
    fp = hashlib.sha256(tok.to_str().encode()).hexdigest()[:16]
    return HFTokenizer(tok, f"bpe{task_cfg.bpe_vocab}-{fp}")


def required_vocab(task_cfg) -> int:
    """An upper bound on the tokeniser's size, known without building it (for config checks)."""
    kind = value_of(task_cfg.tokenizer)
    return GPT2_VOCAB if kind == "gpt2" else int(task_cfg.bpe_vocab)


def gpt2_file_problems(root) -> list[str]:
    """The GPT-2 tokenizer files under ``data.root`` that are missing or damaged (their sha256 is not
    GPT-2's), one message each naming the file; [] when both are intact."""
    out = []
    for rel in GPT2_FILES:
        try:
            path = data_file(root, rel)
        except DataFileError as e:
            out.append(str(e))
            continue
        digest = _sha256(file_key(path))
        want = GPT2_HASHES[path.name]
        if digest != want:
            out.append(
                f"{path} is damaged: its sha256 is {digest[:12]}... ({path.stat().st_size:,} bytes), not "
                f"GPT-2's {want[:12]}...; the offline GPT-2 tokenizer files (data.root={root}, "
                f"{rel}) are truncated or edited: restore them from an intact copy of the data folder, "
                "or use task.tokenizer=bpe"
            )
    return out


@functools.lru_cache(maxsize=8)
def _sha256(key: tuple) -> str:
    """sha256 of a file version (path, size, mtime): hashed once per process."""
    return hashlib.sha256(Path(key[0]).read_bytes()).hexdigest()


def file_key(path: Path) -> tuple:
    st = Path(path).stat()
    return (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
