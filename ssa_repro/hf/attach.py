"""Attach a scorer of the registry to a ``transformers`` model (loading one back: :mod:`ssa_repro.hf.load`).

:func:`attach` finds the attention modules (those whose ``forward`` calls transformers' attention
interface, ``ALL_ATTENTION_FUNCTIONS``), reads what each passes to its attention function (the keyword
names in its source, soft-capping in the config, a ``sinks`` parameter) and checks the scorer against
each: the scorer's config values (finite, in range), causal-only scorers on bidirectional attention,
even head widths for differential attention, and every attention feature — honoured by
:mod:`ssa_repro.hf.attention` (the maths is there) or refused naming it. Only then does it give each
module its own scorer (``module.ssa_scorer``: SSA's b and n per head, a sink logit, …, trained with the
model and saved in its state dict), store the scorer config in ``model.config`` (saved in config.json),
route the model's own weight initialisation to the scorers' initial values (a model built on the meta
device and materialised with ``to_empty`` + ``init_weights`` gets b_init and n_init) and switch the
model to the ``ssa_repro`` attention implementation.

Scorer parameters are float32 whatever the model's dtype (the scorers compute in at least float32; a
bf16 b or n would round learning steps away). ``model.to(dtype)`` afterwards casts them like any
parameter, which is torch's rule; the maths still upcasts.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import textwrap
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface

from ssa_repro.core.refusals import value_refusal
from ssa_repro.hf.attention import (
    ATTN_IMPLS,
    HONOURED,
    IGNORED,
    IMPL_ATTR,
    SCORER_ATTR,
    logit_scorer,
    scorer_attention,
    scorer_mask,
)
from ssa_repro.kernels.ssa_attention import INSTALL, MAX_HEAD_DIM, triton_available
from ssa_repro.scorers import SCORERS, build_scorer
from ssa_repro.scorers.base import Scorer, ScorerConfig

ATTN_NAME = "ssa_repro"  # the attention implementation's name (model.config._attn_implementation)
CONFIG_KEY = "ssa_repro_scorer"  # the scorer config in model.config / config.json
PRESET_DIR = Path(__file__).resolve().parents[2] / "conf" / "scorer"  # this project's scorer options
BUILD_ATTR = "_ssa_repro_build"  # on each scorer: (cfg, n_head, layer, n_embd), to re-initialise it
# The positional parameters of the interface, sometimes passed by name
POSITIONAL = ("module", "query", "key", "value", "attention_mask")

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


@functools.cache
def interface_keywords(cls: type) -> frozenset[str]:
    """The keyword names ``cls.forward`` passes to its attention function (the call of the name it
    assigned from ``ALL_ATTENTION_FUNCTIONS``), read from its source; ``**kwargs`` is not a name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    names = {"attention_interface"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and "ALL_ATTENTION_FUNCTIONS" in ast.unparse(node):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(
        k.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names
        for k in node.keywords
        if k.arg is not None
    )


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
    for attr in ("head_dim", "attention_head_size", "key_value_proj_dim"):
        if isinstance(getattr(module, attr, None), int):
            return getattr(module, attr)
    return None


def presets(conf_dir: Path = PRESET_DIR) -> dict[str, Path]:
    """This project's scorer options (``conf/scorer/<name>.yaml``: ``ssa_n2``, ``softmax_one``, …)."""
    return {p.stem: p for p in sorted(Path(conf_dir).glob("*.yaml"))}


def max_positions(model) -> int | None:
    config = getattr(model, "config", None)
    for attr in ("max_position_embeddings", "n_positions"):
        if isinstance(getattr(config, attr, None), int):
            return getattr(config, attr)
    return None


def scorer_config(name: str, keys: dict, model=None) -> DictConfig:
    """The scorer's config: a registered scorer's schema, or a preset of conf/scorer (its YAML over
    its schema; ``${model.max_positions}`` is the model's), with ``keys`` merged in (unknown keys
    refused, every float key finite)."""
    options = presets()
    if name in options:
        raw = OmegaConf.to_container(OmegaConf.load(options[name]))
        schema = next(
            (
                d.split("/")[-1].split("@")[0]
                for d in raw.pop("defaults", [])
                if str(d).startswith("/schema/")
            ),
            name,
        )
    elif name in SCORERS:
        raw, schema = {}, name
    else:
        raise AttachError(
            f"scorer={name!r} is neither a registered scorer ({', '.join(SCORERS.names())}) nor a preset "
            f"of {PRESET_DIR} ({', '.join(options)})"
        )
    base = OmegaConf.structured(SCORERS.schemas.get(schema, ScorerConfig))
    unknown = sorted(set(keys) - set(base.keys()) - {"name"})
    if unknown:
        raise AttachError(
            f"scorer={name}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(k for k in base if k != 'name')}"
        )
    try:
        cfg = OmegaConf.merge(base, raw, {k: v for k, v in keys.items() if k != "name"})
        root = OmegaConf.create({"model": {"max_positions": max_positions(model)}, "scorer": cfg})
        cfg = OmegaConf.merge(base, OmegaConf.to_container(root.scorer, resolve=True))
    except OmegaConfBaseException as e:  # the key, the value and what is allowed (core/refusals.py)
        raise AttachError(f"scorer={name}: {value_refusal(e)}") from None
    bad = [
        f"scorer.{k}={v} must be a finite number"
        for k, v in cfg.items()
        if isinstance(v, float) and not math.isfinite(v)
    ]
    if bad:
        raise AttachError(f"scorer={name}: {'; '.join(bad)}")
    return cfg


def features(model: PreTrainedModel, module: nn.Module) -> dict[str, object]:
    """The attention features an attention module passes beyond q, k, v and a mask (what
    :mod:`ssa_repro.hf.attention` computes with them): keyword names from its source, and the values
    the config or module carries."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    out: dict[str, object] = {}
    kws = interface_keywords(type(module))
    if "softcap" in kws and getattr(config, "attn_logit_softcapping", None) is not None:
        out["softcap"] = config.attn_logit_softcapping
    if "s_aux" in kws or isinstance(getattr(module, "sinks", None), torch.Tensor):
        out["sinks"] = True
    if "position_bias" in kws and getattr(module, "has_relative_attention_bias", False):
        out["relative position bias"] = True
    window = getattr(module, "sliding_window", getattr(config, "sliding_window", None))
    if "sliding_window" in kws and isinstance(window, int):
        out["sliding window"] = window
    scaling, width = getattr(module, "scaling", None), head_width(module)
    if isinstance(scaling, float) and width and not math.isclose(scaling, width**-0.5):
        out["scaling"] = round(scaling, 6)  # a scale other than head_dim^-½ (Gemma, T5, OPT)
    kv = getattr(module, "num_key_value_groups", 1)
    if isinstance(kv, int) and kv > 1:
        out["grouped-query heads"] = kv
    return out


def check_module(model, name: str, module: nn.Module, scorer: str, cls) -> list[str]:
    """Problems with attaching ``scorer`` (class ``cls``) to one attention module."""
    where = f"{type(model).__name__}.{name} ({type(module).__name__})"
    out = []
    unknown = sorted(interface_keywords(type(module)) - set(HONOURED) - IGNORED - set(POSITIONAL))
    if unknown:
        out.append(
            f"{where} passes {', '.join(unknown)} to its attention function, which ssa_repro.hf's "
            f"attention does not implement (it takes {', '.join(HONOURED)})"
        )
    feats = features(model, module)
    logits_only = [f for f in ("softcap", "sinks") if f in feats]
    if logits_only and not logit_scorer(cls):
        out.append(
            f"{where} uses {' and '.join(logits_only)} (applied to the logits), but scorer={scorer} scores "
            "q and k themselves; use a scorer of the logits (softmax, ssa, …)"
        )
    if cls.causal_only and not getattr(module, "is_causal", False):
        allowed = [n for n in SCORERS.names() if not SCORERS.get(n).causal_only]
        out.append(
            f"scorer={scorer} is causal only (its weights depend on the keys between key and query), "
            f"but {name} ({type(module).__name__}) attends both ways; use a causal model, or a scorer that "
            f"allows a bidirectional one: {', '.join(allowed)}"
        )
    width = head_width(module)
    if width is None and "n_embd" in inspect.signature(cls.__init__).parameters:
        out.append(
            f"scorer={scorer} has per-head maps of the query and needs the head width, which "
            f"{name} ({type(module).__name__}) does not declare (head_dim, attention_head_size)"
        )
    if cls.splits_head_dim and width is not None and width % 2:
        out.append(f"scorer={scorer} splits each head in two halves; {name} has odd head width {width}")
    return out


def check_kernel(model, name: str, module: nn.Module, scorer: str, cls) -> list[str]:
    """Problems with ``attn_impl="triton"`` for one attention module: what would keep every call of it
    off the fused SSA kernel (ssa_repro/hf/attention.py, ``kernel_call``)."""
    where = f"attn_impl='triton': {name} ({type(module).__name__})"
    out = []
    if cls.kernel_params is Scorer.kernel_params:
        fused = [n for n in SCORERS.names() if SCORERS.get(n).kernel_params is not Scorer.kernel_params]
        return [
            f"attn_impl='triton' runs the fused SSA kernel; scorer={scorer} is not SSA (allowed: "
            f"{', '.join(fused)}); use attn_impl='auto' or 'plain'"
        ]
    feats = features(model, module)
    blocking = [f for f in ("softcap", "sinks", "relative position bias", "sliding window") if f in feats]
    if blocking:
        out.append(
            f"{where} uses {', '.join(blocking)}, which the kernel does not compute; use attn_impl='auto'"
        )
    width = head_width(module)
    if width is not None and width > MAX_HEAD_DIM:
        out.append(f"{where} has head width {width}; the kernel takes 1..{MAX_HEAD_DIM}")
    return out


def attach(
    model: PreTrainedModel,
    scorer: str = "ssa",
    *,
    replace: bool = False,
    attn_impl: str = "auto",
    **scorer_keys,
) -> PreTrainedModel:
    """Give each attention module of ``model`` its own ``scorer`` and route attention through it.

    ``scorer`` is a registered scorer (``ssa``, ``softmax``, …) or a preset of conf/scorer (``ssa_n2``,
    ``ssa_n1.5``, ``softmax_one``, …); ``scorer_keys`` are its config keys, as for ``scorer=`` in this
    project (``b_init=1, n_init=1.5, per_head=True``). Returns ``model`` (changed in place). Raises
    :class:`AttachError`, before changing anything, for: no ``transformers`` model; scorers already
    attached (their trained values would be reset: ``replace=True`` replaces them with fresh ones); an
    unknown scorer or key; a value that is not finite or out of the scorer's range; no attention
    module using the attention interface (naming the modules that compute their own attention); an
    attention feature the attention function cannot honour (naming it); a causal-only scorer on
    bidirectional attention; an odd head width for a scorer that splits heads. The new parameters are
    float32, on each module's device (meta included: see the module docstring).

    ``attn_impl`` chooses SSA's path, as ``model.attn_impl`` in this project: ``"auto"`` (the plain
    maths, or the fused Triton kernel on CUDA where :data:`ssa_repro.models.attention.AUTO_TRITON` says
    so: off today), ``"plain"``, or ``"triton"`` (the kernel for every call it can compute; refused
    here for a scorer other than SSA, without triton, a head width above 128, or a model whose soft-cap,
    sinks, relative position bias or sliding window the kernel cannot compute; see
    :mod:`ssa_repro.hf.attention`). It is stored on each attention module (``ssa_attn_impl``), not saved.
    """
    if attn_impl not in ATTN_IMPLS:
        raise AttachError(f"attn_impl={attn_impl!r}; allowed: {', '.join(ATTN_IMPLS)}")
    if not isinstance(model, PreTrainedModel):
        raise AttachError(f"{type(model).__name__} is not a transformers PreTrainedModel")
    kind = type(model).__name__
    existing = [n for n, m in model.named_modules() if isinstance(getattr(m, SCORER_ATTR, None), nn.Module)]
    if existing and not replace:
        had = (getattr(model.config, CONFIG_KEY, None) or {}).get("label", "?")
        raise AttachError(
            f"{kind} already has scorers (scorer {had} in {existing[0]} and {len(existing) - 1} more, "
            "from an earlier attach or load_pretrained): attaching again would reset their trained "
            "values; pass replace=True to replace them with new ones"
        )
    cfg = scorer_config(scorer, scorer_keys, model)
    cls = SCORERS.get(cfg.name)
    modules = attention_modules(model)
    if not modules:
        own = {type(m) for m in model.modules() if type(m).__name__.endswith("Attention")}
        names = ", ".join(sorted(c.__name__ for c in own))
        alibi = any("alibi" in inspect.getsource(c.forward).lower() for c in own)
        own_text = f" ({names} computes its own attention{', with ALiBi' if alibi else ''})" if own else ""
        raise AttachError(
            f"{kind}: no attention module calls transformers' attention interface "
            f"(ALL_ATTENTION_FUNCTIONS){own_text}, "
            "so its attention cannot be replaced; models written for the interface (GPT-2, Llama, BERT, "
            "T5, … in transformers >= 5) can"
        )
    problems: list[str] = []
    if (
        cls.output_params
    ):  # e.g. gated attention's gate: it reads the layer input, not passed by the interface
        problems.append(
            f"scorer={scorer} acts on the attention output with the layer's input ({', '.join(cls.output_params)}), "
            "which transformers' attention interface does not pass to an attention function; it is not "
            "available in Hugging Face models"
        )
    if not model._can_set_attn_implementation():  # transformers' own test before switching
        problems.append(f"{kind} does not allow setting its attention implementation")
    for name, m in modules:
        problems += [f"{name}: {p}" for p in cls.check_config(cfg, head_count(m))]
        problems += check_module(model, name, m, scorer, cls)
        if attn_impl == "triton":
            problems += check_kernel(model, name, m, scorer, cls)
    if attn_impl == "triton" and not triton_available():
        problems.append(f"attn_impl='triton' needs triton, which is not installed: {INSTALL}")
    if problems:
        raise AttachError("; ".join(dict.fromkeys(problems)))
    for i, (_, m) in enumerate(modules):
        layer = m.layer_idx if isinstance(getattr(m, "layer_idx", None), int) else i
        device = next((p.device for p in m.parameters()), None)
        h, width = head_count(m), head_width(m)
        # the query width for scorers with per-head maps of q (asentmax); None where not declared
        n_embd = h * width if width is not None else None
        module = build_scorer(cfg, h, layer=layer, n_embd=n_embd).to(device)
        setattr(module, BUILD_ATTR, (cfg, h, layer, n_embd))
        setattr(m, SCORER_ATTR, module)
        setattr(m, IMPL_ATTR, attn_impl)
    hook_init(model)
    setattr(model.config, CONFIG_KEY, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    model.set_attn_implementation(ATTN_NAME)
    return model


def reset_scorer(scorer: nn.Module) -> None:
    """The scorer's initial values (b_init, n_init, …), written into its own tensors in place."""
    cfg, h, layer, n_embd = getattr(scorer, BUILD_ATTR)
    with torch.device("cpu"):
        fresh = build_scorer(cfg, h, layer=layer, n_embd=n_embd).state_dict()
    with torch.no_grad():
        for key, t in scorer.state_dict(keep_vars=True).items():
            t.copy_(fresh[key])


def _init_weights(original, model: PreTrainedModel, module: nn.Module) -> None:
    """transformers' ``_init_weights`` (``original``, the class's function) of ``model`` for one
    module; a scorer gets its own initial values instead."""
    if hasattr(module, BUILD_ATTR):
        reset_scorer(module)
    else:
        original(model, module)


def hook_init(model: PreTrainedModel) -> None:
    """Route ``_init_weights`` of ``model`` and of each sub-model (transformers initialises each part
    with its nearest sub-model's function) through :func:`_init_weights`, on these instances only (a
    partial of plain functions, so the model still deep-copies and pickles)."""
    for m in model.modules():
        if isinstance(m, PreTrainedModel) and not isinstance(
            m.__dict__.get("_init_weights"), functools.partial
        ):
            m._init_weights = functools.partial(_init_weights, type(m)._init_weights, m)
