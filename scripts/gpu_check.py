"""GPU readiness in one command (`make gpu-check`): the CUDA tests, the speed table on CUDA, the SSA
attention paths against softmax at T = 82, 256 and 1,024 (`bench.py --kernel`: the fused autograd node,
FlexAttention, the Triton kernel), seed ensembles against one seed (`bench_ensemble.py`), and a short
paper-size training and evaluation, written to a dated report docs/results/gpu_check_<date>.md.

    python scripts/gpu_check.py [--out docs/results] [--steps 1000] [--scorer ssa] [--eval quick]

Without a CUDA GPU it says so and exits 0, writing nothing. Each step runs as its own process; a failing
step is recorded in the report (its exit status and the end of its output) and the others still run;
the exit status is 1 if any step failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--out", default=str(ROOT / "docs" / "results"), help="folder of the dated report")
    p.add_argument("--steps", type=int, default=1000, help="training steps of the paper-size run")
    p.add_argument("--scorer", default="ssa", help="the scorer of the paper-size run (default: ssa)")
    p.add_argument("--eval", default="quick", help="the evaluation after training (evaluate.py eval=...)")
    return p


if __name__ == "__main__":
    parser().parse_args()  # --help and usage errors answer here, before the imports below load torch

import torch  # noqa: E402

from ssa_repro.core.atomic import write_text  # noqa: E402

TAIL = 4000  # characters of each step's output kept in the report


def run_step(name: str, cmd: list[str], full_output: bool = False) -> dict:
    print(f"gpu-check: {name}: {shlex.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    out = proc.stdout + (("\n" + proc.stderr) if proc.returncode else "")
    print(f"gpu-check: {name}: exit {proc.returncode} after {time.perf_counter() - t0:.0f} s", flush=True)
    return {
        "name": name,
        "command": shlex.join(cmd),
        "rc": proc.returncode,
        "seconds": time.perf_counter() - t0,
        "output": out if full_output else out[-TAIL:],
    }


def report(steps: list[dict], args, summary: dict | None) -> str:
    props = torch.cuda.get_device_properties(0)
    lines = [
        f"# GPU check, {dt.date.today().isoformat()}",
        "",
        f"Written by `make gpu-check` (scripts/gpu_check.py). Device: {props.name}, "
        f"{props.total_memory / 2**30:.0f} GiB, {torch.cuda.device_count()} visible; torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}; Python {platform.python_version()}; host {platform.node()}.",
        "",
        "| step | exit | wall time |",
        "|---|---:|---:|",
        *[f"| {s['name']} | {s['rc']} | {s['seconds']:.0f} s |" for s in steps],
        "",
    ]
    if summary is not None:
        keep = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
        lines += [f"Training summary ({args.steps} steps, paper_linear, scorer={args.scorer}):", "", "```"]
        lines += [f"{k}: {v}" for k, v in keep.items()] + ["```", ""]
    for s in steps:
        lines += [f"## {s['name']}", "", f"`{s['command']}`", "", "```", s["output"].rstrip(), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not torch.cuda.is_available():
        print(
            f"gpu-check: no CUDA GPU here (torch {torch.__version__}, built for CUDA {torch.version.cuda}): "
            "skipped, nothing written"
        )
        return 0
    py = sys.executable
    # test_cuda.py: the compiled FlexAttention and Triton kernels' values on the GPU; test_fast_paths'
    # checks of the same paths, and test_devices' GPU selection, run for real where CUDA is present
    cuda_tests = ["tests/test_cuda.py", "tests/test_fast_paths.py", "tests/test_devices.py"]
    steps = [
        run_step("CUDA tests", [py, "-m", "pytest", "-q", "-rfsxX", *cuda_tests]),
        run_step("speed table", [py, "scripts/bench.py", "--device", "cuda"], full_output=True),
        # train.compile=true and =reduce-overhead (CUDA graphs) against eager: the launch-bound small model
        run_step(
            "compiled steps",
            [py, "scripts/bench.py", "--device", "cuda", "--compile", "--no-eval", "--no-hf"],
            full_output=True,
        ),
        # SSA / softmax per attention path (node, FlexAttention, the Triton kernel) at T = 82, 256, 1024
        run_step(
            "SSA kernel table",
            [py, "scripts/bench.py", "--device", "cuda", "--kernel", "--sizes", "paper"],
            full_output=True,
        ),
        # seed ensembles: K = 1, 8, 32, 128 seeds as one stacked model at 2L/32 and 4L/64 (issue 36)
        run_step("seed ensembles", [py, "scripts/bench_ensemble.py", "--device", "cuda"], full_output=True),
    ]
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        run_dir = Path(tmp) / "run"
        train = [
            py, "train.py", "experiment=paper_linear", f"scorer={args.scorer}", "device=cuda",
            f"train.steps={args.steps}", "train.log_interval=100", f"train.ckpt_interval={args.steps}",
            "logger.mode=disabled", f"hydra.run.dir={run_dir}",
        ]  # fmt: skip
        steps.append(run_step("paper-size training", train))
        summary_file = run_dir / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
        evaluate = [py, "evaluate.py", f"run_dir={run_dir}", f"eval={args.eval}", "device=cuda"]
        steps.append(run_step("evaluation", evaluate))
    path = Path(args.out) / f"gpu_check_{dt.date.today().isoformat()}.md"
    write_text(path, report(steps, args, summary))
    print(f"gpu-check: report {path}")
    return int(any(s["rc"] for s in steps))


if __name__ == "__main__":
    sys.exit(main())
