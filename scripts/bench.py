"""Speed, measured as ratios in one process: ours vs HF GPT2Model, softmax vs SSA, and vs the matmul peak.

    python scripts/bench.py                      # small and paper-size models on CPU (about 3 minutes)
    python scripts/bench.py --sizes small --reps 20
    python scripts/bench.py --device cuda --bf16 # adds FlexAttention SSA and the 500k-step projection
    python scripts/bench.py --compile            # adds torch.compile variants of ours (and the break-even)
    python scripts/bench.py --bf16-rows          # adds bf16-autocast variants of ours, interleaved with fp32
    python scripts/bench.py --eval-only          # only the evaluation rows (plain vs fused; a few minutes)
    python scripts/bench.py --kernel --device cuda --sizes paper   # the SSA attention paths at T = 82-1024
    python scripts/bench.py --sizes small --no-eval --no-hf --scorers softmax ssa logn gated \
        --pos none sinusoidal rope alibi t5          # adds a row per scorer × position scheme (model.pos)

Training step (forward + backward + Adam), batch 64, 41 examples (82 tokens), the paper's longest
curriculum prompt. Variants run interleaved (one step of each in turn), so drifts in machine load hit
every variant alike; medians are reported.

- ``ours``: ``ssa_repro`` models (softmax through SDPA, SSA through its fused autograd node: on a CPU its C
  loops, ssa_repro/scorers/ssa_cpu.py; ``--torch-node`` adds ``ours-torchnode``, SSA through the torch node).
- ``ours@<pos>`` (``--pos``): the same with ``model.pos=<pos>`` (ssa_repro/models/positions/); the
  column "vs ours-<first scorer>" is then the cost relative to that scorer with learned positions.
- ``hf``: the field's setup (Garg et al.; the SSA authors' ICL code): HuggingFace ``GPT2Model`` with the
  same linear read-in/read-out and dropout 0; its SSA registered through HF's attention-function
  interface as plain autograd ops (needs the ``bench`` extra: ``pip install -e '.[bench]'``).
- FLOPs per step: 6 × parameters × tokens + 12 × layers × batch × T² × width (attention matmuls,
  forward and backward), against the float32 (or bf16) matmul peak timed in the same run.
- ``--kernel``: the SSA training step through each attention path against softmax's (SDPA) at T = 82,
  256 and 1,024 tokens, batch × T ≈ 5,250 tokens: ``ours-node`` (the fused autograd node over
  [B, H, T, T] scores, what ``auto`` trained SSA with before the kernel), ``ours-flex``
  (FlexAttention, CUDA), ``ours-triton`` (the fused Triton kernel, ssa_repro/kernels/; CUDA), with the
  ratio SSA / softmax per row.
- Evaluation: sequences per second of the quantifier grid (default model, every task) through the plain
  and the fused (FlexAttention) path per scorer (``--eval-paths``; ``node``: the plain path with SSA's
  CPU inference through its training node, as before its blocked path), on ``--eval-prompts`` prompts at each of the paper
  grid's 20 lengths, and the projected time of the full grid (see ``eval_throughput``).
"""

from __future__ import annotations

import contextlib
import statistics
import time

from ssa_repro.cli import arguments
from ssa_repro.cli.arguments import BENCH_SIZES as SIZES


def parser():
    return arguments.bench(__doc__)


if __name__ == "__main__":
    parser().parse_args()  # --help and usage errors answer here, before the imports below load torch

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from torch import nn  # noqa: E402

from ssa_repro.models import attention, build_model, count_parameters  # noqa: E402
from ssa_repro.models.positions import POSITIONS  # noqa: E402
from ssa_repro.scorers import SCORERS, ssa, ssa_cpu  # noqa: E402
from ssa_repro.scorers.base import masked_softmax  # noqa: E402
from ssa_repro.scorers.ssa import ssa_transform  # noqa: E402
from ssa_repro.tasks import build_task  # noqa: E402
from ssa_repro.tasks.linear import LinearTaskConfig  # noqa: E402
from ssa_repro.training import compile_policy  # noqa: E402

