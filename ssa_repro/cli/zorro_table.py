"""The paper's table 3 from Zorro results: ``python scripts/zorro_table.py SWEEP_OR_RUN_DIR ... [--out DIR]``.

Reads the stored ``eval=zorro`` results of every task=mlm run under each folder (``python evaluate.py
run_dir=... eval=zorro`` stores them), aggregates seeds per scorer (mean, sd, count) and writes ``zorro_table.csv``, ``zorro_table.md``
and ``zorro_table.png``/``.pdf`` (grouped bars, the paper's 12 probes highlighted) into ``--out``
(default: the first folder given when it is a sweep, else ``zorro_table/`` beside that run). See
``ssa_repro/reports/zorro_table.py``.
"""

import argparse
import sys

from ssa_repro.evaluation.zorro import METHODS
from ssa_repro.reports.zorro_table import main as table_main


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("paths", nargs="+", help="run folders or sweep folders (searched recursively)")
    p.add_argument("--method", default="pll", choices=METHODS, help="Zorro score (default: pll)")
    p.add_argument("--out", default=None, help="output folder (default: the first path, if a sweep)")
    a = p.parse_args(argv)
    return table_main(a.paths, a.out, a.method)


if __name__ == "__main__":
    sys.exit(main())
