"""Evaluate a trained run: ``python evaluate.py run_dir=outputs/... [eval=...]`` (see README.md); the
same as the ``ssa-evaluate`` command (ssa_repro/cli/evaluate_app.py: ``cli``)."""

from ssa_repro.cli.evaluate_app import cli

if __name__ == "__main__":
    cli()