PAPER_STEPS = 500_000
DEFAULT_STEPS = 4_000  # train.steps' default: what --compile's auto line decides for


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
    """A closure running one training step of the variant, and its FLOPs and parameter count.
    ``impl`` ``ours@<pos>``: ours with the position scheme ``model.pos=<pos>``."""
    torch.manual_seed(0)
    cfg = SIZES[size]
    impl, _, pos = impl.partition("@")
    if impl == "hf":
        model = HFReference(cfg, scorer).to(device)
    else:
        extra = {
            "attn_impl": {"ours-flex": "flex", "ours-triton": "triton"}.get(impl, "auto"),
            "pos": pos or "learned",
            "rope_base": 1e4,
            "max_positions": max(cfg["max_positions"], 2 * n_points),
        }
        model_cfg = OmegaConf.create({**cfg, **extra})
        model = build_model(model_cfg, OmegaConf.structured(SCORERS.schemas[scorer]())).to(device)
    if impl == "ours-cudagraph":  # train.compile=reduce-overhead: forward and backward as CUDA graphs
        forward = torch.compile(model, mode="reduce-overhead")
    else:
        forward = torch.compile(model) if impl == "ours-compile" else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    task = build_task(OmegaConf.structured(LinearTaskConfig()))
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    bf16 = bf16 or impl == "ours-bf16"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    # ours-node: auto without the Triton kernel (attention.AUTO_TRITON off during its steps only);
    # ours-torchnode: SSA without its fused CPU node (ssa_cpu.FUSED off during its steps only)
    node = {"ours-node": _auto_triton_off, "ours-torchnode": _torch_node}.get(impl, contextlib.nullcontext)

    def step():
        b = task.sample(batch, n_points, gen, device)
        with autocast, node():  # the path is chosen in the forward; the backward follows it
            loss = task.loss(forward(b.tokens)[:, b.pred_idx], b.targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    # HF's unused 50257-token table is not part of the computation
    n_params = count_parameters(model) - (model.backbone.wte.weight.numel() if impl == "hf" else 0)
    t = 2 * n_points
    flops = 6 * n_params * batch * t + 12 * cfg["n_layer"] * batch * t**2 * cfg["n_embd"]
    return step, flops, n_params


@contextlib.contextmanager
def _auto_triton_off():
    old, attention.AUTO_TRITON = attention.AUTO_TRITON, False
    try:
        yield
    finally:
        attention.AUTO_TRITON = old


@contextlib.contextmanager
def _torch_node():
    old, ssa_cpu.FUSED = ssa_cpu.FUSED, False
    try:
        yield
    finally:
        ssa_cpu.FUSED = old


def time_variants(variants: dict, reps: int, device) -> tuple[dict, dict]:
    """Median step time per variant, and the time of its first step (compilation included)."""
    first = {}
    for k, (fn, _, _) in variants.items():  # warm-up (and compilation)
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        first[k] = time.perf_counter() - t
        fn()
    times = {k: [] for k in variants}
    for _ in range(reps):  # interleaved
        for k, (fn, _, _) in variants.items():
            sync(device)
            t = time.perf_counter()
            fn()
            sync(device)
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}, first


def train_table(size, args, device, peak) -> None:
    names = [("ours", s) for s in args.scorers]
    names += [(f"ours@{pos}", s) for s in args.scorers for pos in args.pos if pos != "learned"]
    if args.compile:
        names += [("ours-compile", s) for s in args.scorers]
        if device.type == "cuda":  # CUDA graphs exist on CUDA only (on a CPU the mode compiles as true)
            names += [("ours-cudagraph", s) for s in args.scorers]
    if args.torch_node:
        names += [("ours-torchnode", s) for s in args.scorers if s.startswith("ssa")]
    if args.bf16_rows and not args.bf16:
        names += [("ours-bf16", s) for s in args.scorers]
    if device.type == "cuda" and not args.no_flex:
        names += [("ours-flex", s) for s in args.scorers if s in ("softmax", "ssa")]
    if hf_available() and not args.no_hf:
        names += [("hf", s) for s in args.scorers if s in ("softmax", "ssa")]
    reps = args.reps or (30 if size == "small" else 6)
    variants = {n: make_step(size, *n, device, args.batch, args.n_points, args.bf16) for n in names}
    med, first = time_variants(variants, reps, device)
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
    for s in args.scorers if args.compile else ():
        # train.compile=true pays its compile once (again at the curriculum's second prompt length, when
        # dynamo recompiles with dynamic shapes); it wins after overhead / (eager − compiled) steps
        eager, comp = med[("ours", s)], med[("ours-compile", s)]
        overhead = first[("ours-compile", s)] - comp
        gain = eager - comp
        first_c, first_e = first[("ours-compile", s)], first[("ours", s)]
        print(
            f"  compile {s}: first step {first_c:.1f} s (eager {first_e:.2f} s), "
            f"steady {comp * 1e3:.1f} vs {eager * 1e3:.1f} ms: "
            + (f"break-even after {overhead / gain:,.0f} steps" if gain > 0 else "never breaks even")
        )
    if args.compile:
        auto_line(size, args, device, med)
    if device.type == "cuda" and size == "paper":
        for (impl, s), m in med.items():
            print(
                f"  {impl + ' ' + s:<22} {1 / m:8.1f} steps/s; the paper's {PAPER_STEPS:,} steps: "
                f"{PAPER_STEPS * m / 3600:.2f} h"
            )


