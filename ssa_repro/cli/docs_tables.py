"""The docs' component tables, generated from the registries: ``python scripts/docs_tables.py [--check]``.

Each table stands in its page between a ``<!-- generated: NAME -->`` line and ``<!-- end generated -->``;
the command rewrites what stands between them (atomically), or with ``--check`` exits 1 naming every
page whose table differs from the registries (tests/test_registries.py runs the check, so CI does).

- ``scorers`` (docs/scorers.md): one row per YAML option of ``conf/scorer/``, built as training builds it
  (``config.load_scorer``, 8 heads): the registered class, the option's keys and defaults as composed
  (interpolations unresolved), its trainable parameters (as ``named_parameters`` names them), the class flags and whether it has a
  FlexAttention ``score_mod`` (and whether that holds under the causal mask only).
"""

from __future__ import annotations

import re
from enum import Enum

from omegaconf import OmegaConf

from ssa_repro.cli import arguments
from ssa_repro.config import CONF_DIR, compose_cached, load_scorer, scorer_options
from ssa_repro.core.atomic import write_text

DOCS = CONF_DIR.parent / "docs"
END = "<!-- end generated -->"
SCORER_HEADER = (
    "| option | `name` | keys (defaults) | learnable | signed | causal only | rows sum to 1 | score_mod |\n"
    "|---|---|---|---|---|---|---|---|"
)


def _value(v) -> str:
    """A default as the docs write it: interpolations in backticks, booleans in YAML's spelling, an enum
    by its option, a float to 4 significant digits where its repr is longer."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, Enum):
        return v.name
    if isinstance(v, float) and len(repr(v)) > 8:
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, str) and "${" in v:
        return f"`{v}`"
    return str(v)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def scorer_row(option: str) -> str:
    """The table row of ``conf/scorer/<option>.yaml``."""
    node = OmegaConf.to_container(compose_cached([f"scorer={option}"]).scorer, resolve=False)
    keys = [f"`{k}`={_value(v)}" for k, v in node.items() if k not in ("name", "label")]
    scorer = load_scorer(option)
    learnable = [n for n, p in scorer.named_parameters() if p.requires_grad]
    mod = scorer.score_mod()
    fused = "no" if mod is None else ("yes, causal only" if getattr(mod, "causal_only", False) else "yes")
    cells = [
        f"`{option}`",
        f"`{node['name']}`",
        ", ".join(keys) or "—",
        ", ".join(learnable) or "—",
        _yes(scorer.signed),
        _yes(scorer.causal_only),
        _yes(scorer.rows_sum_to_one),
        fused,
    ]
    return "| " + " | ".join(cells) + " |"


def scorers_table() -> str:
    return "\n".join([SCORER_HEADER, *(scorer_row(o) for o in scorer_options())])


TABLES = {"scorers": (DOCS / "scorers.md", scorers_table)}


def rendered(text: str, name: str, table: str) -> str:
    """``text`` with the block after ``<!-- generated: name -->`` replaced by ``table``."""
    begin = f"<!-- generated: {name} -->"
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"no '{begin}' ... '{END}' block")
    return pattern.sub(lambda _: f"{begin}\n{table}\n{END}", text, count=1)


def stale(names: list[str] | None = None) -> list[str]:
    """The tables (``name: page``) whose page differs from what the registries give."""
    out = []
    for name in names or list(TABLES):
        page, make = TABLES[name]
        text = page.read_text()
        if rendered(text, name, make()) != text:
            out.append(f"{name}: {page}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = arguments.docs_tables()
    a = parser.parse_args(argv)
    names = a.tables or list(TABLES)
    if set(names) - set(TABLES):
        parser.error(f"no table {sorted(set(names) - set(TABLES))}; the tables: {', '.join(TABLES)}")
    if a.check:
        found = stale(names)
        for line in found:
            print(f"stale: {line} (python scripts/docs_tables.py rewrites it)")
        return 1 if found else 0
    for name in names:
        page, make = TABLES[name]
        write_text(page, rendered(page.read_text(), name, make()))
        print(f"wrote {name}: {page}")
    return 0
