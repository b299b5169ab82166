"""The console entry points in pyproject.toml's ``[project.scripts]``: each names an importable callable
inside the package, and each script in ``scripts/`` that has one is a thin wrapper around the same
callable (so ``python scripts/X.py`` and the installed command run the same code).

Read from pyproject.toml with tomllib rather than from the installed metadata (that is the one from the
last ``pip install -e .``; the file is what the next install will use), and resolved with
``importlib.metadata.EntryPoint.load``, the way the installed command resolves it.
"""

from __future__ import annotations

import ast
from importlib.metadata import EntryPoint

import pytest

from ssa_repro.cli import commands
from tests.conftest import ROOT

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
# the thin wrapper in scripts/ for each command
WRAPPERS = {
    "ssa-compare": "compare.py",
    "ssa-study": "study.py",
    "ssa-zorro-table": "zorro_table.py",
    "ssa-lm-table": "lm_table.py",
    "ssa-get-data": "get_data.py",
    "ssa-stats-table": "stats_table.py",
    "ssa-wandb-dashboard": "wandb_dashboard.py",
    "ssa-train": "../train.py",  # the Hydra entries (their work: the apps' cli())
    "ssa-evaluate": "../evaluate.py",
}


def test_every_user_script_has_a_command():
    assert set(SCRIPTS) == set(WRAPPERS)


@pytest.mark.parametrize("command", sorted(WRAPPERS))
def test_entry_point_resolves_to_a_callable_in_the_package(command):
    entry = EntryPoint(command, SCRIPTS[command], "console_scripts")
    assert entry.module.startswith("ssa_repro.") and callable(entry.load()), entry


def test_the_work_of_every_command_resolves():
    """cli/commands.py names the module and function that do each command's work (imported after the
    arguments are read): every name resolves to a callable, in the package's top layers."""
    targets = [target for _, target in commands.WORK.values()] + list(commands.HYDRA_WORK.values())
    for target in targets:
        assert target.startswith(("ssa_repro.cli.", "ssa_repro.reports.")), target
        assert callable(commands.load(target)), target
    assert set(commands.WORK) == {
        c for c, t in SCRIPTS.items() if t.startswith("ssa_repro.cli.commands:")
    } - {
        "ssa-train",
        "ssa-evaluate",
    }


@pytest.mark.parametrize("command", sorted(WRAPPERS))
def test_script_is_a_thin_wrapper_around_the_entry_point(command):
    tree = ast.parse((ROOT / "scripts" / WRAPPERS[command]).read_text())
    imports = [
        f"{node.module}:{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module.startswith("ssa_repro")
        for alias in node.names
    ]
    assert imports == [SCRIPTS[command]]
    assert not any(isinstance(node, ast.FunctionDef | ast.ClassDef) for node in tree.body)
