"""A W&B workspace for one sweep (``ssa-wandb-dashboard``); see ssa_repro/cli/wandb_dashboard.py."""

import sys

from ssa_repro.cli.wandb_dashboard import main

if __name__ == "__main__":
    sys.exit(main())
