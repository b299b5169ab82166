"""The console commands (``[project.scripts]`` in pyproject.toml) and ``train.py``/``evaluate.py``.

Each command reads its arguments first (:mod:`ssa_repro.cli.arguments`: argparse only), so ``--help``
and a wrong argument answer at once; only then is the module that does the work imported, by name
(:data:`WORK`), with torch, pandas and seaborn behind it. This module therefore imports no other part of
the package at its top but the parsers: the one place where the layer rule's "no package import inside
a function" is met by naming modules instead (tests/test_layers.py checks that every name here resolves
and that ``--help`` of each command loads no torch: tests/test_cli_feel.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from ssa_repro.cli import arguments

# command -> (its parser, the function that does its work on the parsed arguments: "module:function")
WORK: dict[str, tuple[Callable, str]] = {
    "ssa-compare": (arguments.compare, "ssa_repro.reports.compare:run"),
    "ssa-study": (arguments.study, "ssa_repro.cli.run_study:run"),
    "ssa-stats-table": (arguments.stats_table, "ssa_repro.cli.stats_table:run"),
    "ssa-zorro-table": (arguments.zorro_table, "ssa_repro.cli.zorro_table:run"),
    "ssa-lm-table": (arguments.lm_table, "ssa_repro.cli.lm_table:run"),
    "ssa-wandb-dashboard": (arguments.wandb_dashboard, "ssa_repro.cli.wandb_dashboard:run"),
}
HYDRA_WORK = {"train": "ssa_repro.cli.train_app:cli", "evaluate": "ssa_repro.cli.evaluate_app:cli"}


def load(target: str) -> Callable:
    """``"module:function"`` -> the function (the module imported now, not at this module's top)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def run(command: str, argv: list[str] | None = None) -> int:
    """Parse ``argv`` with the command's parser (``--help`` and usage errors exit here), then do its work."""
    parser, target = WORK[command]
    args = parser().parse_args(argv)
    if command == "ssa-study":  # its report records the command line that made it
        args.argv = list(sys.argv[1:] if argv is None else argv)
    return load(target)(args)


def _hydra(primary: str, argv: list[str] | None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if arguments.asks_help(argv):
        print(arguments.hydra_help(primary))
        sys.exit(0)
    load(HYDRA_WORK[primary])(argv)


def train(argv: list[str] | None = None) -> None:
    """``ssa-train`` and ``python train.py``: train one model (ssa_repro/cli/train_app.py)."""
    _hydra("train", argv)


def evaluate(argv: list[str] | None = None) -> None:
    """``ssa-evaluate`` and ``python evaluate.py``: evaluate one run (ssa_repro/cli/evaluate_app.py)."""
    _hydra("evaluate", argv)


def compare(argv: list[str] | None = None) -> int:
    return run("ssa-compare", argv)


def study(argv: list[str] | None = None) -> int:
    return run("ssa-study", argv)


def stats_table(argv: list[str] | None = None) -> int:
    return run("ssa-stats-table", argv)


def zorro_table(argv: list[str] | None = None) -> int:
    return run("ssa-zorro-table", argv)


def lm_table(argv: list[str] | None = None) -> int:
    return run("ssa-lm-table", argv)


def wandb_dashboard(argv: list[str] | None = None) -> int:
    return run("ssa-wandb-dashboard", argv)
