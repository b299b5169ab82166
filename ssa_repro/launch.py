"""Start one data-parallel training run: ``python -m ssa_repro.launch --nproc 2 task=every scorer=ssa``.

Hydra resolves ``${now:...}`` in ``hydra.run.dir`` separately in every process, so N processes started
by ``torchrun train.py ...`` could each pick a different run folder. This launcher resolves the run
folder once (the config's ``hydra.run.dir`` with the given overrides, or the one given with
``hydra.run.dir=...``) and then runs

    python -m torch.distributed.run --standalone --nproc_per_node=N train.py <overrides> hydra.run.dir=<folder>

Options before the overrides that this script does not know (``--nnodes``, ``--rdzv-endpoint``, ...)
go to torchrun unchanged (``--standalone`` is then left out). On several nodes, give every node's
launcher the same ``hydra.run.dir`` on a shared file system. ``--dry-run`` prints the command only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

import ssa_repro.config  # noqa: F401  (schemas and resolvers)

ROOT = Path(__file__).resolve().parents[1]


def run_dir(overrides: list[str], config_dir: Path = ROOT / "conf") -> str:
    """``hydra.run.dir`` as ``python train.py <overrides>`` would resolve it now."""
    for o in overrides:
        if o.startswith("hydra.run.dir="):
            return o.split("=", 1)[1]

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    return str(cfg.hydra.run.dir)


def command(nproc: int, overrides: list[str], torchrun_args: list[str], script: str) -> list[str]:
    folder = run_dir(overrides)
    rest = [o for o in overrides if not o.startswith("hydra.run.dir=")]
    multi_node = any(a.startswith(("--nnodes", "--rdzv", "--master")) for a in torchrun_args)
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *([] if multi_node else ["--standalone"]),
        f"--nproc_per_node={nproc}",
        *torchrun_args,
        script,
        *rest,
        f"hydra.run.dir={folder}",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ssa_repro.launch",
        description="One training run on N processes (torchrun, DDP) with the run folder fixed before "
        "they start. Unknown --options go to torchrun; the rest are Hydra overrides for train.py.",
    )
    p.add_argument("--nproc", "--nproc_per_node", type=int, default=2, help="processes on this node")
    p.add_argument("--script", default=str(ROOT / "train.py"), help="training script (default train.py)")
    p.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    args, rest = p.parse_known_args(argv)
    torchrun_args = [a for a in rest if a.startswith("--")]
    overrides = [a for a in rest if not a.startswith("--")]
    cmd = command(args.nproc, overrides, torchrun_args, args.script)
    print(shlex.join(cmd), flush=True)
    if args.dry_run:
        return 0
    os.execv(cmd[0], cmd)  # torchrun takes over this process (signals reach it directly)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
