"""Checkpoints: written atomically, read with ``weights_only=True``; the CPU thread count they were made with.

A checkpoint is a plain dict of tensors and Python primitives: model and optimizer state, the step,
the RNG states (torch CPU, CUDA if used, and the data generator's), and the resolved config.

Writing goes through :func:`ssa_repro.core.atomic.atomic_path`: ``torch.save`` writes
``.<name>.tmp<pid>`` beside the target, which is ``fsync``ed and renamed onto it. So a reader (or a
resume) sees the previous checkpoint or the new one, never part of one; an error, ``KeyboardInterrupt``
or ``SystemExit`` during the write (a second Ctrl-C) removes the temporary file and leaves the previous
checkpoint as it was. A full disk, a read-only folder or a file-size limit is raised as
:class:`ssa_repro.core.atomic.StorageError` naming the file and what to do (``torch.save`` itself says
``[enforce fail at inline_container.cc:...] unexpected pos``). Only a SIGKILL mid-write leaves the
temporary file; :func:`ssa_repro.core.atomic.clean_leftovers` removes those of dead processes.

**Threads.** On CPU the results depend on the number of threads torch uses (the order of floating-point
reductions changes: up to ~4e-3 in the weights after a few hundred steps between 1 and 2 threads, e.g.
the joblib launcher's one thread per worker against the basic launcher's two). :func:`save` records
:func:`thread_info` in every checkpoint (``"threads"``); :func:`thread_mismatch` compares a loaded
checkpoint with this process, for a warning at resume: a resumed run with another count is valid, but
it no longer reproduces the uninterrupted run bit for bit.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import torch

from ssa_repro.core import atomic

FORMAT = "ssa_repro.checkpoint/1"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: truncated, foreign, or from an incompatible run."""


def save(path: Path, state: dict) -> None:
    """Write ``state`` (plus the format tag and, unless given, :func:`thread_info`) to ``path``
    atomically; a storage failure is :class:`~ssa_repro.core.atomic.StorageError`, and the previous
    file at ``path`` is left as it was whatever happens."""
    path = Path(path)
    payload = {"format": FORMAT, "threads": thread_info(), **state}
    with atomic.atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load(path: Path, map_location="cpu") -> dict:
    path = Path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        code = refused_code(str(e))
        if code is None:
            raise CheckpointError(
                f"cannot read checkpoint {path}: it is truncated or not a torch checkpoint (UnpicklingError)."
                " Remove it to start over, or point hydra.run.dir at another folder."
            ) from None
        raise CheckpointError(  # never torch's hint to load it with weights_only=False: that runs it
            f"refused checkpoint {path}: it holds code ({code}) that safe loading (weights_only=True) "
            "does not run; a checkpoint written by this framework holds only tensors and plain values, so "
            "this file was made or changed elsewhere: do not load it by other means unless you trust where "
            "it came from; remove it, or point hydra.run.dir at another folder."
        ) from None
    except Exception as e:  # torch raises many kinds (RuntimeError, EOFError, KeyError...)
        raise CheckpointError(
            f"cannot read checkpoint {path}: it is truncated or not a torch checkpoint "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). Remove it to start over, "
            "or point hydra.run.dir at another folder."
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not an ssa_repro checkpoint (expected format {FORMAT!r}, "
            f"found {state.get('format') if isinstance(state, dict) else type(state).__name__!r})"
        )
    return state


def refused_code(message: str) -> str | None:
    """The callable a ``weights_only`` load refused (``posix.system``), from torch's message; None when
    the failure was not a refused global."""
    m = re.search(r"(?:unsupported GLOBAL|Unsupported global: GLOBAL) ([\w.]+)", message)
    return m.group(1) if m else None


def thread_info() -> dict:
    """The CPU threads this process computes with: ``torch`` (``torch.get_num_threads()``), ``interop``
    and the environment variables that set them (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``; None if
    unset)."""
    return {
        "torch": torch.get_num_threads(),
        "interop": torch.get_num_interop_threads(),
        **{var: os.environ.get(var) for var in THREAD_VARS},
    }


def thread_mismatch(state: dict, device_type: str = "cpu") -> str | None:
    """A warning when the checkpoint was written with another number of torch CPU threads than this
    process uses (None when they match, when the checkpoint predates the record, or on CUDA, where the
    CPU threads do not change the training numbers)."""
    saved = (state.get("threads") or {}).get("torch")
    now = torch.get_num_threads()
    if device_type != "cpu" or saved is None or int(saved) == now:
        return None
    env = ", ".join(f"{k}={v}" for k, v in (state.get("threads") or {}).items() if k in THREAD_VARS and v)
    return (
        f"this checkpoint was written with {saved} CPU threads{f' ({env})' if env else ''}, this process uses "
        f"{now}: training continues, but on CPU results depend on the thread count (up to ~4e-3 in the "
        f"weights), so the resumed run will not match an uninterrupted one exactly; for that, resume with "
        f"OMP_NUM_THREADS={saved} (or torch.set_num_threads({saved}))"
    )
