"""train.compile: whether the trainer compiles the model's forward, decided before the first step, and a
compiled forward that trains eagerly when the compile fails.

``train.compile``:

    false            eager
    true             torch.compile(forward) (inductor)
    reduce-overhead  compiled with CUDA graphs (on a CPU inductor compiles it as ``true``)
    auto (default)   compiled where it pays, from what is known before the run:

        device     "cpu" or "cuda" (others: eager)
        scorer     ``Scorer.compile_gains`` (False where its eager path is one fused kernel, e.g. SDPA)
        fused node on a CPU, not for SSA when its fused CPU node is built (ssa_repro/scorers/ssa_cpu.py:
                   C loops compiled in under a second, trained eagerly at least as fast as the compiled
                   model and from the first step); without it (no C compiler, a failed build) as below
        steps      train.steps >= AUTO_MIN_STEPS[device]
        width      on a CPU, model.n_embd <= AUTO_MAX_WIDTH_CPU
        compiler   a C/C++ compiler for inductor on PATH (c_compiler)

A compile that pays back after k steps is worth it when the run has train.steps >= margin · k; the
thresholds are the measured break-evens k (scripts/bench.py --compile; docs/performance.md, section
"When train.compile=auto compiles") times a margin (see AUTO_MIN_STEPS) for the dynamo recompile at the
curriculum's second prompt length and for machines slower to compile. ``steps`` is train.steps, not the
steps left: a resumed run decides as the uninterrupted one did (the machine's load is left out of the rule
for the same reason).

Whatever decides to compile, a machine without a compiler trains eagerly, and a compile that fails on
a call (inductor or dynamo raising) makes :class:`EagerFallback` train eagerly from that call on; each
logs one line saying why. Compiling changes speed, not the numbers (to float32 rounding:
tests/test_fast_paths.py::test_compiled_training_matches_eager).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass

import torch

from ssa_repro.scorers import SCORERS, ssa_cpu

log = logging.getLogger("ssa_repro.train")

SETTINGS = ("auto", "true", "false", "reduce-overhead")
# train.steps from which auto compiles, per device type, from the measured break-evens (the compile's
# first-step cost / the per-step saving). CPU, default size: SSA breaks even after 164, 493 and 706 steps
# in three runs (13-23 s of compile for 33-77 ms a step), and dynamo compiles twice (again, with dynamic
# shapes, at the curriculum's second prompt length): 2,000 is 1.4x the worst of those doubled and 3x the
# median; the default run (4,000 steps) compiles. CUDA, the paper's ICL size on an H200: about 3,000
# steps (24 s for 8 ms a step); 10,000 is 3x that. docs/performance.md, "When train.compile=auto compiles".
AUTO_MIN_STEPS = {"cpu": 2000, "cuda": 10_000}
# On a CPU the saving is SSA's elementwise passes over the [B, H, T, S] scores, whose share of the step
# falls with the width (H·T / n_embd² per layer): compiling gains at the default width 64, while at the
# paper's 256 SSA's eager step already costs what softmax's does (0.98-1.03x: nothing to gain); widths in
# between are not measured (docs/performance.md).
AUTO_MAX_WIDTH_CPU = 128


@dataclass(frozen=True)
class CompileDecision:
    """Whether to compile, torch.compile's ``mode``, and the one-line reason logged at the start."""

    compile: bool
    mode: str | None
    reason: str


def c_compiler(device_type: str) -> str | None:
    """The compiler inductor would call for ``device_type``, found on PATH, or None. CPU: inductor's C++
    compiler (``torch._inductor.config.cpp.cxx``, g++ unless set); CUDA: Triton's C compiler for its
    launchers (``CC``, else cc, gcc or clang). Only looks (no subprocess): a compiler that is there but
    broken surfaces as a failing compile, which :class:`EagerFallback` handles."""
    if device_type == "cuda":
        names = [os.environ.get("CC"), "cc", "gcc", "clang"]
    else:
        from torch._inductor import config as inductor_config

        cxx = inductor_config.cpp.cxx
        names = list(cxx) if isinstance(cxx, (list, tuple)) else [cxx]
    for name in names:
        if name and (path := shutil.which(name)):
            return path
    return None


