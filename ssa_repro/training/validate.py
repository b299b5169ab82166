"""Start-up checks that a schema cannot express. All problems are reported at once, each naming the
key, the bad value and what is allowed, before any work starts or any file is written."""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from ssa_repro.core import distributions as D
from ssa_repro.models import MODELS
from ssa_repro.scorers import SCORERS
from ssa_repro.scorers.base import Scorer
from ssa_repro.tasks import TASKS, build_task


class ConfigError(ValueError):
    """A bad config value; the message lists every problem found."""


def problems(cfg: DictConfig) -> list[str]:
    out: list[str] = []
    for key, registry, name in (
        ("task.name", TASKS, cfg.task.name),
        ("model.name", MODELS, cfg.model.name),
        ("scorer.name", SCORERS, cfg.scorer.name),
    ):
        if name not in registry:
            out.append(f"{key}={name!r} is not registered; allowed: {', '.join(registry.names())}")
    if out:
        return out

    t = cfg.task
    for key in ("a_dist", "b_dist", "x_dist"):
        if key in t:
            out += D.check(t[key], f"task.{key}")
    task = build_task(t)
    if "balance" in t:
        if task.balanced and not D.is_symmetric(t.x_dist):
            out.append(
                "task.x_dist must be symmetric about 0 when the task is balanced (balancing flips signs); "
                "set task.balance=false or use mean 0 / low = -high"
            )

    m = cfg.model
    for key in ("n_layer", "n_head", "n_embd", "max_positions", "mlp_ratio"):
        if m[key] < 1:
            out.append(f"model.{key}={m[key]} must be >= 1")
    if m.vocab_size < 0:
        out.append(f"model.vocab_size={m.vocab_size} must be >= 0 (0: scalar tokens)")
    if m.n_head >= 1 and m.n_embd % m.n_head:
        out.append(f"model.n_head={m.n_head} must divide model.n_embd={m.n_embd}")

    out += SCORERS.get(cfg.scorer.name).check_config(cfg.scorer, cfg.model.n_head)
    if getattr(m.attn_impl, "value", m.attn_impl) == "flex":
        with_mod = [n for n in SCORERS.names() if _has_score_mod(n)]
        if cfg.scorer.name not in with_mod:
            out.append(
                f"model.attn_impl=flex needs a scorer written as a FlexAttention score_mod; "
                f"scorer.name={cfg.scorer.name!r} is not (allowed: {', '.join(with_mod)}); use model.attn_impl=auto"
            )
        if _device_type(cfg.device) != "cuda":
            out.append(
                "model.attn_impl=flex needs CUDA (torch 2.13 has no FlexAttention backward on CPU); "
                "use model.attn_impl=auto on CPU"
            )

    tr = cfg.train
    for key in ("steps",):
        if tr[key] < 0:
            out.append(f"train.{key}={tr[key]} must be >= 0")
    for key in ("batch_size", "log_interval", "ckpt_interval"):
        if tr[key] < 1:
            out.append(f"train.{key}={tr[key]} must be >= 1")
    if not tr.lr > 0:
        out.append(f"train.lr={tr.lr} must be > 0")
    for key in ("warmup_steps", "weight_decay", "grad_clip"):
        if tr[key] < 0:
            out.append(f"train.{key}={tr[key]} must be >= 0")
    if tr.grad_accum < 1:
        out.append(f"train.grad_accum={tr.grad_accum} must be >= 1")
    if not 0 <= tr.min_lr_ratio <= 1:
        out.append(f"train.min_lr_ratio={tr.min_lr_ratio} must be in [0, 1]")
    if len(tr.betas) != 2 or any(not 0 <= b < 1 for b in tr.betas):
        out.append(f"train.betas={list(tr.betas)} must be two values in [0, 1)")
    if tr.weight_decay > 0 and getattr(tr.optimizer, "value", tr.optimizer) == "adam":
        out.append(
            f"train.weight_decay={tr.weight_decay} needs train.optimizer=adamw (adam has no decoupled decay)"
        )
    if str(tr.compile).lower() not in ("auto", "true", "false"):
        out.append(f"train.compile={tr.compile!r} is not allowed; allowed: auto, true, false")
    if tr.keep_every < 0:
        out.append(f"train.keep_every={tr.keep_every} must be >= 0 (0: keep only last.pt)")
    elif tr.keep_every and tr.ckpt_interval >= 1 and tr.keep_every % tr.ckpt_interval:
        out.append(
            f"train.keep_every={tr.keep_every} must be a multiple of train.ckpt_interval={tr.ckpt_interval}"
        )

    c = cfg.curriculum
    for key in ("start", "end", "interval"):
        if c[key] < 1:
            out.append(f"curriculum.{key}={c[key]} must be >= 1")
    if c.inc < 0:
        out.append(f"curriculum.inc={c.inc} must be >= 0")
    if c.enabled and c.start > c.end:
        out.append(f"curriculum.start={c.start} must be <= curriculum.end={c.end}")
    need = task.n_tokens(c.end)
    if need > m.max_positions:
        out.append(
            f"curriculum.end={c.end} examples need {need} tokens for task {t.name}, more than "
            f"model.max_positions={m.max_positions}; raise model.max_positions or lower curriculum.end"
        )

    out += task.check(cfg)

    dev = getattr(cfg.device, "value", cfg.device)
    if dev == "cuda" and not torch.cuda.is_available():
        out.append("device=cuda but no CUDA device is available; use device=auto or device=cpu")
    return out


def _has_score_mod(name: str) -> bool:

    return SCORERS.get(name).score_mod is not Scorer.score_mod


def _device_type(device) -> str:
    name = getattr(device, "value", device)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def check(cfg: DictConfig) -> None:
    found = problems(cfg)
    if found:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(found))
