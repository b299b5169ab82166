"""Attach a scorer of the registry to a ``transformers`` model, and load such a model back.

:func:`attach` finds the attention modules (those whose ``forward`` calls transformers' attention
interface, ``ALL_ATTENTION_FUNCTIONS``), checks the scorer against each (its config, causal-only
scorers on bidirectional attention, even head widths for differential attention), then gives each
module its own scorer (``module.ssa_scorer``: SSA's b and n per head, a sink logit, a gate…, trained
with the model and saved in its state dict), stores the scorer config in ``model.config`` (saved in
config.json) and switches the model to the ``ssa_repro`` attention implementation
(:mod:`ssa_repro.hf.attention`). Everything is checked before the model is changed.
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from safetensors import safe_open
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface

from ssa_repro.hf.attention import SCORER_ATTR, scorer_attention, scorer_mask
from ssa_repro.scorers import SCORERS, build_scorer
from ssa_repro.scorers.base import ScorerConfig

ATTN_NAME = "ssa_repro"  # the attention implementation's name (model.config._attn_implementation)
CONFIG_KEY = "ssa_repro_scorer"  # the scorer config in model.config / config.json

AttentionInterface.register(ATTN_NAME, scorer_attention)
AttentionMaskInterface.register(ATTN_NAME, scorer_mask)


class AttachError(ValueError):
    """The scorer cannot be attached to this model; the message says why and what is allowed."""


@functools.cache
def uses_interface(cls: type) -> bool:
    """Whether ``cls.forward`` dispatches through transformers' attention interface."""
    try:
        return "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False


def attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of every module whose forward calls the attention interface, in model order."""
    return [(n, m) for n, m in model.named_modules() if uses_interface(type(m))]


def head_count(module: nn.Module) -> int:
    """Number of query heads of an attention module (the attribute names transformers' models use)."""
    for attr in ("num_heads", "num_attention_heads", "n_head", "n_heads"):
        if isinstance(getattr(module, attr, None), int):
            return getattr(module, attr)
    config = getattr(module, "config", None)
    if config is not None and isinstance(getattr(config, "num_attention_heads", None), int):
        return config.num_attention_heads
    raise AttachError(f"{type(module).__name__}: no head count found (num_heads, config.num_attention_heads)")


def head_width(module: nn.Module) -> int | None:
    for attr in ("head_dim", "attention_head_size"):
        if isinstance(getattr(module, attr, None), int):
            return getattr(module, attr)
    return None


def scorer_config(name: str, keys: dict) -> DictConfig:
    """The scorer's config: its registered schema with ``keys`` merged in (unknown keys refused)."""
    if name not in SCORERS:
        raise AttachError(f"scorer={name!r} is not registered; allowed: {', '.join(SCORERS.names())}")
    base = OmegaConf.structured(SCORERS.schemas.get(name, ScorerConfig))
    unknown = sorted(set(keys) - set(base.keys()) - {"name"})
    if unknown:
        raise AttachError(
            f"scorer={name}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(k for k in base if k != 'name')}"
        )
    return OmegaConf.merge(base, {k: v for k, v in keys.items() if k != "name"})


def attach(model: PreTrainedModel, scorer: str = "ssa", **scorer_keys) -> PreTrainedModel:
    """Give each attention module of ``model`` its own ``scorer`` (config keys as for ``scorer=`` in
    this project, e.g. ``b_init=1, n_init=1.5, per_head=True``) and route attention through it.

    Returns ``model`` (changed in place). Raises :class:`AttachError`, before changing anything, for a
    model that is no ``transformers`` model or has no attention module using the attention interface,
    an unknown scorer or key, a bad config value, a causal-only scorer on bidirectional attention, or
    an odd head width for a scorer that splits heads. The new parameters are created on each module's
    device, in float32 (the scorers compute in at least float32).
    """
    if not isinstance(model, PreTrainedModel):
        raise AttachError(f"{type(model).__name__} is not a transformers PreTrainedModel")
    cfg = scorer_config(scorer, scorer_keys)
    cls = SCORERS.get(scorer)
    modules = attention_modules(model)
    if not modules:
        raise AttachError(
            f"{type(model).__name__}: no attention module calls transformers' attention interface "
            "(ALL_ATTENTION_FUNCTIONS), so its attention cannot be replaced; models written for the "
            "interface (GPT-2, Llama, BERT, RoBERTa, … in transformers >= 5) can"
        )
    problems: list[str] = []
    if (
        cls.output_params
    ):  # e.g. gated attention's gate: it reads the layer input, which the interface does not pass
        problems.append(
            f"scorer={scorer} acts on the attention output with the layer's input ({', '.join(cls.output_params)}), "
            "which transformers' attention interface does not pass to an attention function; it is not "
            "available in Hugging Face models"
        )
    if not model._can_set_attn_implementation():  # transformers' own test before switching
        problems.append(f"{type(model).__name__} does not allow setting its attention implementation")
    for name, m in modules:
        n_head = head_count(m)
        problems += [f"{name}: {p}" for p in cls.check_config(cfg, n_head)]
        if cls.causal_only and not getattr(m, "is_causal", False):
            allowed = [n for n in SCORERS.names() if not SCORERS.get(n).causal_only]
            problems.append(
                f"scorer={scorer} is causal only (its weights depend on the keys between key and query), "
                f"but {name} ({type(m).__name__}) attends both ways; use a causal model, or a scorer that "
                f"allows a bidirectional one: {', '.join(allowed)}"
            )
        width = head_width(m)
        if width is None and "n_embd" in inspect.signature(cls.__init__).parameters:
            problems.append(
                f"scorer={scorer} has per-head maps of the query and needs the head width, which "
                f"{name} ({type(m).__name__}) does not declare (head_dim, attention_head_size)"
            )
        if cls.splits_head_dim and width is not None and width % 2:
            problems.append(
                f"scorer={scorer} splits each head in two halves; {name} has odd head width {width}"
            )
    if problems:
        raise AttachError("; ".join(dict.fromkeys(problems)))
    for i, (_, m) in enumerate(modules):
        layer = m.layer_idx if isinstance(getattr(m, "layer_idx", None), int) else i
        device = next((p.device for p in m.parameters()), None)
        h, width = head_count(m), head_width(m)
        # the query width for scorers with per-head maps of q (asentmax); None where not declared
        n_embd = h * width if width is not None else None
        setattr(m, SCORER_ATTR, build_scorer(cfg, h, layer=layer, n_embd=n_embd).to(device))
    setattr(model.config, CONFIG_KEY, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    model.set_attn_implementation(ATTN_NAME)
    return model


def _saved_tensors(path: Path) -> dict[str, str]:
    """Tensor name -> safetensors file holding it, for a folder written by ``save_pretrained``."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        return {k: str(path / f) for k, f in json.loads(index.read_text())["weight_map"].items()}
    single = path / "model.safetensors"
    if not single.exists():
        raise FileNotFoundError(f"{path}: no model.safetensors(.index.json) (written by save_pretrained)")
    with safe_open(str(single), "pt") as f:
        return {k: str(single) for k in f.keys()}  # noqa: SIM118 (safe_open is no mapping)


def load_pretrained(model_cls: type[PreTrainedModel], path, **kwargs) -> PreTrainedModel:
    """``model_cls.from_pretrained(path, **kwargs)`` for a model saved after :func:`attach`: attaches
    the scorer named in its config.json again and loads the scorer parameters saved beside the weights
    (``from_pretrained`` itself drops them as unexpected keys)."""
    path = Path(path)
    model = model_cls.from_pretrained(path, **kwargs)
    saved = getattr(model.config, CONFIG_KEY, None)
    if saved is None:
        raise AttachError(
            f"{path / 'config.json'} has no {CONFIG_KEY!r}: not saved after ssa_repro.hf.attach"
        )
    keys = dict(saved)
    attach(model, scorer=keys.pop("name"), **keys)
    where = _saved_tensors(path)
    state = {}
    for k, t in model.state_dict().items():
        if f".{SCORER_ATTR}." not in k:
            continue
        # the same name, or the name under another head class's prefix (e.g. transformer.h.0… vs h.0…)
        match = [s for s in where if s == k or s.endswith("." + k) or k.endswith("." + s)]
        if len(match) != 1:
            raise AttachError(f"{path}: scorer tensor {k} found {len(match)} times among the saved tensors")
        with safe_open(where[match[0]], "pt", device=str(t.device)) as f:
            state[k] = f.get_tensor(match[0])
    model.load_state_dict(state, strict=False)
    return model