def decide(setting, *, device_type: str, scorer: str, steps: int, width: int) -> CompileDecision:
    """The decision for ``train.compile=setting`` (see the module docstring) on ``device_type``, for
    ``scorer`` (a registry name), ``steps`` (train.steps) and ``width`` (model.n_embd)."""
    value = str(setting).lower()
    if value not in SETTINGS:
        raise ValueError(f"train.compile={setting!r}: expected one of {', '.join(SETTINGS)}")
    mode = "reduce-overhead" if value == "reduce-overhead" else None
    if value == "false":
        return CompileDecision(False, None, "train.compile=false: training eagerly")
    if value == "auto":
        why_not = _auto_refusal(device_type, scorer, steps, width)
        if why_not:
            return CompileDecision(False, None, f"train.compile=auto: training eagerly ({why_not})")
    compiler = c_compiler(device_type)
    if compiler is None:
        return CompileDecision(
            False,
            None,
            f"train.compile={value}: training eagerly (no C compiler for inductor on PATH; "
            "install g++ or set CXX, or train.compile=false to silence this)",
        )
    why = "asked for" if value != "auto" else f"{scorer}, {steps} steps, width {width} on {device_type}"
    return CompileDecision(True, mode, f"train.compile={value}: compiling the forward ({why}; {compiler})")


def _auto_refusal(device_type: str, scorer: str, steps: int, width: int) -> str | None:
    """Why auto does not compile this run, or None when it should."""
    if device_type not in AUTO_MIN_STEPS:
        return f"not measured on {device_type}"
    cls = SCORERS.get(scorer)
    if not cls.compile_gains:
        return f"scorer {scorer}'s eager path is fused already: a compile would not pay"
    if device_type == "cpu" and getattr(cls, "fused_cpu_node", False) and ssa_cpu.library() is not None:
        return f"scorer {scorer} trains through its fused CPU node, as fast as compiled and without the wait"
    if steps < AUTO_MIN_STEPS[device_type]:
        return f"train.steps={steps} < {AUTO_MIN_STEPS[device_type]}: the compile would not pay back"
    if device_type == "cpu" and width > AUTO_MAX_WIDTH_CPU:
        return f"model.n_embd={width} > {AUTO_MAX_WIDTH_CPU}: on a CPU the attention's share is too small to gain"
    return None


class EagerFallback:
    """``compiled(*args)`` until a call raises, then ``eager(*args)`` for that call and every later one,
    with one warning. The compile happens inside a call (dynamo compiles on first use and recompiles at a
    new prompt length), before any of the call's results exist, so the eager retry computes the same
    step; an error of the model itself raises again from the eager call. A plain callable, not a module:
    ``state_dict``, checkpoints and evaluation use the model itself, as under torch.compile."""

    def __init__(self, compiled, eager, setting) -> None:
        self.compiled, self.eager, self.setting = compiled, eager, setting
        self.failed = False

    def __call__(self, *args, **kwargs):
        if not self.failed:
            try:
                return self.compiled(*args, **kwargs)
            except Exception as e:  # inductor, dynamo, a missing or broken compiler
                self.failed = True
                log.warning(
                    "train.compile=%s: the compile failed (%s); training eagerly", self.setting, _cause(e)
                )
        return self.eager(*args, **kwargs)


def _cause(e: BaseException) -> str:
    """ "Outer <- Inner: first line of the inner message": dynamo wraps a backend's error
    (BackendCompilerFailed: its ``inner_exception``) and says what went wrong only there."""
    names, root = [type(e).__name__], e
    while (inner := getattr(root, "inner_exception", None) or root.__cause__) is not None and len(names) < 5:
        root = inner
        names.append(type(root).__name__)
    first = (str(root).strip().splitlines() or [""])[0][:200]
    return f"{' <- '.join(names)}: {first}"


def ran_compiled(forward) -> bool:
    """Whether ``forward`` (from :func:`compile_forward`) is compiled and its compile has not failed."""
    return isinstance(forward, EagerFallback) and not forward.failed


def compile_forward(forward, decision: CompileDecision, setting):
    """``forward`` compiled as ``decision`` says (with :class:`EagerFallback`), or ``forward`` itself."""
    log.info(decision.reason)
    if not decision.compile:
        return forward
    return EagerFallback(torch.compile(forward, mode=decision.mode), forward, str(setting).lower())


__all__ = [
    "AUTO_MAX_WIDTH_CPU",
    "AUTO_MIN_STEPS",
    "CompileDecision",
    "EagerFallback",
    "c_compiler",
    "compile_forward",
    "decide",
    "ran_compiled",
]
