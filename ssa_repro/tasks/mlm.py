"""Masked language modelling on child-directed speech: BabyBERTa (Huebner et al., 2021), ``task=mlm``.

The paper's encoder experiment (its table 3): a small RoBERTa-style encoder (``model=encoder``) trained
on AO-CHILDES utterances and scored on the Zorro grammar probes (``eval=zorro``,
:mod:`ssa_repro.evaluation.zorro`). BabyBERTa's data recipe (phueb/BabyBERTa, ``params.py`` and
``dataset.py``), followed here:

- one utterance per sequence, ``<s> ... </s>``; utterances over ``max_length`` tokens are left out;
- each utterance appears ``num_mask_patterns`` (10) times per epoch, each time with its own mask;
  the (utterance, pattern) items are shuffled (BabyBERTa's ``consecutive_masking=False``);
- a mask selects each ordinary token with probability ``mask_prob`` (0.15), redrawn when it selects
  nothing (BabyBERTa skips empty patterns); special tokens are never selected; of the selected
  tokens ``random_token_prob`` (10%) become a random ordinary token, ``leave_unmasked_prob`` (0, the
  key change from RoBERTa's 10%) stay as they are, the rest become ``<mask>``; the loss is the cross
  entropy at the selected positions only (targets are -100 elsewhere).

**No padding.** The attention module has no key-padding mask, so a padded batch would let ``<pad>``
keys change the real tokens' outputs. Every batch therefore holds utterances of one token length:
per epoch the items are shuffled, grouped by length, cut into batches of ``train.batch_size`` and the
batches shuffled. The price: the last batch of each length is smaller (about 60 lengths, so about 60
short batches in an epoch of thousands) and a batch's utterances share a length, which BabyBERTa's
batches do not.

**Resume.** Batch ``index`` is a pure function of (``seed``, ``index``): the epoch's order comes from
(seed, epoch), the masks from a generator seeded with (seed, index). The training generator the
trainer passes is not used, so a resumed run reads exactly the same batches.

Every ``heldout_every``-th utterance (1%) is kept out of training; the end-of-run evaluation scores
the masked-LM loss on them and a 100-pair-per-paradigm Zorro subset.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from ssa_repro.core.schema import DataConfig
from ssa_repro.data import childes
from ssa_repro.data.paths import DataFileError, data_file, resolve_root
from ssa_repro.tasks.base import Evaluation, Task
from ssa_repro.tasks.registry import TASKS

log = logging.getLogger("ssa_repro.mlm")

AO_CHILDES_KNOWN_AGE_LINES = 162_130  # ../shared/data/README.md: lines with a known child age


@dataclass
class MLMTaskConfig:
    name: str = "mlm"
    corpus: str = "childes/aochildes_partial.txt"  # under data.root
    max_lines: int | None = AO_CHILDES_KNOWN_AGE_LINES  # AO-CHILDES keeps known ages only; null = all
    vocab_size: int = 8192  # BPE size; must equal model.vocab_size
    max_length: int = 128  # tokens per utterance with <s> and </s>; longer ones are left out
    mask_prob: float = 0.15
    random_token_prob: float = 0.1
    leave_unmasked_prob: float = 0.0
    num_mask_patterns: int = 10  # copies of each utterance per epoch, each with its own mask
    heldout_every: int = 100  # every N-th utterance is held out (0: none)
    zorro_dir: str = "zorro"  # under data.root
    quick_zorro_pairs: int = 100  # pairs per paradigm in the end-of-run evaluation (0: skip Zorro)
    quick_heldout: int = 1000  # held-out utterances in the end-of-run masked-LM loss


@dataclass
class MLMBatch:
    """tokens [B, T] long (masked input), targets [B, T] long (original id at selected positions, else -100)."""

    tokens: torch.Tensor
    targets: torch.Tensor

    def to(self, device) -> MLMBatch:
        return MLMBatch(self.tokens.to(device), self.targets.to(device))


def _root(cfg):
    """The run config holding a task config (for data.root and seed), or None for a detached one."""
    try:
        root = cfg._get_root()
    except AttributeError:
        return None
    return root if root is not cfg and "data" in root else None


def logits_at(model, tokens: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """Logits [N, V] at the positions where ``select`` [B, T] (bool) is true, in row-major order: the
    model's own ``logits_at`` (the head only where a prediction is scored). A wrapped model
    (``train.compile``, DDP; their class has no ``logits_at``) is called whole and its logits gathered."""
    if not hasattr(type(model), "logits_at"):
        return model(tokens)[select]
    return model.logits_at(tokens, select)


def mask_tokens(
    tokens: torch.Tensor,
    g: torch.Generator,
    *,
    mask_prob: float,
    random_token_prob: float,
    leave_unmasked_prob: float,
    vocab_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BabyBERTa's masking of [B, T] ids (CPU): returns (inputs, targets). Rows with an ordinary token
    always get at least one selected position (an empty draw is redrawn, as BabyBERTa skips it)."""
    maskable = tokens >= childes.N_SPECIAL
    select = (torch.rand(tokens.shape, generator=g) < mask_prob) & maskable
    for _ in range(1000):
        empty = ~select.any(1) & maskable.any(1)
        if not empty.any():
            break
        redraw = (torch.rand((int(empty.sum()), tokens.shape[1]), generator=g) < mask_prob) & maskable[empty]
        select[empty] = redraw
    u = torch.rand(tokens.shape, generator=g)
    rand = select & (u < random_token_prob)
    keep = select & (u >= random_token_prob) & (u < random_token_prob + leave_unmasked_prob)
    inputs = tokens.clone()
    inputs[select & ~rand & ~keep] = childes.MASK
    n_rand = int(rand.sum())
    if n_rand:
        inputs[rand] = torch.randint(childes.N_SPECIAL, vocab_size, (n_rand,), generator=g)
    targets = torch.where(select, tokens, torch.full_like(tokens, -100))
    return inputs, targets


