"""eval=scale: the rms reaching each site, against closed forms (a linear path scales exactly with the
inputs, a LayerNorm removes the scale) and a direct computation of the logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ssa_repro.evaluation import runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.scale import logit_rms, site_rms
from ssa_repro.jobs.train_job import run_job
from ssa_repro.models import build_model
from tests.conftest import make_cfg


def _model(*overrides):
    cfg = make_cfg("task=every", "task.labels_in_context=false", "model.n_layer=2", *overrides)
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.scorer).eval()
    with torch.no_grad():  # a path with no constant: every linear map scales exactly with its input
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "wpe" in name or "positions" in name:
                p.zero_()
    return model


def _tokens(bsz=3, t=10):
    g = torch.Generator().manual_seed(1)
    return torch.randn(bsz, t, 1, generator=g)


def test_without_any_normalisation_before_it_the_scale_grows_with_the_inputs():
    """Post-LN without the embedding LN: the embeddings and the first attention's input are linear in the
    tokens (ratio c), its logits quadratic (c²); the second layer's input has passed a LayerNorm (ratio 1)."""
    model, x, c = _model("model.post_ln=true", "model.emb_ln=false"), _tokens(), 16.0
    a, b = site_rms(model, x), site_rms(model, c * x)
    torch.testing.assert_close(
        b[("residual", 0)] / a[("residual", 0)], torch.full((3,), c, dtype=torch.float64)
    )
    torch.testing.assert_close(
        b[("attn_input", 0)] / a[("attn_input", 0)], torch.full((3,), c, dtype=torch.float64)
    )
    torch.testing.assert_close(
        b[("logits", 0)] / a[("logits", 0)], torch.full((3,), c * c, dtype=torch.float64)
    )
    ratio = b[("attn_input", 1)] / a[("attn_input", 1)]
    assert torch.allclose(ratio, torch.ones(3, dtype=torch.float64), atol=0.05)  # after a LayerNorm


def test_a_pre_ln_block_normalises_what_its_attention_sees_not_the_residual_stream():
    """Pre-LN (GPT-2): the embeddings grow with the inputs, each attention's input is LayerNorm'd (rms 1 at
    the initial gain, whatever the scale), and so is the read-out's input (the final LayerNorm)."""
    model, x, c = _model(), _tokens(), 16.0
    a, b = site_rms(model, x), site_rms(model, c * x)
    torch.testing.assert_close(
        b[("residual", 0)] / a[("residual", 0)], torch.full((3,), c, dtype=torch.float64)
    )
    # what attention writes does not grow (its input is normalised), the stream it is added to does:
    # its share falls as 1/c wherever the stream is still the embeddings' scale
    # (between two scales, 16 and 256, where nearly every token's LayerNorm input is far above its eps)
    big = site_rms(model, 16 * c * x)
    share = big[("attn_share", 0)] / b[("attn_share", 0)]
    torch.testing.assert_close(share, torch.full((3,), 1 / c, dtype=torch.float64), rtol=0.02, atol=0)
    torch.testing.assert_close(
        b[("attn_share", 0)], b[("attn_output", 0)] / b[("residual", 0)], rtol=1e-12, atol=0
    )
    for site in (("attn_input", 0), ("attn_input", 1), ("readout_input", 0)):
        # a LayerNorm's output has mean square var / (var + eps) per token: at most 1, near 1 once var ≫ eps
        assert (a[site] <= 1 + 1e-12).all() and (b[site] <= 1 + 1e-12).all(), site
        torch.testing.assert_close(b[site], torch.ones(3, dtype=torch.float64), atol=0.02, rtol=0)


def test_the_logit_rms_is_over_the_pairs_a_causal_query_sees():
    g = torch.Generator().manual_seed(2)
    bsz, t, h, d = 2, 5, 2, 3
    qkv = torch.randn(bsz, t, 3 * h * d, generator=g)
    q = qkv[..., : h * d].double().numpy().reshape(bsz, t, h, d)
    k = qkv[..., h * d : 2 * h * d].double().numpy().reshape(bsz, t, h, d)
    want = np.zeros(bsz)
    for i in range(bsz):
        for head in range(h):
            vals = [
                float(q[i, r, head] @ k[i, s, head]) / math.sqrt(d) for r in range(t) for s in range(r + 1)
            ]
            want[i] += math.sqrt(np.mean(np.square(vals))) / h
    np.testing.assert_allclose(logit_rms(qkv, h, causal=True).numpy(), want, rtol=1e-12)
    full = logit_rms(qkv, h, causal=False)
    assert not torch.allclose(full, torch.from_numpy(want))  # the causal mask is what was applied


@pytest.mark.slow  # a 6-step training run and the evaluation through the runner
def test_the_evaluation_stores_one_row_per_sigma_site_and_layer(tmp_path):
    cfg = make_cfg(
        "task=every", "task.labels_in_context=false", "model.n_layer=2", "evaluation.enabled=false"
    )
    run_job(cfg, tmp_path)
    run = load_run(tmp_path, torch.device("cpu"))
    from omegaconf import OmegaConf

    from ssa_repro.evaluation.scale import ScaleConfig

    ecfg = OmegaConf.merge(OmegaConf.structured(ScaleConfig), {"sigmas": [1.0, 16.0], "n_prompts": 4})
    summary = runner.evaluate(run, ecfg)
    rows = runner.store_of(tmp_path, runner.build(ecfg, run.cfg, run.task)[0]).read("results")
    assert set(rows.sigma_x) == {1.0, 16.0}
    assert set(zip(rows.site, rows.layer)) == {
        (site, layer)
        for site in ("residual", "attn_input", "logits", "attn_output", "attn_share")
        for layer in (0, 1)
    } | {("readout_input", 0)}
    assert (rows.value > 0).all() and (rows.n_samples == 4).all()
    s = summary["scale"]["attn_input_0"]
    assert s["ratio"] == pytest.approx(s["rms_sigma_16"] / s["rms_sigma_1"])
    # pre-LN: the attention sees LayerNorm'd tokens, the embeddings grow with σ
    assert s["ratio"] < 1.5 < summary["scale"]["residual_0"]["ratio"]
