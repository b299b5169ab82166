"""Will a training run fit in memory? An estimate from the config alone, before anything is allocated.

``estimate(cfg)`` counts the bytes one training process needs:

- **parameters** — a closed form of the model's shape (equal to ``count_parameters(build_model(...))``
  for every model kind, with or without a token table; tested), float32;
- **gradients** — one float32 per parameter;
- **optimizer** — Adam / AdamW keep two float32 moments per parameter;
- **activations** — what one micro-batch's forward keeps for its backward, roughly: per layer
  ``B·T·(8 + 2·mlp_ratio)·C`` values for the residual stream, LayerNorms, q/k/v, the attention output
  and the MLP's two hidden layers, plus ``k·B·H·T²`` float32 attention tensors for scorers that keep
  them (``k`` = 3 for SSA's fused path, 4 for the plain path, 0 for softmax through SDPA and for
  FlexAttention, which keep no T×T tensor); the embeddings; the logits of a token head (``B·T·V``
  three times in float32: logits, log-softmax, their gradient; the masked LM only at its masked
  share); and one more layer (without attention tensors) for the backward's transient gradients. bf16 autocast halves the
  activations other than the attention tensors (scorers compute them in float32).

The estimate is meant to catch configs that cannot fit (a width of 10⁸, a batch of 10⁶), not to
predict the peak to the megabyte: it leaves out the allocator's slack, the framework's own few hundred
megabytes and the end-of-run evaluation (inference only, smaller), and it rounds the activations down
rather than up, so a config it refuses really does not fit and one that fits is never refused.
Measured on CPU (peak resident memory of model + Adam + two training steps, 9 configs from the default
to batch 2048 and 200-token SSA prompts): the estimate was 0.43–0.99 of the measured growth (lowest
for small models, where the framework's own allocations dominate).

``available(device)`` is the memory this process may still take: on the host the smallest of
``MemAvailable`` (``/proc/meminfo``), the cgroup's limit minus its usage (containers, SLURM) and
``RLIMIT_AS``; elsewhere ``os.sysconf``; on CUDA the free memory of the device
(``torch.cuda.mem_get_info``). ``problems(cfg, device)`` compares the two and says what to lower.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from ssa_repro.core.enums import value_of
from ssa_repro.models.positions import pos_name
from ssa_repro.models.positions.t5 import NUM_BUCKETS as T5_BUCKETS
from ssa_repro.models.transformer import MODELS
from ssa_repro.scorers import build_scorer
from ssa_repro.tasks import build_task

FLOAT32 = 4
ATTENTION_TENSORS = {"softmax": 0, "ssa": 3}  # [B, H, T, T] float32 tensors kept per layer by the fast path
PLAIN_ATTENTION_TENSORS = 4  # the plain path (logits, transformed logits, weights, mask fill)


# ------------------------------------------------------------------ parameters, in closed form
def scorer_parameters(scorer_cfg, n_head: int, n_embd: int | None = None) -> int:
    """Trainable scalars of one attention layer's scorer (SSA's b and n: 2 per head, gated attention's
    gate, ...): the scorer module alone is built (a few numbers), never the model."""

    return sum(p.numel() for p in build_scorer(scorer_cfg, n_head, n_embd=n_embd).parameters())


def position_parameters(model_cfg) -> int:
    """The position scheme's parameters: the learned table P·C, T5's bucket table NUM_BUCKETS·H, else 0."""
    pos = pos_name(model_cfg)
    if pos == "learned":
        return int(model_cfg.max_positions) * int(model_cfg.n_embd)
    return T5_BUCKETS * int(model_cfg.n_head) if pos == "t5" else 0


def parameter_count(model_cfg, scorer_cfg) -> int:
    """``count_parameters(build_model(model_cfg, scorer_cfg))`` without building the model.

    C = n_embd, r = mlp_ratio, V = vocab_size, P = max_positions, L = n_layer:
    token table V·C (tied to the head) or read-in (n_in + 1)·C + read-out C + 1; positions P·C (model.pos=
    learned; T5 buckets 32·H; none for the others); per layer with
    attention 2C (LayerNorm) + 3C² + 3C (qkv) + C² + C (proj) + the scorer's; per layer with an MLP
    2C (LayerNorm) + r·C² + r·C (fc) + r·C² + C (proj); the final LayerNorm 2C."""
    c, r = int(model_cfg.n_embd), int(model_cfg.get("mlp_ratio", 4))
    v, n_layer = int(model_cfg.get("vocab_size", 0) or 0), int(model_cfg.n_layer)
    blocks = MODELS.get(model_cfg.name)
    n_in = int(model_cfg.get("n_in", 1) or 1)
    n = v * c if v else (n_in + 1) * c + (c + 1)
    n += position_parameters(model_cfg) + 2 * c
    per_layer = 0
    if blocks.attention:
        per_layer += (
            2 * c
            + (3 * c * c + 3 * c)
            + (c * c + c)
            + scorer_parameters(scorer_cfg, int(model_cfg.n_head), c)
        )
    if blocks.mlp:
        per_layer += 2 * c + (r * c * c + r * c) + (r * c * c + c)
    return n + n_layer * per_layer


# ------------------------------------------------------------------ the estimate
def _tokens(cfg) -> int:
    """The longest training sequence: the task's tokens at the curriculum's end (ICL), task.context
    (lm), task.max_length (mlm); never more than the model's positions."""

    task = build_task(cfg.task)
    return min(int(task.n_tokens(int(cfg.curriculum.end))), int(cfg.model.max_positions))


