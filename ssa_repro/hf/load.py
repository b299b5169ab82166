"""Load a model saved after :func:`ssa_repro.hf.attach.attach` back, with its trained scorer tensors.

``from_pretrained`` drops the scorer tensors as unexpected keys; :func:`load_pretrained` attaches the
saved scorer again and reads them from the safetensors beside the weights, refusing a save that holds a
layer's weights without its scorer tensors (the model would compute with initial values). A filter on
transformers' loading-report logger warns when a plain ``from_pretrained`` drops them.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

from safetensors import safe_open
from transformers import PreTrainedModel

from ssa_repro.hf.attach import CONFIG_KEY, AttachError, attach
from ssa_repro.hf.attention import SCORER_ATTR


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


LOG = logging.getLogger(__name__)
LOAD_LOGGER = logging.getLogger("transformers.modeling_utils")  # where transformers logs its LOAD REPORT


class _LoadReport(logging.Filter):
    """On transformers' loading-report logger: a report listing ``ssa_scorer`` tensors as UNEXPECTED
    means an SSA model was loaded without its scorer; it gets a warning saying so and how to restore it.
    Inside :func:`load_pretrained`, such a report is held back instead (``held``)."""

    def __init__(self):
        super().__init__()
        self.held: list[logging.LogRecord] | None = None  # a list while load_pretrained runs

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if (
            getattr(record, "ssa_repro_loaded", False)
            or "LOAD REPORT" not in text
            or f"{SCORER_ATTR}." not in text
        ):
            return True
        if self.held is not None:
            self.held.append(record)
            return False
        path = text.split(" from: ", 1)[-1].splitlines()[0].strip()
        saved = _saved_scorer(Path(path))
        warnings.warn(
            f"{path} holds a model saved after ssa_repro.hf.attach (scorer {saved or '?'}), loaded here "
            "without its scorer: the model computes the architecture's own attention and its ssa_scorer "
            f"tensors were dropped; restore it with ssa_repro.hf.load_pretrained(<model class>, {path!r})",
            UserWarning,
            stacklevel=2,
        )
        return True


def _saved_scorer(path: Path) -> str | None:
    """The scorer label saved in ``path``/config.json, or None."""
    try:
        saved = json.loads((path / "config.json").read_text()).get(CONFIG_KEY) or {}
    except (OSError, ValueError):
        return None
    return saved.get("label") or saved.get("name")


REPORT_FILTER = _LoadReport()
if not any(isinstance(f, _LoadReport) for f in LOAD_LOGGER.filters):
    LOAD_LOGGER.addFilter(REPORT_FILTER)
else:  # a re-import (importlib.reload): keep the filter already installed
    REPORT_FILTER = next(f for f in LOAD_LOGGER.filters if isinstance(f, _LoadReport))


MISSING_SCORER = ("refuse", "initial")  # load_pretrained(missing_scorer=...)


def load_pretrained(
    model_cls: type[PreTrainedModel],
    path,
    *,
    attn_impl: str = "auto",
    missing_scorer: str = "refuse",
    **kwargs,
) -> PreTrainedModel:
    """``model_cls.from_pretrained(path, **kwargs)`` for a model saved after :func:`attach`: attaches
    the scorer named in its config.json again (with ``attn_impl``, as :func:`attach`) and loads the
    scorer parameters saved beside the weights
    (``from_pretrained`` itself drops them as unexpected keys; its loading report is shown only where
    it lists more than those).

    A scorer tensor the save lacks while its layer's own weights are there (a save that lost it) is
    refused, naming the tensors: the model would compute with initial values, not the trained ones.
    ``missing_scorer="initial"`` asks for the initial values instead (with a warning). A layer the save
    lacks entirely (``n_layer`` raised in ``kwargs``) gets initial values in every tensor, as
    transformers' own weights of it do (its report lists them MISSING), with a warning."""
    if missing_scorer not in MISSING_SCORER:
        raise AttachError(
            f"missing_scorer={missing_scorer!r}: allowed: {', '.join(map(repr, MISSING_SCORER))}"
        )
    path = Path(path)
    if _saved_scorer(path) is None:
        raise AttachError(
            f"{path / 'config.json'} has no {CONFIG_KEY!r}: not saved after ssa_repro.hf.attach"
        )
    REPORT_FILTER.held = []
    try:
        model, info = model_cls.from_pretrained(path, output_loading_info=True, **kwargs)
    finally:
        held, REPORT_FILTER.held = REPORT_FILTER.held, None
    keys = dict(getattr(model.config, CONFIG_KEY))
    attach(model, scorer=keys.pop("name"), attn_impl=attn_impl, **keys)
    others = [k for k in info["unexpected_keys"] if f"{SCORER_ATTR}." not in k]
    if others or info["missing_keys"] or info["mismatched_keys"]:
        for record in held:  # the report has more to say than the scorer tensors: show it
            record.msg = (
                f"{record.getMessage()}\n(the {SCORER_ATTR} rows were loaded by ssa_repro.hf.load_pretrained)"
            )
            record.args, record.ssa_repro_loaded = (), True
            LOAD_LOGGER.handle(record)
    where = _saved_tensors(path)
    own = model.state_dict()
    state, absent, lost = {}, [], []
    for k, t in own.items():
        if f".{SCORER_ATTR}." not in k:
            continue
        match = _saved_name(k, where)
        if len(match) > 1:
            raise AttachError(f"{path}: scorer tensor {k} found {len(match)} times among the saved tensors")
        if match:
            with safe_open(where[match[0]], "pt", device=str(t.device)) as f:
                state[k] = f.get_tensor(match[0])
            continue
        layer = k.split(f".{SCORER_ATTR}.")[0] + "."  # the attention module the scorer sits in
        saved_layer = any(
            _saved_name(w, where) for w in own if w.startswith(layer) and f".{SCORER_ATTR}." not in w
        )
        (lost if saved_layer else absent).append(k)
    if lost and missing_scorer == "refuse":
        raise AttachError(
            f"{path}: the save holds the weights of these layers but not their trained scorer tensors "
            f"{', '.join(lost)} (saved after attach, then edited or copied in part?); loading would "
            "compute with their initial values, not the saved ones. Load the complete save, or pass "
            "missing_scorer='initial' to ssa_repro.hf.load_pretrained to start them from b_init, n_init, …"
        )
    if absent or lost:
        LOG.warning(
            "%s: no saved values for %s; they keep their initial values%s",
            path,
            ", ".join(absent + lost),
            " (missing_scorer='initial')" if lost else " (layers the save lacks entirely)",
        )
    model.load_state_dict(state, strict=False)
    return model


def _saved_name(name: str, where: dict[str, str]) -> list[str]:
    """The saved tensors that are ``name``: the same name, or the name under another head class's
    prefix (e.g. ``transformer.h.0…`` saved by GPT2LMHeadModel, ``h.0…`` in GPT2Model)."""
    return [s for s in where if s == name or s.endswith("." + name) or name.endswith("." + s)]
