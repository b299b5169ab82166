"""Glue between Hydra and the plain functions: the run folder, and validation before Hydra writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ssa_repro import config as _config  # noqa: F401  (stores the schemas)
from ssa_repro.training.checkpoint import CheckpointError
from ssa_repro.validate import ConfigError


class ValidateFirst(Callback):
    """Check the config, and that the run folder (if it exists) holds a run this config may continue,
    before Hydra creates the folder or rewrites its ``.hydra/``: a bad value never touches a run."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ssa_repro.training.trainer import preflight

        try:
            preflight(config, Path(str(config.hydra.run.dir)))
        except (ConfigError, CheckpointError) as e:
            raise SystemExit(f"Error: {e}") from None


def run_dir() -> Path:
    return Path(HydraConfig.get().runtime.output_dir)


def main(cfg: DictConfig) -> dict:
    from ssa_repro.training.trainer import train

    try:
        return train(cfg, run_dir())
    except (ConfigError, CheckpointError) as e:
        raise SystemExit(f"Error: {e}") from None
