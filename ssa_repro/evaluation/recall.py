"""Where an associative-recall query looks, as the number of pairs grows (``eval=recall``; issue 59).

For a recall task (MQAR: ``k_1 v_1 … k_n v_n q_1 … q_n``, q_j = k_π(j)), per attention layer ℓ and
test length n (pairs), over ``n_prompts`` prompts and every query row q_j:

    pair_weight           (1/H) Σ_h  w^ℓ_h(q_j → k_π(j)) + w^ℓ_h(q_j → v_π(j))
                          the attention the query puts on its own pair (key and value positions),
                          averaged over heads and query rows
    pair_weight_max_head  max_h of the same, per prompt (the head that does the recall)
    entropy               (1/H) Σ_h  −Σ_s p_hs log p_hs of the query row, p = |w| / Σ|w| (nats)

with a 95% interval over prompts. Rows with ``predictor=uniform`` give what uniform attention over the
visible keys scores on the same rows (pair weight 2 / #visible, entropy log #visible; #visible = the
query's position + 1 under a causal mask, the prompt's length otherwise). The question this answers
(Scalable-Softmax, Nakanishi 2025): as n grows, does a scorer's weight on the queried pair stay
concentrated, or spread towards 2 / #visible like a softmax whose logits do not grow with n?

The task says where a query's pair is (``recall_positions(batch)``): a new recall task that provides it
gets this evaluation without a change here. ``lengths`` null: the training length ×1, ×4, ×16
(``curriculum.end`` pairs), the extrapolation range of the length grids.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ssa_repro.core import plotting
from ssa_repro.core.plotting import plt, save
from ssa_repro.evaluation.attention_maps import attention_chunk
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.models.positions import position_limit
from ssa_repro.stats.intervals import summarize

log = logging.getLogger("ssa_repro.evaluate")

KINDS = {"pair_weight": "rate", "pair_weight_max_head": "rate", "entropy": "real"}
MULTIPLES = (1, 4, 16)  # lengths null: these multiples of the training length


@dataclass
class RecallConfig(EvalConfig):
    """Attention on the queried pair and attention entropy per layer, against the number of pairs."""

    name: str = "recall"
    lengths: list[int] | None = None  # pairs per prompt; null = curriculum.end × 1, 4, 16
    n_prompts: int = 256
    batch_size: int = 32
    seed: int = 1234


def pair_stats(w: torch.Tensor, query_pos: torch.Tensor, pair_pos: torch.Tensor) -> dict[str, torch.Tensor]:
    """One layer's statistics per prompt: ``w`` [B, H, T, S] weights, ``query_pos`` [P] the query rows,
    ``pair_pos`` [B, P, 2] the key and value positions of each query's pair -> {metric: [B]}."""
    mag = w.double().abs()[:, :, query_pos]  # [B, H, P, S]
    rows = mag / mag.sum(-1, keepdim=True).clamp_min(1e-30)  # attention mass per query row
    idx = pair_pos[:, None].expand(-1, w.shape[1], -1, -1)  # [B, H, P, 2]
    on_pair = rows.gather(-1, idx).sum(-1)  # [B, H, P]
    entropy = -torch.special.xlogy(rows, rows).sum(-1)  # [B, H, P]
    return {
        "pair_weight": on_pair.mean((1, 2)),
        "pair_weight_max_head": on_pair.mean(2).amax(1),
        "entropy": entropy.mean((1, 2)),
    }


def uniform_pair_stats(query_pos: torch.Tensor, t: int, causal: bool, batch: int) -> dict[str, torch.Tensor]:
    """What uniform attention over the visible keys scores on the same rows: {metric: [batch]}."""
    visible = (query_pos.double() + 1) if causal else torch.full(query_pos.shape, float(t))
    weight = (2.0 / visible).mean().expand(batch)
    return {
        "pair_weight": weight,
        "pair_weight_max_head": weight,
        "entropy": visible.log().mean().expand(batch),
    }


