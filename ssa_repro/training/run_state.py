"""What the run folder holds, and what this config may do with it: start, resume, or skip as finished.

:func:`prepare` reads the folder (it writes nothing) after checking the config's values:

- no ``checkpoints/last.pt``: a new run;
- a checkpoint and ``train.resume=false``: refused (another ``hydra.run.dir`` starts a new run);
- a checkpoint whose config differs in the keys that must match to continue it (``RESUME_KEYS``: task,
  model, scorer, seed, curriculum, the optimiser's settings), or that was written on another device
  type or by another number of data-parallel processes: refused, every difference listed;
- a checkpoint beyond ``train.steps`` (a finished 3,000-step run given ``train.steps=100``): refused,
  not silently "finished" with a rewritten config;
- a finished run (``summary.json`` at ``train.steps`` and the same config, W&B and evaluation settings
  aside): :attr:`RunState.finished` holds its summary, and the trainer skips it;
- else: resume from the checkpoint. A checkpoint written with another number of CPU threads resumes
  with a warning (results depend on it, up to ~4e-3 in the weights).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssa_repro.training import checkpoint, distributed, validate
from ssa_repro.training.setup import plain, resolve_device

log = logging.getLogger("ssa_repro.train")

# Keys that must match for a checkpoint to be continued; others (steps, intervals, evaluation, logger,
# device, compile, precision) may change between starts.
RESUME_KEYS = (
    "task",
    "model",
    "scorer",
    "seed",
    "curriculum",
    "train.batch_size",
    "train.lr",
    "train.optimizer",
    "train.betas",
    "train.weight_decay",
    "train.schedule",
    "train.warmup_steps",
    "train.min_lr_ratio",
    "train.grad_clip",
    "train.grad_accum",
)
# model.attn_impl: same numbers either way (tested); task.lowercase_zorro: a retired key (never read; the
# end-of-run Zorro evaluation takes eval.lowercase) that checkpoints written before its removal still hold
RESUME_FREE = ("model.attn_impl", "task.lowercase_zorro")
# Keys added to the schema after checkpoints were written: a checkpoint without one had its default
# (model.pos: the learned table every earlier model used; rope_base is read by pos=rope only)
ADDED_DEFAULTS = {"model.pos": "learned", "model.rope_base": 10000.0}
FREE_WHEN_FINISHED = ("logger", "evaluation")  # a finished run re-run with other ones is still finished


def _flatten(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def config_mismatches(saved: dict, current: dict) -> list[str]:
    """Differences in the keys that must match to resume, one line per leaf key."""
    a, b = _flatten(saved), _flatten(current)
    if any(k.startswith("model.") for k in a):
        a = {**ADDED_DEFAULTS, **a}
    keys = sorted(
        k
        for k in a.keys() | b.keys()
        if any(k == r or k.startswith(r + ".") for r in RESUME_KEYS)
        and k not in RESUME_FREE
        and (k in a or k.startswith(("task.", "model.", "scorer.")))  # keys added since: their defaults
    )
    return [
        f"{k}: checkpoint has {a.get(k)!r}, config has {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)
    ]


@dataclass
class RunState:
    checkpoint: dict | None = None  # the state to resume from
    finished: dict | None = None  # the summary of a run that already finished this config


def _checkpoint_problems(cfg: DictConfig, run_dir: Path, state: dict) -> list[str]:
    bad = config_mismatches(state["config"], plain(cfg))
    here, there = resolve_device(cfg.device).type, state.get("device_type", "cpu")
    if here != there:  # the prompt generator's state is specific to the device type
        bad.append(
            f"device: checkpoint was written on {there}, this run would be on {here} (set device={there})"
        )
    saved_world = len(state["rng"].get("data_ranks") or [None])
    if saved_world != distributed.world_size():
        bad.append(
            f"processes: checkpoint was written by {saved_world} (data-parallel ranks), this run has "
            f"{distributed.world_size()}; resume with the same number of processes"
        )
    if int(state["step"]) > int(cfg.train.steps):
        bad.append(
            f"train.steps={cfg.train.steps} is fewer than the {int(state['step'])} steps the checkpoint holds; "
            f"use train.steps>={int(state['step'])} to continue or evaluate it"
        )
    return bad


def _finished(cfg: DictConfig, run_dir: Path, state: dict) -> dict | None:
    summary_path, config_path = run_dir / "summary.json", run_dir / "config.yaml"
    if not cfg.train.resume or not summary_path.exists() or not config_path.exists():
        return None
    try:
        summary = json.loads(summary_path.read_text())
        saved = OmegaConf.to_container(OmegaConf.load(config_path))
    except Exception:  # noqa: BLE001  (a damaged file: do the work again)
        return None
    steps = cfg.train.steps
    if summary.get("steps") != steps or int(state["step"]) != steps:
        return None
    same = {k: v for k, v in saved.items() if k not in FREE_WHEN_FINISHED} == {
        k: v for k, v in plain(cfg).items() if k not in FREE_WHEN_FINISHED
    }
    return summary if same else None


def prepare(cfg: DictConfig, run_dir: str | Path) -> RunState:
    """Every check that can fail before work starts (config values, the folder's state); writes nothing."""
    validate.check(cfg)
    run_dir = Path(run_dir)
    ckpt_path = run_dir / "checkpoints" / "last.pt"
    if not ckpt_path.exists():
        return RunState()
    if not cfg.train.resume:
        raise validate.ConfigError(
            f"{run_dir} already holds a run (checkpoints/last.pt) and train.resume=false; use "
            "train.resume=true to continue it, or another hydra.run.dir for a new run"
        )
    state = checkpoint.load(ckpt_path)
    bad = _checkpoint_problems(cfg, run_dir, state)
    if bad:
        raise validate.ConfigError(
            f"cannot resume {ckpt_path}: the config differs from the checkpoint's in\n  - "
            + "\n  - ".join(bad)
            + "\nuse another hydra.run.dir for a new run"
        )
    finished = _finished(cfg, run_dir, state)
    if finished is None:
        warning = checkpoint.thread_mismatch(state, resolve_device(cfg.device).type)
        if warning:
            log.warning("%s", warning)
    return RunState(checkpoint=None if finished else state, finished=finished)
