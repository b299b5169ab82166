"""The registry of report kinds: a study's ``report`` key (``icl``, the default, or ``early``) names one.

A kind is what a study's report is made of: how its per-seed values are written from the run folders
(``write``), how the report is rendered from those CSVs alone (``render``, ``--from-csv``) and how the
CSVs are read back (``read_back``, a continued study's published rows). Every kind shares the one
pipeline below it: its inputs (``reports/inputs.py``), its decisions (``reports/decide.py``) and its
markdown (``reports/markdown.py``, ``reports/primary_markdown.py``); a kind adds its own claims'
context, tables and sections. A kind module of ``reports/kinds/`` registers itself when imported
(``REPORTS.register(name)(ReportKind(...))``), and ``reports/kinds/__init__.py`` imports every module of
its folder: a new kind needs no line elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ssa_repro.core.registry import Registry


@dataclass(frozen=True)
class ReportKind:
    """One report kind: ``write(root, out_dir, name, command, setup, prior) -> Path``,
    ``render(paths, inputs, out_dir, name, command, setup) -> Path`` and ``read_back(paths) -> frame``
    (its per-seed CSVs as one frame)."""

    write: Callable
    render: Callable
    read_back: Callable


REPORTS: Registry[ReportKind] = Registry("report")
DEFAULT = "icl"  # a study without a ``report`` key
