"""Shared pieces of the evaluations: reproducible prompts per cell, batched inference, statistics."""

from __future__ import annotations

import logging
import math
import time
import zlib

import torch
from tqdm.auto import tqdm

log = logging.getLogger("ssa_repro.evaluate")

# Largest attention tensor (batch × heads × T × T elements) one forward pass may build in evaluation;
# bigger batches are split (SSA and the maps materialise it: 2^27 float32 = 512 MiB).
MAX_ATTENTION_ELEMENTS = 2**27


def cell_generator(seed: int, *cell) -> torch.Generator:
    """A CPU generator seeded from the evaluation seed and the cell's values (not its position in a
    list), so a cell gets the same prompts on any device, for any model and in any grid holding it."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(repr((int(seed), *map(float, cell))).encode()))
    return g


def sample_batches(task, g, n_batches, batch_size, length, device, **dists):
    """Prompts drawn on the CPU (reproducible across devices), then moved to the model's device."""
    for _ in range(n_batches):
        yield task.sample(batch_size, length, g, "cpu", **dists).to(device)


def stat(per_prompt: torch.Tensor) -> dict:
    """Mean and 95% normal interval of a [N] tensor of per-prompt values."""
    v = per_prompt.double().cpu()
    mean = v.mean().item()
    half = 1.96 * v.std().item() / math.sqrt(len(v)) if len(v) > 1 else float("nan")
    return {"value": mean, "n_samples": len(v), "ci_low": mean - half, "ci_high": mean + half}


# Largest activation (batch × T × 4·width elements, the MLP's hidden layer) one forward pass may build.
MAX_ACTIVATION_ELEMENTS = 2**27


@torch.inference_mode()
def predict(model, batch) -> torch.Tensor:
    """Predictions [B, P] at the batch's prediction positions, in chunks as large as the memory bounds
    above allow (big batches keep the matmuls efficient; the bounds keep memory in check)."""
    bsz, t = batch.tokens.shape[:2]
    heads = max((b.attn.n_head for b in model.blocks if b.attn is not None), default=1)
    wpe = getattr(model, "wpe", None)
    width = wpe.weight.shape[1] if wpe is not None else 256  # stub models in tests have no wpe
    chunk = max(1, min(MAX_ATTENTION_ELEMENTS // (heads * t * t), MAX_ACTIVATION_ELEMENTS // (4 * width * t)))
    outs = [model(batch.tokens[i : i + chunk])[:, batch.pred_idx] for i in range(0, bsz, chunk)]
    return torch.cat(outs).float()


def predict_batches(model, batches: list) -> list[torch.Tensor]:
    """Predictions for many batches of one prompt length in as few forward passes as memory allows
    (the batches of several grid cells at once); returns one [B_i, P] tensor per batch, equal to
    ``predict`` on each batch alone."""
    if not batches:
        return []
    first = batches[0]
    joined = type(first)(
        tokens=torch.cat([b.tokens for b in batches]),
        targets=first.targets[:0],
        pred_idx=first.pred_idx,
        xs=first.xs[:0],
    )
    return list(predict(model, joined).split([len(b.tokens) for b in batches]))


class Progress:
    """Progress over cells: a tqdm bar on a terminal; elsewhere (logs, CI, SLURM) a log line at every
    10% with the elapsed time and an ETA. Used as ``with Progress(total, "name") as bar: bar.update(1)``."""

    def __init__(self, total: int, desc: str):
        self.bar = tqdm(total=total, desc=desc, disable=None)
        self.total, self.desc, self.done, self.next_pct = total, desc, 0, 10.0
        self.t0 = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.bar.update(n)
        self.done += n
        pct = 100.0 * self.done / max(self.total, 1)
        if self.bar.disable and (pct >= self.next_pct or self.done == self.total):
            elapsed = time.perf_counter() - self.t0
            eta = elapsed * (self.total - self.done) / max(self.done, 1)
            log.info(
                "%s: %d/%d cells (%.0f%%), %.0f s elapsed, about %.0f s left",
                self.desc,
                self.done,
                self.total,
                pct,
                elapsed,
                eta,
            )
            self.next_pct = (pct // 10 + 1) * 10

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
