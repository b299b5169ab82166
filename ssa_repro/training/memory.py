"""Will a training run fit in memory? An estimate from the config alone, before anything is allocated.

``estimate(cfg)`` counts the bytes one training process needs:

- **parameters** — ``count_parameters`` of the model built on the meta device (shapes only), float32;
- **gradients** — one float32 per parameter;
- **optimizer** — Adam / AdamW keep two float32 moments per parameter;
- **activations** — what one micro-batch's forward keeps for its backward, roughly: per layer
  ``B·T·(8 + 2·mlp_ratio)·C`` values for the residual stream, LayerNorms, q/k/v, the attention output
  and the MLP's two hidden layers, plus ``k·B·H·T²`` float32 attention tensors for scorers that keep
  them (``k`` = 3 for SSA's fused path, 4 for the plain path, 0 for softmax through SDPA and for
  FlexAttention, which keep no T×T tensor: the scorer's ``attention_tensors``); the embeddings; the
  logits of a token head (``B·T·V`` three times in float32: logits, log-softmax, their gradient, at the
  task's ``logit_share`` of the positions); and one more layer (without attention tensors) for the backward's transient gradients. bf16 autocast halves the
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
from torch.overrides import TorchFunctionMode

from ssa_repro.core.enums import value_of
from ssa_repro.models import MODELS, build_model, count_parameters
from ssa_repro.models.positions import position_limit
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import build_task

FLOAT32 = 4
PLAIN_ATTENTION_TENSORS = 4  # the plain path (logits, transformed logits, weights, mask fill)


class _ShapesOnly(TorchFunctionMode):
    """Skips ``normal_`` (the weights' initialisation): meta tensors hold no values, and its meta kernel
    is a Python reference whose first call imports torch._dynamo (seconds)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.normal_, torch.nn.init.normal_):
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def parameter_count(model_cfg, scorer_cfg) -> int:
    """``count_parameters(build_model(model_cfg, scorer_cfg))``, the model built on the meta device:
    shapes only, no memory and no random numbers drawn, so a width of 10⁸ is counted in milliseconds."""
    with torch.device("meta"), _ShapesOnly():
        return count_parameters(build_model(model_cfg, scorer_cfg))


# ------------------------------------------------------------------ the estimate
def _tokens(cfg, task) -> int:
    """The longest training sequence: the task's tokens at the curriculum's end (ICL), task.context
    (lm), task.max_length (mlm); never more than the model's positions where the scheme has a table."""
    need, limit = int(task.n_tokens(int(cfg.curriculum.end))), position_limit(cfg.model)
    return need if limit is None else min(need, limit)


def _attention_tensors(cfg) -> int:
    impl = value_of(cfg.model.attn_impl)
    if impl in ("flex", "triton"):  # fused kernels: no [B, H, T, T] tensor is kept for the backward
        return 0
    if impl == "eager":
        return PLAIN_ATTENTION_TENSORS
    return SCORERS.get(cfg.scorer.name).attention_tensors


def estimate(cfg) -> dict:
    """Bytes one training process needs, by part (see the module docstring), from the config alone:
    ``parameters`` (a count), ``parameter_bytes``, ``gradient_bytes``, ``optimizer_bytes``,
    ``activation_bytes`` (of which ``attention_bytes`` and ``logits_bytes``), ``total_bytes``, and
    the ``batch_size`` and ``tokens`` they were computed for."""
    m, tr = cfg.model, cfg.train
    n = parameter_count(m, cfg.scorer)
    task = build_task(cfg.task)
    blocks = MODELS.get(m.name)
    b, t, c, h = int(tr.batch_size), _tokens(cfg, task), int(m.n_embd), int(m.n_head)
    r, v, n_layer = int(m.mlp_ratio), int(m.vocab_size), int(m.n_layer)
    act = 2 if value_of(tr.precision) == "bf16" else FLOAT32

    per_token = (8 * c if blocks.attention else 0) + ((2 + 2 * r) * c if blocks.mlp else 0)
    layer = b * t * per_token * act
    attention = _attention_tensors(cfg) * b * h * t * t * FLOAT32 if blocks.attention else 0
    embeddings = 2 * b * t * c * act
    logits = 3 * math.ceil(b * t * task.logit_share()) * v * FLOAT32
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
        f", model.vocab_size={m.vocab_size}" if m.vocab_size else ""
    )
    if static * share > have:
        fix = "lower model.n_embd or model.n_layer" + (" or model.vocab_size" if m.vocab_size else "")
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
