"""Glue between Hydra and the plain functions: the run folder, and validation before Hydra writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ssa_repro import config as _config  # noqa: F401  (stores the schemas)
from ssa_repro.validate import ConfigError, check


class ValidateFirst(Callback):
    """Check the config before Hydra creates (or writes into) the run folder, so a bad value never
    touches an existing run."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check(config)
        except ConfigError as e:
            raise SystemExit(f"Error: {e}") from None


def run_dir() -> Path:
    return Path(HydraConfig.get().runtime.output_dir)


def main(cfg: DictConfig) -> dict:
    from ssa_repro.training.trainer import train

    try:
        return train(cfg, run_dir())
    except ConfigError as e:
        raise SystemExit(f"Error: {e}") from None
