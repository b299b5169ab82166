"""Weights & Biases logging that never waits on a server by default.

``logger.mode``: ``offline`` (default; the ``WANDB_MODE`` environment variable wins when set),
``online`` or ``disabled``. Files go under ``<run_dir>/wandb``; offline runs can be uploaded later
with ``wandb sync <run_dir>/wandb/offline-run-*``. The run id is stored in the run folder, so a
resumed training run continues the same W&B run. One W&B run per job: ``finish`` is always called.
"""

from __future__ import annotations

import logging
import os
import uuid
from enum import Enum
from pathlib import Path

log = logging.getLogger(__name__)


def resolve_mode(cfg_mode) -> str:
    mode = cfg_mode.value if isinstance(cfg_mode, Enum) else str(cfg_mode)
    env = os.environ.get("WANDB_MODE")
    if env:
        if env not in ("offline", "online", "disabled", "dryrun", "run"):
            raise ValueError(f"WANDB_MODE={env!r}; allowed: offline, online, disabled")
        mode = {"dryrun": "offline", "run": "online"}.get(env, env)
    return mode


class WandbLogger:
    def __init__(self, cfg, run_dir: Path, config_dict: dict, name: str):
        self.run = None
        mode = resolve_mode(cfg.mode)
        if mode == "disabled":
            return
        import wandb

        id_file = Path(run_dir) / "wandb_id.txt"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group,
            tags=list(cfg.tags),
            name=name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            config=config_dict,
            reinit="finish_previous",  # a multirun job never logs into the previous job's run
            settings=wandb.Settings(silent=True, console="off"),
        )
        log.info("W&B %s run %s in %s", mode, run_id, run_dir)

    def log(self, data: dict, step: int) -> None:
        if self.run is not None:
            self.run.log(data, step=step)

    def log_table(self, key: str, frame, step: int | None = None) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Table(dataframe=frame)}, step=step)

    def log_image(self, key: str, path: Path, step: int | None = None) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Image(str(path))}, step=step)

    def finish(self, exit_code: int = 0) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None
