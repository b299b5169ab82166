"""Evaluate a trained run: ``python evaluate.py run_dir=outputs/... [eval=...]`` (see README.md); the
same as the ``ssa-evaluate`` command (ssa_repro/cli/commands.py: ``evaluate``; the work: cli/evaluate_app.py)."""

from ssa_repro.cli.commands import evaluate

if __name__ == "__main__":
    evaluate()
