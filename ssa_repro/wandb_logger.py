"""Weights & Biases logging that never waits on a server by default.

``logger.mode``: ``offline`` (default; ``$WANDB_MODE`` when set, through the YAML default
``${oc.env:WANDB_MODE,offline}``; an explicit ``logger.mode=`` wins), ``online`` or ``disabled``. Files
go under ``<run_dir>/wandb``; offline runs can be uploaded later with
``wandb sync <run_dir>/wandb/offline-run-*``. The run id is stored in the run folder, so a resumed
training run continues the same W&B run. Metrics are plotted against ``train/step`` (a logged value,
not W&B's internal step), so rows re-logged after a resume are kept. One W&B run per job: ``finish``
is always called, and ``reinit="finish_previous"`` closes any run a previous job left open.
"""

from __future__ import annotations

import logging
import uuid
from enum import Enum
from pathlib import Path

log = logging.getLogger(__name__)


class WandbLogger:
    def __init__(self, cfg, run_dir: Path, config_dict: dict, name: str):
        self.run = None
        mode = cfg.mode.value if isinstance(cfg.mode, Enum) else str(cfg.mode)
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
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.run.define_metric("train/step")
        self.run.define_metric("*", step_metric="train/step")
        log.info("W&B %s run %s in %s", mode, run_id, run_dir)

    @classmethod
    def off(cls) -> WandbLogger:
        """A logger that logs nothing (data-parallel ranks other than 0)."""
        self = cls.__new__(cls)
        self.run = None
        return self

    def log(self, data: dict) -> None:
        if self.run is not None:
            self.run.log(data)

    def log_table(self, key: str, frame) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Table(dataframe=frame)})

    def log_image(self, key: str, path: Path) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Image(str(path))})

    def finish(self, exit_code: int = 0) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None
