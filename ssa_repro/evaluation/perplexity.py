"""Perplexity of a token-level language model on a token stream.

The stream t_0 … t_{N-1} (``<|endoftext|>`` first) is cut into windows of ``context`` input tokens;
window w reads t[b : b + context] and predicts t[b + 1 : b + context + 1]. With ``stride = context``
(the default) the windows do not overlap and every token t_1 … t_{N-1} is predicted exactly once,
the first token of a window with no context before it. With ``stride < context`` windows overlap and
only each window's last ``stride`` predictions are scored (each token still exactly once, now with at
least ``context - stride`` tokens of context). Perplexity = exp(sum of NLL / number of predicted
tokens); also per word (whitespace words of the text) and bits per UTF-8 byte, which do not depend on
the tokeniser: token perplexities of runs with different tokenisers are not comparable.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def windows(n_tokens: int, context: int, stride: int | None = None) -> list[tuple[int, int, int]]:
    """(begin, end, first_scored): inputs t[begin:end], targets t[begin+1:end+1], scored from
    target index ``first_scored`` (within the window) on. Targets t_1..t_{N-1} each scored once."""
    stride = stride or context
    if not 1 <= stride <= context:
        raise ValueError(f"stride={stride} must be in [1, context={context}]")
    out, begin, prev_end = [], 0, 0
    while prev_end < n_tokens - 1:
        end = min(begin + context, n_tokens - 1)
        out.append((begin, end, prev_end - begin))
        prev_end = end
        begin += stride
    return out


@torch.no_grad()
def stream_nll(
    model,
    tokens: np.ndarray,
    context: int,
    *,
    stride: int | None = None,
    batch_size: int = 8,
    max_windows: int | None = None,
    device="cpu",
) -> tuple[float, int]:
    """(sum of NLL in nats, number of predicted tokens) over the stream (its first ``max_windows``)."""
    wins = windows(len(tokens), context, stride)
    if max_windows is not None:
        wins = wins[:max_windows]
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        # full-length windows in batches; shorter ones (the last) alone
        groups: dict[int, list] = {}
        for w in wins:
            groups.setdefault(w[1] - w[0], []).append(w)
        for length, ws in groups.items():
            for i in range(0, len(ws), batch_size):
                chunk = ws[i : i + batch_size]
                idx = np.stack([np.arange(b, b + length + 1) for b, _, _ in chunk])
                seq = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64)).to(device)
                logits = model(seq[:, :-1]).float()  # [b, L, V]
                nll = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), seq[:, 1:].flatten(), reduction="none"
                ).view(len(chunk), length)
                for row, (_, _, first) in zip(nll, chunk):
                    total += row[first:].double().sum().item()
                    count += length - first
    finally:
        model.train(was_training)
    return total, count


def summarise(nll_sum: float, n_tokens: int, n_words: int | None = None, n_bytes: int | None = None) -> dict:
    """Perplexity exp(nll_sum / n_tokens) and the per-word / per-byte rates. No token scored is an error,
    not a perplexity of 1 (the best possible score)."""
    if n_tokens < 1:
        raise ValueError(
            f"no token was scored (n_tokens={n_tokens}): the stream has fewer than 2 tokens or no window; "
            "check the split's file and max_tokens"
        )
    out = {
        "nll_sum": nll_sum,
        "n_tokens": n_tokens,
        "nll_per_token": nll_sum / n_tokens,
        "perplexity": math.exp(nll_sum / n_tokens),
    }
    if n_words:
        out["n_words"] = n_words
        out["word_perplexity"] = math.exp(nll_sum / n_words)
    if n_bytes:
        out["n_bytes"] = n_bytes
        out["bits_per_byte"] = nll_sum / n_bytes / math.log(2)
    return out
