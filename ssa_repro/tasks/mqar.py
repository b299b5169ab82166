"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology: Measuring and Improving Recall
in Efficient Language Models", arXiv 2312.04927; HazyResearch/zoology ``zoology/data/multiquery_ar.py``
and its ``ar_extrapolate`` variant: train with few key-value pairs, test with many).

A prompt of n pairs (``length`` = n): n distinct keys k_1..k_n drawn from ``n_keys`` key tokens,
values v_1..v_n from ``n_values`` value tokens (a separate id range, so a value is never a key), then
every key once more as a query, in random order:

    k_1 v_1 k_2 v_2 ... k_n v_n  q_1 q_2 ... q_n          q_j = k_{π(j)},  target at q_j: v_{π(j)}

3n tokens; the answer to q_j is read at q_j (its next token). There is no filler: zoology's
``random_non_queries`` fills the gap with random tokens that can repeat a key and so overwrite a
pair (zoology issue #29); here keys are distinct and never appear outside their pair and their
query (tests/test_length_tasks.py checks it). The grid sweeps n to 16× the training n (the
extrapolation variant); its σ axis is unused (1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssa_repro.tasks.base import Prompts
from ssa_repro.tasks.registry import TASKS
from ssa_repro.tasks.tokens import TokenTask, random_perms, token_evaluation, uniform_ints


@dataclass
class MQARConfig:
    name: str = "mqar"
    n_keys: int = 128  # key tokens 0 .. n_keys−1 (a prompt's pairs <= n_keys)
    n_values: int = 128  # value tokens n_keys .. n_keys + n_values − 1


@TASKS.register("mqar", schema=MQARConfig)
class MQAR(TokenTask):
    evaluation = token_evaluation(8)  # conf/task/mqar.yaml trains up to 8 pairs
    needs_causal = False  # a query's answer is its pair's value, earlier in the prompt, never the next token

    def vocab_size(self):
        return self.cfg.n_keys + self.cfg.n_values

    def n_tokens(self, n_points):
        return 3 * n_points

    def check(self, cfg):
        out = super().check(cfg)
        for key in ("n_keys", "n_values"):
            if getattr(self.cfg, key) < 1:
                out.append(f"task.{key}={getattr(self.cfg, key)} must be >= 1")
        if cfg.curriculum.end > self.cfg.n_keys >= 1:
            out.append(
                f"curriculum.end={cfg.curriculum.end} pairs need distinct keys, more than task.n_keys="
                f"{self.cfg.n_keys}: raise task.n_keys or lower curriculum.end"
            )
        return out + (self.end_of_run_problems(cfg) if self.cfg.n_keys >= 1 else [])

    def grid_problems(self, sigmas, lengths, prefix="eval"):
        if not lengths or max(lengths) <= self.cfg.n_keys:
            return []
        return [
            f"{prefix}.lengths={list(lengths)} draws prompts of up to {max(lengths)} pairs, more than "
            f"task.n_keys={self.cfg.n_keys} distinct keys: raise task.n_keys to {max(lengths)} or set {prefix}.lengths"
        ]

    def draw(self, batch_size, n_points, generator, device, shift=None):
        """keys [B, n] distinct per prompt, values [B, n], order [B, n] (the queries' permutation)."""
        if n_points > self.cfg.n_keys:
            raise ValueError(f"mqar: {n_points} pairs need distinct keys, but task.n_keys={self.cfg.n_keys}")
        keys = random_perms(batch_size, self.cfg.n_keys, n_points, generator, device)
        values = uniform_ints(self.cfg.n_values, (batch_size, n_points), generator, device)
        order = random_perms(batch_size, n_points, n_points, generator, device)
        return Prompts(keys, {"values": values, "order": order})

    def label(self, prompts):
        """[B, n] the value of the j-th queried key (a value index, 0 .. n_values − 1)."""
        return prompts.params["values"].gather(1, prompts.params["order"])

    def encode(self, prompts, ys):
        keys, values, order = prompts.xs, prompts.params["values"], prompts.params["order"]
        bsz, n = keys.shape
        pairs = torch.stack([keys, values + self.cfg.n_keys], dim=2).reshape(bsz, 2 * n)  # k1 v1 k2 v2 ...
        queries = keys.gather(1, order)  # [B, n]
        tokens = torch.cat([pairs, queries], dim=1)  # [B, 3n]
        pred_idx = torch.arange(2 * n, 3 * n, device=keys.device)
        return self.batch(tokens, ys + self.cfg.n_keys, pred_idx, prompts)

    def recall_positions(self, batch):
        """Where each query's pair is (eval=recall): the query rows [P] (2n .. 3n−1) and, per prompt,
        the key and value positions of each query's pair [B, P, 2] (pair i sits at 2i, 2i + 1)."""
        order = batch.params["order"]  # [B, n]: query j asks for pair order[:, j]
        n = order.shape[1]
        key_pos = 2 * order
        return torch.arange(2 * n, 3 * n), torch.stack([key_pos, key_pos + 1], dim=-1)
