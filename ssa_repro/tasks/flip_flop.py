"""Flip-flop language modelling (Liu et al. 2023, "Exposing Attention Glitches with Flip-Flop Language
Modeling", NeurIPS 2023, arXiv 2306.00946): a sequence of instruction-bit pairs

    w b   write bit b          r b   read: b must be the last written bit          i b   ignore (b random)

The first instruction is a write and the last a read; the others are w, r, i with probabilities
((1 − p)/2, (1 − p)/2, p), p = ``p_ignore`` (the paper's FFL(p): 0.8 in training, 0.98 "sparse" and
0.1 "dense" out of distribution). 2n tokens for n instructions (``length`` = n). The model must read
the bit after every ``r`` (the deterministic tokens, which the paper scores); the random bits after
``w`` and ``i`` are not predicted (target IGNORE). Tokens: w = 0, r = 1, i = 2, bits 3 and 4.

Grid: length to 8× the training instructions (the ignore spans grow with it) × the setting σ, how many
times rarer writes and reads are than in training: p(σ) = 1 − (1 − p)/σ (σ = 1: training; with
p = 0.8, σ = 0.25 gives the dense 0.2, σ = 10 the sparse 0.98); σ must be >= 1 − p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.tasks.base import Prompts
from ssa_repro.tasks.registry import TASKS
from ssa_repro.tasks.tokens import IGNORE, TokenTask, token_evaluation, uniform_ints

WRITE, READ, IGNORE_OP, BIT0 = 0, 1, 2, 3


@dataclass
class FlipFlopConfig:
    name: str = "flip_flop"
    p_ignore: float = 0.8  # the training FFL(p)


def p_ignore_at(p_train: float, sigma: float) -> float:
    """p(σ) = 1 − (1 − p)/σ; a clear error where it is not a probability."""
    p = 1.0 - (1.0 - p_train) / sigma
    if not 0.0 <= p < 1.0:
        raise ValueError(
            f"flip_flop: grid σ={sigma} gives p(ignore)={p:.3f} with task.p_ignore={p_train}; "
            f"σ must be >= 1 − task.p_ignore = {1.0 - p_train:.3f}"
        )
    return p


@TASKS.register("flip_flop", schema=FlipFlopConfig)
class FlipFlop(TokenTask):
    setting = "σ: writes and reads σ times rarer than in training, p(ignore) = 1 − (1 − p)/σ"
    evaluation = token_evaluation(
        32, factors=(1, 2, 4, 8), settings=(0.25, 1.0, 2.0, 5.0), paper_settings=(0.25, 1.0, 2.0, 5.0, 10.0)
    )

    def vocab_size(self):
        return 5

    def n_tokens(self, n_points):
        return 2 * n_points

    def check(self, cfg):
        out = super().check(cfg)
        if not 0.0 <= self.cfg.p_ignore < 1.0:
            return [*out, f"task.p_ignore={self.cfg.p_ignore} must be in [0, 1)"]
        return out + self.end_of_run_problems(cfg)

    def grid_problems(self, sigmas, lengths, prefix="eval"):
        """σ >= 1 − p, so that p(σ) = 1 − (1 − p)/σ is a probability (:func:`p_ignore_at`)."""
        p = float(self.cfg.p_ignore)
        low = [s for s in sigmas or [] if not (s > 0 and 0.0 <= 1.0 - (1.0 - p) / s < 1.0)]
        if not low:
            return []
        return [
            f"{prefix}.sigmas={list(sigmas)} has {low}: with task.p_ignore={p} each setting σ (p(ignore) = "
            f"1 − (1 − p)/σ) must be >= 1 − task.p_ignore = {1.0 - p:g}; set {prefix}.sigmas or raise task.p_ignore"
        ]

    def draw(self, batch_size, n_points, generator, device, shift=None):
        """ops [B, n] in {w, r, i} (first w, last r) and bits [B, n] (random; reads' are relabelled)."""
        sigma = (shift or {}).get("sigma_x", 1.0)
        p = p_ignore_at(float(self.cfg.p_ignore), float(sigma))
        u = torch.rand(batch_size, n_points, generator=generator, device=device)
        ops = torch.where(u < p, IGNORE_OP, torch.where(u < p + (1.0 - p) / 2, WRITE, READ))
        ops[:, 0] = WRITE
        ops[:, -1] = READ
        bits = uniform_ints(2, (batch_size, n_points), generator, device)
        return Prompts(ops, {"bits": bits})

    def label(self, prompts):
        """[B, n] the last bit written at or before each instruction."""
        ops, bits = prompts.xs, prompts.params["bits"]
        n = ops.shape[1]
        idx = torch.arange(n, device=ops.device).expand_as(ops)
        last_write = torch.where(ops == WRITE, idx, torch.zeros_like(idx)).cummax(dim=1).values  # [B, n]
        return bits.gather(1, last_write)

    def encode(self, prompts, ys):
        ops, bits = prompts.xs, prompts.params["bits"]
        read = ops == READ
        shown = torch.where(read, ys, bits)  # a read's bit is the memory; others as drawn
        bsz, n = ops.shape
        tokens = torch.stack([ops, shown + BIT0], dim=2).reshape(bsz, 2 * n)
        targets = torch.where(read, ys + BIT0, torch.full_like(ys, IGNORE))
        pred_idx = torch.arange(0, 2 * n, 2, device=ops.device)  # the instruction tokens
        return self.batch(tokens, targets, pred_idx, prompts)
