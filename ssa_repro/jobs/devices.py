"""One device per parallel job: GPUs round-robin by job index, CPU cores split between the jobs.

A joblib or Ray multirun (and ``scripts/study.py``) runs several jobs at once on one machine. Left
alone, every job with ``device=auto`` takes ``cuda:0``, and every CPU job starts as many threads as the
machine has cores (two 2-thread jobs on 2 cores ran several times slower than one after the other).
:func:`placement` is the rule, a pure function of (job index, jobs at once, visible GPUs, cores):

    gpu     = visible[job_index mod len(visible)]        (device auto or cuda, and a GPU visible)
    threads = max(1, cores // n_parallel)                (torch's CPU threads, GPU jobs included)

``visible`` is the ``CUDA_VISIBLE_DEVICES`` list (else every GPU torch sees), or the callback's
``gpus`` key (``hydra.callbacks.device_per_job.gpus=[0,2]``). A job keeps the process's device list
and selects its GPU with ``torch.cuda.set_device``: joblib reuses worker processes, and a mask set in
``CUDA_VISIBLE_DEVICES`` cannot change once CUDA is initialised in a process. Because a worker takes
the next job when it is free, two running jobs could map to the same GPU by index; :func:`claim` makes
the index a preference: the job locks its GPU (``<lock_dir>/gpu<id>.lock``, held until the job ends,
dropped by the kernel if it dies) or, if another job holds it, the next free one; with more jobs at
once than GPUs they share. The job's environment records the choice: ``SSA_JOB_GPU`` (the
``CUDA_VISIBLE_DEVICES`` entry) and ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``.

:class:`OneDevicePerJob` is the Hydra callback (``hydra.callbacks.device_per_job`` in conf/train.yaml):
it acts in multiruns under the joblib and Ray launchers only; single runs, the basic launcher (one job
at a time) and SLURM (each job its own allocation) are left as they are.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from ssa_repro.core.enums import value_of
from ssa_repro.core.locks import FileLock, LockTimeout
from ssa_repro.core.schema import Device

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
GPU_VAR = "SSA_JOB_GPU"
LOCK_DIR_VAR = "SSA_DEVICE_LOCKS"  # where the per-GPU locks live (default: a folder in the temp dir)


@dataclass(frozen=True)
class Placement:
    gpu: str | None  # the CUDA_VISIBLE_DEVICES entry the job uses; None: no GPU
    cuda_index: int | None  # its position in the visible list (torch's device index)
    threads: int  # torch CPU threads

    def env(self) -> dict[str, str]:
        out = dict.fromkeys(THREAD_VARS, str(self.threads))
        if self.gpu is not None:
            out[GPU_VAR] = self.gpu
        return out


def placement(
    job_index: int, n_parallel: int, visible: list[str], cores: int, device=Device.auto
) -> Placement:
    """The device and CPU threads of job ``job_index`` when ``n_parallel`` jobs run at once."""
    threads = max(1, cores // max(1, n_parallel))
    if value_of(device) == "cpu" or not visible:
        return Placement(None, None, threads)
    i = job_index % len(visible)
    return Placement(visible[i], i, threads)


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` as a list (empty when set to ""), else every GPU torch sees."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def cores() -> int:
    """CPU cores this process may use (its affinity: a SLURM or taskset allocation, not the machine)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parallel_jobs(launcher: DictConfig, n_cores: int) -> int | None:
    """Jobs a launcher runs at once on this machine, or None for a launcher this module leaves alone.

    joblib: ``n_jobs`` (-1: one per core; -k: cores + 1 − k, as joblib counts). Ray: cores over each
    task's ``ray.remote.num_cpus`` (Ray's default: 1 CPU per task)."""
    cls = str(launcher.get("_target_", "")).rsplit(".", 1)[-1].lower()  # JoblibLauncher, RayLauncher, …
    if cls.startswith("joblib"):
        n = int(launcher.get("n_jobs") or 1)
        return n if n > 0 else max(1, n_cores + 1 + n)
    if cls.startswith("ray"):
        remote = (launcher.get("ray") or {}).get("remote") or {}
        return max(1, n_cores // int(remote.get("num_cpus") or 1))
    return None


def lock_dir() -> Path:
    default = Path(tempfile.gettempdir()) / f"ssa_repro_gpus_{os.getuid() if hasattr(os, 'getuid') else 0}"
    return Path(os.environ.get(LOCK_DIR_VAR) or default)


def claim(p: Placement, visible: list[str], folder: Path) -> tuple[Placement, FileLock | None]:
    """Lock ``p``'s GPU, or the next free one in round-robin order; (p, None) when all are taken."""
    if p.gpu is None:
        return p, None
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(len(visible)):
        i = (p.cuda_index + k) % len(visible)
        lock = FileLock(folder / f"gpu{visible[i]}.lock", timeout=0)
        try:
            lock.acquire()
        except LockTimeout:
            continue
        return replace(p, gpu=visible[i], cuda_index=i), lock
    return p, None  # more jobs at once than GPUs: share the round-robin one


def apply(p: Placement) -> None:
    """Set this process's torch threads, the job's environment and (where CUDA exists) its GPU."""
    os.environ.update(p.env())
    torch.set_num_threads(p.threads)
    if p.cuda_index is not None and torch.cuda.is_available():
        torch.cuda.set_device(p.cuda_index)


@contextmanager
def job_device(
    job_index: int,
    n_parallel: int,
    device=Device.auto,
    visible: list[str] | None = None,
    n_cores: int | None = None,
) -> Iterator[Placement]:
    """:func:`placement`, :func:`claim` and :func:`apply` for one job; its GPU lock is held inside. On
    leaving, the process's environment, torch threads and CUDA device are as before (a job run in the calling
    process, joblib's ``n_jobs=1``, leaves nothing behind)."""
    visible = visible_gpus() if visible is None else visible
    p = placement(job_index, n_parallel, visible, n_cores or cores(), device)
    p, lock = claim(p, visible, lock_dir())
    saved_env = {k: os.environ.get(k) for k in p.env()}
    saved_threads = torch.get_num_threads()
    selects = p.cuda_index is not None and torch.cuda.is_available()
    saved_gpu = torch.cuda.current_device() if selects else None
    apply(p)
    try:
        yield p
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        torch.set_num_threads(saved_threads)
        if saved_gpu is not None:
            torch.cuda.set_device(saved_gpu)
        if lock is not None:
            lock.release()


class OneDevicePerJob(Callback):
    """Hydra callback: :func:`placement` + :func:`claim` + :func:`apply` at the start of each job of a
    joblib or Ray multirun; the GPU lock is released when the job ends. ``gpus``: the devices to use
    (CUDA_VISIBLE_DEVICES entries; default all visible)."""

    def __init__(self, gpus: list | None = None):
        self.gpus = [str(g) for g in gpus] if gpus else None
        self.job = None  # the open job_device context

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        n_cores = cores()
        n_parallel = parallel_jobs(config.hydra.launcher, n_cores)
        if n_parallel is None:
            return
        device = config.device  # (train and evaluate configs: the schema gives it)
        self.job = job_device(int(config.hydra.job.num), n_parallel, device, self.gpus, n_cores)
        self.job.__enter__()

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        if self.job is not None:
            self.job.__exit__(None, None, None)
            self.job = None
