"""Configs that would run and be silently wrong are refused where the config is checked, before the run
folder exists (issue 41): bidirectional attention on tasks that score next tokens, an eval.skip_first
that leaves nothing to score, scorer values that are not finite or that overflow, token-task sizes that
the sampler would refuse only while drawing prompts.

Each refusal is tied to an independent fact: the task's own prompts (is the target the next token?),
the task's sampler (does it draw at the accepted boundary, and refuse past it?), the scorer's own forward
and backward (finite at every value the check accepts)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.jobs.prepared import PreparedRun as check_run
from ssa_repro.jobs.prepared import problems
from ssa_repro.scorers import SCORERS, build_scorer
from ssa_repro.tasks import TASKS, build_task
from ssa_repro.tasks.tokens import IGNORE
from ssa_repro.training.validate import ConfigError
from tests.conftest import make_cfg

# tasks drawn here without corpus files (lm and mlm read the offline data)
SYNTHETIC = [n for n in TASKS.names() if n not in ("lm", "mlm")]


# ----------------------------------------------------------------------------- causal attention
def _target_is_next_token(task_overrides: list[str]) -> bool:
    """From the task's own prompts: is every scored target the token right after the position that
    predicts it (first coordinate of a vector token)?"""
    cfg = make_cfg(*task_overrides)
    task = build_task(cfg.task)
    batch = task.sample(16, 6, torch.Generator().manual_seed(0), "cpu")
    inside = batch.pred_idx + 1 < batch.tokens.shape[1]  # (copy's last target ends the prompt unshown)
    if not inside.any():
        return False  # the only target is no token of the prompt (counting)
    shown = batch.tokens[:, batch.pred_idx[inside] + 1]
    shown = shown[..., 0] if shown.dim() == 3 else shown  # [B, P']
    targets = batch.targets[:, inside]
    scored = targets != IGNORE if task.tokens else torch.ones_like(targets, dtype=torch.bool)
    return bool((shown[scored] == targets[scored].to(shown.dtype)).all())


@pytest.mark.parametrize(
    "overrides",
    [[f"task={n}"] for n in SYNTHETIC] + [["task=every", "task.labels_in_context=false"]],
    ids=lambda o: ",".join(o),
)
def test_bidirectional_attention_is_refused_exactly_where_targets_are_next_tokens(overrides):
    leaks = _target_is_next_token(overrides)
    task = build_task(make_cfg(*overrides).task)
    assert task.needs_causal == leaks  # the declaration says what the prompts show
    found = problems(make_cfg(*overrides, "model.causal=false"))
    refused = [p for p in found if p.startswith("model.causal=false")]
    assert bool(refused) == leaks, found
    if leaks:
        assert f"task={task.cfg.name}" in refused[0] and "model.causal=true" in refused[0]


def test_causal_refusal_comes_before_the_run_folder(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="model.causal=false"):
        check_run(make_cfg("task=copy", "model.causal=false"), run_dir)
    assert not run_dir.exists()


# ----------------------------------------------------------------------------- eval.skip_first
@pytest.mark.parametrize("task", ["every", "some"])
def test_skip_first_past_the_quantifier_prompt_is_refused(task):
    lengths = "evaluation.lengths=[6,12]"
    found = problems(make_cfg(f"task={task}", lengths, "evaluation.skip_first=6"))
    assert any(p.startswith("evaluation.skip_first=6 must be < the shortest") for p in found), found
    assert not [
        p for p in problems(make_cfg(f"task={task}", lengths, "evaluation.skip_first=5")) if "skip" in p
    ]
    # one prediction per prompt (supervise=last): that prediction is scored whatever skip_first says
    last = make_cfg(f"task={task}", lengths, "evaluation.skip_first=6", "task.supervise=last")
    assert not [p for p in problems(last) if "skip_first" in p]


def test_the_refused_skip_first_would_have_scored_the_last_prediction_only():
    """What the refusal prevents: with skip_first >= the predictions, the quantifier's metric is the last
    prediction's error alone (here: all predictions wrong but the last one -> error 0)."""
    task = build_task(make_cfg("task=every").task)
    batch = task.sample(4, 6, torch.Generator().manual_seed(1), "cpu")
    pred = -batch.targets.clone()  # every sign wrong ...
    pred[:, -1] = batch.targets[:, -1]  # ... but the last
    assert task.prompt_metrics(pred, batch, 6)["sequence_error"].tolist() == [0.0] * 4
    assert task.prompt_metrics(pred, batch, 5)["sequence_error"].tolist() == [0.0] * 4
    assert task.prompt_metrics(pred, batch, 4)["sequence_error"].tolist() == [1.0] * 4


