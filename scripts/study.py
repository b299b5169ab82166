"""Run a study and write its report (``ssa-study``): ``python scripts/study.py icl_cpu``; see ssa_repro/cli/run_study.py."""

import sys

from ssa_repro.cli.commands import study

if __name__ == "__main__":
    sys.exit(study())
