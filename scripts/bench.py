"""Training-step timings: ours with softmax vs ours with SSA, in one process, interleaved.

    python scripts/bench.py                 # default small model and the paper-size model, CPU
    python scripts/bench.py --sizes small --reps 20
    python scripts/bench.py --device cuda

Prints median step time (forward + backward + Adam) per variant, the SSA/softmax ratio, the float32
matmul peak measured in the same run and each variant's achieved FLOP/s against it (FLOPs counted as
6 × parameters × tokens + the attention matmuls 6 × 2 × L × B × T² × C). Batch 64, 41 examples
(82 tokens), the paper's full curriculum length.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from omegaconf import OmegaConf

from ssa_repro.models import build_model, count_parameters
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import build_task
from ssa_repro.tasks.linear import LinearTaskConfig

SIZES = {
    "small": dict(name="gpt2", n_layer=4, n_head=4, n_embd=64, max_positions=512, mlp_ratio=4),
    "paper": dict(name="gpt2", n_layer=12, n_head=8, n_embd=256, max_positions=512, mlp_ratio=4),
}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device, n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    sync(device)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t)
    return 2 * n**3 / min(times)


def make_step(size, scorer, device, batch, n_points):
    torch.manual_seed(0)
    model = build_model(OmegaConf.create(SIZES[size]), OmegaConf.structured(SCORERS.schemas[scorer]())).to(
        device
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    task = build_task(OmegaConf.structured(LinearTaskConfig()))
    gen = torch.Generator(device=device)
    gen.manual_seed(0)

    def step():
        b = task.sample(batch, n_points, gen, device)
        loss = task.loss(model(b.tokens)[:, b.pred_idx], b.targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    cfg = SIZES[size]
    tokens = batch * 2 * n_points
    flops = (
        6 * count_parameters(model) * tokens
        + 12 * cfg["n_layer"] * batch * (2 * n_points) ** 2 * cfg["n_embd"]
    )
    return step, flops, count_parameters(model)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=["small", "paper"], choices=sorted(SIZES))
    p.add_argument("--scorers", nargs="+", default=["softmax", "ssa"])
    p.add_argument(
        "--reps", type=int, default=None, help="timed steps per variant (default: 30 small, 5 paper)"
    )
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--n-points", type=int, default=41)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    for s in args.scorers:
        SCORERS.get(s)  # unknown names fail here, listing the registered ones
    device = torch.device(args.device)
    peak = matmul_peak(device)
    print(f"device {device}, {torch.get_num_threads()} threads, float32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    for size in args.sizes:
        reps = args.reps or (30 if size == "small" else 5)
        steps = {s: make_step(size, s, device, args.batch, args.n_points) for s in args.scorers}
        for fn, _, _ in steps.values():  # warm-up
            fn()
            fn()
        times = {s: [] for s in args.scorers}
        for _ in range(reps):  # interleaved, so drifts in machine load hit every variant alike
            for s, (fn, _, _) in steps.items():
                sync(device)
                t = time.perf_counter()
                fn()
                sync(device)
                times[s].append(time.perf_counter() - t)
        base = statistics.median(times[args.scorers[0]])
        print(
            f"\n{size}: {steps[args.scorers[0]][2]:,} parameters, batch {args.batch}, "
            f"{args.n_points} examples ({2 * args.n_points} tokens), {reps} steps each"
        )
        print(f"  {'scorer':<10} {'median ms':>10} {'ratio':>7} {'GFLOP/s':>9} {'% peak':>7}")
        for s, ts in times.items():
            med = statistics.median(ts)
            rate = steps[s][1] / med
            print(
                f"  {s:<10} {med * 1e3:>10.1f} {med / base:>7.2f} {rate / 1e9:>9.1f} {100 * rate / peak:>6.1f}%"
            )


if __name__ == "__main__":
    main()
