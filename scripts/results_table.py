"""Regenerate README's "Results at a glance" block and its forest plot from the published
docs/results/<study>_primary.csv (ssa_repro/reports/endpoints.py): ``python scripts/results_table.py``
(``--check``: exit 1 where README's block is not what the CSVs give, writing nothing)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "docs" / "results"
README = ROOT / "README.md"
FIGURE = "docs/results/primary_forest.png"
# the studies in the README's order: the ICL claims, their scale and length, the mechanism, early learning
STUDIES = ("icl_cpu", "icl_scale", "length_cpu", "relpos_cpu", "mechanism_cpu", "early_cpu")


def block() -> str:
    """The README's block as the published CSVs give it."""
    from ssa_repro.reports import endpoints  # after the arguments: --help loads no heavy library

    return endpoints.readme_block(endpoints.read_all(RESULTS, STUDIES), FIGURE)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--check", action="store_true", help="only check that README holds the generated block")
    args = p.parse_args(argv)
    from ssa_repro.core.atomic import write_text  # after the arguments: --help loads no heavy library
    from ssa_repro.reports import endpoints

    text = README.read_text()
    new = endpoints.replace_block(text, block())
    if args.check:
        if new != text:
            print("README.md's results block is stale: python scripts/results_table.py", file=sys.stderr)
            return 1
        return 0
    write_text(README, new)
    endpoints.forest(endpoints.read_all(RESULTS, STUDIES), ROOT / FIGURE)
    print(f"README.md and {FIGURE} regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
