"""Data-parallel training of one run over several processes (``torchrun``), and preemption signals.

``torchrun --nproc_per_node=N train.py hydra.run.dir=<folder> ...`` (or ``python -m ssa_repro.launch
--nproc N ...``, which fixes the folder for you) starts N copies of the trainer; each reads ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE`` from the environment torchrun sets. :func:`setup` joins them into one
process group (gloo on CPU, NCCL on CUDA, one GPU per local rank). The trainer then

- wraps the model in ``DistributedDataParallel`` (gradients averaged over ranks every step);
- draws rank r's training prompts from ``data_seed(seed) + r``: rank 0's stream is the single-process
  run's, the others are new ones; ``train.batch_size`` is **per rank** (global batch = N × batch_size);
- logs the loss averaged over ranks (the loss of the global batch);
- writes everything (checkpoints, metrics, W&B, evaluation, figures, summary) from rank 0 only; the
  end-of-run evaluation runs on rank 0 with its fixed ``evaluation.seed``, so its prompts are the same
  as in a single-process run;
- saves every rank's prompt-generator state in the checkpoint, so a resumed run with the same N
  continues every rank's stream exactly.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger("ssa_repro.train")


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owns_group: bool = False  # this module started the group, so it ends it

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The average of ``x`` over ranks (in place), or ``x`` itself in a single process."""
        if self.enabled:
            dist.all_reduce(x)
            x /= self.world
        return x

    def gather(self, obj) -> list:
        """``obj`` from every rank, in rank order (on every rank)."""
        if not self.enabled:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's rank under torchrun (0 in a single process): only rank 0 writes."""
    return int(os.environ.get("RANK", "0")) if world_size() > 1 else 0


def setup(device_type: str) -> Dist:
    """Join the process group torchrun describes (nothing to do in a single process)."""
    if dist.is_available() and dist.is_initialized():  # started by the caller (tests, notebooks)
        return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    world = world_size()
    if world <= 1:
        return Dist()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return Dist(rank, world, local, owns_group=True)


class PreemptionGuard:
    """SIGTERM / SIGUSR2 (SLURM preemption, ``scancel``, the end of a time limit) set a flag that the
    training loop checks after every step: it saves a checkpoint, then hands the signal on to the
    handler that was there before (under the submitit launcher, submitit's: requeue on SIGUSR2, carry
    on after SIGTERM), or exits with 128 + the signal number when there was none. So a preempted job
    loses at most the step in flight, not a checkpoint interval. Signals can only be caught in the
    main thread; elsewhere (a thread-based launcher) this does nothing."""

    SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGUSR2", None)) if s)

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> PreemptionGuard:
        for sig in self.SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                break
        return self

    def _handle(self, signum, frame) -> None:
        self.received = signum

    def __exit__(self, *exc) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()

    def hand_on(self) -> None:
        """After the checkpoint: pass the signal to the handler that was there before. A Python handler
        (submitit's: requeue the job and exit, or log and carry on) decides; the default action ends
        the process (SystemExit with 128 + the signal number); an ignored signal is ignored."""
        signum = self.received
        self.received = None
        prev = self._previous.get(signum)
        if callable(prev):
            prev(signum, None)
            return
        if prev is signal.SIG_IGN:
            return
        raise SystemExit(128 + signum)


__all__ = ["Dist", "setup", "world_size", "PreemptionGuard"]
