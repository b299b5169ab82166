"""SSA attention alone, forward + backward, through each path against softmax's SDPA, on a GPU:

    python scripts/bench_kernel.py [--shapes icl_default icl_paper t256 t1024 gpt2] [--reps 30]

One attention call y = attend(q, k, v) and y.backward(g), q, k, v [B, H, T, d] with gradients, causal;
per shape (batch × T ≈ 5,250 tokens, as a training step at the default batch; gpt2: GPT-2 small's 12
heads of 64 at 1,024 tokens, 12 sequences, bf16) the median time of

- ``sdpa softmax``: torch's scaled_dot_product_attention (its flash / efficient kernels);
- ``node ssa``: the model's SSA path without the kernel (SSAFoldedWeights over [B, H, T, T] scores);
- ``triton ssa BMxBN/wW/sS``: the fused kernel (ssa_repro/kernels/) with BLOCK_M × BLOCK_N tiles,
  W warps and S pipeline stages (``ssa_attention.GPU_TILES``);

variants interleaved call by call, CUDA events around each, and the kernel's largest difference from the
node path (output and dq, relative to the node's largest value): a tile setting that computes wrong
numbers shows here before its time is read. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys

TILE_NAMES = ["64x64/w4/s2", "32x32/w4/s2", "128x64/w8/s3", "64x32/w4/s3"]  # TILES below, by name
SHAPE_NAMES = ["icl_default", "icl_paper", "t256", "t1024", "gpt2"]  # SHAPES below, by name


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", default=SHAPE_NAMES, choices=SHAPE_NAMES)
    p.add_argument("--tiles", nargs="+", default=TILE_NAMES, choices=TILE_NAMES)
    p.add_argument("--reps", type=int, default=30, help="timed calls per variant")
    return p


if __name__ == "__main__":
    parser().parse_args()  # --help and usage errors answer here, before the imports below load torch

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from ssa_repro.scorers import SCORERS, build_scorer  # noqa: E402

# the module (ssa_repro.kernels.ssa_attention is also the name of the function the package exports)
kernel_module = importlib.import_module("ssa_repro.kernels.ssa_attention")

SHAPES = {  # name: (batch, heads, T, d, dtype)
    "icl_default": (64, 4, 82, 16, torch.float32),  # the default model (4 heads of 16) at the longest prompt
    "icl_paper": (64, 8, 82, 32, torch.float32),  # the paper's ICL model (8 heads of 32)
    "t256": (20, 8, 256, 32, torch.float32),
    "t1024": (5, 8, 1024, 32, torch.float32),
    "gpt2": (12, 12, 1024, 64, torch.bfloat16),  # experiment=paper_lm's attention (bf16 autocast)
}
TILES = {  # name: GPU_TILES
    "64x64/w4/s2": dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),  # the first default
    "32x32/w4/s2": dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2),
    "128x64/w8/s3": dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
    "64x32/w4/s3": dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=3),  # the default (docs/performance_log.md)
}
assert list(TILES) == TILE_NAMES and list(SHAPES) == SHAPE_NAMES


def variants(shape, tiles, device="cuda"):
    """name -> (call(q, k, v) -> y, its GPU_TILES or None) for one shape."""
    bsz, heads, t, d, dtype = shape
    scorer = build_scorer(OmegaConf.structured(SCORERS.schemas["ssa"]()), heads).to(device)
    mask = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    out = {
        "sdpa softmax": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), None),
        "node ssa": (lambda q, k, v: scorer.attend(q, k, v, mask, is_causal=True)[0], None),
    }
    for name in tiles:
        out[f"triton ssa {name}"] = (
            lambda q, k, v: kernel_module.ssa_attention(q, k, v, *scorer.kernel_params(), causal=True),
            TILES[name],
        )
    return out


def run(call, tiles, q, k, v, g) -> tuple[torch.Tensor, torch.Tensor]:
    kernel_module.GPU_TILES = tiles
    q.grad = k.grad = v.grad = None
    with torch.autocast(q.device.type, dtype=torch.bfloat16, enabled=q.dtype == torch.bfloat16):
        y = call(q, k, v)
    y.backward(g)
    return y, q.grad


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_kernel: no CUDA GPU here: skipped")
        return 0
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.reps} interleaved calls each")
    for shape_name in args.shapes:
        bsz, heads, t, d, dtype = shape = SHAPES[shape_name]
        torch.manual_seed(0)
        q, k, v = (
            torch.randn(bsz, heads, t, d, device="cuda", dtype=dtype, requires_grad=True) for _ in "qkv"
        )
        g = torch.randn(bsz, heads, t, d, device="cuda", dtype=dtype)
        vs = variants(shape, args.tiles)
        ref_y, ref_dq = (z.float().clone() for z in run(*vs["node ssa"], q, k, v, g))
        err, first = {}, {}
        for name, (call, tiles) in vs.items():  # warm-up (compiles), and each path's difference
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                y, dq = run(call, tiles, q, k, v, g)
            except Exception as e:  # noqa: BLE001  (a tile setting the GPU cannot run: say so, go on)
                print(f"  {shape_name} {name}: failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            end.record()
            torch.cuda.synchronize()
            first[name] = start.elapsed_time(end)
            if "ssa" in name:
                err[name] = max(
                    ((y.float() - ref_y).abs().max() / ref_y.abs().max()).item(),
                    ((dq.float() - ref_dq).abs().max() / ref_dq.abs().max()).item(),
                )
        times = {name: [] for name in first}
        for _ in range(args.reps):
            for name in first:
                call, tiles = vs[name]
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                run(call, tiles, q, k, v, g)
                end.record()
                torch.cuda.synchronize()
                times[name].append(start.elapsed_time(end))
        med = {name: statistics.median(ts) for name, ts in times.items()}
        base = med["sdpa softmax"]
        print(
            f"\n{shape_name}: B {bsz}, H {heads}, T {t}, d {d}, {str(dtype)[6:]}, causal, forward + backward"
        )
        print(f"  {'variant':<30} {'median ms':>9} {'vs sdpa':>8} {'first ms':>9} {'rel. diff vs node':>18}")
        for name, m in med.items():
            diff = f"{err[name]:.1e}" if name in err and name != "node ssa" else ""
            print(f"  {name:<30} {m:>9.3f} {m / base:>8.2f} {first[name]:>9.1f} {diff:>18}")
    kernel_module.GPU_TILES = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
