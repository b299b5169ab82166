"""Shared helpers: compose the real config (conf/train.yaml) and shrink it for fast tests."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ssa_repro.config import compose_cached  # (importing it stores the schemas)
from ssa_repro.data.paths import resolve_root

# Under pytest-xdist (make test: -n auto) every core runs a worker: one thread each, for torch and for the
# processes a test starts, so workers do not oversubscribe the cores (measured faster on 2 cores).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# A model and run small enough for a few-step end-to-end run in about a second: conf/debug/tiny.yaml,
# composed last, so an override given after it (in make_cfg or on a command line) still wins.
# The end-of-run evaluation writes its tables but draws no figure (evaluation.figures=false): drawing
# was 1.5-2 s of each such run (measured, tiny runs under load: 2.4-3.7 s with figures, 1.0-1.6 without),
# and the suite trains hundreds. The tests of figures ask for them (evaluation.figures=true, or an
# evaluator's own figures key, whose default stays on).
TINY = ["debug=tiny", "evaluation.figures=false"]


# The offline data (../shared/data beside the repository, or $SSA_DATA_ROOT): tests that read the real
# corpora skip, saying why, on a checkout that has none.
SHARED_DATA = resolve_root(os.environ.get("SSA_DATA_ROOT", "../shared/data"))
HAVE_SHARED_DATA = (SHARED_DATA / "lm" / "train.txt").exists()
needs_shared = pytest.mark.skipif(
    not HAVE_SHARED_DATA, reason=f"the offline data is not at {SHARED_DATA} (set SSA_DATA_ROOT)"
)


def make_cfg(*overrides: str, tiny: bool = True):
    """conf/train.yaml composed with ``overrides`` (after debug=tiny unless ``tiny=False``): a fresh copy,
    through :func:`ssa_repro.config.compose_cached` (Hydra composes each choice of config groups once per
    process, about 0.3 s; the value overrides are applied to a copy by Hydra's own function, about 4 ms;
    the suite asks for configs thousands of times). tests/test_config.py checks it against ``compose``."""
    return compose_cached([*(TINY if tiny else []), *overrides])


def run_script(
    script: str, *args: str, cwd: Path = ROOT, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python <script> ARGS`` run in this process: ``runpy`` with ``sys.argv`` set, so the script's own
    argument checks, its Hydra main and its exit code are the real ones, without a new interpreter's start
    and imports (about 11 s a call as a subprocess, well under 1 s here). An uncaught exception becomes
    exit code 1 with its traceback on stderr, and ``sys.exit("message")`` prints the message there, as
    Python does. ``env``: variables set for the call (restored after). Hydra's logging set-up is undone
    afterwards. Kept as subprocesses: what needs a process
    of its own (signals, a second writer, a killed study) and one real command line per entry point."""
    from hydra.core.global_hydra import GlobalHydra

    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    argv, cwd_before, code = sys.argv, os.getcwd(), 0
    env_before = {k: os.environ.get(k) for k in env or {}}
    GlobalHydra.instance().clear()
    try:
        os.environ.update(env or {})
        sys.argv = [str(ROOT / script), *args]
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(ROOT / script), run_name="__main__")
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:  # sys.exit("Error: ...")
                    print(e.code, file=sys.stderr)
                    code = 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = argv
        os.chdir(cwd_before)
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        GlobalHydra.instance().clear()
        for h in root.handlers:
            if h not in handlers:
                h.close()
        root.handlers[:] = handlers
        root.setLevel(level)
    return subprocess.CompletedProcess([script, *args], code, out.getvalue(), err.getvalue())


