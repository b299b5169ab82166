"""Start-up checks that a schema cannot express. All problems are reported at once, each naming the
key, the bad value and what is allowed, before any work starts or any file is written.

Three parts: every float of the run config is a finite float32 number (:func:`non_finite`); each key
of :data:`RULES` meets its rule (a key absent from the config, such as ``scorer.b_init`` with
``scorer=softmax``, is skipped); then the conditions between keys, written out in :func:`problems`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from ssa_repro.core import distributions as D
from ssa_repro.core.enums import value_of
from ssa_repro.core.rundir import device_problems
from ssa_repro.data.paths import CorpusError
from ssa_repro.kernels.ssa_attention import INSTALL, MAX_HEAD_DIM, interpreter_on, triton_available
from ssa_repro.models import MODELS
from ssa_repro.models.positions import POSITIONS, pos_name, position_limit
from ssa_repro.scorers import SCORERS
from ssa_repro.scorers.base import Scorer
from ssa_repro.tasks import TASKS, build_task

FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # 3.4028e38: training computes in float32


class ConfigError(ValueError):
    """A bad config value; the message lists every problem found."""


@dataclass(frozen=True)
class Rule:
    """What a key's value must be: ``ok(value)``, and the words for it in the message."""

    ok: Callable[[Any], bool]
    allowed: str


def _num(x: float) -> str:
    return f"{x:g}".replace("e+0", "e").replace("e+", "e")  # 1e6, 1e30, 3.40282e38


def at_least(low, note: str = "") -> Rule:
    return Rule(lambda v: v >= low, f">= {low}" + (f" ({note})" if note else ""))


def at_most(high: float) -> Rule:
    return Rule(lambda v: v <= high, f"<= {_num(high)}")


def within(low: float, high: float) -> Rule:
    return Rule(lambda v: low <= v <= high, f"in [{_num(low)}, {_num(high)}]")


def one_of(*allowed: str) -> Rule:
    return Rule(lambda v: str(v).lower() in allowed, f"one of {', '.join(allowed)}")


