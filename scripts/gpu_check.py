"""GPU readiness in one command (`make gpu-check`): the CUDA tests, the speed table on CUDA, the SSA
attention paths against softmax at T = 82, 256 and 1,024 (`bench.py --kernel`: the fused autograd node,
FlexAttention, the Triton kernel), the kernel alone against SDPA per tile setting (`bench_kernel.py`),
seed ensembles against one seed (`bench_ensemble.py`), and a short paper-size training and evaluation,
written to a dated report docs/results/gpu_check_<date>.md.

    python scripts/gpu_check.py [--out docs/results] [--steps 1000] [--scorer ssa] [--eval quick]
    python scripts/gpu_check.py --only kernel-ops kernel-tests kernel-table --budget 480   # a short lease

Without a CUDA GPU it says so and exits 0, writing nothing. Each step runs as its own process, with its
own time limit (at most what is left of ``--budget``); a failing or stopped step is recorded in the report
(its exit status and the end of its output) and the others still run; the report is rewritten after every
step, so a lease that ends early keeps what finished. The exit status is 1 if any step failed.
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


# bench.py's compiled and CUDA-graph steps at paper size (steps "compiled" and "compiled-bf16")
COMPILED = (
    "scripts/bench.py --device cuda --compile --no-eval --no-hf --no-flex --sizes paper --reps 20".split()
)
# name: (command after the interpreter, keep the whole output, time limit in seconds). In this order.
STEPS = {
    # test_cuda.py: the compiled FlexAttention and Triton kernels' values on the GPU; test_fast_paths'
    # checks of the same paths, and test_devices' GPU selection, run for real where CUDA is present
    "cuda-tests": (
        [
            "-m",
            "pytest",
            "-q",
            "-rfsxX",
            "tests/test_cuda.py",
            "tests/test_fast_paths.py",
            "tests/test_devices.py",
        ],
        False,
        900,
    ),
    # the fused SSA kernel's and compiled training's CUDA tests alone (a short lease)
    "kernel-tests": (
        ["-m", "pytest", "-q", "-rfsxX", "tests/test_cuda.py", "-k", "kernel or triton or compiled_training"],
        False,
        300,
    ),
    # the kernel alone (forward + backward) against SDPA, per tile setting, with its difference from the node
    "kernel-ops": (["scripts/bench_kernel.py"], True, 300),
    # SSA / softmax per attention path (node, FlexAttention, the Triton kernel) at T = 82, 256, 1024
    "kernel-table": (["scripts/bench.py", "--device", "cuda", "--kernel", "--sizes", "paper"], True, 300),
    # GPT-2 small's backbone at T = 1,024 in bf16 (experiment=paper_lm's attention): node against kernel
    "kernel-gpt2": (
        [
            "scripts/bench.py",
            "--device",
            "cuda",
            "--kernel",
            "--sizes",
            "gpt2s",
            "--lengths",
            "1024",
            "--bf16",
        ],
        True,
        300,
    ),
    "speed": (["scripts/bench.py", "--device", "cuda"], True, 900),
    # train.compile=true and =reduce-overhead (CUDA graphs) against eager at paper size: the launch-bound step
    "compiled": (COMPILED, True, 600),
    # the same in bf16 autocast: what is left for the paper's 500k ICL steps in under an hour (fp32 with
    # CUDA graphs: docs/performance_log.md)
    "compiled-bf16": ([*COMPILED, "--bf16"], True, 600),
    # seed ensembles: K = 1, 8, 32, 128 seeds as one stacked model at 2L/32 and 4L/64 (issue 36)
    "ensembles": (["scripts/bench_ensemble.py", "--device", "cuda"], True, 600),
    "train": (None, False, 900),  # the paper-size training and its evaluation (two processes)
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--out", default=str(ROOT / "docs" / "results"), help="folder of the dated report")
    p.add_argument("--steps", type=int, default=1000, help="training steps of the paper-size run")
    p.add_argument("--scorer", default="ssa", help="the scorer of the paper-size run (default: ssa)")
    p.add_argument("--eval", default="quick", help="the evaluation after training (evaluate.py eval=...)")
    p.add_argument(
        "--only",
        nargs="+",
        choices=list(STEPS),
        default=None,
        help="these steps, in this order (default: all)",
    )
    p.add_argument(
        "--budget", type=float, default=None, help="seconds for all steps together (default: none)"
    )
    p.add_argument(
        "--limits",
        nargs="+",
        default=[],
        metavar="STEP=SECONDS",
        help="a step's own time limit in place of its default (e.g. kernel-ops=120)",
    )
    return p


def step_limits(pairs: list[str]) -> dict[str, float]:
    """--limits STEP=SECONDS ... -> {step: seconds}; a bad pair exits naming it and what is allowed."""
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if name not in STEPS or seconds <= 0:
            raise SystemExit(
                f"gpu-check: --limits {pair!r}: STEP=SECONDS with STEP one of {', '.join(STEPS)}"
            )
        out[name] = seconds
    return out


if __name__ == "__main__":
    step_limits(parser().parse_args().limits)  # --help and usage errors answer here, before torch loads

import torch  # noqa: E402

from ssa_repro.core.atomic import write_text  # noqa: E402

TAIL = 4000  # characters of each step's output kept in the report


def run_step(name: str, cmd: list[str], full_output: bool = False, timeout: float | None = None) -> dict:
    print(f"gpu-check: {name}: {shlex.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:  # stopped at its limit: what it printed is kept
        rc = 124
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")) + (
            f"\n(stopped at its limit of {timeout:.0f} s)"
        )
    out = stdout + (("\n" + stderr) if rc else "")
    print(f"gpu-check: {name}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
    return {
        "name": name,
        "command": shlex.join(cmd),
        "rc": rc,
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
    limits = step_limits(args.limits)
    if not torch.cuda.is_available():
        print(
            f"gpu-check: no CUDA GPU here (torch {torch.__version__}, built for CUDA {torch.version.cuda}): "
            "skipped, nothing written"
        )
        return 0
    py = sys.executable
    path = Path(args.out) / f"gpu_check_{dt.date.today().isoformat()}.md"
    end = time.perf_counter() + args.budget if args.budget else None
    steps: list[dict] = []
    summary = None
    for name in args.only or list(STEPS):
        cmd, full, limit = STEPS[name]
        limit = limits.get(name, limit)
        if end is not None:
            limit = min(limit, end - time.perf_counter())
            if limit < 10:
                print(f"gpu-check: {name}: skipped, the budget is spent", flush=True)
                continue
        if name != "train":
            steps.append(run_step(name, [py, *cmd], full, limit))
        else:
            summary = train_and_evaluate(py, args, steps, limit)
        write_text(path, report(steps, args, summary))  # after every step: a lease cut short keeps these
    print(f"gpu-check: report {path}")
    return int(any(s["rc"] for s in steps))


def train_and_evaluate(py: str, args, steps: list[dict], limit: float) -> dict | None:
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        run_dir = Path(tmp) / "run"
        train = [
            py, "train.py", "experiment=paper_linear", f"scorer={args.scorer}", "device=cuda",
            f"train.steps={args.steps}", "train.log_interval=100", f"train.ckpt_interval={args.steps}",
            "logger.mode=disabled", f"hydra.run.dir={run_dir}",
        ]  # fmt: skip
        t0 = time.perf_counter()
        steps.append(run_step("paper-size training", train, timeout=limit))
        summary_file = run_dir / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
        evaluate = [py, "evaluate.py", f"run_dir={run_dir}", f"eval={args.eval}", "device=cuda"]
        steps.append(run_step("evaluation", evaluate, timeout=max(10, limit - (time.perf_counter() - t0))))
    return summary


if __name__ == "__main__":
    sys.exit(main())
