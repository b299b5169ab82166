"""Train one model: ``python train.py task=linear scorer=ssa`` (see README.md and conf/train.yaml)."""

import hydra
from omegaconf import DictConfig

from ssa_repro import hydra_app


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    hydra_app.main(cfg)


if __name__ == "__main__":
    main()
