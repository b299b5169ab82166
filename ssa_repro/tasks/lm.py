"""Language modelling on the offline corpus: the paper's decoder experiment (its table 2).

Next-token prediction with a token table and tied head (``model.vocab_size`` > 0), cross-entropy over
every position of ``task.context``-token sequences cut from the tokenised ``task.train_file``
(documents joined with ``<|endoftext|>``). Presets: ``experiment=lm_small`` (CPU) and
``experiment=paper_lm`` (GPT-2 small, GPU); they set the model's vocabulary, AdamW + warmup/cosine,
and turn the curriculum off (it counts examples, which a corpus does not have; ``n_points`` is ignored
and every sequence has ``task.context`` tokens).

Data order. Epoch e reads the training stream in ``S = len // context - 1`` non-overlapping windows of
``context + 1`` tokens (inputs and shifted targets) that start at ``offset_e + k·context``, in the order
of a permutation of k; offset_e ∈ [0, context) and the permutation are drawn from (``shuffle_seed``, e)
alone. The g-th training sequence of the run is window ``perm_e[g mod S]`` of epoch ``e = g div S``,
and micro-batch ``index`` holds sequences ``index·B … index·B + B − 1``. The data position is thus a
pure function of the micro-batch index: a resumed run reads exactly what the uninterrupted one would
have, with no loader state in the checkpoint. A window never reads past the end of the stream; each
window is read once per epoch and a new epoch is logged, never silent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import II

from ssa_repro.core.enums import value_of
from ssa_repro.data import corpus as C
from ssa_repro.data.corpus import cached_meta, scan
from ssa_repro.data.paths import DataFileError, data_file, resolve_root
from ssa_repro.data.tokenizer import GPT2_FILES, build_tokenizer, gpt2_file_problems, required_vocab
from ssa_repro.tasks.base import Batch, Evaluation, Stage, Task
from ssa_repro.tasks.registry import TASKS

log = logging.getLogger("ssa_repro.lm")


class TokenizerKind(str, Enum):
    bpe = "bpe"  # byte-level BPE trained on task.train_file (task.bpe_vocab tokens), cached
    gpt2 = "gpt2"  # GPT-2's exact BPE (50,257 tokens) from data.root/tokenizers/gpt2


@dataclass
class LMTaskConfig:
    name: str = "lm"
    context: int = 256  # tokens per training sequence (<= model.max_positions)
    tokenizer: TokenizerKind = TokenizerKind.bpe
    bpe_vocab: int = 8192  # tokenizer=bpe: its size (model.vocab_size must be >= this)
    train_file: str = "lm/train.txt"  # under data.root: documents separated by blank lines
    valid_file: str = "lm/valid.txt"  # WikiText-2 valid (perplexity)
    test_file: str = "lm/test.txt"  # WikiText-2 test (perplexity)
    heldout_every: int = 100  # every k-th document of train_file is held out (in-domain perplexity); 0: none
    detokenize_eval: bool = True  # undo WikiText's tokenisation before scoring valid/test (as lm-eval does)
    shuffle_seed: int = II("seed")  # the data order (see the module docstring)
    data_root: str = II("data.root")  # follows data.root
    cache_dir: str = II("data.cache_dir")  # tokenisers and tokenised corpora


@TASKS.register("lm", schema=LMTaskConfig)
class LMTask(Task):
    metric = "nll"
    evaluation = Evaluation(default="lm", quick=("lm", {}))

    def __init__(self, cfg):
        super().__init__(cfg)
        self._tok = None
        self._corpora: dict = {}
        self._orders: dict[int, tuple[int, np.ndarray]] = {}
        self._logged_epoch = -1

    # ------------------------------------------------------------------ data
    def n_tokens(self, n_points: int) -> int:
        return int(self.cfg.context)

    @property
    def tokenizer(self):
        if self._tok is None:
            self._tok = build_tokenizer(self.cfg, _DataCfg(self.cfg.data_root, self.cfg.cache_dir))
        return self._tok

    def _cache(self) -> Path:

        return resolve_root(self.cfg.cache_dir)

    def corpus(self, split: str):
        """``train`` / ``heldout`` (from train_file) or ``valid`` / ``test`` (whole files)."""
        if split not in self._corpora:
            root = self.cfg.data_root
            if split in ("train", "heldout"):
                path = data_file(root, self.cfg.train_file)
                tr, held = C.documents_corpus(path, self.tokenizer, self._cache(), self.cfg.heldout_every)
                self._corpora.update(train=tr, heldout=held)
                m = tr.meta
                log.info(
                    "lm corpus %s: %d documents (%d held out), %d training tokens, %d held-out tokens; "
                    "%d empty lines, %d invalid UTF-8 sequences (replaced)",
                    path,
                    m["documents"],
                    m["heldout_documents"],
                    len(tr),
                    len(held),
                    m["empty_lines"],
                    m["invalid_utf8"],
                )
            elif split in ("valid", "test"):
                path = data_file(root, self.cfg.valid_file if split == "valid" else self.cfg.test_file)
                self._corpora[split] = C.stream_corpus(
                    path, self.tokenizer, self._cache(), detokenize=self.cfg.detokenize_eval
                )
            else:
                raise ValueError(f"unknown split {split!r}; splits: train, heldout, valid, test")
        return self._corpora[split]

    def sequences_per_epoch(self) -> int:
        n = len(self.corpus("train"))
        s = n // self.cfg.context - 1
        if s < 1:
            raise ValueError(
                f"the training corpus {self.cfg.train_file} has {n} tokens, too few for one sequence of "
                f"task.context={self.cfg.context} (needs >= {2 * self.cfg.context}); lower task.context "
                "or use a larger corpus"
            )
        return s

    def epoch_order(self, epoch: int) -> tuple[int, np.ndarray]:
        """(offset, permutation of the S windows) of ``epoch``, from (shuffle_seed, epoch) alone."""
        if epoch not in self._orders:
            rng = np.random.default_rng([int(self.cfg.shuffle_seed), epoch, 0x1A5])
            s = self.sequences_per_epoch()
            self._orders[epoch] = (int(rng.integers(self.cfg.context)), rng.permutation(s))
            while len(self._orders) > 2:  # a batch spans at most two epochs when B <= S
                self._orders.pop(next(k for k in self._orders if k != epoch))  # the oldest other
        return self._orders[epoch]

    def window_starts(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Start offsets in the training stream of global sequences first..first+count-1, and their epochs."""
        s = self.sequences_per_epoch()
        g = np.arange(first, first + count, dtype=np.int64)
        epochs, pos = g // s, g % s
        starts = np.empty(count, dtype=np.int64)
        for e in np.unique(epochs):
            offset, perm = self.epoch_order(int(e))
            sel = epochs == e
            starts[sel] = offset + perm[pos[sel]] * self.cfg.context
        return starts, epochs

    def train_batch(self, index, batch_size, stage, generator, device) -> Batch:
        ctx = self.cfg.context
        starts, epochs = self.window_starts(index * batch_size, batch_size)
        last = int(epochs[-1])
        if last != self._logged_epoch:
            if last > 0 or index == 0:
                log.info(
                    "lm data: epoch %d (of %d sequences of %d tokens) starts in micro-batch %d",
                    last,
                    self.sequences_per_epoch(),
                    ctx,
                    index,
                )
            self._logged_epoch = last
        tokens = self.corpus("train").tokens
        seq = torch.from_numpy(tokens[starts[:, None] + np.arange(ctx + 1)].astype(np.int64))  # [B, ctx+1]
        seq = seq.to(device, non_blocking=True)
        return Batch(
            tokens=seq[:, :-1],
            targets=seq[:, 1:],
            pred_idx=torch.arange(ctx, device=device),
            xs=torch.from_numpy(epochs).to(device),  # the epoch of each sequence (diagnostics)
        )

    def sample(self, batch_size, n_points, generator, device, **overrides) -> Batch:
        """Random training windows (for diagnostics; training uses :meth:`train_batch`)."""
        first = int(torch.randint(0, 2**40, (1,), generator=generator).item())
        return self.train_batch(first // batch_size, batch_size, Stage(n_points), generator, device)

    # ------------------------------------------------------------------ loss
    def training_loss(self, model, batch: Batch) -> torch.Tensor:
        logits = model(batch.tokens)  # [B, T, V]
        return F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten())

    def loss(self, pred, targets):
        return F.cross_entropy(pred.flatten(0, 1).float(), targets.flatten())

    def error(self, pred, targets):
        """[B, T] negative log-likelihood of each target token."""
        return F.cross_entropy(pred.flatten(0, 1).float(), targets.flatten(), reduction="none").view(
            targets.shape
        )

    # ------------------------------------------------------------------ checks
    def check(self, cfg) -> list[str]:

        t, m, out = cfg.task, cfg.model, []
        need = required_vocab(t)
        kind = value_of(t.tokenizer)
        if m.vocab_size < need:
            preset = "experiment=paper_lm" if kind == "gpt2" else "experiment=lm_small"
            out.append(
                f"model.vocab_size={m.vocab_size} but task=lm with task.tokenizer={kind} needs a token table "
                f"of >= {need} entries: use {preset} (the LM presets set it, with the LM training "
                f"settings), or set model.vocab_size={need}"
            )
        if t.context < 2:
            out.append(f"task.context={t.context} must be >= 2")
        if kind == "bpe" and t.bpe_vocab < 257 + 1:
            out.append(f"task.bpe_vocab={t.bpe_vocab} must be > 257 (256 bytes + <|endoftext|>)")
        if t.heldout_every < 0 or t.heldout_every == 1:
            out.append(f"task.heldout_every={t.heldout_every} must be 0 (none) or >= 2")
        files = [t.train_file, t.valid_file, t.test_file] + (list(GPT2_FILES) if kind == "gpt2" else [])
        for rel in files:
            try:
                data_file(cfg.data.root, rel)
            except DataFileError as e:
                out.append(str(e))
        if out:
            return out

        damaged = gpt2_file_problems(cfg.data.root) if kind == "gpt2" else []
        out += _corpus_problems(cfg) + damaged
        train = data_file(cfg.data.root, t.train_file)
        if damaged or scan(train)["documents"] == 0:
            return out  # nothing more to say about the corpus's size
        # too small a corpus for the context: exact if it was tokenised before, else a byte bound
        # (a byte-level BPE token covers >= 1 byte; the exact check runs again when training starts)
        ctx = t.context
        meta = None
        if kind == "gpt2":
            meta = cached_meta(train, "gpt2-r50k", resolve_root(cfg.data.cache_dir), _doc_settings(t))
        n = meta["splits"]["train"]["tokens"] if meta else train.stat().st_size
        what = "tokens" if meta else "bytes (an upper bound on its tokens)"
        if n // ctx - 1 < 1:
            out.append(
                f"task.train_file={t.train_file} has {n} {what}, too few for one training sequence of "
                f"task.context={ctx} (needs >= {2 * ctx} tokens); lower task.context or use a larger corpus"
            )
        elif meta and n // ctx - 1 < cfg.train.batch_size:
            out.append(
                f"task.train_file={t.train_file} gives {n // ctx - 1} sequences of task.context={ctx} "
                f"tokens per epoch, fewer than one batch (train.batch_size={cfg.train.batch_size})"
            )
        return out

    def quick_evaluation(self) -> tuple[str, dict]:
        """The end-of-run evaluation: perplexity on the first 256 windows of the held-out documents
        (when any are held out) and of WikiText-2 valid; no LM-eval tasks (``eval=lm`` scores all)."""
        splits = ["heldout", "valid"] if self.cfg.heldout_every else ["valid"]
        return "lm", {"splits": splits, "max_windows": 256, "ppl_batch_size": 8, "tasks": []}


