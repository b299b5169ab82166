"""Shared helpers: compose the real config (conf/train.yaml) and shrink it for fast tests."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir

import ssa_repro.config  # noqa: F401  (stores the schemas)
from ssa_repro.data.paths import resolve_root

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# A model and run small enough for a few-step end-to-end run in about a second: conf/debug/tiny.yaml,
# composed last, so an override given after it (in make_cfg or on a command line) still wins.
TINY = ["debug=tiny"]


# The offline data (../shared/data beside the repository, or $SSA_DATA_ROOT): tests that read the real
# corpora skip, saying why, on a checkout that has none.
SHARED_DATA = resolve_root(os.environ.get("SSA_DATA_ROOT", "../shared/data"))
HAVE_SHARED_DATA = (SHARED_DATA / "lm" / "train.txt").exists()
needs_shared = pytest.mark.skipif(
    not HAVE_SHARED_DATA, reason=f"the offline data is not at {SHARED_DATA} (set SSA_DATA_ROOT)"
)


def make_cfg(*overrides: str, tiny: bool = True):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[*(TINY if tiny else []), *overrides])


@pytest.fixture(autouse=True)
def _no_wandb_network(monkeypatch):
    # Tests never talk to a W&B server, whatever the environment says.
    monkeypatch.setenv("WANDB_MODE", os.environ.get("SSA_TEST_WANDB_MODE", "disabled"))
    monkeypatch.setenv("WANDB_SILENT", "true")


# The compiled FlexAttention CPU kernel returned wrong rows on this project's CI machine
# (flex.CPU_UNTRUSTED), and its C++ compile fails there at times (CppCompileError): the value checks
# of the kernel on CPU are expected to fail there, and run for real on CUDA (test_cuda.py)
CPU_KERNEL = pytest.mark.xfail(
    condition=not torch.cuda.is_available(),
    reason="torch 2.13's compiled FlexAttention CPU kernel gives wrong rows on some CPUs (flex.CPU_UNTRUSTED)",
    strict=False,
)


@pytest.fixture
def cpu_kernel(monkeypatch):
    """The fused path's choice and compile logic on CPU, whose kernel `auto` does not use
    (flex.CPU_UNTRUSTED): switched on for tests of the mechanics, not of the values."""
    from ssa_repro.scorers import flex

    monkeypatch.setattr(flex, "CPU_UNTRUSTED", False)


class NoProgress:
    """An evaluator's progress bar that shows nothing (tests calling ``Evaluator.compute`` directly)."""

    def update(self, n=1):
        pass


def evaluation_run(model, task, cfg):
    """What an evaluator's ``compute`` reads of a loaded run (model, task, config, device, labels), for
    a model built in a test without a run folder."""
    return SimpleNamespace(model=model, task=task, cfg=cfg, device=torch.device("cpu"), labels={})
