"""Glue between Hydra and the evaluation runner (``python evaluate.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ssa_repro import config as _config  # noqa: F401  (stores the schemas)
from ssa_repro.evaluation import runner
from ssa_repro.evaluation.run import RunFolderError, load_run, problems
from ssa_repro.training.checkpoint import CheckpointError
from ssa_repro.training.trainer import resolve_device


def preflight(cfg: DictConfig) -> list[str]:
    """Everything knowable before loading the model: the folder, and the evaluation against its config."""
    found = problems(cfg.run_dir)
    if found:
        return found
    return runner.check(OmegaConf.load(Path(cfg.run_dir) / "config.yaml"), cfg.eval)


class CheckRunFirst(Callback):
    """Check before Hydra creates <run_dir>/eval (a typo in run_dir must not create folders)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        found = preflight(config)
        if found:
            raise SystemExit("Error: " + "\n  - ".join(["cannot evaluate:", *found]))


def main(cfg: DictConfig) -> dict:
    found = preflight(cfg)
    if found:
        raise SystemExit("Error: " + "\n  - ".join(["cannot evaluate:", *found]))
    try:
        run = load_run(cfg.run_dir, resolve_device(cfg.device))
    except (RunFolderError, CheckpointError) as e:
        raise SystemExit(f"Error: {e}") from None
    return runner.evaluate(run, cfg.eval, wandb_log=cfg.wandb)