POSITIVE = Rule(lambda v: v > 0, "> 0")
BETAS = Rule(lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two values in [0, 1)")

# Task distributions: inputs are squared in float32 (LayerNorm's variance, the squared error), so they
# must stay well below sqrt(3.4e38) = 1.8e19, and the linear task's y = a·x + b multiplies two draws;
# within ±1e6 each, |y| < 1e14 even 10 σ out (training fails at step 1 from std ≈ 1e19; the paper's
# largest σ is 29).
DIST = within(-1e6, 1e6)

RULES: list[tuple[str, Rule]] = [
    ("model.n_layer", at_least(1)),
    ("model.n_head", at_least(1)),
    ("model.n_embd", at_least(1)),
    ("model.max_positions", at_least(1)),
    ("model.mlp_ratio", at_least(1)),
    ("model.vocab_size", at_least(0, "0: scalar tokens")),
    ("train.steps", at_least(0)),
    ("train.batch_size", at_least(1)),
    ("train.log_interval", at_least(1)),
    ("train.ckpt_interval", at_least(1)),
    ("train.lr", POSITIVE),
    ("train.warmup_steps", at_least(0)),
    ("train.weight_decay", at_least(0)),
    ("train.grad_clip", at_least(0)),
    ("train.grad_accum", at_least(1)),
    ("train.min_lr_ratio", within(0, 1)),
    ("train.betas", BETAS),
    ("train.compile", one_of("auto", "true", "false", "reduce-overhead")),
    ("train.keep_every", at_least(0, "0: keep only last.pt")),
    ("curriculum.start", at_least(1)),
    ("curriculum.end", at_least(1)),
    ("curriculum.interval", at_least(1)),
    ("curriculum.inc", at_least(0)),
    ("curriculum.dims_start", at_least(0, "0: every dimension from the start")),
    ("curriculum.dims_inc", at_least(0)),
    ("curriculum.dims_interval", at_least(1)),
    ("model.n_in", at_least(1)),
    *[
        (f"task.{d}.{f}", DIST)
        for d in ("a_dist", "b_dist", "x_dist")
        for f in ("mean", "std", "low", "high")
    ],
    # scorer values: each scorer's check_config (finite, in range; ssa_repro/scorers/base.py)
]


def _show(value) -> str:
    if isinstance(value, (list, ListConfig)):
        return str(list(value))
    return repr(value) if isinstance(value, str) else str(value)


def non_finite(cfg: DictConfig) -> list[tuple[str, float]]:
    """(key, value) for every float of the config (lists included) that is NaN, infinite, or beyond
    float32's range (training computes in float32, where it would be infinite). ``hydra`` is left out."""
    out = []

    def walk(node, key):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        elif isinstance(node, float) and not (math.isfinite(node) and abs(node) <= FLOAT32_MAX):
            out.append((key, node))

    for key in cfg:
        if key != "hydra":
            node = cfg._get_node(key)
            walk(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else cfg[key], key)
    return out


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

    bad = non_finite(cfg)
    out += [
        f"{key}={value} must be a finite number in float32's range (|value| <= {_num(FLOAT32_MAX)})"
        for key, value in bad
    ]
    reported = {key.split("[")[0] for key, _ in bad}  # train.betas[1] -> train.betas
    for key, rule in RULES:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and key not in reported and not rule.ok(value):
            out.append(f"{key}={_show(value)} must be {rule.allowed}")

    t, m, tr, c = cfg.task, cfg.model, cfg.train, cfg.curriculum
    for key in ("a_dist", "b_dist", "x_dist"):
        if key in t and not any(r.startswith(f"task.{key}.") for r in reported):
            out += D.check(t[key], f"task.{key}")
    task = build_task(t)
    if "balance" in t and task.balanced and not D.is_symmetric(t.x_dist):
        out.append(
            "task.x_dist must be symmetric about 0 when the task is balanced (balancing flips signs); "
            "set task.balance=false or use mean 0 / low = -high"
        )

    if m.n_head >= 1 and m.n_embd % m.n_head:
        out.append(f"model.n_head={m.n_head} must divide model.n_embd={m.n_embd}")
    scorer_cls = SCORERS.get(cfg.scorer.name)
    # (the scorer reports its own non-finite values too, for the plug-in: once is enough here)
    out += [p for p in scorer_cls.check_config(cfg.scorer, m.n_head) if p.split("=")[0] not in reported]
    if task.needs_causal and not m.causal:
        out.append(
            f"model.causal=false (model={m.name}) but task={t.name} scores each prediction against a later "
            "token of the same prompt, which bidirectional attention shows to the position predicting it "
            "(Task.needs_causal); use model.causal=true (a causal model such as model=gpt2)"
        )
    if scorer_cls.causal_only and not m.causal:
        allowed = [n for n in SCORERS.names() if not SCORERS.get(n).causal_only]
        out.append(
            f"scorer={cfg.scorer.name} is causal only (its weights depend on the keys between key and "
            f"query), but model.causal=false (model={m.name}); use a causal model, or a scorer that allows "
            f"a bidirectional one: {', '.join(allowed)}"
        )
    if scorer_cls.splits_head_dim and m.n_head >= 1 and (m.n_embd // m.n_head) % 2:
        out.append(
            f"scorer={cfg.scorer.name} splits each head in two halves, so the head width "
            f"model.n_embd / model.n_head = {m.n_embd // m.n_head} must be even; change model.n_embd or model.n_head"
        )
    out += POSITIONS.get(pos_name(m)).check_config(m)
    if value_of(m.attn_impl) == "flex":
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

    if value_of(m.attn_impl) == "triton":
        out += _triton_problems(cfg)

    if tr.weight_decay > 0 and value_of(tr.optimizer) == "adam":
        out.append(
            f"train.weight_decay={tr.weight_decay} needs train.optimizer=adamw (adam has no decoupled decay)"
        )
    bad = [int(k) for k in tr.keep_at if not 1 <= k <= tr.steps]
    if bad:
        out.append(
            f"train.keep_at={list(tr.keep_at)} has {bad}: each step must be in [1, train.steps={tr.steps}] "
            "(a checkpoint is kept when training reaches that step)"
        )
    if tr.keep_every > 0 and tr.ckpt_interval >= 1 and tr.keep_every % tr.ckpt_interval:
        out.append(
            f"train.keep_every={tr.keep_every} must be a multiple of train.ckpt_interval={tr.ckpt_interval}"
        )

    if c.enabled and c.start > c.end:
        out.append(f"curriculum.start={c.start} must be <= curriculum.end={c.end}")
    need, limit = task.n_tokens(c.end), position_limit(m)  # limit None: the scheme has no table
    if limit is not None and need > limit:
        out.append(
            f"curriculum.end={c.end} examples need {need} tokens for task {t.name}, more than "
            f"model.max_positions={limit} (the table of model.pos=learned); raise model.max_positions or "
            "lower curriculum.end"
        )

    try:
        out += task.check(cfg)
    except CorpusError as e:  # a corpus file that cannot be read as text (its share of invalid UTF-8)
        out.append(str(e))

    out += device_problems(cfg.device)
    return out


# position schemes that add a logit bias β_h(i, j) (ssa_repro/models/positions/), which the kernel lacks
_LOGIT_BIAS_POS = ("alibi", "t5")


def _triton_problems(cfg) -> list[str]:
    """model.attn_impl=triton: an SSA-shaped scorer, no logit bias, a head width the kernel takes,
    triton installed, and CUDA (or CPU under TRITON_INTERPRET=1)."""
    m, out = cfg.model, []
    fused = [n for n in SCORERS.names() if SCORERS.get(n).kernel_params is not Scorer.kernel_params]
    if cfg.scorer.name not in fused:
        out.append(
            f"model.attn_impl=triton runs the fused SSA kernel; scorer.name={cfg.scorer.name!r} is not SSA "
            f"(allowed: {', '.join(fused)}); use model.attn_impl=auto"
        )
    if pos_name(m) in _LOGIT_BIAS_POS:
        out.append(
            f"model.attn_impl=triton has no additive position bias; model.pos={pos_name(m)} adds one "
            "(allowed with triton: learned, none, sinusoidal, rope); use model.attn_impl=auto"
        )
    if m.n_head >= 1 and not 1 <= m.n_embd // m.n_head <= MAX_HEAD_DIM:
        out.append(
            f"model.attn_impl=triton takes head widths 1..{MAX_HEAD_DIM}; model.n_embd / model.n_head = "
            f"{m.n_embd // m.n_head}; use model.attn_impl=auto"
        )
    if not triton_available():
        out.append(f"model.attn_impl=triton needs triton, which is not installed: {INSTALL}")
    elif _device_type(cfg.device) != "cuda" and not interpreter_on():
        out.append(
            f"model.attn_impl=triton needs CUDA (device={value_of(cfg.device)}); on CPU only under "
            "TRITON_INTERPRET=1 (Triton's interpreter: slow, for tests); use model.attn_impl=auto"
        )
    return out


def _has_score_mod(name: str) -> bool:
    return SCORERS.get(name).score_mod is not Scorer.score_mod


def _device_type(device) -> str:
    name = value_of(device)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def check(cfg: DictConfig) -> None:
    found = problems(cfg)
    if found:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(found))
