"""The CUDA paths, checked where a GPU is present (skipped elsewhere, e.g. in CI): FlexAttention training
(forward and backward) and fused inference against the plain path, the whole model on CUDA against the
same weights on CPU, and `train.py device=cuda` then `evaluate.py` end to end with the CPU evaluation
of the same checkpoint as the reference."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
import pytest
import torch

from ssa_repro.models import build_model
from ssa_repro.scorers.base import Scorer
from tests.conftest import ROOT, make_cfg
from tests.test_fast_paths import WITH_SCORE_MOD, scorer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def qkv(bsz, h, t, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(bsz, h, t, d, device="cuda", generator=g, requires_grad=True) for _ in range(3)]


def grads(y, tensors, go):
    for t in tensors:
        t.grad = None
    y.backward(go)
    return [t.grad.clone() for t in tensors]


def weight_params(s):
    """The scorer's parameters that act on the weights (not gated attention's output gate)."""
    return [p for n, p in s.named_parameters() if n not in s.output_params]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name,kw", WITH_SCORE_MOD)
def test_flex_training_equals_plain_path_on_cuda(name, kw, causal):
    """model.attn_impl=flex on CUDA: compiled FlexAttention's output and its gradients (q, k, v and the
    scorer's parameters) equal the plain path's (logits -> weights -> weights @ v) to float32 rounding."""
    from ssa_repro.scorers.flex import flex_attend

    s = scorer(name, n_head=4, **kw).cuda()
    mod = s.score_mod()
    if not causal and getattr(mod, "causal_only", False):
        pytest.skip(f"{name} counts keys as q_idx + 1: causal only")
    q, k, v = qkv(3, 4, 150, 16)  # T = 150: more than one 128-block, so the block mask matters
    mask = torch.ones(150, 150, dtype=torch.bool, device="cuda").tril() if causal else None
    go = torch.randn(3, 4, 150, 16, device="cuda")
    params = [q, k, v, *weight_params(s)]
    y = flex_attend(q, k, v, mod, causal=causal)
    fast = [y.detach(), *grads(y, params, go)]
    ref, _ = Scorer.attend(s, q, k, v, mask)
    plain = [ref.detach(), *grads(ref, params, go)]
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,kw", WITH_SCORE_MOD)
def test_fused_inference_equals_plain_path_on_cuda(name, kw):
    from ssa_repro.scorers import flex

    s = scorer(name, n_head=2, **kw).cuda()
    for t in (5, 40, 130):
        mask = torch.ones(t, t, dtype=torch.bool, device="cuda").tril()
        with torch.inference_mode(), flex.inference_path("fused"):
            q, k, v = (x.detach() for x in qkv(7, 2, t, 16, seed=t))  # head width >= 16 on CUDA
            y = flex.fused_inference(s, q, k, v, True)
            ref, _ = Scorer.attend(s, q, k, v, mask)
        assert y is not None, flex._failed
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["softmax", "ssa", "sparsemax", "stickbreaking", "diff"])
def test_model_on_cuda_equals_model_on_cpu(name):
    """The same weights give the same outputs on both devices (training mode's forward and, in eval
    mode, the inference path each device takes)."""
    cfg = make_cfg("task=linear", f"scorer={name}")
    torch.manual_seed(0)
    cpu = build_model(cfg.model, cfg.scorer).eval()
    gpu = build_model(cfg.model, cfg.scorer).cuda().eval()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(4, 2 * 9, cpu.read_in.in_features)  # [B, T, token width]
    with torch.no_grad():
        a, b = cpu(x), gpu(x.cuda()).cpu()
    torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)


@pytest.mark.slow
def test_train_and_evaluate_on_cuda(tmp_path):
    """train.py device=cuda (SSA through its CUDA path), then the quick evaluation on CUDA and on CPU
    of the same checkpoint: the same cells and the same MSE to float32 rounding of the model."""
    run = tmp_path / "run"
    common = [f"hydra.run.dir={run}", "debug=tiny", "task=linear", "scorer=ssa", "evaluation.enabled=false"]
    subprocess.run([sys.executable, "train.py", "device=cuda", *common], cwd=ROOT, check=True)
    frames = {}
    for device in ("cuda", "cpu"):  # the same checkpoint, evaluated in two copies of the run folder
        where = tmp_path / device
        shutil.copytree(run, where)
        subprocess.run(
            [
                sys.executable,
                "evaluate.py",
                f"run_dir={where}",
                "eval=quick",
                f"device={device}",
                "wandb=false",
            ],
            cwd=ROOT,
            check=True,
        )
        parts = sorted(where.glob("eval/*/*/parts/results-*.csv"))
        frames[device] = pd.concat([pd.read_csv(p) for p in parts])
    key = [c for c in ("step", "sigma_f", "sigma_x", "length", "predictor", "metric") if c in frames["cpu"]]
    merged = frames["cpu"].merge(frames["cuda"], on=key, suffixes=("_cpu", "_cuda"))
    assert len(merged) == len(frames["cpu"]) > 0
    model = merged[merged.predictor == "model"]
    torch.testing.assert_close(
        torch.tensor(model.value_cuda.to_numpy()),
        torch.tensor(model.value_cpu.to_numpy()),
        rtol=1e-3,
        atol=1e-5,
    )


def test_a_job_selects_its_gpu():
    """One device per parallel job (ssa_repro/cli/devices.py) on the GPUs this machine has: the job's
    CUDA device is its placement's, and the process's device comes back after it."""
    from ssa_repro.cli import devices as dv

    visible = [str(i) for i in range(torch.cuda.device_count())]
    before = torch.cuda.current_device()
    last = len(visible) - 1
    with dv.job_device(last, len(visible), "auto", visible=visible, n_cores=2) as p:
        assert (p.gpu, p.cuda_index) == (visible[last], last)
        assert torch.cuda.current_device() == last
        x = torch.ones(1, device="cuda")
        assert x.device.index == last
    assert torch.cuda.current_device() == before


def test_fused_inference_leaves_a_head_narrower_than_16_to_the_plain_path():
    """The CUDA kernel's lowering refuses head widths under 16: such a model evaluates on the plain path
    without a compile attempt or a warning."""
    from ssa_repro.scorers import flex

    s = scorer("ssa", n_head=2).cuda()
    with torch.inference_mode():
        q, k, v = (x.detach() for x in qkv(3, 2, 40, 8))
        assert flex.fused_inference(s, q, k, v, True) is None
    assert not flex._failed
