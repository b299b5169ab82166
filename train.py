"""Train one model: ``python train.py task=linear scorer=ssa`` (see README.md and conf/train.yaml); the
same as the ``ssa-train`` command (ssa_repro/cli/commands.py: ``train``; the work: cli/train_app.py)."""

from ssa_repro.cli.commands import train

if __name__ == "__main__":
    train()
