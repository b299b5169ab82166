"""GPT-2-style transformer (pre-LN blocks, learned positions by default, dropout 0), for numbers or for tokens.

``model.pos`` chooses the position scheme (ssa_repro/models/positions/): GPT-2's learned table (the
default), none, sinusoidal, RoPE, ALiBi or T5 buckets; only the learned table bounds the prompt length.

``model.vocab_size=0`` (the ICL tasks): each token is one scalar, mapped to the width by a linear
read-in; a linear read-out maps each output vector back to one scalar (the prediction, or a logit for
classification tasks). There is no token table: the paper's 22.5M count for its 12L/8H/256 model
includes HuggingFace GPT2Model's unused 50257×256 word embedding, so the same model counts about 9.6M
here. ``model.vocab_size=V`` (language modelling): a token table [V, C] in, and the same table as the
output projection (tied weights): tokens [B, T] long -> logits [B, T, V].

``model.causal=false`` makes it a bidirectional encoder (masked LM); ``model.post_ln=true`` puts each
LayerNorm after the residual add (BERT/RoBERTa) instead of before it (GPT-2), with no final LayerNorm.
``model.emb_ln`` puts a LayerNorm on the embeddings before the first block (default: as ``post_ln``, as
BERT does and GPT-2 does not), so LayerNorm placement and the embedding LayerNorm can be varied apart
(the 2 × 2 of the ICL study); ``model.final_ln=false`` drops a pre-LN model's final LayerNorm (without it
nothing bounds the read-out's input, which separates the architecture's bound from attention's).

Model kinds (``model=``): ``gpt2`` (attention + MLP blocks), ``attn_only`` (no MLP), ``ff_only`` (no
attention: each position is processed alone, so no in-context learning is possible; the paper's
ablation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ssa_repro.core.enums import value_of
from ssa_repro.core.registry import Registry
from ssa_repro.core.schema import ModelConfig
from ssa_repro.models.attention import SelfAttention
from ssa_repro.models.positions import LearnedPositions, build_positions

MODELS: Registry = Registry("model")
MODEL_KEYS = set(ModelConfig.__dataclass_fields__)


@dataclass(frozen=True)
class Blocks:
    attention: bool
    mlp: bool


MODELS.register("gpt2")(Blocks(attention=True, mlp=True))
MODELS.register("attn_only")(Blocks(attention=True, mlp=False))
MODELS.register("ff_only")(Blocks(attention=False, mlp=True))
# the masked LM's encoder: gpt2's blocks; conf/model/encoder.yaml sets causal=false and post_ln=true
MODELS.register("encoder")(Blocks(attention=True, mlp=True))


class MLP(nn.Module):
    def __init__(self, n_embd: int, ratio: int):
        super().__init__()
        self.fc = nn.Linear(n_embd, ratio * n_embd)
        self.act = nn.GELU(approximate="tanh")  # GPT-2's gelu_new
        self.proj = nn.Linear(ratio * n_embd, n_embd)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg, scorer_cfg, blocks: Blocks, layer: int = 0):
        super().__init__()
        self.attn = self.mlp = None
        self.post_ln = cfg.post_ln
        if blocks.attention:
            self.ln_1 = nn.LayerNorm(cfg.n_embd)
            self.attn = SelfAttention(
                cfg.n_embd,
                cfg.n_head,
                scorer_cfg,
                causal=cfg.causal,
                impl=value_of(cfg.attn_impl),
                layer=layer,
            )
        if blocks.mlp:
            self.ln_2 = nn.LayerNorm(cfg.n_embd)
            self.mlp = MLP(cfg.n_embd, cfg.mlp_ratio)

    def forward(self, x, need_weights: bool = False, pos=None):
        w = None
        if self.attn is not None:
            if self.post_ln:  # x = LN(x + attn(x))
                a, w = self.attn(x, need_weights, pos)
                x = self.ln_1(x + a)
            else:  # x = x + attn(LN(x))
                a, w = self.attn(self.ln_1(x), need_weights, pos)
                x = x + a
        if self.mlp is not None:
            x = self.ln_2(x + self.mlp(x)) if self.post_ln else x + self.mlp(self.ln_2(x))
        return x, w


class Transformer(nn.Module):
    def __init__(self, cfg, scorer_cfg):
        super().__init__()
        cfg = model_config(cfg)
        blocks = MODELS.get(cfg.name)
        self.max_positions = cfg.max_positions
        self.n_embd = cfg.n_embd  # the residual width (evaluation sizes its batches by it)
        self.vocab_size = cfg.vocab_size
        if self.vocab_size:
            self.wte = nn.Embedding(self.vocab_size, cfg.n_embd)  # also the LM head (tied)
        else:
            self.read_in = nn.Linear(cfg.n_in, cfg.n_embd)  # [B, T, n_in] -> [B, T, C]
        # model.pos (models/positions/); learned is an nn.Embedding created here, as it always was, so
        # existing configs consume the same random numbers and keep the state-dict key wpe.weight
        positions = build_positions(cfg)
        if isinstance(positions, LearnedPositions):
            self.wpe = positions
        else:
            self.positions = positions
        self.blocks = nn.ModuleList(Block(cfg, scorer_cfg, blocks, layer=i) for i in range(cfg.n_layer))
        # pre-LN: the final LayerNorm; post-LN: blocks end normalised, so it normalises the embeddings (BERT)
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.post_ln = cfg.post_ln
        self.emb_ln = self.post_ln if cfg.emb_ln is None else cfg.emb_ln
        self.final_ln = cfg.final_ln and not self.post_ln
        if self.emb_ln and not self.post_ln:  # post-LN uses ln_f here (its blocks end normalised)
            self.ln_e = nn.LayerNorm(cfg.n_embd)  # deterministic init: consumes no random numbers
        if not self.vocab_size:
            self.read_out = nn.Linear(cfg.n_embd, 1)
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def hidden(self, tokens: torch.Tensor, need_weights: bool = False):
        """The final hidden states [B, T, C] (before the read-out or LM head), and the list of [B, H, T, T]
        attention maps (empty unless need_weights). Heads applied to a few positions only (the masked
        LM) start from here."""
        t = tokens.shape[1]
        scheme = self.position_scheme
        if scheme.table and t > self.max_positions:
            raise ValueError(f"prompt of {t} tokens exceeds model.max_positions={self.max_positions}")
        x = self.wte(tokens) if self.vocab_size else self.read_in(tokens)  # [B, T, C]
        emb = scheme.embedding(t, x.device)
        if emb is not None:
            x = x + emb
        pos = scheme.context(t, x.device)  # rotary angles / logit bias, shared by the layers
        if self.emb_ln:
            x = self.ln_f(x) if self.post_ln else self.ln_e(x)
        maps = []
        for block in self.blocks:
            x, w = block(x, need_weights, pos)
            if w is not None:
                maps.append(w)
        if self.final_ln:
            x = self.ln_f(x)
        return x, maps

    def forward(self, tokens: torch.Tensor, need_weights: bool = False):
        """tokens [B, T, 1] float -> outputs [B, T]; with a vocabulary, tokens [B, T] long -> logits
        [B, T, V]. With need_weights, also a list of [B, H, T, T] maps, one per attention layer."""
        x, maps = self.hidden(tokens, need_weights)
        if self.vocab_size:
            out = x @ self.wte.weight.T  # [B, T, V], tied head
        else:
            out = self.read_out(x).squeeze(-1)  # [B, T]
        return (out, maps) if need_weights else out

    def logits_at(self, tokens: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        """Token logits [N, V] at the positions where ``select`` [B, T] (bool) is true, row-major: the
        tied head runs only where a prediction is scored (the masked LM: 15% of positions in training,
        one per masked copy in Zorro); equal to ``self(tokens)[select]`` (tested)."""
        return self.hidden(tokens)[0][select] @ self.wte.weight.T

    @property
    def position_scheme(self):
        """The ``model.pos`` module (``wpe`` for learned positions, ``positions`` otherwise)."""
        return self.wpe if hasattr(self, "wpe") else self.positions

    def scorer_stats(self) -> dict[str, torch.Tensor]:
        """{"b": [L, H|1], ...}: each scorer statistic stacked over the attention layers."""
        per_layer = [b.attn.scorer.stats() for b in self.blocks if b.attn is not None]
        if not per_layer or not per_layer[0]:
            return {}
        return {k: torch.stack([s[k] for s in per_layer]) for k in per_layer[0]}


def model_config(cfg) -> DictConfig:
    """A ``model`` config (a node of the run's config, or a partial dict) over :class:`ModelConfig`:
    keys it lacks take the schema's defaults, so no reader restates them. Keys the schema does not
    have are not the model's (a retired key in an old run folder) and are left out."""
    if isinstance(cfg, DictConfig) and MODEL_KEYS <= set(cfg):
        return cfg  # composed over the schema already (a run's config)
    given = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    known = {k: v for k, v in given.items() if k in MODEL_KEYS}
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), known)


def build_model(cfg, scorer_cfg) -> Transformer:
    return Transformer(cfg, scorer_cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
