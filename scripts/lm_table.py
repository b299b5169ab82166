"""The paper's table 2 from LM results (``ssa-lm-table``); see ssa_repro/cli/lm_table.py."""

import sys

from ssa_repro.cli.commands import lm_table

if __name__ == "__main__":
    sys.exit(lm_table())
