"""Speed, measured as ratios in one process: ours vs HF GPT2Model, softmax vs SSA, and vs the matmul peak.

    python scripts/bench.py                      # small and paper-size models on CPU (about 3 minutes)
    python scripts/bench.py --sizes small --reps 20
    python scripts/bench.py --device cuda --bf16 # adds FlexAttention SSA and the 500k-step projection
    python scripts/bench.py --compile            # adds torch.compile variants of ours

Training step (forward + backward + Adam), batch 64, 41 examples (82 tokens), the paper's longest
curriculum prompt. Variants run interleaved (one step of each in turn), so drifts in machine load hit
every variant alike; medians are reported.

- ``ours``: ``ssa_repro`` models (softmax through SDPA, SSA through its fused autograd node).
- ``hf``: the field's setup (Garg et al.; the SSA authors' ICL code): HuggingFace ``GPT2Model`` with the
  same linear read-in/read-out and dropout 0; its SSA registered through HF's attention-function
  interface as plain autograd ops (needs the ``bench`` extra: ``pip install -e '.[bench]'``).
- FLOPs per step: 6 × parameters × tokens + 12 × layers × batch × T² × width (attention matmuls,
  forward and backward), against the float32 (or bf16) matmul peak timed in the same run.
- Evaluation: sequences per second of the quantifier grid (default model, every task) on a slice of
  the paper's grid (all 20 lengths, 2 σ, 2 batches each), and the projected time of the full grid.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import nn

from ssa_repro.models import build_model, count_parameters
from ssa_repro.scorers import SCORERS
from ssa_repro.scorers.base import masked_softmax
from ssa_repro.scorers.ssa import ssa_transform
from ssa_repro.tasks import build_task
from ssa_repro.tasks.linear import LinearTaskConfig

SIZES = {
    "small": dict(name="gpt2", n_layer=4, n_head=4, n_embd=64, max_positions=512, mlp_ratio=4),
    "paper": dict(name="gpt2", n_layer=12, n_head=8, n_embd=256, max_positions=512, mlp_ratio=4),
}
PAPER_STEPS = 500_000


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device, dtype=torch.float32, n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    sync(device)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t)
    return 2 * n**3 / min(times)


# ----------------------------------------------------------------------------- the HF reference
def _hf_ssa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """SSA as an HF attention function, written with plain autograd ops as a user of HF would."""
    x = (query @ key.transpose(-1, -2)) * scaling  # [B, H, T, S]
    b = module.ssa_beta.exp().view(-1, 1, 1)
    n = (1 + nn.functional.softplus(module.ssa_nu)).view(-1, 1, 1)
    t, s = x.shape[-2:]
    if attention_mask is None:  # HF passes None for a plain causal mask
        mask = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(s - t)
    elif attention_mask.dtype == torch.bool:
        mask = attention_mask
    else:
        mask = attention_mask > float("-inf")
    w = masked_softmax(ssa_transform(x, b, n), mask)
    return (w.to(value.dtype) @ value).transpose(1, 2), w


class HFReference(nn.Module):
    """Garg et al.'s TransformerModel: read-in Linear(1, C) -> GPT2Model(inputs_embeds) -> Linear(C, 1)."""

    def __init__(self, size: dict, scorer: str):
        super().__init__()
        from transformers import AttentionInterface, GPT2Config, GPT2Model

        impl = "sdpa"
        if scorer == "ssa":
            AttentionInterface.register("ssa_bench", _hf_ssa_attention)
            impl = "ssa_bench"
        cfg = GPT2Config(
            n_positions=size["max_positions"],
            n_embd=size["n_embd"],
            n_layer=size["n_layer"],
            n_head=size["n_head"],
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            use_cache=False,
            attn_implementation=impl,
        )
        self.read_in = nn.Linear(1, size["n_embd"])
        self.backbone = GPT2Model(cfg)
        self.read_out = nn.Linear(size["n_embd"], 1)
        if scorer == "ssa":
            for block in self.backbone.h:
                block.attn.ssa_beta = nn.Parameter(torch.zeros(size["n_head"]))  # b = 1
                block.attn.ssa_nu = nn.Parameter(torch.full((size["n_head"],), 0.1868))  # n ≈ 1.5

    def forward(self, tokens):  # [B, T, 1] -> [B, T]
        h = self.backbone(inputs_embeds=self.read_in(tokens)).last_hidden_state
        return self.read_out(h).squeeze(-1)


