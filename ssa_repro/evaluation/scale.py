"""The scale that reaches each part of the model as the inputs grow: which normalisation does the work?

A model trained on x ~ N(0, 1) fails at σ = 16 under pre-LN and not under post-LN or with a LayerNorm on
the embeddings (icl_cpu's LayerNorm 2 × 2). This evaluation measures, for prompts with x ~ N(0, σ) at
the training length (the same prompts for every model: ``seed``), the root mean square

    rms(z) = sqrt(mean over the prompt's tokens and channels of z²)

of what each site receives, per prompt, averaged over ``n_prompts`` prompts (a positive metric:
interval on the log scale, stats/intervals.py):

- ``residual``: the residual stream entering block l (layer 0: read-in + positions, after the embedding
  LayerNorm where there is one);
- ``attn_input``: what layer l's attention projects to queries, keys and values (after ``ln_1`` in a
  pre-LN block; the residual stream itself in a post-LN block);
- ``logits``: rms of the attention logits q·k/√d_head over the (query, key) pairs a causal model sees,
  averaged over heads (what the scorer transforms; position biases and rotations not included);
- ``attn_output``: what layer l's attention adds to the residual stream;
- ``attn_share``: per prompt rms(attn_output) / rms(residual) of layer l: how much of the stream the
  attention's contribution is (a pre-LN block normalises what attention reads, not the stream it writes
  to: an unnormalised stream that grows with σ drowns what attention adds);
- ``readout_input``: what the read-out sees (after the final LayerNorm where there is one).

Read against σ, a site whose rms stays flat is normalised before it; one that grows ∝ σ is not. The
ratio rms(σ_max) / rms(σ_min) per site is in the summary; a study reads it per seed (reports/icl_cells.py).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from ssa_repro.core import plotting
from ssa_repro.evaluation import checks
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.stats.intervals import summarize

log = logging.getLogger("ssa_repro.evaluate")

SITES = ("residual", "attn_input", "logits", "attn_output", "attn_share", "readout_input")


def rms(z: torch.Tensor) -> torch.Tensor:
    """Per prompt: sqrt(mean z²) over every dimension but the first ([B, ...] -> [B], float64)."""
    return z.double().pow(2).flatten(1).mean(1).sqrt()


def logit_rms(qkv: torch.Tensor, n_head: int, causal: bool) -> torch.Tensor:
    """rms of q·k/√d over the visible (query, key) pairs, averaged over heads: ``qkv`` [B, T, 3C] (the
    attention's projection output) -> [B]."""
    bsz, t, c3 = qkv.shape
    c = c3 // 3
    q, k, _ = qkv.double().split(c, dim=2)
    q, k = (z.view(bsz, t, n_head, c // n_head).transpose(1, 2) for z in (q, k))  # [B, H, T, d]
    x = q @ k.transpose(-2, -1) / math.sqrt(c // n_head)  # [B, H, T, T]
    seen = torch.ones(t, t, dtype=torch.bool, device=x.device)
    if causal:
        seen = seen.tril()
    sq = (x.pow(2) * seen).sum((-2, -1)) / seen.sum()  # [B, H]
    return sq.sqrt().mean(1)


@torch.inference_mode()
def site_rms(model, tokens: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
    """{(site, layer): [B]} for one batch of ``tokens`` [B, T, n_in], through forward hooks."""
    out: dict[tuple[str, int], torch.Tensor] = {}
    hooks = []
    blocks = list(model.blocks)

    def keep(site, layer):
        def pre(_module, args):
            out[(site, layer)] = rms(args[0]).cpu()

        return pre

    for i, block in enumerate(blocks):
        hooks.append(block.register_forward_pre_hook(keep("residual", i)))
        attn = getattr(block, "attn", None)
        if attn is None:
            continue
        hooks.append(attn.register_forward_pre_hook(keep("attn_input", i)))

        def logits(_module, _args, y, i=i, attn=attn):
            out[("logits", i)] = logit_rms(y, attn.n_head, attn.causal).cpu()

        def written(_module, _args, y, i=i):  # SelfAttention returns (output [B, T, C], weights)
            out[("attn_output", i)] = rms(y[0] if isinstance(y, tuple) else y).cpu()

        hooks.append(attn.qkv.register_forward_hook(logits))
        hooks.append(attn.register_forward_hook(written))
    if getattr(model, "read_out", None) is not None:
        hooks.append(model.read_out.register_forward_pre_hook(keep("readout_input", 0)))
    try:
        model(tokens)
    finally:
        for h in hooks:
            h.remove()
    for (site, layer), v in list(out.items()):
        if site == "attn_output":
            out[("attn_share", layer)] = v / out[("residual", layer)]
    return out


@dataclass
class ScaleConfig(EvalConfig):
    """The rms of what each site of the model receives, against the input scale σ."""

    name: str = "scale"
    length: int | None = None  # examples per prompt; null = the run's curriculum.end (training length)
    sigmas: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0, 16.0])
    n_prompts: int = 128
    batch_size: int = 64
    seed: int = 1234


@EVALUATORS.register("scale", schema=ScaleConfig)
class Scale(Evaluator):
    """Cells: one per σ (every site and layer in each)."""

    name = "scale"
    axes = ("sigmas",)
    fills_length = "length"
    coords = ("sigma_x",)

    @classmethod
    def applies_to(cls, task) -> bool:
        """In-context tasks of numeric inputs (a grid, and no token vocabulary)."""
        return task.evaluation is not None and task.evaluation.grid is not None and not task.tokens

    def check(self) -> list[str]:
        cfg = self.cfg
        out = checks.prompt_length(cfg.length, self.task.stride(), self.run_cfg.model)
        out += checks.positive_values("sigmas", cfg.sigmas)
        if cfg.n_prompts < 2:
            out.append(f"eval.n_prompts={cfg.n_prompts} must be >= 2")
        if cfg.batch_size < 1:
            out.append(f"eval.batch_size={cfg.batch_size} must be >= 1")
        return out

    def cells(self) -> list[dict]:
        return [{"sigma_x": float(s)} for s in self.cfg.sigmas]

    def compute(self, run, cells, progress):
        c = self.cfg
        log.info(
            "scale: %d σ × %d prompts of %d examples, on %s", len(cells), c.n_prompts, c.length, run.device
        )
        for cell in cells:
            sigma = cell["sigma_x"]
            g = cell_generator(c.seed, sigma, c.length)  # the same prompts for every model
            per: dict[tuple[str, int], list[torch.Tensor]] = {}
            left = c.n_prompts
            while left > 0:
                bsz = min(c.batch_size, left)
                left -= bsz
                b = run.task.sample(bsz, c.length, g, "cpu", {"sigma_x": float(sigma)})
                for key, v in site_rms(run.model, b.tokens.to(run.device)).items():
                    per.setdefault(key, []).append(v)
            rows = []
            for (site, layer), parts in sorted(per.items(), key=lambda kv: (SITES.index(kv[0][0]), kv[0][1])):
                s = summarize(torch.cat(parts).numpy(), "positive")
                rows.append(
                    {
                        **run.labels,
                        "sigma_x": float(sigma),
                        "site": site,
                        "layer": int(layer),
                        "length": int(c.length),
                        "predictor": "model",
                        "metric": "rms",
                        **s,
                    }
                )
            yield {"results": pd.DataFrame(rows)}
            progress.update(1)

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        frame = frames["results"]
        if not len(frame) or not plotting.enabled():
            return []
        plt = plotting.plt
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for (site, layer), d in frame.groupby(["site", "layer"], sort=False):
            d = d.sort_values("sigma_x")
            ax.plot(d.sigma_x, d.value, marker="o", label=f"{site} (layer {layer})")
        s = frame.sigma_x.sort_values().unique()
        ax.plot(s, s / s[0] * frame[frame.sigma_x == s[0]].value.max(), "k:", label="∝ σ")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("σ of the inputs, x ~ N(0, σ) (log scale)")
        ax.set_ylabel("rms of what the site receives (log scale)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
        ax.set_title(
            f"{title}\nthe scale reaching each site ({int(frame.length.iloc[0])} examples)", fontsize=9
        )
        return plotting.save(fig, out_dir / "scale_by_sigma")

    def summarize(self, frames) -> dict:
        """Per site and layer: rms at the smallest and the largest σ and their ratio."""
        frame = frames["results"]
        if not len(frame):
            return {}
        lo, hi = frame.sigma_x.min(), frame.sigma_x.max()
        out = {}
        for (site, layer), d in frame.groupby(["site", "layer"], sort=False):
            a = d[d.sigma_x == lo].value
            b = d[d.sigma_x == hi].value
            if len(a) and len(b):
                out[f"{site}_{layer}"] = {
                    f"rms_sigma_{lo:g}": float(a.iloc[0]),
                    f"rms_sigma_{hi:g}": float(b.iloc[0]),
                    "ratio": float(b.iloc[0] / a.iloc[0]),
                }
        return {"scale": out}
