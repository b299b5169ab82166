"""The statistics tables of docs/statistics.md (``ssa-stats-table``); see ssa_repro/cli/stats_table.py."""

import sys

from ssa_repro.cli.commands import stats_table

if __name__ == "__main__":
    sys.exit(stats_table())
