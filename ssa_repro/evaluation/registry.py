"""Evaluations by name (``eval=...``): each registers a class with its config schema.

An evaluation class has two static methods:
  ``check(run_cfg, cfg) -> list[str]``: problems, found from the run's config alone, before any work
  ``run(run: LoadedRun, cfg, out_dir) -> (tables, summary)``: ``tables`` maps a file stem to a long-form
      DataFrame (``results`` is the main one); ``summary`` is JSON-able and lists the figures written
      into ``out_dir`` under "figures".
The runner (runner.py) handles folders, caching and W&B.
"""

from dataclasses import dataclass

from ssa_repro.core.registry import Registry

EVALUATORS: Registry = Registry("evaluation")


@dataclass
class EvalConfig:
    name: str = "default"
    force: bool = False  # recompute even when cached results for the same config and checkpoint exist
