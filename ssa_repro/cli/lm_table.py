"""The paper's table 2 from LM results: ``python scripts/lm_table.py RUN_OR_SWEEP_DIR ... [--out DIR]``.

Reads the stored ``eval=lm`` results of every task=lm run under each folder (``python evaluate.py
run_dir=... eval=lm`` stores them) and writes ``lm_table.csv`` and ``lm_table.md`` into ``--out``
(default: the first folder given): perplexities, then each task's accuracy ± standard error, one
column per run (labelled by scorer) and number of shots. See ``ssa_repro/reports/lm_table.py``.
"""

import argparse

from ssa_repro.reports.lm_table import main as table_main


def run(a: argparse.Namespace) -> int:
    """``ssa-lm-table``'s work on its parsed arguments (ssa_repro/cli/arguments.py ``lm_table``)."""
    return table_main(a.paths, a.out)
