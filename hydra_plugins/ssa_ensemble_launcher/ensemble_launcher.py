"""The launcher object Hydra instantiates for ``hydra/launcher=ensemble``; the work is in ``_core``
(imported when a sweep launches, so the plugin scan does not import torch)."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class EnsembleLauncher(Launcher):
    def __init__(self, max_seeds: int = 64, memory_share: float = 0.8) -> None:
        if int(max_seeds) < 1:
            raise ValueError(f"hydra.launcher.max_seeds={max_seeds}: must be at least 1")
        if not 0 < float(memory_share) <= 1:
            raise ValueError(f"hydra.launcher.memory_share={memory_share}: must be in (0, 1]")
        self.max_seeds, self.memory_share = int(max_seeds), float(memory_share)
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra_plugins.ssa_ensemble_launcher import _core

        return _core.launch(self, job_overrides, initial_job_idx)