@torch.inference_mode()
def recall_rows(model, task, n: int, *, n_prompts, batch_size, seed, device, base) -> list[dict]:
    """Rows of one cell (``n`` pairs): per layer and metric for the model, per metric for uniform."""
    g = cell_generator(seed, n)
    per: list[dict[str, list]] = []
    uniform: dict[str, list] = {}
    causal = all(b.attn.causal for b in model.blocks if b.attn is not None)
    left = n_prompts
    while left > 0:
        bsz = min(batch_size, left)
        left -= bsz
        b = task.sample(bsz, n, g, "cpu")
        query_pos, pair_pos = task.recall_positions(b)  # [P], [B, P, 2]
        tokens = b.tokens.to(device)
        chunk = attention_chunk(model, tokens.shape[1])
        for i in range(0, bsz, chunk):
            _, maps = model(tokens[i : i + chunk], need_weights=True)
            for layer, w in enumerate(maps):
                if len(per) <= layer:
                    per.append({})
                for k, v in pair_stats(w.cpu(), query_pos, pair_pos[i : i + chunk]).items():
                    per[layer].setdefault(k, []).append(v)
        for k, v in uniform_pair_stats(query_pos, tokens.shape[1], causal, bsz).items():
            uniform.setdefault(k, []).append(v)
    rows = []
    for layer, stats in [*enumerate(per), (None, uniform)]:
        for metric, parts in stats.items():
            s = summarize(torch.cat(parts).numpy(), KINDS[metric])
            rows.append(
                {
                    **base,
                    "predictor": "model" if layer is not None else "uniform",
                    "layer": np.nan if layer is None else layer,
                    "length": int(n),
                    "metric": metric,
                    **s,
                }
            )
    return rows


@EVALUATORS.register("recall", schema=RecallConfig)
class Recall(Evaluator):
    """Cells: one per number of pairs (``length``)."""

    name = "recall"
    axes = ("lengths",)
    coords = ("length",)

    @classmethod
    def applies_to(cls, task) -> bool:
        """Recall tasks: those that say where each query's pair is (``recall_positions``)."""
        return task.evaluation is not None and callable(getattr(task, "recall_positions", None))

    def resolve(self) -> None:
        if self.cfg.lengths is None:
            end = int(self.run_cfg.curriculum.end)
            self.cfg.lengths = [m * end for m in MULTIPLES]

    def check(self) -> list[str]:
        c, out = self.cfg, []
        if self.run_cfg.model.name == "ff_only":
            return ["eval=recall needs a model with attention, not model=ff_only"]
        if not c.lengths or any(int(n) < 1 for n in c.lengths):
            out.append(f"eval.lengths={list(c.lengths or [])} must be a non-empty list of pair counts >= 1")
        for key in ("n_prompts", "batch_size"):
            if c[key] < 1:
                out.append(f"eval.{key}={c[key]} must be >= 1")
        limit = position_limit(self.run_cfg.model)
        if c.lengths and limit is not None and self.task.n_tokens(max(c.lengths)) > limit:
            out.append(
                f"eval.lengths reach {max(c.lengths)} pairs = {self.task.n_tokens(max(c.lengths))} tokens, "
                f"more than model.max_positions={limit}"
            )
        if c.lengths:
            out += self.task.grid_problems([1.0], list(c.lengths), prefix="eval")
        return out

    def cells(self) -> list[dict]:
        return [{"length": int(n)} for n in self.cfg.lengths]

    def compute(self, run, cells, progress):
        c = self.cfg
        log.info("recall: %d lengths × %d prompts, on %s", len(cells), c.n_prompts, run.device)
        for cell in cells:
            rows = recall_rows(
                run.model,
                run.task,
                cell["length"],
                n_prompts=c.n_prompts,
                batch_size=c.batch_size,
                seed=c.seed,
                device=run.device,
                base=run.labels,
            )
            yield {"results": pd.DataFrame(rows)}
            progress.update(1)

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        frame = frames["results"]
        if frame.empty or not plotting.enabled():
            return []
        metrics = ("pair_weight_max_head", "entropy")
        fig, axs = plt.subplots(1, 2, figsize=(7.5, 2.8))
        for ax, metric in zip(axs, metrics):
            d = frame[frame.metric == metric]
            for layer, g in d[d.predictor == "model"].groupby("layer"):
                g = g.sort_values("length")
                ax.plot(g.length, g.value, "o-", ms=3, label=f"layer {int(layer)}")
            u = d[d.predictor == "uniform"].sort_values("length")
            ax.plot(u.length, u.value, "k--", lw=0.8, label="uniform")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("pairs in the prompt", fontsize=8)
            ax.set_ylabel(metric.replace("_", " "), fontsize=8)
            ax.tick_params(labelsize=7)
        axs[0].legend(fontsize=6)
        fig.suptitle(f"{title}\nattention on the queried pair", fontsize=8)
        fig.tight_layout()
        return save(fig, out_dir / "recall_attention")

    def summarize(self, frames) -> dict:
        frame = frames["results"]
        model = frame[frame.predictor == "model"]
        return {
            metric: {
                f"layer {int(k)}": dict(zip(g.length.tolist(), g.value.tolist()))
                for k, g in model[model.metric == metric].groupby("layer")
            }
            for metric in KINDS
        }
