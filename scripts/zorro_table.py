"""The paper's table 3 from Zorro results (``ssa-zorro-table``); see ssa_repro/cli/zorro_table.py."""

import sys

from ssa_repro.cli.commands import zorro_table

if __name__ == "__main__":
    sys.exit(zorro_table())
