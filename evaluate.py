"""Evaluate a trained run: ``python evaluate.py run_dir=outputs/... [eval=...]`` (see README.md)."""

import hydra
from omegaconf import DictConfig

from ssa_repro.evaluation import app


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    app.main(cfg)


if __name__ == "__main__":
    main()
