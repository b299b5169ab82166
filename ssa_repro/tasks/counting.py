"""Counting: how many times does the queried symbol occur in the context?

    x_1 ... x_n  SEP  q      target: c = #{i : x_i = q},  read at q

The count c is drawn first, uniformly from 0 .. min(``max_count``, n), and c positions chosen at
random get q; the others get symbols ≠ q uniformly. So the answer's distribution does not depend on
n: a longer prompt only adds distractors, and the task measures whether attention can still pick out
and add up c matching keys among n (what a normaliser that fades with length loses; the counting and
local-count tasks of deep-spin/asentmax and of the L2-softmax note). n + 2 tokens; symbols
0 .. ``alphabet`` − 1, SEP = ``alphabet``, counts as tokens ``alphabet`` + 1 + c. The grid sweeps n
to 16× the training n; its σ axis is unused (1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.tasks.base import Prompts
from ssa_repro.tasks.registry import TASKS
from ssa_repro.tasks.tokens import TokenTask, token_evaluation, uniform_ints


@dataclass
class CountingConfig:
    name: str = "counting"
    alphabet: int = 8
    max_count: int = 8


@TASKS.register("counting", schema=CountingConfig)
class Counting(TokenTask):
    evaluation = token_evaluation(16)  # conf/task/counting.yaml trains up to 16 symbols
    needs_causal = False  # the count is read at the last token and is no token of the prompt

    def vocab_size(self):
        return self.cfg.alphabet + 2 + self.cfg.max_count

    def n_tokens(self, n_points):
        return n_points + 2

    def check(self, cfg):
        out = super().check(cfg)
        if self.cfg.alphabet < 2:
            out.append(f"task.alphabet={self.cfg.alphabet} must be >= 2 (the query and another symbol)")
        if self.cfg.max_count < 1:
            out.append(f"task.max_count={self.cfg.max_count} must be >= 1")
        return out

    def draw(self, batch_size, n_points, generator, device, shift=None):
        """xs [B, n] and the query symbol q [B, 1]."""
        a, n = self.cfg.alphabet, n_points
        c = torch.randint(
            0, min(self.cfg.max_count, n) + 1, (batch_size, 1), generator=generator, device=device
        )
        q = uniform_ints(a, (batch_size, 1), generator, device)
        others = uniform_ints(a - 1, (batch_size, n), generator, device)
        others = others + (others >= q).long()  # uniform over the symbols ≠ q
        rank = torch.rand(batch_size, n, generator=generator, device=device).argsort(1).argsort(1)
        xs = torch.where(rank < c, q.expand(-1, n), others)  # c random positions hold q
        return Prompts(xs, {"query": q})

    def label(self, prompts):
        """[B, 1] the count of the query symbol."""
        return (prompts.xs == prompts.params["query"]).sum(1, keepdim=True)

    def encode(self, prompts, ys):
        xs, q = prompts.xs, prompts.params["query"]
        sep = torch.full_like(q, self.cfg.alphabet)
        tokens = torch.cat([xs, sep, q], dim=1)  # [B, n + 2]
        pred_idx = torch.tensor([xs.shape[1] + 1], device=xs.device)
        return self.batch(tokens, ys + self.cfg.alphabet + 1, pred_idx, prompts)