@dataclass
class _DataCfg:
    root: str
    cache_dir: str


def _corpus_problems(cfg) -> list[str]:
    """Empty corpora, and a training file with too few documents to hold one out, from a scan of the
    files (no tokenising; remembered per file version): each message names the key, the file and what
    to do. Invalid UTF-8 is not a problem here: it is replaced and counted when the corpus is read."""

    t, out = cfg.task, []
    train = data_file(cfg.data.root, t.train_file)
    stats = scan(train)
    docs, every = stats["documents"], int(t.heldout_every)
    if docs == 0:
        out.append(
            f"task.train_file={t.train_file}: {train} holds no text ({stats['bytes']} bytes, "
            f"{stats['lines']} lines, all blank); put documents separated by blank lines in it, or point "
            "task.train_file / data.root at another corpus"
        )
    elif every > 0 and docs < every:
        fewer = (
            f"set task.heldout_every between 2 and {docs}, or 0" if docs >= 2 else "set task.heldout_every=0"
        )
        out.append(
            f"task.train_file={t.train_file}: {train} holds {docs} document{'s' if docs != 1 else ''} "
            f"(separated by blank lines), fewer than task.heldout_every={every}, so no document would be "
            f"held out and the held-out perplexity would be scored on 0 tokens; {fewer} (no held-out "
            "split), or use a larger corpus"
        )
    for key in ("valid_file", "test_file"):
        path = data_file(cfg.data.root, t[key])
        if scan(path)["documents"] == 0:
            out.append(
                f"task.{key}={t[key]}: {path} holds no text, so its perplexity would be scored on 0 tokens; "
                f"point task.{key} / data.root at a file with text"
            )
    return out


def _doc_settings(t) -> dict:
    return {"kind": "documents", "heldout_every": int(t.heldout_every)}
