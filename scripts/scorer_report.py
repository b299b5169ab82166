"""The scorer report: saturation, base functions and cost of every scorer option, against
docs/scorers.md (``--help``); see ssa_repro/cli/scorer_report.py."""

import sys

from ssa_repro.cli import arguments

arguments.scorer_report().parse_args()  # --help and usage errors answer here, before the imports below load torch

from ssa_repro.cli.scorer_report import main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1:])
