"""The words of a refused config value: the key, the value, why, and what is allowed.

OmegaConf's own message ("Value 'abc' of type 'str' could not be converted to Float") names neither
the key nor what would do; its first line alone loses the key (it is on a later line, ``full_key``).
:func:`value_refusal` says all of it in one line, from the error and the schema node it was raised on,
for every place that merges user values over a schema (``ssa_repro.hf.attach``, the evaluation's
``eval.*``, a run folder's config.yaml).
"""

from __future__ import annotations

import enum

from omegaconf import ListConfig
from omegaconf.errors import OmegaConfBaseException
from omegaconf.nodes import BooleanNode, BytesNode, EnumNode, FloatNode, IntegerNode, PathNode, StringNode

_KINDS = {
    FloatNode: "a number",
    IntegerNode: "a whole number",
    BooleanNode: "true or false",
    StringNode: "text",
    BytesNode: "bytes",
    PathNode: "a path",
}
_TYPES = {float: "a number", int: "a whole number", bool: "true or false", str: "text"}


def allowed(node, element_type=None) -> str | None:
    """What a schema node (or a list's ``element_type``) accepts, in words; None when unknown."""
    if isinstance(node, EnumNode):
        return "one of " + ", ".join(m.name for m in node.enum_type)
    for kind, words in _KINDS.items():
        if isinstance(node, kind):
            return words
    if isinstance(node, ListConfig):
        inner = allowed(None, node._metadata.element_type)
        return f"a list{f', each item {inner}' if inner else ''}"
    if isinstance(element_type, type) and issubclass(element_type, enum.Enum):
        return "one of " + ", ".join(m.name for m in element_type)
    return _TYPES.get(element_type)


def value_refusal(e: OmegaConfBaseException, prefix: str = "") -> str:
    """``<prefix><key>=<value>: <OmegaConf's reason>; allowed: <what the node accepts>`` for an error
    raised while merging or assigning a value over a schema (``prefix``: where the node sits, e.g.
    ``scorer.``)."""
    key = f"{prefix}{e.full_key}" if e.full_key else prefix.rstrip(".") or "?"
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    value = getattr(e, "value", None)
    parent = getattr(e, "parent_node", None)
    words = allowed(getattr(e, "child_node", None))
    if words is None and isinstance(parent, ListConfig):  # an element of a typed list
        words = allowed(None, parent._metadata.element_type)
    said = f"{key}={value!r}: " if value is not None else f"{key}: "
    return said + reason + (f"; allowed: {words}" if words else "")
