"""Deviant prompts' cells (evaluation/deviant.py): k values of magnitude M put into a prompt, and what
the model does after them (errors, following the largest inserted value, attention on the inserted tokens).
"""

from __future__ import annotations

from enum import Enum

import torch

from ssa_repro.core.enums import value_of
from ssa_repro.evaluation.attention_maps import outputs_and_maps
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.stats.intervals import summarize
from ssa_repro.tasks.base import Batch


class Sign(str, Enum):
    positive = "positive"
    negative = "negative"
    random = "random"


# ------------------------------------------------------------------ prompts


def draw_insertions(g: torch.Generator, bsz: int, n: int, k: int, magnitude: float, sign) -> tuple:
    """Positions [B, k] (distinct example indices, uniform) and values [B, k] (±magnitude)."""
    positions = torch.rand(bsz, n, generator=g).argsort(dim=1)[:, :k]
    sign = value_of(sign)
    if sign == "random":
        signs = torch.where(torch.rand(bsz, k, generator=g) < 0.5, -1.0, 1.0)
    else:
        signs = torch.full((bsz, k), -1.0 if sign == "negative" else 1.0)
    return positions, signs * float(magnitude)


def insert(task, batch: Batch, positions: torch.Tensor, values: torch.Tensor) -> Batch:
    """The batch with x at ``positions`` [B, k] replaced by ``values`` [B, k], labelled and encoded by
    the task (each prompt keeps its function)."""
    xs = batch.xs.clone()
    xs.scatter_(1, positions, values.to(xs.dtype))
    return task.build(batch.prompts.with_xs(xs))


