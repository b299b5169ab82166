"""Components that find themselves: the scorer, task and evaluator registries are filled by importing
every module of their package (no hand-kept import list), no optional dependency is imported at a
module's top, and the names the docs list agree with the registries and ``conf/`` in both directions."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import subprocess
import sys

import pytest
import yaml

from ssa_repro.cli import arguments, docs_tables
from ssa_repro.evaluation import EVALUATORS
from ssa_repro.evaluation.presets import PRESETS
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import TASKS
from tests.conftest import ROOT
from tests.test_layers import PACKAGE, imports

GROUPS = {"scorer": SCORERS, "task": TASKS, "eval": EVALUATORS}  # conf group -> registry
PACKAGES = {"scorer": "scorers", "task": "tasks", "eval": "evaluation"}
DOCS = ROOT / "docs"


def options(group: str) -> dict[str, str]:
    """``conf/<group>/*.yaml`` option -> the registered name whose schema it extends
    (``defaults: [/schema/<group>/<name>@...]``)."""
    out = {}
    for path in sorted((ROOT / "conf" / group).glob("*.yaml")):
        defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
        schemas = [m.group(1) for d in defaults if (m := re.fullmatch(rf"/schema/{group}/(\w+)@\w+", str(d)))]
        assert len(schemas) == 1, f"{path}: expected one /schema/{group}/<name> default, found {schemas}"
        out[path.stem] = schemas[0]
    return out


def ticked(text: str) -> list[str]:
    return re.findall(r"`([\w.]+)`", text)


def cell(path, row_start: str, column: int) -> str:
    """Column ``column`` of the table row of ``path`` that starts with ``row_start``."""
    rows = [line for line in path.read_text().splitlines() if line.startswith(row_start)]
    assert len(rows) == 1, f"{path}: {len(rows)} rows start with {row_start!r}"
    return rows[0].split(" | ")[column]


def table(path, header: str) -> list[list[str]]:
    """The rows (cells) of the table of ``path`` whose header line starts with ``header``."""
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    assert len(starts) == 1, f"{path}: {len(starts)} tables with header {header!r}"
    rows = []
    for line in lines[starts[0] + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_registered_name_has_an_option_and_every_option_a_registered_name(group):
    registry = GROUPS[group]
    # (the package's own components: tests/test_toy_*.py register theirs in the same process)
    registered = {
        n for n in registry.names() if not registry.get(n).__module__.startswith(("tests", "test_"))
    }
    extended = set(options(group).values())
    assert registered - extended == set(), f"registered without a conf/{group}/*.yaml option"
    # eval=default and eval=quick are presets (evaluation/presets.py): options, not registered evaluators
    presets = set(PRESETS) if group == "eval" else set()
    assert extended - registered == presets, f"conf/{group}/*.yaml extends a schema nobody registers"
    assert not presets & set(registry.names()), "a preset is registered as an evaluator"


def test_every_eval_option_is_an_evaluator_or_a_preset():
    """``EVALUATORS.schemas`` (what the ``eval`` config group offers) is the evaluators' and the presets'."""
    assert set(EVALUATORS.schemas) == set(EVALUATORS.names()) | set(PRESETS)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_component_module_is_imported_by_its_package(group):
    """The registry holds what each component module registers: the scan imported every one of them."""
    package = PACKAGE / PACKAGES[group]
    registry = {"scorer": "SCORERS", "task": "TASKS", "eval": "EVALUATORS"}[group]
    registering = {p.stem for p in package.glob("[!_]*.py") if f"@{registry}.register(" in p.read_text()}
    loaded = {m for m in sys.modules if m.startswith(f"ssa_repro.{PACKAGES[group]}.")}
    assert registering and {f"ssa_repro.{PACKAGES[group]}.{m}" for m in registering} <= loaded
    init = (package / "__init__.py").read_text()
    assert not re.search(rf"from ssa_repro\.{PACKAGES[group]} import \(", init)  # no hand-kept list


def _dist(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group()).lower()


def test_no_optional_dependency_is_imported_at_a_module_top():
    """A module's top imports only required dependencies (the extras' are imported where used), so
    importing a package that imports all its modules never needs an extra."""
    requires = importlib.metadata.requires("ssa_repro")  # the installed pyproject's, extras marked
    required = {_dist(r) for r in requires if "extra ==" not in r}
    optional = {_dist(r) for r in requires if "extra ==" in r} - required
    dists = importlib.metadata.packages_distributions()
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module} (extra {', '.join(dists[module.split('.')[0]])})"
        for folder in PACKAGES.values()
        for path in (PACKAGE / folder).glob("*.py")
        for module, _, in_function, line in imports(path)
        if not in_function and {_dist(d) for d in dists.get(module.split(".")[0], [])} & optional
    ]
    assert "lm-eval" in optional and "scikit-learn" in optional  # the check sees the extras
    assert not found, "\n".join(found)


@pytest.mark.slow
def test_importing_the_packages_imports_no_extra_and_every_component():
    """In a fresh interpreter (this process has imported modules directly): importing the three packages
    loads every component module (the scan) and no extra's dependency."""
    code = (
        "import sys, json, ssa_repro.scorers, ssa_repro.tasks, ssa_repro.evaluation; "
        "print(json.dumps([sorted({'lm_eval', 'sklearn', 'transformers', 'triton', 'gensim'} & set(sys.modules)), "
        "sorted(m for m in sys.modules if m.startswith('ssa_repro.'))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    extras, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert extras == []
    for group, folder in PACKAGES.items():
        registry = {"scorer": "SCORERS", "task": "TASKS", "eval": "EVALUATORS"}[group]
        registering = {
            p.stem for p in (PACKAGE / folder).glob("[!_]*.py") if f"@{registry}.register(" in p.read_text()
        }
        assert registering and {f"ssa_repro.{folder}.{m}" for m in registering} <= set(loaded), group


# ------------------------------------------------------------------ the docs' lists
def test_configuration_md_lists_every_task_option():
    """(Scorers and evaluations are listed once, in the tables of scorers.md and evaluations.md.)"""
    path = DOCS / "configuration.md"
    listed = ticked(cell(path, "| `task` |", 1))
    assert sorted(listed) == sorted(options("task")), f"{path} `task` row vs conf/task/*.yaml"
    assert len(listed) == len(set(listed)), f"{path} `task` row names an option twice"


def test_scorers_md_table_gives_every_option_and_its_registered_name():
    rows = table(DOCS / "scorers.md", "| option | `name` |")
    listed = {ticked(r[0])[0]: ticked(r[1])[0] for r in rows}
    assert len(listed) == len(rows)
    assert listed == options("scorer")


def test_docs_tables_are_what_the_registries_give():
    """``python scripts/docs_tables.py --check``: every generated table is current (CI runs this test)."""
    assert docs_tables.main(["--check"]) == 0
    assert set(docs_tables.TABLES) == set(arguments.DOCS_TABLES)


def test_a_stale_docs_table_is_found(tmp_path, monkeypatch):
    """The check itself: a page whose generated block lost a row, or has none, is refused."""
    page = tmp_path / "s.md"
    table = "| option |\n|---|\n| `a` |"
    monkeypatch.setattr(docs_tables, "TABLES", {"scorers": (page, lambda: table)})
    page.write_text(f"x\n<!-- generated: scorers -->\n{table}\n{docs_tables.END}\ny\n")
    assert docs_tables.stale() == []
    page.write_text(f"x\n<!-- generated: scorers -->\n| option |\n|---|\n{docs_tables.END}\n")
    assert docs_tables.stale() == [f"scorers: {page}"]
    assert docs_tables.main([]) == 0 and docs_tables.stale() == []  # rewritten
    page.write_text("no block\n")
    with pytest.raises(ValueError, match="no '<!-- generated: scorers -->'"):
        docs_tables.stale()


def test_evaluations_md_table_names_every_eval_option():
    rows = table(DOCS / "evaluations.md", "| name | what | for |")
    assert sorted(ticked(r[0])[0] for r in rows) == sorted(options("eval"))


def test_a_missing_or_extra_name_is_caught(tmp_path):
    """The checks themselves: a row that drops an option or adds an unknown one differs."""
    path = tmp_path / "c.md"
    names = sorted(options("scorer"))
    path.write_text("| `scorer` | " + ", ".join(f"`{n}`" for n in names[1:] + ["nope"]) + " | keys |\n")
    listed = ticked(cell(path, "| `scorer` |", 1))
    assert set(names) - set(listed) == {names[0]} and set(listed) - set(names) == {"nope"}
