"""Adding a scorer is its file and its config: this module defines one (its dataclass config, the
formula, the flags the layers above read) and stores its config option, as ``ssa_repro/scorers/<name>.py``
and ``conf/scorer/<name>.yaml`` do; it is then built, checked against a float64 reference, estimated and
trained with no other file knowing its name."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hydra.core.config_store import ConfigStore

from ssa_repro import config
from ssa_repro.models import build_model
from ssa_repro.scorers import SCORERS, ssa_cpu
from ssa_repro.scorers.base import Scorer, ScorerConfig
from ssa_repro.training import memory
from ssa_repro.training.compile_policy import decide
from ssa_repro.training.trainer import train
from tests.conftest import forget_component, make_cfg


# ------------------------------------------------------------------ the scorer's file
@dataclass
class PowerConfig(ScorerConfig):
    name: str = "power_toy"
    p: float = 2.0


class Power(Scorer):
    """w_ij = exp(x_ij)^p / Σ_j exp(x_ij)^p over the visible keys: softmax of p·x (a temperature 1/p)."""

    attention_tensors = 2  # what its backward keeps: the logits and the weights
    compile_gains = False

    def forward(self, logits, mask):
        s = float(self.cfg.p) * logits
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1)


@pytest.fixture(scope="module", autouse=True)
def registered():
    """The scorer's registration and its config option (its file and conf/scorer/power_toy.yaml)."""
    assert "power_toy" not in SCORERS
    SCORERS.register("power_toy", schema=PowerConfig)(Power)
    config.register_configs()  # stores schema/scorer/power_toy
    ConfigStore.instance().store(
        group="scorer",
        name="power_toy",
        node={"defaults": ["/schema/scorer/power_toy@_here_", "_self_"], "p": 3.0},
    )
    yield
    forget_component(SCORERS, "scorer", "power_toy")


def reference(x: torch.Tensor, p: float, mask: torch.Tensor) -> torch.Tensor:
    """The formula in float64, one row at a time."""
    out = torch.zeros_like(x, dtype=torch.float64)
    for idx in torch.cartesian_prod(*[torch.arange(n) for n in x.shape[:-1]]):
        row, visible = x[tuple(idx)].double(), mask[tuple(idx[-1:])]
        e = torch.exp(p * row[visible])
        out[tuple(idx)][visible] = e / e.sum()
    return out


def test_the_new_scorer_builds_matches_its_formula_and_trains(tmp_path, monkeypatch):
    cfg = make_cfg("scorer=power_toy")
    assert cfg.scorer.p == 3.0 and cfg.scorer.label == "power_toy"
    model = build_model(cfg.model, cfg.scorer)
    scorer = model.blocks[0].attn.scorer
    x = torch.randn(2, 2, 5, 5, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    assert torch.allclose(scorer(x, mask).double(), reference(x, 3.0, mask), atol=1e-6)
    # the layers above read its flags, not its name
    est, soft = memory.estimate(cfg), memory.estimate(make_cfg())
    b, h, t = cfg.train.batch_size, cfg.model.n_head, est["tokens"]
    assert est["attention_bytes"] == cfg.model.n_layer * 2 * b * h * t * t * 4
    assert soft["attention_bytes"] == 0
    auto = dict(device_type="cpu", steps=10**6, width=64)
    monkeypatch.setattr(ssa_cpu, "library", lambda: None)  # SSA without its fused CPU node: compiled
    assert (
        not decide("auto", scorer="power_toy", **auto).compile
        and decide("auto", scorer="ssa", **auto).compile
    )
    summary = train(cfg, tmp_path / "run")
    assert summary["steps"] == cfg.train.steps and torch.isfinite(torch.tensor(summary["final_loss"]))
