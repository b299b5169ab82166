"""Train one model: ``python train.py task=linear scorer=ssa`` (see README.md and conf/train.yaml); the
same as the ``ssa-train`` command (ssa_repro/cli/train_app.py: ``cli``)."""

from ssa_repro.cli.train_app import cli

if __name__ == "__main__":
    cli()
