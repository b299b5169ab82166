"""The docs' component tables from the registries (``--check``: exit 1 if stale); see ssa_repro/cli/docs_tables.py."""

import sys

from ssa_repro.cli.docs_tables import main

if __name__ == "__main__":
    sys.exit(main())
