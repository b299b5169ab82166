"""The study reports, one module per kind (``icl``: the in-context-learning report, which length_cpu,
relpos_cpu and mechanism_cpu use too; ``early``: the early-learning report), registered by name in
:data:`REPORTS` (``registry.py``) when imported.

Every public module of this package is imported below (``pkgutil``), so a study's ``report`` key is
checked against the kinds found by that scan (:func:`get`): a new kind is one module here.
"""

import importlib
import pkgutil

from ssa_repro.reports.kinds.registry import DEFAULT, REPORTS, ReportKind


def get(name: str | None) -> ReportKind:
    """The report kind ``name`` (None: :data:`DEFAULT`); an unknown name is an error listing the
    registered kinds."""
    return REPORTS.get(DEFAULT if name is None else str(name))


for _module in pkgutil.iter_modules(__path__):  # fill the registry (sorted by name)
    if not _module.name.startswith("_") and _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["DEFAULT", "REPORTS", "ReportKind", "get"]