def pytest_collection_modifyitems(config, items):
    """The ``slow`` tests first, each group still in pytest-randomly's order (it shuffles before this
    hook): the long end-to-end tests then start while there is other work to share the cores with, and the
    suite ends on short tests (one of them started last kept a worker busy for up to a minute alone)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _seeded_torch():
    """Every test starts from the same torch RNG state, whatever ran before it in its process (the suite
    runs in random order, pytest-randomly, spread over workers, pytest-xdist; pytest-randomly reseeds
    ``random`` and numpy the same way, not torch)."""
    torch.manual_seed(0)


def _numeric_state() -> dict:
    """The process-wide settings that change training numbers on CPU: a test that leaves one changed
    makes a later test in the same worker compute differently from a fresh process (a resumed run then
    no longer matches its uninterrupted reference bit for bit)."""
    return {
        "torch threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
        "default dtype": torch.get_default_dtype(),
        "grad enabled": torch.is_grad_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "mkldnn enabled": torch.backends.mkldnn.enabled,
    }


_STATE = pytest.StashKey[dict]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_STATE] = _numeric_state()  # before any fixture of the test is set up


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Each test leaves the process's numeric settings as it found them, checked once every fixture is
    torn down (a monkeypatch undone first): restored here, and the test's teardown fails naming the
    setting where one was left changed."""
    result = yield
    before = item.stash.get(_STATE, None)
    if before is None:
        return result
    after = _numeric_state()
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    if changed:
        torch.set_num_threads(before["torch threads"])
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            if before[var] is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = before[var]
        torch.set_default_dtype(before["default dtype"])
        torch.set_grad_enabled(before["grad enabled"])
        torch.use_deterministic_algorithms(before["deterministic algorithms"])
        torch.set_float32_matmul_precision(before["float32 matmul precision"])
        torch.backends.mkldnn.enabled = before["mkldnn enabled"]
        raise AssertionError(
            f"the test left process-wide numeric settings changed (before, after): {changed}"
        )
    return result


@pytest.fixture(autouse=True)
def _no_wandb_network(monkeypatch):
    # Tests never talk to a W&B server, whatever the environment says.
    monkeypatch.setenv("WANDB_MODE", os.environ.get("SSA_TEST_WANDB_MODE", "disabled"))
    monkeypatch.setenv("WANDB_SILENT", "true")


# The compiled FlexAttention CPU kernel returned wrong rows on this project's CI machine (flex.CPU_UNTRUSTED:
# 24 of 1,280 elements off by up to 0.67, not the same cases from run to run), and its C++ compile costs
# 12-61 s a graph: the compiled kernel's values are checked on CUDA (tests/test_cuda.py), and on CPU the
# fused path's dispatch and semantics run strictly through the uncompiled kernel (`uncompiled_flex`).
COMPILED_KERNEL = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="the compiled FlexAttention kernel's values are checked on CUDA (tests/test_cuda.py): its CPU "
    "kernel gives wrong rows on some CPUs (flex.CPU_UNTRUSTED)",
)


@pytest.fixture
def uncompiled_flex(monkeypatch):
    """The fused inference path on CPU with ``flex_attention`` uncompiled in place of the compiled kernel:
    PyTorch's reference implementation of the same semantics (score_mod, block mask), correct on CPU
    and free of compiles. ``auto`` takes it on CPU (flex.CPU_UNTRUSTED off), so the choice of path, the
    score_mods and the fallbacks are checked for what they are, in any order, without the kernel."""
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    from ssa_repro.scorers import flex

    def reference(*args, **kw):
        with warnings.catch_warnings():  # "called without torch.compile": that is the point here
            warnings.simplefilter("ignore")
            return flex_attention(*args, **kw)

    monkeypatch.setattr(flex, "CPU_UNTRUSTED", False)
    monkeypatch.setattr(flex, "_compiled_inference", reference)
    monkeypatch.setattr(flex, "_failed", {})
    return reference


@pytest.fixture
def fused_calls(monkeypatch):
    """Records, per attention call, whether the fused path ran (True) or handed back to the plain one."""
    from ssa_repro.models import attention

    calls = []

    def spy(*args, **kw):
        y = fused(*args, **kw)
        calls.append(y is not None)
        return y

    fused = attention.fused_inference
    monkeypatch.setattr(attention, "fused_inference", spy)
    return calls


def forget_component(registry, group: str, name: str) -> None:
    """Undo a test's registration of component ``name`` (a toy scorer, task or evaluator): out of its
    registry and out of Hydra's ConfigStore (``<group>/<name>`` and ``schema/<group>/<name>``), so tests
    that list the registered names (tests/test_config.py) see only the package's, in any order."""
    from hydra.core.config_store import ConfigStore

    registry._items.pop(name, None)
    registry.schemas.pop(name, None)
    repo = ConfigStore.instance().repo
    repo.get(group, {}).pop(f"{name}.yaml", None)
    repo.get("schema", {}).get(group, {}).pop(f"{name}.yaml", None)


class NoProgress:
    """An evaluator's progress bar that shows nothing (tests calling ``Evaluator.compute`` directly)."""

    def update(self, n=1):
        pass


def evaluation_run(model, task, cfg):
    """What an evaluator's ``compute`` reads of a loaded run (model, task, config, device, labels), for
    a model built in a test without a run folder."""
    return SimpleNamespace(model=model, task=task, cfg=cfg, device=torch.device("cpu"), labels={})
