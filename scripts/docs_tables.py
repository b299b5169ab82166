"""The docs' component tables from the registries (``--check``: exit 1 if stale); see ssa_repro/cli/docs_tables.py."""

import sys

from ssa_repro.cli import arguments

arguments.docs_tables().parse_args()  # --help and usage errors answer here, before the imports below load torch

from ssa_repro.cli.docs_tables import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
