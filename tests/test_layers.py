"""The package imports in one direction only, without cycles and without imports hidden in functions:

    core, stats → scorers, data → models → tasks, hf → training, evaluation, tracking → reports → config, resolvers
         → entry points (cli, launch)

A module may import its own layer or a lower one; siblings of one layer (scorers and data, training and
evaluation) do not import each other: evaluation reads a run folder through ``core.rundir``, as
training writes it. Imports are read from the source (``ast``), so a
cycle hidden behind an import inside a function is found too; such imports of the package are not
allowed at all (they were the usual way to dodge a cycle). ``hydra._internal`` is never imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "ssa_repro"
LAYERS = {
    "core": 0,
    "stats": 0,  # paired tests, intervals, power: imports nothing from the package (test below)
    "scorers": 1,
    "kernels": 1,  # fused attention kernels (Triton, the kernels extra): what scorers and models call
    "data": 1,
    "models": 2,
    "tasks": 3,
    "hf": 3,  # scorers inside transformers models (the hf extra): scorers, models below it
    "training": 4,
    "evaluation": 4,
    "tracking": 4,  # W&B runs beside the training and evaluation they log: imports core alone
    "reports": 5,
    "config": 6,
    "jobs": 6,  # a training job prepared once, then trained and evaluated: training, evaluation below it
    "studies": 7,  # planning, running, resuming and publishing studies: jobs and reports below it
    "resolvers": 6,
    "cli": 8,
    "launch": 8,
}
SIBLINGS = [
    ("core", "stats"),
    ("scorers", "data"),
    ("training", "evaluation"),
]  # same layer, never importing each other


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def package(module: str) -> str:
    """``ssa_repro.training.trainer`` -> ``training`` (the package's own ``__init__``: "")."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0  # ssa_repro/__init__.py: the version only
    if parts[1] not in LAYERS:
        raise AssertionError(f"{module} belongs to no layer: add ssa_repro/{parts[1]} to LAYERS")
    return LAYERS[parts[1]]


def imports(path: Path) -> list[tuple[str, tuple[str, ...], bool, int]]:
    """(module, names imported from it, inside a function?, line) for every import in ``path``."""
    tree = ast.parse(path.read_text())
    out = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, (), in_function, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                out.append((child.module, tuple(a.name for a in child.names), in_function, child.lineno))
            visit(child, inside)

    visit(tree, False)
    return out


def targets(module: str, names: tuple[str, ...], modules) -> list[str]:
    """What an import loads from the package: ``from pkg import submodule`` counts as the submodule
    (its package is an ancestor being initialised, not a dependency)."""
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
    return subs or ([module] if module in modules else [])


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        for module, names, _, _ in imports(path):
            edges[m] |= {t for t in targets(module, names, modules) if t != m}
    return edges


def test_every_import_goes_down_or_sideways():
    upward = []
    for m, targets in graph().items():
        for t in targets:
            if layer(t) > layer(m):
                upward.append(f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})")
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize("a, b", SIBLINGS)
def test_siblings_do_not_import_each_other(a, b):
    crossing = [
        f"{m} imports {t}"
        for m, targets in graph().items()
        for t in targets
        if {package(m), package(t)} == {a, b}
    ]
    assert not crossing, "\n".join(crossing)


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def walk(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t) :] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                walk(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            walk(m)


def test_no_package_import_hides_inside_a_function():
    hidden = []
    for path in PACKAGE.rglob("*.py"):
        for module, _, in_function, line in imports(path):
            if in_function and module.startswith("ssa_repro"):
                hidden.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not hidden, "\n".join(hidden)


# The one sanctioned use of Hydra's internals: compose_cached applies value overrides with Hydra's own second
# composition step (ConfigLoaderImpl._apply_overrides_to_config), so that the project has no override step of
# its own; the lock pins hydra-core and tests/test_config.py checks the result against compose, override set
# by override set, so a change in Hydra fails there first.
HYDRA_INTERNALS_ALLOWED = {("ssa_repro/config.py", "hydra._internal.config_loader_impl")}


@pytest.mark.parametrize("folder", ["ssa_repro", "scripts", "tests"])
def test_no_hydra_internals(folder):
    found = [
        f"{p.relative_to(ROOT)}:{line} imports {module}"
        for p in (ROOT / folder).rglob("*.py")
        for module, _, _, line in imports(p)
        if module.startswith("hydra._internal")
        and (str(p.relative_to(ROOT)), module) not in HYDRA_INTERNALS_ALLOWED
    ]
    assert not found, found


def test_the_layer_map_covers_the_package():
    for path in PACKAGE.rglob("*.py"):
        layer(module_name(path))  # raises for a folder or module outside the map


def test_a_known_upward_import_is_caught(tmp_path):
    """The check itself: a scorer importing the trainer is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from ssa_repro.training.trainer import train\n\n\ndef f():\n    import ssa_repro.reports\n"
    )
    found = imports(bad)
    assert ("ssa_repro.training.trainer", ("train",), False, 1) in found and (
        "ssa_repro.reports",
        (),
        True,
        5,
    ) in found
    assert layer("ssa_repro.training.trainer") > layer("ssa_repro.scorers.ssa")
