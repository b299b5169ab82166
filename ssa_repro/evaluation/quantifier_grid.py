"""Quantifiers under distribution shift: error on a σ × length grid (the paper's figure 4).

Each cell holds ``n_samples`` × ``batch_size`` prompts of ``length`` numbers x ~ N(0, σ), sampled as the
task samples in training (its ``balance`` setting applies; off by default with labels in context,
the paper's protocol). A sequence is an error if any prediction from index ``skip_first`` on has the
wrong sign (the paper's metric; with ``supervise=last`` the one prediction counts); also the token
error rate. Prompts are fresh per cell from a seed derived from (seed, σ, length). With
``reuse_draws`` the same standard-normal draws are scaled by every σ, so labels are identical across σ
and only magnitudes change — what the public code did, and so what the paper's figure shows.
"""

from __future__ import annotations

import torch

from ssa_repro.distributions import normal
from ssa_repro.evaluation.common import cell_generator, predict, sample_batches, stat


def sequence_and_token_error(task, batch, pred, skip_first: int):
    """[B] sequence error (any wrong from skip_first on) and [B] token error rate."""
    err = task.error(pred, batch.targets)  # [B, P]
    tail = err[:, skip_first:] if err.shape[1] > skip_first else err[:, -1:]
    return tail.amax(1), tail.mean(1)


def quantifier_grid(
    model,
    task,
    *,
    sigmas,
    lengths,
    n_samples,
    batch_size,
    skip_first,
    seed,
    device,
    reuse_draws=False,
    base=None,
    progress=None,
):
    """Rows (dicts) of the σ × length grid, for the sequence and the token error."""
    base = base or {}
    rows = []
    for length in lengths:
        for s in sigmas:
            if reuse_draws:  # the same N(0, 1) draws for every σ, scaled
                g = cell_generator(seed, 0.0, length)
                batches = (b for b in sample_batches(task, g, n_samples, batch_size, length, device))
                batches = (_scaled(task, b, s) for b in batches)
            else:
                g = cell_generator(seed, s, length)
                batches = sample_batches(task, g, n_samples, batch_size, length, device, x_dist=normal(s))
            seq, tok = [], []
            for b in batches:
                se, te = sequence_and_token_error(task, b, predict(model, b), skip_first)
                seq.append(se)
                tok.append(te)
            for metric, v in (("sequence_error", seq), ("token_error", tok)):
                rows.append(
                    {
                        **base,
                        "predictor": "model",
                        "sigma_x": s,
                        "length": length,
                        "metric": metric,
                        **stat(torch.cat(v)),
                    }
                )
            if progress is not None:
                progress.update(1)
    return rows


def _scaled(task, batch, sigma: float):
    """The same prompt with every number multiplied by σ (labels unchanged: only signs matter)."""
    tokens = batch.tokens.clone()
    stride = 2 if task.cfg.labels_in_context else 1
    tokens[:, 0::stride] *= sigma
    return type(batch)(tokens=tokens, targets=batch.targets, pred_idx=batch.pred_idx, xs=batch.xs * sigma)
