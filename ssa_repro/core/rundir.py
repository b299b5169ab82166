"""A run folder: the one place that names its files, reads its config over the schema and its
checkpoint, and says whether a config may continue it.

    <run>/config.yaml           the resolved config (every start rewrites it)
    <run>/provenance.json       one record per start: commit, libraries, device, threads, argv
    <run>/train.log             progress lines
    <run>/metrics.jsonl         one row per log interval
    <run>/checkpoints/last.pt   the whole training state (+ step_XXXXXXX.pt every train.keep_every and
                                at each step of train.keep_at)
    <run>/summary.json          written when training ends (then with the end-of-run evaluations)
    <run>/failed.txt            a multirun job's error (removed when the job succeeds)
    <run>/wandb_id.txt          the W&B run a restart resumes; wandb_run.json its group and name
    <run>/run_id.txt            the run's identity (a uuid), also in its checkpoints and stored cells
    <run>/discarded/<time>/     a trained model's results moved aside by train.discard_old_results=true
    <run>/eval/<evaluation>/    evaluations (``ssa_repro/evaluation/store.py``); eval/sweeps/: their sweeps
    <run>/.hydra/overrides.yaml Hydra's record of the command line's overrides

A sweep folder holds job folders (run folders) and ``jobs.yaml``, the override list of every job,
written before the first job starts (``ssa_repro/cli/sweeps.py``); Hydra adds ``multirun.yaml``.

:meth:`RunDir.config` reads ``config.yaml`` over the schema (:mod:`ssa_repro.core.schema`, and the
task's and scorer's registered schemas): a run written before a key existed reads that key's default,
so code reads ``cfg.model.final_ln`` and never restates a default. Keys a schema no longer has (retired
ones) are kept as they were written.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import uuid
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import get_type_hints

import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from ssa_repro.core import atomic, checkpoint
from ssa_repro.core.enums import value_of
from ssa_repro.core.refusals import value_refusal
from ssa_repro.core.registry import schema_of
from ssa_repro.core.schema import ModelConfig, RootConfig

CONFIG = "config.yaml"
PROVENANCE = "provenance.json"
TRAIN_LOG = "train.log"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
LAST = "last.pt"
SUMMARY = "summary.json"  # also each evaluation protocol's summary (eval/<evaluation>/<id>/)
FAILED = "failed.txt"
EVAL = "eval"
EVAL_SWEEPS = "sweeps"  # eval/sweeps/<stamp>: the logs of an evaluation sweep over one run
OVERRIDES = ".hydra/overrides.yaml"
JOBS = "jobs.yaml"  # a sweep folder's job list
MULTIRUN = "multirun.yaml"  # Hydra's record in a sweep folder
WANDB_ID = "wandb_id.txt"  # the W&B run id a training resumes (also each eval/<evaluation>/'s own run)
WANDB_RUN = "wandb_run.json"  # the training's W&B identity: id, group, name (ssa_repro/tracking/)
WANDB_FILES = (WANDB_ID, WANDB_RUN)
RUN_ID = "run_id.txt"  # the run's identity: written at its first start, kept in checkpoints and cells
DISCARDED = "discarded"  # discarded/<UTC time>/: results moved aside by train.discard_old_results=true

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


class RunFolderError(ValueError):
    """A run folder that cannot be read: missing, incomplete, or inconsistent."""


@dataclass(frozen=True)
class RunDir:
    """The files of one run folder (``RunDir(path).config_file``, ...); nothing is read until asked."""

    path: Path

    def __init__(self, path: str | Path):
        object.__setattr__(self, "path", Path(path))

    # ---------------------------------------------------------------- paths
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG

    @property
    def provenance_file(self) -> Path:
        return self.path / PROVENANCE

    @property
    def log_file(self) -> Path:
        return self.path / TRAIN_LOG

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS

    @property
    def last_checkpoint(self) -> Path:
        return self.path / CHECKPOINTS / LAST

    def kept_checkpoint(self, step: int) -> Path:
        """The checkpoint kept at ``step`` (``train.keep_every``, ``train.keep_at``)."""
        return self.path / CHECKPOINTS / f"step_{step:07d}.pt"

    def kept_steps(self) -> list[int]:
        """The steps of the numbered checkpoints present, ascending."""
        found = []
        for p in (self.path / CHECKPOINTS).glob("step_*.pt"):
            digits = p.stem.removeprefix("step_")
            if digits.isdigit():
                found.append(int(digits))
        return sorted(found)

    def checkpoint_at(self, step: int | None) -> Path:
        """The checkpoint of ``step``: the kept one when present, else the last checkpoint (whose own step
        the loader checks); ``None``: the last checkpoint."""
        if step is None:
            return self.last_checkpoint
        kept = self.kept_checkpoint(int(step))
        return kept if kept.exists() else self.last_checkpoint

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY

    @property
    def failed_file(self) -> Path:
        return self.path / FAILED

    @property
    def eval_dir(self) -> Path:
        return self.path / EVAL

    @property
    def eval_sweeps_dir(self) -> Path:
        return self.path / EVAL / EVAL_SWEEPS

    @property
    def overrides_file(self) -> Path:
        return self.path / OVERRIDES

    @property
    def discarded_dir(self) -> Path:
        return self.path / DISCARDED

    @property
    def wandb_id_file(self) -> Path:
        return self.path / WANDB_ID

    @property
    def wandb_run_file(self) -> Path:
        return self.path / WANDB_RUN

    @property
    def identity_file(self) -> Path:
        return self.path / RUN_ID

    def identity(self) -> str | None:
        """The run's identity (``run_id.txt``), None when it has none (a folder of older code)."""
        try:
            return self.identity_file.read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def adopt_identity(self, from_checkpoint: str | None) -> str:
        """The identity of the model this start trains: the checkpoint's (a resume), else the folder's,
        else a new one (a first start; or a folder of older code, which adopts one at its first load);
        ``run_id.txt`` is written when it does not say so already."""
        found = from_checkpoint or self.identity() or f"r{uuid.uuid4().hex}"  # (never read as a number)
        if self.identity() != found:
            atomic.write_text(self.identity_file, found + "\n")
        return found

    # ---------------------------------------------------------------- state
    def results(self) -> list[Path]:
        """What a trained model left here: ``summary.json`` and the stored evaluations (``eval/``, its
        log folders aside). A folder holding these without a checkpoint cannot be resumed."""
        found = [self.summary_file] if self.summary_file.exists() else []
        if any(self.eval_dir.glob("*/*/parts/*.csv")):
            found.append(self.eval_dir)
        return found

    def discard_results(self) -> Path:
        """Move :meth:`results` (and the W&B run id files of the old model) to ``discarded/<UTC time>/``:
        nothing is deleted. Returns that folder."""
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
        target = self.discarded_dir / stamp
        target.mkdir(parents=True, exist_ok=True)
        old = [self.path / n for n in (*WANDB_FILES, RUN_ID) if (self.path / n).exists()]  # a new model
        for path in [*self.results(), *old]:
            os.rename(path, target / path.name)
        return target

    def is_run(self) -> bool:
        """Holds a config.yaml (a run that started)."""
        return self.config_file.is_file()

    def problems(self) -> list[str]:
        """Why this folder cannot be evaluated or reported on (empty: it can)."""
        if not self.path.is_dir():
            return [f"run_dir={self.path} is not a folder"]
        return [
            f"run_dir={self.path} has no {p.relative_to(self.path)} (not a finished or started training run folder)"
            for p in (self.config_file, self.last_checkpoint)
            if not p.exists()
        ]

    def raw_config(self) -> DictConfig:
        """``config.yaml`` as written, or a RunFolderError naming the file when it cannot be read."""
        path = self.config_file
        try:
            cfg = OmegaConf.load(path)
        except Exception as e:  # noqa: BLE001  (yaml and OmegaConf raise many kinds)
            raise RunFolderError(
                f"{path} is not a readable config ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                "restore it from .hydra/config.yaml in the same folder, or evaluate another run"
            ) from None
        if not isinstance(cfg, DictConfig) or "task" not in cfg or "name" not in cfg.task:
            raise RunFolderError(f"{path} has no task.name: not a training run's config")
        return cfg

    def config(self) -> DictConfig:
        """``config.yaml`` read over the schema (:func:`typed`), or a RunFolderError naming the file and
        the value the schema refuses."""
        raw = self.raw_config()
        try:
            return typed(raw)
        except (ValidationError, ConfigKeyError) as e:
            raise RunFolderError(f"{self.config_file}: {value_refusal(e)}") from None

    def load_checkpoint(self, map_location="cpu", step: int | None = None) -> dict:
        """``checkpoints/last.pt``, or the checkpoint of ``step`` (:meth:`checkpoint_at`), loaded with
        :func:`ssa_repro.core.checkpoint.load`; a RunFolderError naming the steps kept when the folder
        holds no checkpoint of ``step``."""
        state = checkpoint.load(self.checkpoint_at(step), map_location=map_location)
        if step is not None and int(state["step"]) != int(step):
            kept = self.kept_steps()
            raise RunFolderError(
                f"{self.path} holds no checkpoint of step {step}: the last is at step {state['step']}, "
                f"numbered ones at {kept or 'none'} (train.keep_at or train.keep_every keeps them; they "
                "must be set before training reaches the step)"
            )
        return state

    def summary(self) -> dict | None:
        """``summary.json``, None when absent or unreadable (a damaged summary means: not finished)."""
        try:
            return json.loads(self.summary_file.read_text()) if self.summary_file.exists() else None
        except (OSError, json.JSONDecodeError):
            return None

    def overrides(self) -> list[str] | None:
        """Hydra's overrides of the command that made this folder, None without a record."""
        if not self.overrides_file.exists():
            return None
        return [str(o) for o in (yaml.safe_load(self.overrides_file.read_text()) or [])]


