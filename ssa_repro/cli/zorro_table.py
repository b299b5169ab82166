"""The paper's table 3 from Zorro results: ``python scripts/zorro_table.py SWEEP_OR_RUN_DIR ... [--out DIR]``.

Reads the stored ``eval=zorro`` results of every task=mlm run under each folder (``python evaluate.py
run_dir=... eval=zorro`` stores them), aggregates seeds per scorer (mean, sd, count) and writes ``zorro_table.csv``, ``zorro_table.md``
and ``zorro_table.png``/``.pdf`` (grouped bars, the paper's 12 probes highlighted) into ``--out``
(default: the first folder given when it is a sweep, else ``zorro_table/`` beside that run). See
``ssa_repro/reports/zorro_table.py``.
"""

import argparse

from ssa_repro.reports.zorro_table import main as table_main


def run(a: argparse.Namespace) -> int:
    """``ssa-zorro-table``'s work on its parsed arguments (ssa_repro/cli/arguments.py ``zorro_table``)."""
    return table_main(a.paths, a.out, a.method)
