"""A W&B workspace for one sweep (``ssa-wandb-dashboard``); see ssa_repro/cli/wandb_dashboard.py."""

import sys

from ssa_repro.cli.commands import wandb_dashboard

if __name__ == "__main__":
    sys.exit(wandb_dashboard())
