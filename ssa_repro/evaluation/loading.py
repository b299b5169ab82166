"""Loading a trained run folder for evaluation, with clear errors before any work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ssa_repro.models import Transformer, build_model
from ssa_repro.tasks import Task, build_task
from ssa_repro.training import checkpoint
from ssa_repro.training.run_state import config_mismatches


class RunFolderError(ValueError):
    """A run folder that cannot be evaluated: missing, incomplete, or inconsistent."""


@dataclass
class LoadedRun:
    run_dir: Path
    cfg: DictConfig  # the run's resolved config (config.yaml)
    model: Transformer
    task: Task
    step: int  # training steps behind the checkpoint
    device: torch.device

    @property
    def labels(self) -> dict:
        """Columns identifying the run in every table row."""
        return {
            "task": self.cfg.task.name,
            "scorer": self.cfg.scorer.get("label", self.cfg.scorer.name),
            "model": self.cfg.model.name,
            "seed": self.cfg.seed,
            "step": self.step,
        }

    @property
    def title(self) -> str:
        """task · scorer · model · seed (figure titles add the step of the cells they show)."""
        return (
            f"{self.cfg.task.name} · {self.labels['scorer']} · {self.cfg.model.name} · seed {self.cfg.seed}"
        )


def problems(run_dir: str | Path) -> list[str]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return [f"run_dir={run_dir} is not a folder"]
    missing = [p for p in ("config.yaml", "checkpoints/last.pt") if not (run_dir / p).exists()]
    return [f"run_dir={run_dir} has no {p} (not a finished or started training run folder)" for p in missing]


def read_config(run_dir: str | Path) -> DictConfig:
    """The run's ``config.yaml``, or a RunFolderError naming the file when it cannot be read."""
    path = Path(run_dir) / "config.yaml"
    try:
        cfg = OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001  (yaml and OmegaConf raise many kinds)
        raise RunFolderError(
            f"{path} is not a readable config ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "restore it from .hydra/config.yaml in the same folder, or evaluate another run"
        ) from None
    if not isinstance(cfg, DictConfig) or "task" not in cfg or "name" not in cfg.task:
        raise RunFolderError(f"{path} has no task.name: not a training run's config")
    return cfg


def load_run(run_dir: str | Path, device: torch.device) -> LoadedRun:
    found = problems(run_dir)
    if found:
        raise RunFolderError("; ".join(found))
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    state = checkpoint.load(run_dir / "checkpoints" / "last.pt")
    bad = config_mismatches(state["config"], OmegaConf.to_container(cfg))
    if bad:
        raise RunFolderError(
            f"{run_dir}: checkpoints/last.pt does not belong to config.yaml:\n  - " + "\n  - ".join(bad)
        )
    model = build_model(cfg.model, cfg.scorer)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise RunFolderError(
            f"{run_dir}: the checkpoint does not fit the model in config.yaml: {e}"
        ) from None
    model.to(device).eval()
    return LoadedRun(run_dir, cfg, model, build_task(cfg.task), int(state["step"]), device)