# ----------------------------------------------------------------------------- scorer values
def _float_fields(name: str) -> list[str]:
    return [f.name for f in dataclasses.fields(SCORERS.schemas[name]) if f.type in (float, "float")]


FLOAT_KEYS = [(n, k) for n in SCORERS.names() for k in _float_fields(n)]


@pytest.mark.parametrize(("name", "key"), FLOAT_KEYS, ids=[f"{n}.{k}" for n, k in FLOAT_KEYS])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 1e40])
def test_every_scorer_float_must_be_finite_in_float32(name, key, value):
    cfg = OmegaConf.structured(SCORERS.schemas[name])
    cfg[key] = value
    found = SCORERS.get(name).check_config(cfg, 2)
    mine = [p for p in found if p.startswith(f"scorer.{key}=")]
    assert len(mine) == 1 and "finite number in float32's range" in mine[0], found
    if value != 1e40:
        return
    # the same through the run's checks, said once
    run = problems(make_cfg(f"scorer={name}", f"scorer.{key}={value}"))
    assert len([p for p in run if p.startswith(f"scorer.{key}=")]) == 1, run


def _finite_forward_backward(name: str, cfg) -> bool:
    torch.manual_seed(0)
    scorer = build_scorer(cfg, 2, n_embd=16)
    for t in (6, 200):
        q, k, v = (torch.randn(2, 2, t, 8) * s for s in (3, 3, 1))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        y, _ = scorer.attend(q.requires_grad_(), k, v, mask)
        y.sum().backward()
        grads = [q.grad, *(p.grad for p in scorer.parameters() if p.grad is not None)]
        if not (torch.isfinite(y).all() and all(torch.isfinite(g).all() for g in grads)):
            return False
    return True


@pytest.mark.parametrize(("name", "key"), FLOAT_KEYS, ids=[f"{n}.{k}" for n, k in FLOAT_KEYS])
def test_every_scorer_float_the_check_accepts_computes_finitely(name, key):
    """Large and tiny magnitudes: either check_config refuses the value (naming the key), or the scorer's
    forward and backward stay finite on prompts of 6 and 200 keys (before: diff's lambda_std=10,
    asentmax's gamma_range=100 and entmax's tau=1e-6 were accepted and gave NaN or an index error)."""
    warnings.filterwarnings("ignore")
    for value in (1e30, -1e30, 1e-30, -1e-30, 1e10, -1e10, 100.0):
        cfg = OmegaConf.structured(SCORERS.schemas[name])
        cfg[key] = value
        found = SCORERS.get(name).check_config(cfg, 2)
        if found:
            assert any(p.startswith(f"scorer.{key}=") for p in found), (value, found)
        else:
            assert _finite_forward_backward(name, cfg), f"scorer.{key}={value} accepted but not finite"


@pytest.mark.parametrize(
    ("name", "key", "refused", "accepted"),
    [
        ("diff", "lambda_std", 10.0, 1.0),
        ("asentmax", "gamma_range", 100.0, 20.0),
        ("entmax_alpha", "tau", 1e-6, 1e-4),
        ("temperature", "tau", 1e-20, 1e-4),
    ],
)
def test_scorer_ranges_sit_where_the_computation_breaks(name, key, refused, accepted):
    warnings.filterwarnings("ignore")
    for value, ok in ((refused, False), (accepted, True)):
        cfg = OmegaConf.structured(SCORERS.schemas[name])
        cfg[key] = value
        assert (SCORERS.get(name).check_config(cfg, 2) == []) == ok
        try:
            finite = _finite_forward_backward(name, cfg)
        except (RuntimeError, ValueError):  # asentmax's bisection index error
            finite = False
        assert finite == ok, (key, value)