def typed(cfg) -> DictConfig:
    """A training config (a dict or DictConfig) over the schema: RootConfig, and the registered schema of
    its task and scorer. Missing keys read their defaults; values are checked against their types; keys
    no schema has are kept. The result is not in struct mode (a retired key may still be read).

    A copy of the result is kept for the same data and schemas (the last :data:`_TYPED_KEEP`): loading a
    run reads its config.yaml and its checkpoint's config, mostly equal, and a study loads a run once per
    evaluated step; the merge costs ~50 ms, a copy ~3 ms."""
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    schemas = tuple(schema_of(g, str((data.get(g) or {}).get("name", ""))) for g in ("task", "scorer"))
    key = (repr(data), schemas)  # repr tells 1, 1.0 and "1" apart; another key order only misses
    if key not in _TYPED:
        base = OmegaConf.structured(RootConfig)
        groups = {k: t for k, t in get_type_hints(RootConfig).items() if is_dataclass(t)}
        groups.update(zip(("task", "scorer"), schemas))
        for group, schema in groups.items():
            if schema is not None:
                base[group] = OmegaConf.structured(schema)
        _open(base)
        merged = OmegaConf.merge(base, data)  # (a refused value raises here: nothing is kept)
        while len(_TYPED) >= _TYPED_KEEP:
            _TYPED.pop(next(iter(_TYPED)))
        _TYPED[key] = merged
    return copy.deepcopy(_TYPED[key])