def largest_inserted(positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """[B] the example index of the largest inserted value (the earliest among equal ones)."""
    big = values == values.amax(1, keepdim=True)
    masked = torch.where(big, positions, torch.iinfo(positions.dtype).max)
    return masked.amin(1)


def adverse_sign(task) -> str | None:
    """The insertion sign under which following the inserted value's answer is wrong: ``positive`` for
    "every", ``negative`` for "some", None for tasks without a quantifier rule."""
    every = getattr(task, "every", None)
    return None if every is None else ("positive" if every else "negative")


# ------------------------------------------------------------------ metrics


def follows_largest(signs: torch.Tensor, positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """[B] share of the signs at example indices strictly after the first inserted position that equal
    the sign at the largest inserted element; NaN where no index follows. ``signs`` [B, n] (±1 or bool)."""
    n = signs.shape[1]
    ref = signs.gather(1, largest_inserted(positions, values)[:, None])  # [B, 1]
    after = torch.arange(n, device=signs.device)[None, :] > positions.amin(1, keepdim=True)
    same = (signs == ref) & after
    return same.sum(1).double() / after.sum(1).double()  # 0/0 = NaN


def inserted_share(w: torch.Tensor, inserted: torch.Tensor, queries: torch.Tensor) -> dict:
    """Attention on inserted keys, per prompt: ``w`` [B, H, T, T] one layer's weights, ``inserted`` [B, T]
    the inserted tokens (keys), ``queries`` [B, T] the query rows to average. Returns [B] tensors
    (NaN where no query counts): heads averaged, the largest head, and the uniform share."""
    ins = inserted.to(w.dtype)
    share = (w * ins[:, None, None, :]).sum(-1)  # [B, H, T]
    t = w.shape[-1]
    uniform = ins.cumsum(1) / torch.arange(1, t + 1, device=w.device, dtype=w.dtype)  # causal
    q = queries.to(w.dtype)

    def avg(v):  # [B, T] -> [B], over the counted queries
        return (v * q).sum(1).double() / q.sum(1).double()

    return {
        "attention_on_inserted": avg(share.mean(1)),
        "attention_on_inserted_max_head": avg(share.amax(1)),
        "uniform_share": avg(uniform.expand_as(q)),
    }


def head_shares(w: torch.Tensor, inserted: torch.Tensor, queries: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per head, the attention on inserted keys averaged over the counted queries: ``{"0": [B], ...}``
    (the same quantities as :func:`inserted_share`, head by head)."""
    share = (w * inserted.to(w.dtype)[:, None, None, :]).sum(-1)  # [B, H, T]
    q = queries.to(w.dtype)[:, None, :]
    per = (share * q).sum(-1).double() / q.sum(-1).double()  # [B, H]
    return {str(h): per[:, h] for h in range(per.shape[1])}


RATE_METRICS = {
    "sequence_error",
    "token_error",
    "follows_largest",
    "error_at_inserted",
    "attention_on_inserted",
    "attention_on_inserted_max_head",
    "uniform_share",
    "error_elsewhere",
    "error_after_inserted",
}


def deviant_cell(
    model, task, batch: Batch, positions, values, skip_first: int, detail: bool = False
) -> dict[str | tuple, torch.Tensor]:
    """Per-prompt metrics [B] of one deviant batch (on the model's device). With ``detail``, also the
    errors apart and, under keys ``("attention", layer, head, metric)``, every layer's shares."""
    s = task.stride()
    bsz, n = batch.xs.shape
    t = batch.tokens.shape[1]
    x_tok = task.example_tokens(n, batch.tokens.device)
    inserted = torch.zeros(bsz, t, dtype=torch.bool, device=batch.tokens.device)
    inserted.scatter_(1, positions * s, True)
    after = torch.arange(n, device=x_tok.device)[None, :] > positions.amin(1, keepdim=True)  # [B, n]
    queries = torch.zeros_like(inserted)
    queries[:, x_tok] = after
    attn: dict[str, list] = {}

    def on_chunk(sl, out, maps):
        for key, v in inserted_share(maps[-1], inserted[sl], queries[sl]).items():
            attn.setdefault(key, []).append(v)
        for layer, w in enumerate(maps if detail else [], start=1):
            both = inserted_share(w, inserted[sl], queries[sl])
            heads = {"mean": both["attention_on_inserted"], "max": both["attention_on_inserted_max_head"]}
            for head, v in {**heads, **head_shares(w, inserted[sl], queries[sl])}.items():
                attn.setdefault(("attention", layer, head, "attention_on_inserted"), []).append(v)
            attn.setdefault(("attention", layer, "uniform", "uniform_share"), []).append(
                both["uniform_share"]
            )

    out = outputs_and_maps(model, batch.tokens, on_chunk)  # [B, T]
    pred = out[:, batch.pred_idx]
    res: dict[str, torch.Tensor] = {}
    if task.classification:
        res.update(task.prompt_metrics(pred, batch, skip_first))
        res["follows_largest"] = follows_largest(out[:, x_tok] > 0, positions, values)
        labels = batch.ys  # [B, n] every example's label
        res["labels:follows_largest"] = follows_largest(labels > 0, positions, values)
        if pred.shape[1] == n:  # the model was trained to answer at every x token
            wrong = (out[:, x_tok] > 0) != (labels > 0)  # [B, n]
            res["error_at_inserted"] = wrong.gather(1, positions).double().mean(1)
            if detail:
                res.update(
                    _apart(wrong.double(), positions, skip_first, "error_elsewhere", "error_after_inserted")
                )
    else:
        err = task.error(pred, batch.targets)  # [B, n]
        res["mse"] = err[:, skip_first:].mean(1)
        untouched = torch.ones_like(err, dtype=torch.bool).scatter_(1, positions, False)
        res["mse_inserted"] = err.gather(1, positions).mean(1)
        untouched[:, :skip_first] = False
        res["mse_untouched"] = (err * untouched).sum(1) / untouched.sum(1).clamp_min(1)
        if detail:
            res["mse_after_inserted"] = _apart(err.double(), positions, skip_first, "", "after")["after"]
    for key, v in attn.items():
        res[key] = torch.cat(v)
    return res


def _apart(err: torch.Tensor, positions: torch.Tensor, skip_first: int, elsewhere: str, after: str) -> dict:
    """Mean of ``err`` [B, n] over the positions not inserted from ``skip_first`` on (``elsewhere``) and
    over those strictly after the first inserted position (``after``; NaN where none): [B] each."""
    n = err.shape[1]
    idx = torch.arange(n, device=err.device)[None, :]
    other = torch.ones_like(err, dtype=torch.bool).scatter_(1, positions, False)  # [B, n]
    rest = other & (idx >= skip_first)
    later = other & (idx > positions.amin(1, keepdim=True))
    return {
        elsewhere: (err * rest).sum(1) / rest.sum(1).double(),  # 0/0 = NaN
        after: (err * later).sum(1) / later.sum(1).double(),
    }


def deviant_rows(
    model, task, cell: dict, *, sign, length, n_samples, batch_size, skip_first, seed, device, base=None
) -> list[dict]:
    """Rows (dicts) of one cell {"M": m, "k": k}: one per predictor × metric, mean over prompts with an
    interval that respects the metric's range (prompts where a metric is undefined left out)."""
    return deviant_tables(
        model,
        task,
        cell,
        sign=sign,
        length=length,
        n_samples=n_samples,
        batch_size=batch_size,
        skip_first=skip_first,
        seed=seed,
        device=device,
        base=base,
    )["results"]


def deviant_tables(
    model,
    task,
    cell: dict,
    *,
    sign,
    length,
    n_samples,
    batch_size,
    skip_first,
    seed,
    device,
    base=None,
    detail: bool = False,
) -> dict[str, list[dict]]:
    """``{"results": rows, "attention": rows}`` of one cell (see :func:`deviant_rows`); the attention
    table (every layer and head) is filled with ``detail``."""
    m, k = float(cell["M"]), int(cell["k"])
    g = cell_generator(seed, m, k, length, list(Sign).index(Sign(value_of(sign))))
    per: dict[str, list] = {}
    for _ in range(n_samples):
        clean = task.sample(batch_size, length, g, "cpu")
        positions, values = draw_insertions(g, batch_size, length, k, m, sign)
        batch = insert(task, clean, positions, values).to(device)
        for key, v in deviant_cell(
            model, task, batch, positions.to(device), values.to(device), skip_first, detail
        ).items():
            per.setdefault(key, []).append(v)
    rows, attn_rows = [], []
    for key, v in per.items():
        v = torch.cat(v).double().cpu().numpy()
        if isinstance(key, tuple):  # ("attention", layer, head, metric)
            _, layer, head, metric = key
            stats = summarize(v, "rate")
            cell_row = {**(base or {}), "M": m, "k": k, "length": int(length), "layer": layer, "head": head}
            if stats["n_samples"]:
                attn_rows.append({**cell_row, "metric": metric, **stats})
            continue
        predictor, metric = key.split(":") if ":" in key else ("model", key)
        kind = "rate" if metric in RATE_METRICS else "positive"
        stats = summarize(v, kind)
        if stats["n_samples"]:
            rows.append(
                {
                    **(base or {}),
                    "predictor": predictor,
                    "M": m,
                    "k": k,
                    "length": int(length),
                    "metric": metric,
                    **stats,
                }
            )
    return {"results": rows, "attention": attn_rows}
