"""Glue between Hydra and the plain functions: the run folder, and checks before Hydra writes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from ssa_repro import config as _config  # noqa: F401  (stores the schemas)
from ssa_repro.training.checkpoint import CheckpointError
from ssa_repro.validate import ConfigError

log = logging.getLogger("ssa_repro.train")
FAILURES = (ConfigError, CheckpointError)


def _sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The override list of every job a basic-sweeper multirun will launch."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = list(config.hydra.overrides.task)
    params = config.hydra.sweeper.get("params") or {}
    args += [f"{k}={v}" for k, v in params.items()]
    parsed = OverridesParser.create().parse_overrides(args)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


class ValidateFirst(Callback):
    """Check the config, and that the run folder (if it exists) holds a run this config may continue,
    before Hydra creates the folder or rewrites its ``.hydra/``: a bad value never touches a run. In a
    multirun every job's config is checked before the first job starts."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ssa_repro.training.trainer import preflight

        try:
            preflight(config, Path(str(config.hydra.run.dir)))
        except FAILURES as e:
            raise SystemExit(f"Error: {e}") from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.global_hydra import GlobalHydra

        from ssa_repro.validate import check

        if "basic" not in str(config.hydra.sweeper.get("_target_", "")).lower():
            return  # other sweepers choose jobs as they go; each job is still checked when it starts
        loader = GlobalHydra.instance().config_loader()
        for overrides in _sweep_jobs(config):
            job = loader.load_sweep_config(config, overrides)
            try:
                check(job)
            except ConfigError as e:
                raise SystemExit(f"Error in sweep job {' '.join(overrides)}: {e}") from None


def main(cfg: DictConfig) -> dict:
    from ssa_repro.training.trainer import TrainingDiverged, train

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN and cfg.logger.group is None:
        with open_dict(cfg):  # one W&B group per sweep
            cfg.logger.group = Path(hc.sweep.dir).name
    try:
        return train(cfg, Path(hc.runtime.output_dir))
    except FAILURES as e:
        raise SystemExit(f"Error: {e}") from None
    except TrainingDiverged as e:
        log.error("%s", e)
        raise SystemExit(f"Error: {e}") from None
