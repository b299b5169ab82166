"""Train one model: ``python train.py task=linear scorer=ssa`` (see README.md and conf/train.yaml)."""

import sys

import hydra
from omegaconf import DictConfig

from ssa_repro.cli import train_app
from ssa_repro.cli.keys import explain_argv
from ssa_repro.config import CONF_DIR


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    train_app.main(cfg)


if __name__ == "__main__":
    message = explain_argv(CONF_DIR, "train", sys.argv[1:])  # an unknown key, said with the valid ones
    if message:
        sys.exit(f"Error: {message}")
    main()