def _attention_tensors(cfg) -> int:
    impl = value_of(cfg.model.get("attn_impl", "auto"))
    if impl == "flex":
        return 0
    if impl == "eager":
        return PLAIN_ATTENTION_TENSORS
    return ATTENTION_TENSORS.get(cfg.scorer.name, PLAIN_ATTENTION_TENSORS)


def estimate(cfg) -> dict:
    """Bytes one training process needs, by part (see the module docstring), from the config alone:
    ``parameters`` (a count), ``parameter_bytes``, ``gradient_bytes``, ``optimizer_bytes``,
    ``activation_bytes`` (of which ``attention_bytes`` and ``logits_bytes``), ``total_bytes``, and
    the ``batch_size`` and ``tokens`` they were computed for."""
    m, tr = cfg.model, cfg.train
    n = parameter_count(m, cfg.scorer)
    blocks = MODELS.get(m.name)
    b, t, c, h = int(tr.batch_size), _tokens(cfg), int(m.n_embd), int(m.n_head)
    r, v, n_layer = int(m.get("mlp_ratio", 4)), int(m.get("vocab_size", 0) or 0), int(m.n_layer)
    act = 2 if value_of(tr.get("precision", "fp32")) == "bf16" else FLOAT32

    per_token = (8 * c if blocks.attention else 0) + ((2 + 2 * r) * c if blocks.mlp else 0)
    layer = b * t * per_token * act
    attention = _attention_tensors(cfg) * b * h * t * t * FLOAT32 if blocks.attention else 0
    embeddings = 2 * b * t * c * act
    if v:
        share = float(cfg.task.get("mask_prob", 1.0)) if cfg.task.name == "mlm" else 1.0
        logits = 3 * math.ceil(b * t * share) * v * FLOAT32
    else:
        logits = 0
    activations = n_layer * (layer + attention) + embeddings + logits + layer  # + the backward's transients
    parts = {
        "parameters": n,
        "parameter_bytes": n * FLOAT32,
        "gradient_bytes": n * FLOAT32,
        "optimizer_bytes": 2 * n * FLOAT32,
        "activation_bytes": activations,
        "attention_bytes": n_layer * attention,
        "logits_bytes": logits,
        "batch_size": b,
        "tokens": t,
    }
    parts["total_bytes"] = (
        parts["parameter_bytes"] + parts["gradient_bytes"] + parts["optimizer_bytes"] + activations
    )
    return parts


# ------------------------------------------------------------------ what there is
def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) is not a number


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """The cgroup's memory limit minus its usage (v2, then v1), or None without a limit."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            return max(limit - usage, 0)
    return None


def host_available() -> tuple[int | None, str]:
    """(bytes this process may still take on the host, where the number comes from)."""
    found = []
    mem = _meminfo_available()
    if mem is not None:
        found.append((mem, "MemAvailable in /proc/meminfo"))
    cg = _cgroup_available()
    if cg is not None:
        found.append((cg, "the cgroup's memory limit minus its usage"))
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            found.append((soft, "the address-space limit (ulimit -v)"))
    except (ImportError, ValueError, OSError):  # pragma: no cover
        pass
    if not found:
        try:
            pages = (
                os.sysconf("SC_AVPHYS_PAGES")
                if "SC_AVPHYS_PAGES" in os.sysconf_names
                else os.sysconf("SC_PHYS_PAGES")
            )
            found.append((pages * os.sysconf("SC_PAGE_SIZE"), "os.sysconf"))
        except (ValueError, OSError):
            return None, "unknown"
    return min(found)


def available(device) -> int | None:
    """Bytes a training process may still allocate on ``device`` (None if it cannot be told)."""
    return _available(device)[0]


def _available(device) -> tuple[int | None, str]:
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free), f"free on {torch.cuda.get_device_name(device)}"
    return host_available()


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover


def problems(cfg, device=None, processes: int = 1) -> list[str]:
    """Why training ``cfg`` would not fit on ``device`` (default: ``cfg.device``, auto = CUDA when
    present): [] when it fits or when the memory available cannot be told. ``processes``: training
    processes sharing this host's memory (data-parallel ranks on one CPU machine); on CUDA each has
    its own device."""
    if device is None:
        name = value_of(cfg.device)
        device = ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name
    device = torch.device(device)
    have, source = _available(device)
    if have is None:
        return []
    est = estimate(cfg)
    share = processes if device.type == "cpu" else 1
    need = est["total_bytes"] * share
    if need <= have:
        return []
    m, tr = cfg.model, cfg.train
    static = est["parameter_bytes"] + est["gradient_bytes"] + est["optimizer_bytes"]
    shape = f"model.n_layer={m.n_layer}, model.n_head={m.n_head}, model.n_embd={m.n_embd}" + (
        f", model.vocab_size={m.vocab_size}" if m.get("vocab_size", 0) else ""
    )
    if static * share > have:
        fix = "lower model.n_embd or model.n_layer" + (
            " or model.vocab_size" if m.get("vocab_size", 0) else ""
        )
    else:
        fix = (
            f"lower train.batch_size (raise train.grad_accum to keep the batch) or the sequence length "
            f"({est['tokens']} tokens), or model.n_embd"
        )
    where = device.type + (f" for {processes} processes" if share > 1 else "")
    return [
        f"{shape}, train.batch_size={tr.batch_size}: training needs about {fmt_bytes(need)} "
        f"({est['parameters']:,} parameters: {fmt_bytes(static)} for weights, gradients and Adam's two "
        f"moments; {fmt_bytes(est['activation_bytes'])} of activations for a batch of "
        f"{est['batch_size']} × {est['tokens']} tokens), more than the {fmt_bytes(have)} available on "
        f"{where} ({source}); {fix}"
    ]


__all__ = ["estimate", "available", "problems", "parameter_count", "host_available", "fmt_bytes"]
