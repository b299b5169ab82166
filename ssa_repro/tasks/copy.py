"""Copy and reverse (the algorithmic length-generalisation tasks of Deletang et al. 2023 and of
deep-spin/asentmax's synthetic suite): n symbols, a separator, then the same n symbols (``reverse``:
in reverse order),

    a_1 ... a_n  SEP  b_1 ... b_n          b = a (copy) or b_j = a_{n+1−j} (reverse)

The model reads b_j at the token before it (SEP for b_1), so it sees a, SEP and b_1..b_{j−1}: 2n tokens
(the last b is only a target). Symbols 0 .. ``alphabet`` − 1, SEP = ``alphabet``. The grid sweeps n to
16× the training n; its σ axis is unused (1). Copying needs one query-to-key match per position
(an induction head); with ``model.pos=learned`` the positions past training are untrained.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.tasks.base import Prompts
from ssa_repro.tasks.registry import TASKS
from ssa_repro.tasks.tokens import TokenTask, token_evaluation, uniform_ints


@dataclass
class CopyConfig:
    name: str = "copy"
    alphabet: int = 16
    reverse: bool = False


@TASKS.register("copy", schema=CopyConfig)
class Copy(TokenTask):
    evaluation = token_evaluation(8)  # conf/task/copy.yaml trains up to 8 symbols

    def vocab_size(self):
        return self.cfg.alphabet + 1

    def n_tokens(self, n_points):
        return 2 * n_points

    def check(self, cfg):
        out = super().check(cfg)
        if self.cfg.alphabet < 2:
            out.append(f"task.alphabet={self.cfg.alphabet} must be >= 2")
        return out

    def draw(self, batch_size, n_points, generator, device, shift=None):
        return Prompts(uniform_ints(self.cfg.alphabet, (batch_size, n_points), generator, device))

    def label(self, prompts):
        return prompts.xs.flip(1) if self.cfg.reverse else prompts.xs

    def encode(self, prompts, ys):
        xs = prompts.xs
        bsz, n = xs.shape
        sep = torch.full((bsz, 1), self.cfg.alphabet, dtype=xs.dtype, device=xs.device)
        tokens = torch.cat([xs, sep, ys[:, :-1]], dim=1)  # [B, 2n]
        pred_idx = torch.arange(n, 2 * n, device=xs.device)
        return self.batch(tokens, ys, pred_idx, prompts)
