"""``model.pos=rope`` (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding",
arXiv 2104.09864): q and k of position m are rotated, pair by pair, by the angles m·θ_i,

    θ_i = base^(−2i/D),  i = 0 .. D/2 − 1,     base = ``model.rope_base`` (10000),  D = the head width

so that q_m·k_n = Re Σ_i q̃_i conj(k̃_i) e^{i(m−n)θ_i} depends on the positions only through m − n.
Pairs are (x_i, x_{i+D/2}) (GPT-NeoX's half split, as HF Llama; the original pairs neighbours — the
same function up to a fixed permutation of q's and k's coordinates). Applied before scoring, so it
composes with every scorer and with the fused path unchanged. No table and no parameters."""

from __future__ import annotations

import torch

from ssa_repro.models.positions.base import PositionContext, Positions


def rope_angles(t: int, d: int, base: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of m·θ_i, each [T, D/2] float32 (computed in float64: m·θ_0 = m is large at long T)."""
    inv_freq = base ** (-torch.arange(0, d, 2, device=device, dtype=torch.float64) / d)  # [D/2]
    ang = torch.arange(t, device=device, dtype=torch.float64)[:, None] * inv_freq  # [T, D/2]
    return ang.cos().float(), ang.sin().float()


class RotaryPositions(Positions):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.head_dim = cfg.n_embd // cfg.n_head
        self.base = float(cfg.rope_base)

    @classmethod
    def check_config(cls, cfg):
        out = []
        if cfg.n_head >= 1 and (cfg.n_embd // cfg.n_head) % 2:
            out.append(
                f"model.pos=rope rotates pairs of coordinates: the head width model.n_embd / model.n_head = "
                f"{cfg.n_embd // cfg.n_head} must be even"
            )
        if not cfg.rope_base > 1:
            out.append(f"model.rope_base={cfg.rope_base} must be > 1")
        return out

    def context(self, t, device):
        return PositionContext(rotary=rope_angles(t, self.head_dim, self.base, device))