_TYPED: dict = {}  # typed()'s results, oldest first
_TYPED_KEEP = 32


def _open(node: DictConfig) -> None:
    """Let every level of ``node`` take keys its schema lacks (each structured level is closed)."""
    OmegaConf.set_struct(node, False)
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing():
            _open(child)


def plain(cfg: DictConfig) -> dict:
    """The resolved config as plain Python (for files, checkpoints and W&B), without Hydra's node."""
    cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def _flatten(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


# model keys added to the schema after checkpoints were written, with the value every earlier model had,
# spelled as plain() spells it (an enum by its name, everything else as itself: True, not 'True')
ADDED_MODEL_DEFAULTS = {
    f"model.{f.name}": f.default.name if isinstance(f.default, Enum) else f.default
    for f in fields(ModelConfig)
    if f.name in ("emb_ln", "final_ln", "pos", "rope_base")
}


def config_mismatches(saved: dict, current: dict) -> list[str]:
    """Differences in the keys that must match to resume (``RESUME_KEYS``), one line per leaf key. A
    model key the checkpoint lacks (added to the schema after it was written) had its schema default."""
    a, b = _flatten(saved), _flatten(current)
    if any(k.startswith("model.") for k in a):
        a = {**ADDED_MODEL_DEFAULTS, **a}
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


def device_problems(name) -> list[str]:
    """``device=cuda`` on a machine without CUDA, said before any work (train.py and evaluate.py)."""
    if value_of(name) == "cuda" and not torch.cuda.is_available():
        return ["device=cuda but no CUDA device is available; use device=auto or device=cpu"]
    return []


def resolve_device(name) -> torch.device:
    """``auto`` is CUDA when present, else the CPU."""
    name = value_of(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)
