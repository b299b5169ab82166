"""The statistics tables of docs/statistics.md (``ssa-stats-table``); see ssa_repro/cli/stats_table.py."""

import sys

from ssa_repro.cli.stats_table import main

if __name__ == "__main__":
    sys.exit(main())
