"""The CUDA paths, checked where a GPU is present (skipped elsewhere, e.g. in CI): FlexAttention training
(forward and backward) and fused inference against the plain path, the whole model on CUDA against the
same weights on CPU, and `train.py device=cuda` then `evaluate.py` end to end with the CPU evaluation
of the same checkpoint as the reference."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

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
    """One device per parallel job (ssa_repro/jobs/devices.py) on the GPUs this machine has: the job's
    CUDA device is its placement's, and the process's device comes back after it."""
    from ssa_repro.jobs import devices as dv

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


# ------------------------------------------------- the compiled kernel, checked where it is trusted
# On CPU the same checks run through the uncompiled kernel (tests/test_fast_paths.py, `uncompiled_flex`);
# here the compiled kernel that `auto` takes on CUDA.


@pytest.mark.parametrize("name,kw", WITH_SCORE_MOD)
def test_fused_bidirectional_inference_equals_plain_path_on_cuda(name, kw):
    from ssa_repro.scorers import flex

    s = scorer(name, n_head=2, **kw).cuda()
    for t in (5, 130):
        with torch.inference_mode(), flex.inference_path("fused"):
            q, k, v = (x.detach() for x in qkv(7, 2, t, 16, seed=t))
            y = flex.fused_inference(s, q, k, v, False)
            ref, _ = Scorer.attend(s, q, k, v, None)
        if getattr(s.score_mod(), "causal_only", False):
            assert y is None  # counts keys as q_idx + 1: the plain path serves the encoder
            continue
        assert y is not None, flex._failed
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        ("scorer=ssa", "task=every"),
        ("scorer=temperature", "task=every"),
        ("scorer=ssa", "model.causal=false"),
    ],
)
def test_compiled_model_equals_eager_on_cuda(overrides, fused_calls):
    """Whole models (head width 16, the CUDA kernel's least) through the compiled kernel under `auto`,
    against model.attn_impl=eager with the same weights: every attention call fused."""
    cfg = make_cfg(*overrides, "model.max_positions=256", "model.n_head=2", "model.n_embd=32")
    torch.manual_seed(0)
    auto = build_model(cfg.model, cfg.scorer).cuda().eval()
    cfg.model.attn_impl = "eager"
    eager = build_model(cfg.model, cfg.scorer).cuda().eval()
    eager.load_state_dict(auto.state_dict())
    g = torch.Generator(device="cuda").manual_seed(0)
    for t in (10, 80, 200):
        tokens = torch.randn(16, t, 1, device="cuda", generator=g)
        with torch.inference_mode():
            torch.testing.assert_close(auto(tokens), eager(tokens), rtol=1e-4, atol=1e-4)
    assert fused_calls and all(fused_calls)


def test_compiled_fused_inference_with_alibi_equals_plain_on_cuda():
    from ssa_repro.scorers import flex

    cfg = make_cfg("model.pos=alibi", "scorer=ssa", "model.n_head=2", "model.n_embd=32")
    m = build_model(cfg.model, cfg.scorer).cuda().eval()
    x = torch.randn(3, 2 * cfg.model.max_positions, 1, device="cuda")
    with torch.no_grad():
        with flex.inference_path("fused"):
            fused = m(x)
        with flex.inference_path("plain"):
            plain = m(x)
    assert not flex._failed
    torch.testing.assert_close(fused, plain, atol=1e-4, rtol=1e-4)


def test_fused_inference_compiles_once_per_shape_family_on_cuda(caplog, monkeypatch):
    """20 lengths x several batch sizes, and a new scorer instance with other captured values: dynamo's
    caches reset first, so the count does not depend on what ran before (it did, as a CPU test). Measured
    on CPU from a fresh state (torch 2.13): the first call compiles a graph specialised to its sizes, the
    next call with another batch size a dynamic one for T <= block, the first T > block a third; nothing
    after that, and a second scorer instance reuses them. A batch of one takes the plain path (a size-1 dimension would be a graph
    of its own)."""
    from torch._dynamo.utils import counters

    from ssa_repro.scorers import flex

    class HeadScale(Scorer):  # softmax(w_h · x)
        def __init__(self, n_head):
            super().__init__(OmegaConf.create({"name": "head_scale"}), n_head)
            self.w = torch.nn.Parameter(torch.rand(n_head) + 0.5)

        def score_mod(self):
            w = self.w

            def head_scale_mod(x, b, h, q_idx, kv_idx):
                return w[h] * x

            return head_scale_mod

    torch._dynamo.reset()
    monkeypatch.setattr(flex, "_compiled_inference", None)
    monkeypatch.setattr(flex, "_failed", {})
    lengths = list(range(20, 420, 20))  # the quantifier grid's 20 lengths (10..200 numbers), in tokens
    first_long = next(t for t in lengths if t > 128)  # the CUDA block size
    new_graphs_at = []
    with caplog.at_level("INFO", logger="ssa_repro.evaluate"), torch.inference_mode():
        for instance, s in enumerate((HeadScale(2).cuda(), HeadScale(2).cuda())):
            for t in lengths:
                for bsz in (2, 5, 37):
                    before = counters["stats"]["unique_graphs"]
                    q, k, v = (x.detach() for x in qkv(bsz, 2, t, 16))
                    assert flex.fused_inference(s, q, k, v, causal=True) is not None
                    if counters["stats"]["unique_graphs"] != before:
                        new_graphs_at.append((instance, t, bsz))
            q1 = [x.detach() for x in qkv(1, 2, 9, 16)]
            assert flex.fused_inference(s, *q1, causal=True) is None  # B = 1: plain
    assert new_graphs_at == [(0, 20, 2), (0, 20, 5), (0, first_long, 2)]
    compiled = [r.getMessage() for r in caplog.records if "compiling FlexAttention" in r.getMessage()]
    assert len(compiled) == 3 and all("HeadScale" in m and " took " in m for m in compiled)


# ---------------------------------------------------------------- the fused SSA kernel (ssa_repro/kernels/)
# The checks of tests/test_kernels.py (there through Triton's interpreter) compiled on the GPU, larger:
# T = 300 (blocks of 64: a partial last block), head widths 8 (padded to 16) to 128, the three dtypes.
# fp32 runs IEEE matmuls, but tl.exp/tl.log are the GPU's fast approximations (a few ulp) summed over
# 300 keys: 1e-4. bf16/fp16: as in tests/test_kernels.py (weights rounded to the input dtype before the
# value matmul).
KERNEL_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 3e-2), torch.float16: (5e-3, 5e-3)}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [8, 16, 64, 128])
def test_ssa_kernel_equals_float64_reference_on_cuda(d, dtype, causal):
    from tests.test_kernels import B_EXT, N_EXT, compare  # skips where triton is missing

    g = torch.Generator(device="cuda").manual_seed(d)
    q, k, v = (torch.randn(2, 3, 300, d, device="cuda", generator=g) for _ in range(3))
    kpm = torch.ones(2, 300, dtype=torch.bool, device="cuda")
    kpm[1, :70] = False  # under the causal mask, rows 0-69 of sequence 1 see no key: output 0
    kpm[1, 250:] = False
    y = compare(q, k, v, B_EXT, N_EXT, causal, kpm, dtype=dtype, tol=KERNEL_TOL[dtype])
    if causal:
        assert torch.equal(y[1, :, :70], torch.zeros_like(y[1, :, :70]))


def test_ssa_kernel_edge_cases_on_cuda():
    from tests.test_kernels import compare

    g = torch.Generator(device="cuda").manual_seed(0)
    one = [torch.randn(3, 2, 1, 32, device="cuda", generator=g) for _ in range(3)]  # T = 1: y = v
    y = compare(
        *one, torch.tensor([0.8, 2.0]), torch.tensor([1.5, 1.0]), causal=True, tol=KERNEL_TOL[torch.float32]
    )
    torch.testing.assert_close(y, one[2])
    _, k, v = (torch.randn(2, 2, 100, 64, device="cuda", generator=g) for _ in range(3))
    q = torch.zeros_like(k)  # every logit exactly 0: t'(0) = n·b; b, n fixed (no gradient)
    compare(
        q,
        k,
        v,
        torch.tensor([0.5, 3.0]),
        torch.tensor([2.0, 1.0]),
        causal=True,
        learn_bn=False,
        tol=KERNEL_TOL[torch.float32],
    )


@pytest.mark.parametrize("impl", ["triton", "auto"])
def test_model_through_the_ssa_kernel_equals_eager_on_cuda(impl, monkeypatch):
    """Training (grad enabled) through the kernel: model.attn_impl=triton, and auto, which takes it for
    SSA on CUDA; outputs and every parameter gradient equal model.attn_impl=eager's (same weights)."""
    pytest.importorskip("triton")
    from ssa_repro.models import attention

    calls = []
    real = attention.ssa_attention
    monkeypatch.setattr(attention, "ssa_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    monkeypatch.setattr(attention, "AUTO_TRITON", True)  # what auto does where the kernel is chosen
    cfg = make_cfg("scorer=ssa", "model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.pos=rope")
    cfg.model.attn_impl = impl
    torch.manual_seed(0)
    fused = build_model(cfg.model, cfg.scorer).cuda()
    cfg.model.attn_impl = "eager"
    plain = build_model(cfg.model, cfg.scorer).cuda()
    plain.load_state_dict(fused.state_dict())
    tokens = torch.randn(8, 150, 1, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    results = []
    for m in (fused, plain):
        out = m(tokens)
        out.square().mean().backward()
        results.append([out.detach()] + [p.grad for p in m.parameters()])
    assert len(calls) == 2  # both layers of the fused model, none of the eager one
    for a, r in zip(*results):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
def test_hf_attn_impl_triton_equals_plain_on_cuda(arch):
    """ssa_repro.hf with attn_impl='triton' on a GPU (compiled kernels, not the interpreter): every layer
    calls the kernel and the output and the gradients of b and n equal attn_impl='plain'
    (tests/test_hf.py checks the same under the interpreter on CPU)."""
    pytest.importorskip("triton")
    hf_tests = pytest.importorskip("tests.test_hf")
    build = {"gpt2": hf_tests.gpt2, "llama": hf_tests.llama, "bert": hf_tests.bert}[arch]
    padding = "left" if arch == "llama" else "right"
    calls = []
    real = hf_tests.H.attention.ssa_attention

    def counted(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    torch.manual_seed(0)
    base = build()
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hf_tests.H.attention, "ssa_attention", counted)
        for impl in ("triton", "plain"):
            model = hf_tests.H.attach(copy.deepcopy(base), scorer="ssa", attn_impl=impl)
            hf_tests.perturb(model)  # on the CPU (its generator), before the move
            model = model.cuda()
            ids, mask = (z.cuda() for z in hf_tests.batch(padding))
            h = hf_tests.hidden(model, ids, mask)
            real_rows = mask.bool()
            (h[real_rows] ** 2).sum().backward()
            scorers = [getattr(m, hf_tests.SCORER_ATTR) for _, m in hf_tests.attention_modules(model)]
            out[impl] = (h[real_rows].detach(), [p.grad for s in scorers for p in (s.beta, s.nu)])
    assert len(calls) == 2
    torch.testing.assert_close(out["triton"][0], out["plain"][0], atol=2e-5, rtol=1e-5)
    for g, r in zip(out["triton"][1], out["plain"][1], strict=True):
        torch.testing.assert_close(g, r, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("setting", ["true", "reduce-overhead"])
def test_compiled_training_on_cuda_matches_eager(setting, tmp_path):
    """train.compile=true and =reduce-overhead (CUDA graphs) change speed, not the numbers: the logged
    losses of a few steps at one prompt length equal the eager run's to float32 rounding."""
    from ssa_repro.training.metrics_log import read_metrics
    from ssa_repro.training.trainer import train

    base = ("scorer=ssa", "device=cuda", "evaluation.enabled=false", "train.steps=6", "curriculum.start=8")
    base += ("curriculum.end=8",)
    train(make_cfg(*base, "train.compile=false"), tmp_path / "eager")
    train(make_cfg(*base, f"train.compile={setting}"), tmp_path / "compiled")
    a = read_metrics(tmp_path / "eager" / "metrics.jsonl")
    b = read_metrics(tmp_path / "compiled" / "metrics.jsonl")
    assert [r["step"] for r in a] == [r["step"] for r in b] and a
    for ra, rb in zip(a, b):
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4)


def test_a_batch_drawn_for_cuda_holds_the_cpu_draws_values():
    """draw_batch to CUDA (pinned, non-blocking copies) gives the CPU draw's values, on the GPU; an
    ensemble's stacked leaves likewise."""
    from ssa_repro.tasks import build_task, curriculum
    from ssa_repro.training.stacking import stack_batches
    from ssa_repro.training.trainer import draw_batch

    cfg = make_cfg("task=linear")
    task = build_task(cfg.task)
    stage = curriculum.stage(cfg.curriculum, 0)
    on_cpu = draw_batch(task, 3, 8, stage, torch.Generator().manual_seed(1), "cpu")
    on_gpu = draw_batch(task, 3, 8, stage, torch.Generator().manual_seed(1), "cuda")
    torch.cuda.synchronize()
    for name in ("tokens", "targets", "pred_idx", "xs"):
        assert getattr(on_gpu, name).device.type == "cuda"
        assert torch.equal(getattr(on_gpu, name).cpu(), getattr(on_cpu, name))
    leaves, _, _ = stack_batches([on_cpu, on_cpu], "cuda")
    torch.cuda.synchronize()
    assert torch.equal(leaves[0].cpu(), torch.stack([on_cpu.tokens, on_cpu.tokens]))
