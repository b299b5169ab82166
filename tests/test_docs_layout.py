"""docs/development.md's layout block is checked against the package: it names every package and
top-level module of ``ssa_repro/``, and every file it names under a package is there."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PACKAGE = ROOT / "ssa_repro"


def layout(text: str) -> dict[str, str]:
    """The block under "## Layout": entry (``core/``, ``config.py``) -> its text, continuation lines
    included."""
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        if line[:1].strip():
            name, _, rest = line.partition(" ")
            entries[name] = rest
        elif name is not None:
            entries[name] += " " + line.strip()
    return entries


def problems(entries: dict[str, str]) -> list[str]:
    packages = {p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    named = set(entries) | {m for text in entries.values() for m in re.findall(r"\b(\w+\.py)\b", text)}
    found = [f"not in the layout: {n}" for n in sorted((packages | modules) - named)]
    found += [
        f"no such package: {n}" for n in sorted(e for e in entries if e.endswith("/") and e not in packages)
    ]
    for entry, text in entries.items():
        if entry.endswith("/"):
            for f in re.findall(r"\b(\w+\.py)\b", text):
                if not (PACKAGE / entry / f).is_file():
                    found.append(f"{entry}{f} does not exist")
    return found


def test_development_md_layout_is_the_package():
    assert problems(layout((ROOT / "docs" / "development.md").read_text())) == []


def test_a_missing_package_or_a_gone_file_is_caught():
    entries = layout((ROOT / "docs" / "development.md").read_text())
    entries.pop("jobs/")
    entries["training/"] += " curriculum.py"
    assert problems(entries) == ["not in the layout: jobs/", "training/curriculum.py does not exist"]
