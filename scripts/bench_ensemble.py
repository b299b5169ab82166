"""Seed ensembles' speed: K seeds of one small model trained as one stacked model (hydra/launcher=ensemble,
ssa_repro/training/ensemble.py) against one seed alone, in one process.

    python scripts/bench_ensemble.py --device cuda            # K = 1, 8, 32, 128 at 2L/32 and 4L/64 (make gpu-check)
    python scripts/bench_ensemble.py --device cpu --ks 1 4 --steps 40   # on a CPU (no gain expected)

For each size × scorer × K, ``train_ensemble`` trains seeds 0..K-1 for ``--steps`` steps (the every task,
no curriculum, no evaluation, no W&B) into a temporary folder; the wall time of the call is the cost of
the whole ensemble (start-up, checkpoints and summary files included). Printed per row: the wall time,
the seed-steps per second (K × steps / wall time) and the wall time against K = 1 of the same size and
scorer (issue 36's target: 64 seeds of 2L/32 in at most 2× one seed's time). K = 1 trains through the
same stacked code path as the larger ensembles; a 2-step run of each size and scorer goes first, untimed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

SIZES = {
    "2L/32": ["model.n_layer=2", "model.n_embd=32", "model.n_head=4"],
    "4L/64": ["model.n_layer=4", "model.n_embd=64", "model.n_head=4"],
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--device", default="cuda", help="cuda (the point of ensembles) or cpu")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 8, 32, 128], help="ensemble sizes K")
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="model sizes")
    p.add_argument("--scorers", nargs="+", default=["softmax", "ssa"], help="scorers (default: softmax ssa)")
    p.add_argument("--steps", type=int, default=300, help="training steps of every run")
    return p


if __name__ == "__main__":
    parser().parse_args()  # --help and usage errors answer here, before the imports below load torch


from ssa_repro.config import compose_cached  # noqa: E402
from ssa_repro.training.ensemble import train_ensemble  # noqa: E402


def configs(size: str, scorer: str, k: int, steps: int, device: str) -> list:
    base = [
        "task=every",
        f"scorer={scorer}",
        *SIZES[size],
        f"train.steps={steps}",
        f"train.log_interval={steps}",
        f"train.ckpt_interval={steps}",
        "train.compile=false",
        "curriculum.enabled=false",
        "evaluation.enabled=false",
        "logger.mode=disabled",
        f"device={device}",
    ]
    return [compose_cached([*base, f"seed={s}"]) for s in range(k)]  # one compose, K copies


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    print("| size | scorer | K | wall s | seed-steps/s | wall / K=1 |")
    print("|---|---|---:|---:|---:|---:|")
    for size in args.sizes:
        for scorer in args.scorers:
            alone = None
            with tempfile.TemporaryDirectory(prefix="bench_ensemble_") as tmp:  # warm-up, not timed
                train_ensemble(configs(size, scorer, 1, 2, args.device), [Path(tmp) / "warm"])
            for k in args.ks:
                cfgs = configs(size, scorer, k, args.steps, args.device)
                with tempfile.TemporaryDirectory(prefix="bench_ensemble_") as tmp:
                    dirs = [Path(tmp) / f"s{s}" for s in range(k)]
                    t0 = time.perf_counter()
                    train_ensemble(cfgs, dirs)
                    wall = time.perf_counter() - t0
                alone = wall if k == 1 else alone
                ratio = f"{wall / alone:.2f}" if alone else "–"
                print(
                    f"| {size} | {scorer} | {k} | {wall:.1f} | {k * args.steps / wall:.0f} | {ratio} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
