"""The launcher's options, stored in Hydra's ConfigStore as ``hydra/launcher=ensemble`` (imported by
Hydra's plugin scan: kept free of torch so that every command's start stays fast)."""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class EnsembleLauncherConf:
    _target_: str = "hydra_plugins.ssa_ensemble_launcher.ensemble_launcher.EnsembleLauncher"
    # at most this many seeds in one stacked model; a larger group is split into several ensembles
    max_seeds: int = 64
    # the share of the device's free memory one ensemble may fill (training/memory.py's estimate per
    # seed); fewer seeds fit: the group is split
    memory_share: float = 0.8


ConfigStore.instance().store(
    group="hydra/launcher", name="ensemble", node=EnsembleLauncherConf, provider="ssa_ensemble_launcher"
)
