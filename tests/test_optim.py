"""Optimizer, schedule, accumulation and the model options added for the corpus tasks."""

import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.config import TrainConfig
from ssa_repro.models import build_model
from ssa_repro.training.optim import build_optimizer, lr_at
from ssa_repro.training.run_state import TrainingRun
from tests.conftest import make_cfg


def _tr(**kw):
    return OmegaConf.merge(OmegaConf.structured(TrainConfig), kw)


def test_warmup_then_cosine_reaches_floor():
    tr = _tr(lr=1.0, steps=110, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_at(tr, 0) == pytest.approx(0.1)
    assert lr_at(tr, 9) == pytest.approx(1.0)
    assert lr_at(tr, 10) == pytest.approx(1.0)
    assert lr_at(tr, 60) == pytest.approx(0.1 + 0.9 * 0.5)  # half way: cos(pi/2) = 0
    assert lr_at(tr, 110) == pytest.approx(0.1)
    assert lr_at(tr, 500) == pytest.approx(0.1)  # past the end: stays at the floor
    lrs = [lr_at(tr, s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_constant_schedule_is_the_papers():
    tr = _tr(lr=3e-4)
    assert {lr_at(tr, s) for s in (0, 1, 10_000)} == {3e-4}


def test_adamw_decays_matrices_only():
    cfg = make_cfg("scorer=ssa")
    model = build_model(cfg.model, cfg.scorer)
    opt = build_optimizer(model, _tr(optimizer="adamw", weight_decay=0.1))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    n_all = sum(1 for p in model.parameters() if p.requires_grad)
    assert len(decay["params"]) + len(no_decay["params"]) == n_all


def test_bad_train_values_are_named():
    from ssa_repro.training import validate

    cfg = make_cfg("train.grad_accum=0", "train.min_lr_ratio=2.0", "train.weight_decay=0.1")
    msg = "\n".join(validate.problems(cfg))
    assert "train.grad_accum=0" in msg and "train.min_lr_ratio=2.0" in msg and "adamw" in msg


def test_grad_accum_logs_the_mean_of_its_micro_batch_losses(tmp_path):
    """train.grad_accum=2: the first step's logged loss is the mean of its two micro-batches' losses at
    the initial weights, recomputed here by hand from the same seed (weights and prompt generator); the
    next step's differs (the weights moved)."""
    from ssa_repro.tasks import curriculum
    from ssa_repro.training import trainer
    from ssa_repro.training.metrics_log import read_metrics

    overrides = (
        "train.steps=2",
        "train.grad_accum=2",
        "train.log_interval=1",
        "train.grad_clip=1.0",
        "train.schedule=cosine",
        "train.warmup_steps=1",
        "evaluation.enabled=false",
    )
    cfg = make_cfg(*overrides)
    trainer.train(cfg, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]

    s = trainer.build(
        TrainingRun(make_cfg(*overrides), tmp_path / "by_hand")
    )  # the same seed: same weights, prompts
    s.model.train()
    stage = curriculum.stage(cfg.curriculum, 0)
    with torch.no_grad():
        micro = [
            s.task.training_loss(
                s.model, trainer.draw_batch(s.task, i, cfg.train.batch_size, stage, s.gen, s.device)
            )
            for i in (0, 1)
        ]
    assert rows[0]["loss"] == pytest.approx(float(sum(micro)) / 2, rel=1e-5)
    assert abs(float(micro[0]) - float(micro[1])) > 1e-3  # two different batches, so the mean is a mean
    assert rows[1]["loss"] != pytest.approx(rows[0]["loss"], rel=1e-4)


def test_token_model_ties_head_and_post_ln_runs():
    cfg = make_cfg("model.vocab_size=11", "model.post_ln=true", "model.causal=false")
    m = cfg.model
    model = build_model(m, cfg.scorer)
    tokens = torch.randint(0, 11, (2, 7))
    out = model(tokens)
    assert out.shape == (2, 7, 11)
    assert not hasattr(model, "read_out") and model.wte.weight.shape == (11, m.n_embd)
    # bidirectional: changing the last token changes the first position's output
    t2 = tokens.clone()
    t2[:, -1] = (t2[:, -1] + 1) % 11
    assert not torch.allclose(model(t2)[:, 0], out[:, 0])


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_fused_optimizer_matches_the_per_tensor_loop(optimizer):
    """build_optimizer's fused kernel makes the same updates as torch's reference for-loop."""
    cfg = make_cfg("scorer=ssa")
    torch.manual_seed(0)
    a = build_model(cfg.model, cfg.scorer)
    b = build_model(cfg.model, cfg.scorer)
    b.load_state_dict(a.state_dict())
    tr = _tr(optimizer=optimizer, weight_decay=0.1 if optimizer == "adamw" else 0.0, lr=1e-2)
    fused = build_optimizer(a, tr)
    assert all(g["fused"] for g in fused.param_groups)
    b_params = dict(b.named_parameters())
    groups = [
        {"params": [b_params[n] for n in _names(a, g["params"])], "weight_decay": g["weight_decay"]}
        for g in fused.param_groups
    ]
    ref_cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    ref = ref_cls(groups, lr=1e-2, foreach=False, fused=False)
    x = torch.randn(4, 6, 1)
    for _ in range(3):
        for m, opt in ((a, fused), (b, ref)):
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


def _names(model, params):
    ids = {id(p): n for n, p in model.named_parameters()}
    return [ids[id(p)] for p in params]


def test_micro_batch_indices_partition_the_data_across_ranks():
    from ssa_repro.training.setup import micro_batch_index

    for accum, world in ((1, 1), (2, 1), (1, 3), (2, 4)):
        for step in range(3):
            got = sorted(
                micro_batch_index(step, m, accum, world, r) for m in range(accum) for r in range(world)
            )
            assert got == list(range(step * accum * world, (step + 1) * accum * world))
    assert [micro_batch_index(s, 0, 1, 1, 0) for s in range(4)] == [0, 1, 2, 3]  # one process: in order
