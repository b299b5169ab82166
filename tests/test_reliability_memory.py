"""training/memory.py: the parameter count in closed form, the estimate, what is available, and the
refusal of configs that cannot fit (before any folder or allocation)."""

from __future__ import annotations

import pytest
import torch

from ssa_repro.models import build_model, count_parameters
from ssa_repro.training import memory
from tests.conftest import make_cfg

SHAPES = [
    (),
    ("model=attn_only", "scorer=ssa"),
    ("model=ff_only",),
    ("scorer=ssa_n2", "model.n_head=3", "model.n_embd=24", "model.n_layer=3"),
    ("scorer=temperature", "model.mlp_ratio=2"),
    ("scorer=hybrid",),
    ("scorer=cosformer", "model.max_positions=100"),
    ("task=lm", "model.n_embd=32", "model.n_layer=2"),
    ("task=lm", "model=attn_only", "scorer=ssa"),
    ("task=mlm", "model=encoder", "model.n_embd=32", "model.n_layer=2"),
    ("experiment=paper_linear",),
    ("model.pos=t5", "scorer=gated"),  # T5's bucket table, the gate's W_g; no position table
    ("model.pos=rope", "scorer=gated", "scorer.gate=headwise"),
    ("task=mqar", "model.pos=alibi"),
]


@pytest.mark.parametrize("overrides", SHAPES, ids=lambda o: ",".join(o) or "default")
def test_closed_form_parameter_count_is_exact(overrides):
    cfg = make_cfg(*overrides, tiny=False)
    expected = count_parameters(build_model(cfg.model, cfg.scorer))
    assert memory.parameter_count(cfg.model, cfg.scorer) == expected
    assert memory.estimate(cfg)["parameters"] == expected


def test_estimate_parts_and_growth():
    est = memory.estimate(make_cfg(tiny=False))
    n = est["parameters"]
    assert (est["parameter_bytes"], est["gradient_bytes"], est["optimizer_bytes"]) == (4 * n, 4 * n, 8 * n)
    assert est["total_bytes"] == 16 * n + est["activation_bytes"]
    assert est["tokens"] == 42 and est["batch_size"] == 64  # curriculum.end = 21 examples
    big = memory.estimate(make_cfg("train.batch_size=128", tiny=False))
    assert big["activation_bytes"] > 1.9 * est["activation_bytes"]
    assert memory.estimate(make_cfg("scorer=ssa", tiny=False))["attention_bytes"] > 0
    assert memory.estimate(make_cfg(tiny=False))["attention_bytes"] == 0  # SDPA keeps no T×T tensor
    lm = memory.estimate(make_cfg("task=lm", tiny=False))
    assert lm["tokens"] == 128 and lm["logits_bytes"] == 3 * 16 * 128 * 8192 * 4


def test_tokens_pass_max_positions_only_without_a_position_table():
    # curriculum.end = 100 examples of the linear task are 200 tokens, past model.max_positions = 64:
    # a learned table caps the sequence (validation refuses the run), a scheme without one trains on all
    long = ("curriculum.end=100", "model.max_positions=64")
    assert memory.estimate(make_cfg(*long, "model.pos=learned"))["tokens"] == 64
    for pos in ("none", "rope", "alibi"):
        assert memory.estimate(make_cfg(*long, f"model.pos={pos}"))["tokens"] == 200


def test_available_host_and_cuda(monkeypatch):
    have = memory.available("cpu")
    assert have is None or have > 0
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (3 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "FakeGPU")
    assert memory.available("cuda:0") == 3 << 30


def test_the_papers_size_fits_here_and_a_huge_width_does_not(monkeypatch):
    monkeypatch.setattr(memory, "host_available", lambda: (24 << 30, "MemAvailable in /proc/meminfo"))
    assert memory.problems(make_cfg("experiment=paper_linear", tiny=False), "cpu") == []
    assert memory.problems(make_cfg("experiment=paper_linear", "scorer=ssa", tiny=False), "cpu") == []
    assert memory.problems(make_cfg("task=lm", tiny=False), "cpu") == []
    [msg] = memory.problems(make_cfg("model.n_embd=100000000", tiny=False), "cpu")
    assert "model.n_embd=100000000" in msg and "model.n_layer=4" in msg and "train.batch_size=64" in msg
    assert "more than the 24.0 GiB available on cpu (MemAvailable" in msg
    assert "lower model.n_embd or model.n_layer" in msg
    [msg] = memory.problems(make_cfg("train.batch_size=1000000", tiny=False), "cpu")
    assert "lower train.batch_size" in msg and "activations for a batch of 1000000 × 42 tokens" in msg


def test_cuda_device_and_several_processes(monkeypatch):
    cfg = make_cfg("experiment=paper_linear", tiny=False)
    need = memory.estimate(cfg)["total_bytes"]
    monkeypatch.setattr(memory, "_available", lambda d: (int(need * 1.5), "free on FakeGPU"))
    assert memory.problems(cfg, "cuda") == [] and memory.problems(cfg, "cuda", processes=2) == []
    [msg] = memory.problems(cfg, "cpu", processes=2)  # two ranks share one host's memory
    assert "available on cpu for 2 processes" in msg
    monkeypatch.setattr(memory, "_available", lambda d: (None, "unknown"))
    assert memory.problems(make_cfg("model.n_embd=100000000", tiny=False), "cpu") == []  # cannot tell


def test_estimate_allocates_nothing_large(monkeypatch):
    """The refused case must be fast: the estimate builds the model on the meta device only (a real
    width of 10⁸ would take 6 s and fail to allocate 200 GB)."""
    built = []

    def spy(*a):
        built.append(real(*a))
        return built[-1]

    real = memory.build_model
    monkeypatch.setattr(memory, "build_model", spy)
    est = memory.estimate(make_cfg("model.n_embd=100000000", tiny=False))
    assert est["parameters"] > 10**17
    params = [p for m in built for p in m.parameters()]
    assert params and all(p.is_meta for p in params)
