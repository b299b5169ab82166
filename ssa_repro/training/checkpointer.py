"""Saving and restoring the whole training state, and refusing to save a diverged one.

:class:`LossWindow` keeps the losses of the current log interval on the training device (no host sync
per step on a GPU); :meth:`LossWindow.check` finds the first non-finite one and names its step. The
window is saved with each checkpoint, so the metrics row after a resume averages the same steps as
without one.

:class:`Checkpointer` writes the run folder's last checkpoint (and a numbered one every
``train.keep_every`` and at each step of ``train.keep_at``, :class:`ssa_repro.core.rundir.RunDir`): model, optimizer, step, loss window, the RNG states (torch CPU, CUDA, and every
rank's prompt generator) and the config; only after checking that the losses and weights are finite
(:class:`TrainingDiverged` names the step and the last good checkpoint). Restoring puts all of it back,
so a resumed run continues exactly where the saved one was (on CPU, bit for bit).
"""

from __future__ import annotations

import torch

from ssa_repro.core import checkpoint
from ssa_repro.core.rundir import RunDir


class TrainingDiverged(RuntimeError):
    """The loss or the weights became non-finite; the message names the step and the last good checkpoint."""


class LossWindow:
    """The losses since the last log row, on the device: [log_interval] with ``filled`` entries.
    ``values``: a given [log_interval] tensor to fill instead (a seed ensemble's row of its [K,
    log_interval] window, filled for every seed by one write: ``training/ensemble.py``)."""

    def __init__(self, size: int, device, values: torch.Tensor | None = None):
        self.values = torch.zeros(size, device=device) if values is None else values
        self.filled = 0

    def add(self, loss: torch.Tensor) -> None:
        self.values[self.filled] = loss
        self.filled += 1

    def mean(self) -> float:
        return self.values[: self.filled].mean().item()

    def reset(self) -> None:
        self.filled = 0

    def saved(self) -> torch.Tensor:
        return self.values[: self.filled].cpu()

    def restore(self, saved: torch.Tensor) -> None:
        self.filled = len(saved)
        self.values[: self.filled] = saved.to(self.values.device)

    def check(self, step: int, last_good: str) -> None:
        """Raise TrainingDiverged at the first non-finite loss (``step`` is the current step)."""
        vals = self.saved()
        bad = (~torch.isfinite(vals)).nonzero()
        if len(bad):
            raise TrainingDiverged(
                f"non-finite loss ({vals[bad[0]].item()}) at step {step - self.filled + int(bad[0]) + 1}; "
                f"training stopped; last good checkpoint: {last_good}"
            )


class Checkpointer:
    def __init__(
        self,
        run: RunDir,
        model,
        opt,
        gen: torch.Generator,
        device,
        dd,
        config: dict,
        keep_every: int,
        keep_at=(),
    ):
        self.run, self.path, self.model, self.opt, self.gen = run, run.last_checkpoint, model, opt, gen
        self.device, self.dd, self.config, self.keep_every = device, dd, config, keep_every
        self.keep_at = frozenset(int(s) for s in keep_at)  # steps whose checkpoint is also kept
        self.last_good: int | None = None
        self.run_id: str | None = None  # the run's identity (RunDir.adopt_identity), kept in each checkpoint

    def describe_last_good(self) -> str:
        return f"{self.path} (step {self.last_good})" if self.last_good is not None else "none was written"

    def restore(self, state: dict, window: LossWindow) -> int:
        """Put a checkpoint's state back (strict: a missing scorer parameter is an error); the step."""
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        ranks = state["rng"].get("data_ranks")
        data = ranks[self.dd.rank] if ranks else state["rng"]["data"]
        try:
            self.gen.set_state(data)
        except RuntimeError as e:  # a CUDA generator's state: prompts were drawn on the GPU before
            raise checkpoint.CheckpointError(
                f"{self.path}: its prompt generator state ({data.numel()} bytes) is not a CPU generator's: "
                "it was written before training prompts were drawn on the CPU for every device, so its "
                "prompt stream cannot be continued; start a new run in another hydra.run.dir"
            ) from e
        torch.set_rng_state(state["rng"]["torch"])
        if self.device.type == "cuda" and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        window.restore(state["loss_window"])
        self.last_good = int(state["step"])
        return self.last_good

    def due(self, step: int) -> bool:
        """Whether ``step``'s checkpoint is one to keep (``train.keep_every``, ``train.keep_at``)."""
        return bool(self.keep_every and step % self.keep_every == 0) or step in self.keep_at

    def save(self, step: int, window: LossWindow, rng: dict | None = None) -> None:
        """Check finiteness, gather every rank's prompt stream (a collective), write (rank 0).
        ``rng``: the global generators' states to store (``torch``, ``cuda``) instead of this process's
        (a seed ensemble stores each seed's own: the states its separate run would hold)."""
        window.check(step, self.describe_last_good())
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            raise TrainingDiverged(
                f"non-finite weights after step {step}; training stopped; last good checkpoint: "
                f"{self.describe_last_good()}"
            )
        gen_states = self.dd.gather(self.gen.get_state().cpu())
        self.last_good = step
        if not self.dd.main:
            return
        payload = {
            "step": step,
            "device_type": self.device.type,
            "loss_window": window.saved(),
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "rng": {
                "data": self.gen.get_state(),
                "data_ranks": gen_states if self.dd.enabled else None,
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
                **(rng or {}),
            },
            "config": self.config,
            **({"run_id": self.run_id} if self.run_id else {}),
        }
        checkpoint.save(self.path, payload)
        if self.due(step):
            checkpoint.save(self.run.kept_checkpoint(step), payload)
