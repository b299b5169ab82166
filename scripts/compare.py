"""Compare runs or a sweep: ``python scripts/compare.py RUN_DIR RUN_DIR ...`` or ``python scripts/compare.py SWEEP_DIR``.

Side-by-side heat maps on one colour scale, a difference map against a baseline (softmax by default)
and a summary table; see ``ssa_repro/reports/compare.py`` for the definitions and ``--help`` for
the options.
"""

import sys

from ssa_repro.cli.commands import compare

if __name__ == "__main__":
    sys.exit(compare())
