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

import contextlib
import logging
import os
import signal
import sys
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


class Interrupted(SystemExit):
    """The run stops because of a signal, at a safe point (after a checkpoint, or between evaluation
    steps): a ``SystemExit`` with the conventional code 128 + signal number (130 for SIGINT, 143 for
    SIGTERM), so uncaught it ends the process quietly, without a traceback. Catch it by name to skip
    work that should not start after an interrupt (the end-of-run evaluation, a sweep's next job)."""

    def __init__(self, signum: int):
        super().__init__(128 + int(signum))
        self.signum = int(signum)

    def __str__(self) -> str:
        return f"interrupted by signal {self.signum} ({_signal_name(self.signum)})"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class PreemptionGuard:
    """SIGINT (Ctrl-C), SIGTERM and SIGUSR2 (SLURM preemption, ``scancel``, the end of a time limit)
    set a flag (``received``) that the training loop checks after every step: it saves a checkpoint,
    then calls :meth:`hand_on`. So an interrupted or preempted job loses at most the step in flight,
    not a checkpoint interval.

    - SIGTERM / SIGUSR2: the signal goes on to the handler that was there before (under the submitit
      launcher, submitit's: requeue on SIGUSR2, carry on after SIGTERM), or the process exits with
      128 + the signal number (:class:`Interrupted`) when there was none.
    - SIGINT: the process exits with 130 (:class:`Interrupted`, no traceback), unless a Python handler
      other than the default ``KeyboardInterrupt`` one was installed before, which then decides. A
      second SIGINT while the first is being handled (during the checkpoint write) exits at once with
      130: checkpoints are written atomically, so the previous one stays intact. A SIGINT that was
      ignored when the guard started (``nohup``, a background job of a non-interactive shell) stays
      ignored.

    Between the end of training and the end of the run (the end-of-run evaluation), call
    :meth:`check` at safe points: it hands a pending signal on (normally raising
    :class:`Interrupted`). Signals can only be caught in the main thread; elsewhere (a thread-based
    launcher) this does nothing."""

    SIGNALS = tuple(
        s
        for s in (
            getattr(signal, "SIGTERM", None),
            getattr(signal, "SIGUSR2", None),
            getattr(signal, "SIGINT", None),
        )
        if s
    )

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> PreemptionGuard:
        for sig in self.SIGNALS:
            try:
                if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                    continue  # ignored by whoever started us: keep it so
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                break
        return self

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.received is not None:
            raise Interrupted(signum)  # a second Ctrl-C: stop now (an atomic write in flight is undone)
        self.received = signum

    def __exit__(self, *exc) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()

    @property
    def interrupted(self) -> bool:
        """Whether a signal arrived that has not been handed on yet."""
        return self.received is not None

    def check(self) -> None:
        """At a safe point: hand a pending signal on (see :meth:`hand_on`); nothing if none arrived."""
        if self.received is not None:
            self.hand_on()

    def hand_on(self) -> None:
        """After the checkpoint: pass the signal to the handler that was there before. A Python handler
        (submitit's: requeue the job and exit, or log and carry on) decides; the default action ends
        the process (:class:`Interrupted`, a SystemExit with 128 + the signal number; for SIGINT also
        when the handler before was Python's default ``KeyboardInterrupt`` one); an ignored signal is
        ignored."""
        signum = self.received
        if signum is None:
            return
        self.received = None
        prev = self._previous.get(signum)
        if signum == signal.SIGINT and prev is signal.default_int_handler:
            raise Interrupted(signum)
        if callable(prev):
            prev(signum, None)
            return
        if prev is signal.SIG_IGN:
            return
        raise Interrupted(signum)


@contextlib.contextmanager
def exit_quietly_on_interrupt():
    """Around a whole command: a Ctrl-C outside the guarded loop (while the data loads, or the model
    builds) ends the process with 130 and one line on stderr instead of a ``KeyboardInterrupt``
    traceback."""
    try:
        yield
    except KeyboardInterrupt:
        print("interrupted (SIGINT)", file=sys.stderr)
        raise Interrupted(signal.SIGINT) from None


__all__ = ["Dist", "setup", "world_size", "PreemptionGuard", "Interrupted", "exit_quietly_on_interrupt"]