def auto_line(size, args, device, med) -> None:
    """What train.compile=auto trains each scorer with at this size in a run of train.steps' default
    (ssa_repro/training/compile_policy.py), and its step against the first scorer's under auto."""
    chosen = {}  # scorer -> (compiled, median step)
    for s in args.scorers:
        d = compile_policy.decide(
            "auto", device_type=device.type, scorer=s, steps=DEFAULT_STEPS, width=SIZES[size]["n_embd"]
        )
        chosen[s] = d.compile, med[("ours-compile" if d.compile else "ours", s)]
    base = chosen[args.scorers[0]][1]
    print(
        f"  train.compile=auto, {DEFAULT_STEPS:,} steps: "
        + ", ".join(f"{s} {'compiled' if c else 'eager'} {m / base:.2f}" for s, (c, m) in chosen.items())
        + f" (vs {args.scorers[0]} under auto)"
    )


KERNEL_LENGTHS = (82, 256, 1024)  # tokens: the paper's longest ICL prompt, and LM-like lengths
KERNEL_TOKENS = 64 * 82  # batch × T per step, as at the default batch and prompt


def kernel_table(size, args, device) -> None:
    """The SSA training step through each attention path, and softmax's (SDPA), at several lengths:
    median step time and SSA / softmax, variants interleaved (see the module docstring)."""
    impls = ["ours-node"]
    if device.type == "cuda":
        impls += ([] if args.no_flex else ["ours-flex"]) + ["ours-triton"]
    reps = args.reps or 10
    for t in args.lengths or KERNEL_LENGTHS:
        batch = max(1, round(KERNEL_TOKENS / t))
        names = [("ours", "softmax")] + [(impl, "ssa") for impl in impls]
        variants = {n: make_step(size, *n, device, batch, t // 2, args.bf16) for n in names}
        med, first = time_variants(variants, reps, device)
        base = med[("ours", "softmax")]
        print(f"\nkernel {size}: T = {2 * (t // 2)} tokens, batch {batch}, {reps} interleaved steps each")
        print(f"  {'variant':<22} {'median ms':>9} {'SSA/softmax':>12} {'first step s':>13}")
        for (impl, s), m in med.items():
            print(f"  {impl + ' ' + s:<22} {m * 1e3:>9.2f} {m / base:>12.2f} {first[(impl, s)]:>13.2f}")


def eval_throughput(device, args) -> None:
    """Sequences/s of the quantifier grid (the paper's protocol, declared by the task:
    ``tasks/quantifier.py`` ``QUANTIFIER_EVALUATION.grid.paper``) on the default model, for each scorer
    through the plain path (softmax: SDPA; SSA: its fused eager node) and the fused one (compiled
    FlexAttention, ssa_repro/scorers/flex.py), and the projected time of the full grid, drawn per
    length and ``nested`` (every length scored on prefixes of the longest prompts: one pass at the
    longest length per σ). Untrained weights: speed does not depend on them.

    ``--eval-prompts`` prompts at each of the grid's 20 lengths go through ``predict_batches`` (what the
    grid runs per cell), length by length with the variants interleaved at each length; a variant's rate
    is its prompts over its summed time, so every length weighs as in the full grid. Compilation happens
    in a warm-up on the shortest and the longest length (both shape families), timed and reported
    separately ("compile s": the warm-up minus the same calls once compiled)."""
    from ssa_repro.evaluation.inference import predict_batches
    from ssa_repro.scorers import flex
    from ssa_repro.tasks import TASKS
    from ssa_repro.tasks.quantifier import QuantifierTaskConfig

    paper = TASKS.get("every").evaluation.grid.paper
    lengths, sigmas, bsz = list(paper["lengths"]), list(paper["sigmas"]), paper["batch_size"]
    per_cell = paper["n_samples"] * bsz
    grid = len(sigmas) * len(lengths) * per_cell  # prompts in the full grid
    task = build_task(OmegaConf.structured(QuantifierTaskConfig(name="every")))
    models = {}
    for scorer in args.scorers:
        torch.manual_seed(0)
        cfg = OmegaConf.create(SIZES["small"])
        models[scorer] = build_model(cfg, OmegaConf.structured(SCORERS.schemas[scorer]())).to(device).eval()
    variants = [(s, path) for s in args.scorers for path in args.eval_paths]
    g = torch.Generator().manual_seed(0)
    n_batches = max(1, args.eval_prompts // bsz)

    def prompts(n):
        return [task.sample(bsz, n, g, "cpu").to(device) for _ in range(n_batches)]

    def run(variant, batches) -> float:
        scorer, path = variant
        # "node": the plain path with SSA's CPU inference through its training node (before blocks)
        ssa.BLOCKED_INFERENCE = path != "node"
        with flex.inference_path("plain" if path == "node" else path):
            sync(device)
            t = time.perf_counter()
            predict_batches(models[scorer], batches)
            sync(device)
            return time.perf_counter() - t

    warm = {v: 0.0 for v in variants}
    ends = {n: prompts(n) for n in (lengths[0], lengths[-1])}
    for v in variants:  # first calls compile (fused); the second calls time the same work compiled
        first = sum(run(v, b) for b in ends.values())
        warm[v] = first - sum(run(v, b) for b in ends.values())
    times = {v: 0.0 for v in variants}
    longest = {v: 0.0 for v in variants}  # time at the longest length: what a nested grid runs
    for i, n in enumerate(lengths):
        batches = prompts(n)
        order = variants[i % len(variants) :] + variants[: i % len(variants)]  # rotate who goes first
        for v in order:
            t = run(v, batches)
            times[v] += t
            if n == lengths[-1]:
                longest[v] = t
    total = len(lengths) * n_batches * bsz
    base = times[variants[0]]
    params = count_parameters(models[args.scorers[0]])
    print(
        f"\nevaluation: quantifier grid (every), default model ({params:,} parameters), {n_batches * bsz} "
        f"prompts at each of {len(lengths)} lengths ({lengths[0]}..{lengths[-1]} numbers, "
        f"{2 * lengths[0]}..{2 * lengths[-1]} tokens), variants interleaved per length"
    )
    print(
        f"  {'variant':<16} {'sequences/s':>11} {'time vs ' + ' '.join(variants[0]):>20} "
        f"{'fused speed-up':>14} {'compile s':>9} {'full grid':>10} {'nested':>9}"
    )
    for v in variants:
        rate = total / times[v]
        fused = v[1] == "fused"
        plain = times.get((v[0], "plain"))
        speedup = f"{plain / times[v]:14.2f}" if fused and plain else f"{'':>14}"
        compile_s = f"{warm[v]:9.1f}" if fused else f"{'-':>9}"
        nested = len(sigmas) * per_cell * longest[v] / (n_batches * bsz)  # one longest pass per σ
        print(
            f"  {v[0] + ' ' + v[1]:<16} {rate:>11,.0f} {times[v] / base:>20.2f} {speedup} {compile_s} "
            f"{grid / rate / 60:>6.1f} min {nested / 60:>5.1f} min"
        )
    print(
        f"  full grid: {len(sigmas)} σ × {len(lengths)} lengths × {per_cell} prompts = {grid:,} prompts "
        f"(nested: {len(sigmas) * per_cell:,} prompts of {lengths[-1]} numbers); 'auto' (the default) runs "
        f"{', '.join(flex.PLAIN_FIRST)} plain, the others fused"
    )


def main():
    args = parser().parse_args()
    try:  # unknown names fail here, listing the registered ones
        for s in args.scorers:
            SCORERS.get(s)
        for pos in args.pos:
            POSITIONS.get(pos)
    except KeyError as e:
        raise SystemExit(f"Error: {e.args[0]}") from None
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
    if args.kernel:
        for size in args.sizes:
            kernel_table(size, args, device)
        return
    if not args.eval_only:
        for size in args.sizes:
            train_table(size, args, device, peak)
    if not args.no_eval:
        eval_throughput(device, args)


if __name__ == "__main__":
    main()