# ----------------------------------------------------------------------------- token-task sizes
@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["task=mqar", "task.n_values=0"], "task.n_values=0 must be >= 1"),
        (["task=mqar", "task.n_keys=0"], "task.n_keys=0 must be >= 1"),
        (
            ["task=mqar", "task.n_keys=4"],
            "curriculum.end=5 pairs need distinct keys, more than task.n_keys=4",
        ),
        (
            ["task=mqar", "task.n_keys=8"],
            "evaluation.lengths=[5, 10] draws prompts of up to 10 pairs, more than task.n_keys=8",
        ),
        (
            ["task=flip_flop", "task.p_ignore=0.5", "evaluation.sigmas=[0.25,1.0]"],
            "sigmas=[0.25, 1.0] has [0.25]",
        ),
        (["task=flip_flop", "task.p_ignore=1.0"], "task.p_ignore=1.0 must be in [0, 1)"),
        (["task=copy", "task.alphabet=1"], "task.alphabet=1 must be >= 2"),
        (["task=counting", "task.max_count=0"], "task.max_count=0 must be >= 1"),
    ],
)
def test_token_task_sizes_are_refused_before_the_run_folder(overrides, needle, tmp_path):
    cfg = make_cfg(*overrides)
    assert any(needle in p for p in problems(cfg)), problems(cfg)
    with pytest.raises(ConfigError):
        check_run(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_mqar_key_boundary_is_the_samplers():
    """n_keys = the longest end-of-run prompt is accepted and draws; one fewer is refused, and the sampler
    itself refuses that length."""
    ok = make_cfg("task=mqar", "task.n_keys=10")
    assert problems(ok) == []
    g = torch.Generator().manual_seed(0)
    assert build_task(ok.task).sample(2, 10, g, "cpu").tokens.shape == (2, 30)
    bad = make_cfg("task=mqar", "task.n_keys=9")
    assert problems(bad)
    with pytest.raises(ValueError, match="distinct keys"):
        build_task(bad.task).sample(2, 10, g, "cpu")


@pytest.mark.parametrize(("p_ignore", "ok"), [(0.75, True), (0.7, False)])
def test_flip_flop_settings_boundary_is_the_samplers(p_ignore, ok):
    """σ = 0.25 needs p(ignore) = 1 − (1 − p)/σ >= 0, i.e. p >= 0.75: the check and the sampler agree."""
    cfg = make_cfg("task=flip_flop", f"task.p_ignore={p_ignore}", "evaluation.sigmas=[0.25,1.0]")
    assert (problems(cfg) == []) == ok, problems(cfg)
    draw = lambda: build_task(cfg.task).draw(2, 8, torch.Generator().manual_seed(0), "cpu", {"sigma_x": 0.25})  # noqa: E731
    if ok:
        assert draw().xs.shape == (2, 8)
    else:
        with pytest.raises(ValueError, match="σ must be >="):
            draw()


def test_grid_problems_name_the_evaluate_keys():
    """The same limits for ``python evaluate.py``'s grid keys (eval.*), from the task alone."""
    mqar = build_task(make_cfg("task=mqar", "task.n_keys=16").task)
    assert mqar.grid_problems([1.0], [8, 16]) == []
    assert mqar.grid_problems([1.0], [8, 32])[0].startswith("eval.lengths=[8, 32] draws prompts of up to 32")
    ff = build_task(make_cfg("task=flip_flop", "task.p_ignore=0.8").task)
    assert ff.grid_problems([0.2, 1.0], [8]) == []  # p(0.2) = 0 exactly
    (found,) = ff.grid_problems([0.1, 1.0, -1.0], [8])
    assert found.startswith("eval.sigmas=[0.1, 1.0, -1.0] has [0.1, -1.0]")