def _seed_of(*parts: int) -> int:
    h = 0x345678
    for p in parts:
        h = (h * 1_000_003 ^ (int(p) & 0xFFFFFFFF)) % (2**61 - 1)
    return h


@TASKS.register("mlm", schema=MLMTaskConfig)
class MLMTask(Task):
    needs_causal = False  # the targets are masked out of the input: bidirectional by design
    metric = "mlm_loss"
    evaluation = Evaluation(default="zorro", quick=("zorro", {}))

    def __init__(self, cfg):
        super().__init__(cfg)
        root = _root(cfg)
        data = root.data if root is not None else OmegaConf.structured(DataConfig)  # the schema's defaults
        self.data_root, self.cache_dir = data.root, data.cache_dir
        self.seed = int(root.seed) if root is not None else 0
        self._loaded = None
        self._plan = (None, None)  # (key, batches) for the current epoch

    def logit_share(self) -> float:
        return float(self.cfg.mask_prob)  # logits are computed at the masked positions only

    # ------------------------------------------------------------------ data
    def _cache(self) -> Path:
        return resolve_root(self.cache_dir)

    @property
    def tokenizer(self):
        return self._load()["tokenizer"]

    @property
    def corpus(self) -> childes.EncodedCorpus:
        return self._load()["corpus"]

    def _load(self) -> dict:
        if self._loaded is None:
            path = data_file(self.data_root, self.cfg.corpus)
            tok = childes.tokenizer_for(path, self.cfg.vocab_size, self._cache(), self.cfg.max_lines)
            corpus = childes.encode_corpus(path, tok, self._cache(), self.cfg.max_lines, self.cfg.max_length)
            idx = np.arange(len(corpus))
            every = self.cfg.heldout_every
            held = (idx % every == every - 1) if every else np.zeros(len(corpus), bool)
            self._loaded = {
                "tokenizer": tok,
                "corpus": corpus,
                "train": idx[~held],
                "heldout": idx[held],
                "n_vocab": tok.get_vocab_size(),
            }
            log.info(
                "mlm: %s utterances (%d left out as longer than %d tokens), %d held out, %d tokens of BPE",
                f"{len(corpus):,}",
                corpus.n_dropped,
                self.cfg.max_length,
                int(held.sum()),
                tok.get_vocab_size(),
            )
        return self._loaded

    def zorro_dir(self) -> Path:
        return resolve_root(self.data_root) / self.cfg.zorro_dir

    def epoch_batches(self, epoch: int, batch_size: int) -> list[np.ndarray]:
        """Utterance indices of every batch of an epoch, in training order; each batch one length."""
        key = (epoch, batch_size)
        if self._plan[0] == key:
            return self._plan[1]
        d = self._load()
        rng = np.random.default_rng([self.seed, epoch, 0x6D6C6D])
        items = np.repeat(d["train"], self.cfg.num_mask_patterns)
        items = items[rng.permutation(len(items))]
        lengths = d["corpus"].lengths[items]
        items = items[np.argsort(lengths, kind="stable")]  # grouped by length, shuffled within
        lengths = d["corpus"].lengths[items]
        bounds = np.flatnonzero(np.diff(lengths)) + 1
        batches = []
        for group in np.split(items, bounds):
            batches += [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
        batches = [batches[i] for i in rng.permutation(len(batches))]
        self._plan = (key, batches)
        return batches

    def batches_per_epoch(self, batch_size: int) -> int:
        lengths = self.corpus.lengths[self._load()["train"]]
        counts = np.bincount(lengths) * self.cfg.num_mask_patterns
        return int(sum(math.ceil(c / batch_size) for c in counts if c))

    def stack(self, rows: np.ndarray) -> torch.Tensor:
        c = self.corpus
        return torch.from_numpy(np.stack([c.sentence(i) for i in rows]).astype(np.int64))

    def mask(self, tokens: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.cfg
        return mask_tokens(
            tokens,
            g,
            mask_prob=c.mask_prob,
            random_token_prob=c.random_token_prob,
            leave_unmasked_prob=c.leave_unmasked_prob,
            vocab_size=self._load()["n_vocab"],
        )

    def train_batch(self, index, batch_size, stage, generator, device) -> MLMBatch:
        n = self.batches_per_epoch(batch_size)
        epoch, b = divmod(int(index), n)
        rows = self.epoch_batches(epoch, batch_size)[b]
        g = torch.Generator().manual_seed(_seed_of(self.seed, index))
        inputs, targets = self.mask(self.stack(rows), g)
        return MLMBatch(inputs, targets).to(device)

    def sample(self, batch_size, n_points, generator, device, **_) -> MLMBatch:
        """A random batch of training utterances of one length (for tests and notebooks)."""
        epoch = int(torch.randint(0, 2**20, (1,), generator=generator))
        batches = self.epoch_batches(epoch, batch_size)
        rows = batches[int(torch.randint(0, len(batches), (1,), generator=generator))]
        inputs, targets = self.mask(self.stack(rows), generator)
        return MLMBatch(inputs, targets).to(device)

    # ------------------------------------------------------------------ loss
    def n_tokens(self, n_points: int) -> int:
        return self.cfg.max_length  # the curriculum does not apply: one utterance per sequence

    def training_loss(self, model, batch: MLMBatch) -> torch.Tensor:
        sel = batch.targets != -100
        logits = logits_at(model, batch.tokens, sel)  # [N selected, V]: the head only where scored
        return F.cross_entropy(logits.float(), batch.targets[sel])

    def loss(self, pred, targets):
        return F.cross_entropy(pred.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)

    # ------------------------------------------------------------------ checks
    def check(self, cfg) -> list[str]:
        t, m, out = cfg.task, cfg.model, []
        if m.vocab_size != t.vocab_size:
            out.append(
                f"model.vocab_size={m.vocab_size} must equal task.vocab_size={t.vocab_size} (the BPE's size) "
                f"for task=mlm; use model=encoder or set model.vocab_size={t.vocab_size}"
            )
        if m.causal:
            out.append(
                "model.causal=true: task=mlm needs a bidirectional encoder; use model=encoder or model.causal=false"
            )
        if t.max_length > m.max_positions:
            out.append(
                f"task.max_length={t.max_length} is more than model.max_positions={m.max_positions}; "
                "raise model.max_positions or lower task.max_length"
            )
        if t.max_length < 3:
            out.append(f"task.max_length={t.max_length} must be >= 3 (<s>, one token, </s>)")
        if t.vocab_size <= childes.N_SPECIAL + 256:
            out.append(
                f"task.vocab_size={t.vocab_size} must be > {childes.N_SPECIAL + 256} (specials + bytes)"
            )
        if not 0 < t.mask_prob < 1:
            out.append(f"task.mask_prob={t.mask_prob} must be in (0, 1)")
        for key in ("random_token_prob", "leave_unmasked_prob"):
            if not 0 <= t[key] <= 1:
                out.append(f"task.{key}={t[key]} must be in [0, 1]")
        if t.random_token_prob + t.leave_unmasked_prob > 1:
            out.append("task.random_token_prob + task.leave_unmasked_prob must be <= 1")
        if t.num_mask_patterns < 1:
            out.append(f"task.num_mask_patterns={t.num_mask_patterns} must be >= 1")
        for key in ("heldout_every", "quick_zorro_pairs", "quick_heldout"):
            if t[key] < 0:
                out.append(f"task.{key}={t[key]} must be >= 0")
        if t.heldout_every == 1:
            out.append("task.heldout_every=1 would hold out every utterance; use 0 (none) or >= 2")
        try:
            corpus = data_file(cfg.data.root, t.corpus)
        except DataFileError as e:
            out.append(f"task.corpus={t.corpus}: {e}")
        else:
            out += _corpus_problems(cfg, corpus, exact=not out)
        if t.quick_zorro_pairs and cfg.evaluation.enabled:
            z = resolve_root(cfg.data.root) / t.zorro_dir
            if not z.is_dir() or not any(z.glob("*.txt")):
                out.append(
                    f"task.zorro_dir={t.zorro_dir}: no Zorro files in {z} (data.root={cfg.data.root}); "
                    "point data.root at the data folder, or set task.quick_zorro_pairs=0"
                )
        return out

    # ------------------------------------------------------------------ evaluation
    @torch.inference_mode()
    def heldout_loss(self, model, device, n_sentences: int, batch_size: int = 64, seed: int = 1234) -> dict:
        """Masked-LM loss and top-1 accuracy at the masked positions of held-out utterances, with a
        fixed masking seed (every model sees the same masks); one mask pattern per utterance."""
        d = self._load()
        rows = d["heldout"][:n_sentences]
        if not len(rows):
            return {}
        lengths = d["corpus"].lengths[rows]
        total = correct = count = 0.0
        g = torch.Generator().manual_seed(seed)
        for length in np.unique(lengths):
            group = rows[lengths == length]
            for i in range(0, len(group), batch_size):
                inputs, targets = self.mask(self.stack(group[i : i + batch_size]), g)
                t = targets.to(device)
                sel = t != -100
                logits = logits_at(model, inputs.to(device), sel).float()
                total += F.cross_entropy(logits, t[sel], reduction="sum").item()
                correct += (logits.argmax(-1) == t[sel]).sum().item()
                count += sel.sum().item()
        return {
            "heldout_mlm_loss": total / count,
            "heldout_masked_accuracy": correct / count,
            "heldout_sentences": int(len(rows)),
            "heldout_masked_tokens": int(count),
        }

    def quick_evaluation(self) -> tuple[str, dict]:
        """The end-of-run evaluation: masked-LM loss on ``task.quick_heldout`` held-out utterances and a
        Zorro subset of ``task.quick_zorro_pairs`` pairs per paradigm (0: none)."""
        return "zorro", {"n_pairs": self.cfg.quick_zorro_pairs, "heldout": self.cfg.quick_heldout}


def _corpus_problems(cfg, corpus: Path, exact: bool) -> list[str]:
    """A corpus with no utterance to train on (empty, only blank lines, or every utterance longer than
    ``task.max_length``) or too few to hold one out, each message naming the file and the keys. The
    lines are scanned (no tokenising; remembered per file version); only when no utterance is short
    enough in bytes to be sure it fits (a byte-level BPE gives at most one token per byte, plus the
    prefix space, ``<s>`` and ``</s>``) is the corpus tokenised (cached) to count exactly — and only
    when ``exact`` (the other settings are valid). Invalid UTF-8 is replaced and counted, not refused."""
    t = cfg.task
    stats = childes.scan_lines(corpus, t.max_lines)
    n = stats["utterances"]
    if n == 0:
        return [childes.no_utterance_message(corpus, t.max_lines, t.max_length, 0)]
    if stats["shortest_bytes"] + 3 > t.max_length and exact:
        cache = resolve_root(cfg.data.cache_dir)
        tok = childes.tokenizer_for(corpus, t.vocab_size, cache, t.max_lines)
        try:
            n = len(childes.encode_corpus(corpus, tok, cache, t.max_lines, t.max_length))
        except childes.CorpusError as e:
            return [str(e)]
    every = int(t.heldout_every)
    if every > 0 and n < every:
        fewer = f"set task.heldout_every between 2 and {n}, or 0" if n >= 2 else "set task.heldout_every=0"
        return [
            f"task.corpus={t.corpus}: {corpus} holds {n} utterance{'s' if n != 1 else ''}, fewer than "
            f"task.heldout_every={every}, so none would be held out and the held-out masked-LM loss would "
            f"be scored on nothing; {fewer} (no held-out split), or use a larger corpus"
        ]
    return []
