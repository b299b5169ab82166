"""Evaluate a trained run: ``python evaluate.py run_dir=outputs/... [eval=...]`` (see README.md)."""

import sys

import hydra
from omegaconf import DictConfig

from ssa_repro.cli import evaluate_app
from ssa_repro.cli.keys import explain_argv
from ssa_repro.config import CONF_DIR


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    evaluate_app.main(cfg)


if __name__ == "__main__":
    if not any(a.split("=", 1)[0].lstrip("+") == "run_dir" for a in sys.argv[1:] if "=" in a) and not any(
        a in ("--help", "-h", "--hydra-help") or a.startswith(("--cfg", "-c", "--info")) for a in sys.argv[1:]
    ):
        sys.exit("Error: give the run to evaluate: python evaluate.py run_dir=<run folder> [eval=<name>]")
    message = explain_argv(CONF_DIR, "evaluate", sys.argv[1:])  # an unknown key, said with the valid ones
    if message:
        sys.exit(f"Error: {message}")
    main()