def hf_available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------------- one training step
def make_step(size, impl, scorer, device, batch, n_points, bf16=False):
    """A closure running one training step of the variant, and its FLOPs and parameter count."""
    torch.manual_seed(0)
    cfg = SIZES[size]
    if impl == "hf":
        model = HFReference(cfg, scorer).to(device)
    else:
        model_cfg = OmegaConf.create({**cfg, "attn_impl": "flex" if impl == "ours-flex" else "auto"})
        model = build_model(model_cfg, OmegaConf.structured(SCORERS.schemas[scorer]())).to(device)
    forward = torch.compile(model) if impl == "ours-compile" else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    task = build_task(OmegaConf.structured(LinearTaskConfig()))
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def step():
        b = task.sample(batch, n_points, gen, device)
        with autocast:
            loss = task.loss(forward(b.tokens)[:, b.pred_idx], b.targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    # HF's unused 50257-token table is not part of the computation
    n_params = count_parameters(model) - (model.backbone.wte.weight.numel() if impl == "hf" else 0)
    t = 2 * n_points
    flops = 6 * n_params * batch * t + 12 * cfg["n_layer"] * batch * t**2 * cfg["n_embd"]
    return step, flops, n_params


def time_variants(variants: dict, reps: int, device) -> dict:
    for fn, _, _ in variants.values():  # warm-up (and compilation)
        fn()
        fn()
    times = {k: [] for k in variants}
    for _ in range(reps):  # interleaved
        for k, (fn, _, _) in variants.items():
            sync(device)
            t = time.perf_counter()
            fn()
            sync(device)
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def train_table(size, args, device, peak) -> None:
    names = [("ours", s) for s in args.scorers]
    if args.compile:
        names += [("ours-compile", s) for s in args.scorers]
    if device.type == "cuda":
        names += [("ours-flex", s) for s in args.scorers if s in ("softmax", "ssa")]
    if hf_available() and not args.no_hf:
        names += [("hf", s) for s in args.scorers if s in ("softmax", "ssa")]
    reps = args.reps or (30 if size == "small" else 6)
    variants = {n: make_step(size, *n, device, args.batch, args.n_points, args.bf16) for n in names}
    med = time_variants(variants, reps, device)
    base = med[("ours", args.scorers[0])]
    params = variants[("ours", args.scorers[0])][2]
    print(
        f"\n{size}: {params:,} parameters (ours), batch {args.batch}, {args.n_points} examples "
        f"({2 * args.n_points} tokens), {reps} interleaved steps each"
    )
    print(
        f"  {'variant':<22} {'median ms':>9} {'vs ours-' + args.scorers[0]:>16} {'ours/hf':>8} "
        f"{'GFLOP/s':>8} {'% peak':>7}"
    )
    for (impl, s), m in med.items():
        rate = variants[(impl, s)][1] / m
        hf = med.get(("hf", s))
        vs_hf = f"{m / hf:8.2f}" if hf and impl.startswith("ours") else f"{'':>8}"
        print(
            f"  {impl + ' ' + s:<22} {m * 1e3:>9.1f} {m / base:>16.2f} {vs_hf} {rate / 1e9:>8.1f} "
            f"{100 * rate / peak:>6.1f}%"
        )
    if device.type == "cuda" and size == "paper":
        for (impl, s), m in med.items():
            print(
                f"  {impl + ' ' + s:<22} {1 / m:8.1f} steps/s; the paper's {PAPER_STEPS:,} steps: "
                f"{PAPER_STEPS * m / 3600:.2f} h"
            )


def eval_throughput(device) -> None:
    """Sequences/s of the paper's quantifier grid protocol on the default model (untrained weights:
    speed does not depend on them)."""
    from ssa_repro.evaluation.quantifier_grid import quantifier_grid
    from ssa_repro.tasks.quantifier import QuantifierTaskConfig

    eval_cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "eval" / "quantifier_grid.yaml")
    lengths, sigmas = list(eval_cfg.lengths), list(eval_cfg.sigmas)
    task = build_task(OmegaConf.structured(QuantifierTaskConfig(name="every")))
    print("\nevaluation: quantifier grid (every), default model, paper protocol")
    for scorer in ("softmax", "ssa"):
        torch.manual_seed(0)
        cfg = OmegaConf.create(SIZES["small"])
        model = build_model(cfg, OmegaConf.structured(SCORERS.schemas[scorer]())).to(device).eval()
        n_samples, bsz, some = 2, eval_cfg.batch_size, sigmas[:2]
        t = time.perf_counter()
        quantifier_grid(
            model, task, sigmas=some, lengths=lengths, n_samples=n_samples, batch_size=bsz,
            skip_first=3, seed=0, device=device,
        )  # fmt: skip
        sync(device)
        dt = time.perf_counter() - t
        rate = len(some) * len(lengths) * n_samples * bsz / dt
        full = len(sigmas) * len(lengths) * eval_cfg.n_samples * bsz / rate
        print(
            f"  {scorer:<8} {rate:>9,.0f} sequences/s (mean length {sum(lengths) / len(lengths):.0f}); "
            f"full grid ({len(sigmas)} σ × {len(lengths)} lengths × {eval_cfg.n_samples * bsz} prompts): "
            f"{full / 60:.1f} min"
        )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=["small", "paper"], choices=sorted(SIZES))
    p.add_argument("--scorers", nargs="+", default=["softmax", "ssa"])
    p.add_argument(
        "--reps", type=int, default=None, help="timed steps per variant (default: 30 small, 6 paper)"
    )
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--n-points", type=int, default=41)
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (what train.precision=bf16 does)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile'd variants of ours")
    p.add_argument("--no-hf", action="store_true", help="skip the HF GPT2Model reference")
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation throughput")
    args = p.parse_args()
    for s in args.scorers:
        SCORERS.get(s)  # unknown names fail here, listing the registered ones
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    peak = matmul_peak(device, dtype)
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}, {str(dtype)[6:]} matmul peak "
        f"{peak / 1e9:.1f} GFLOP/s"
    )
    if not hf_available() and not args.no_hf:
        print("(HF reference skipped: install the bench extra, pip install -e '.[bench]')")
    for size in args.sizes:
        train_table(size, args, device, peak)
    if not args.no_eval:
        eval_throughput(device)


if __name__ == "__main__":
    main()
