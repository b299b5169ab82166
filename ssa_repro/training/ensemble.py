"""Seed ensembles: K runs that differ only in ``seed``, trained in one process as one stacked model.

``train_ensemble(cfgs, run_dirs)`` trains K configs equal but for their seed (``hydra/launcher=ensemble``
groups a multirun's jobs into such lists: ``hydra_plugins/ssa_ensemble_launcher``). Seed k is exactly
what its separate run (``trainer.train``) would be:

- **weights**: ``trainer.init_model`` with its config (the global generator seeded with seed k, the
  model built on the CPU, then moved), so each seed starts from its separate run's weights;
- **prompts**: its own CPU generator (``trainer.prompt_generator``), each micro-batch drawn by
  ``trainer.draw_batch`` at the same index and curriculum stage as the separate run draws it;
- **optimizer**: one Adam(W) over the stacked parameters {name: [K, *shape]}
  (``torch.func.stack_module_state``); its update is elementwise, so slice k follows its separate run's
  update; the learning rate is the schedule's, the same for all seeds; gradient clipping
  (``train.grad_clip``) takes each seed's own global norm ‖g_k‖ = (Σ_p ‖g_{k,p}‖²)^½;
- **the forward and the loss** of all seeds are one call under ``vmap`` over the seed dimension
  (``stacking.py``: one skeleton module with the stacked parameters); the backward of Σ_k loss_k
  gives each seed its own gradient, as the seeds share nothing;
- **its run folder**, written as the separate run writes it (one file log per seed): config.yaml,
  provenance.json (with ``ensemble``: the seeds trained together), train.log, metrics.jsonl,
  checkpoints in the separate run's format (its model and optimizer state dicts, prompt generator and
  RNG states; ``evaluate.py`` and a separate resume read them), summary.json (``ensemble``: K), and its
  W&B run (written after training from metrics.jsonl: wandb keeps one run open per process).

Numbers equal the separate runs' up to float rounding (batched matmuls sum in another order). A scorer
whose fused training path cannot run under ``vmap`` (SSA's ``SSAWeights`` autograd.Function has no
vmap rule) trains through its plain path (``model.attn_impl=eager``, the same function); one that has
no such path (sparsemax, entmax: autograd.Functions in the scorer itself) or a task whose batches
cannot be stacked (the masked LM: each draw is padded to its own length) is refused before any work
(``stacking.stack_problem``, found by trying). Keys defined from the seed (the LM's ``task.shuffle_seed:
${seed}``) follow each seed: every seed has its own task object and draws through it.

A seed whose loss or weights become non-finite is stopped alone, with the separate run's message
(:class:`~ssa_repro.training.checkpointer.TrainingDiverged`, at the same checks: each log interval and
checkpoint); its slice keeps computing (the seeds share nothing) but nothing more is written. A killed
ensemble resumes each seed from its own checkpoint (seeds at different steps train in separate
stacks). SIGINT/SIGTERM save every seed after the step in flight, as the trainer does.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch.func import stack_module_state

from ssa_repro import tracking
from ssa_repro.core.enums import value_of
from ssa_repro.core.rundir import RunDir, resolve_device
from ssa_repro.core.runlock import RunLock
from ssa_repro.models import build_model, count_parameters
from ssa_repro.tasks import curriculum
from ssa_repro.training import distributed, memory
from ssa_repro.training.checkpointer import Checkpointer, LossWindow, TrainingDiverged
from ssa_repro.training.metrics_log import MetricsLog
from ssa_repro.training.optim import build_optimizer, lr_at, set_lr
from ssa_repro.training.run_state import TrainingRun
from ssa_repro.training.setup import micro_batch_index
from ssa_repro.training.stacking import (
    FALLBACK,
    SDPA_CPU_LOOP,
    clip_per_seed,
    group_key,
    rng_kept,
    skeleton_cfg,
    stack_batches,
    stack_problem,
    stacked_opt_state,
    unstack,
    vmapped_loss,
)
from ssa_repro.training.trainer import (
    DRAW_DEVICE,
    draw_batch,
    finish,
    init_model,
    log_progress,
    log_row,
    metrics_row,
    prompt_generator,
    start_files,
)
from ssa_repro.training.validate import ConfigError

log = logging.getLogger("ssa_repro.train")

MEMORY_SHARE = 0.8  # of the free device memory, for the seeds of one ensemble (the estimate is rough)


class EnsembleRefused(ConfigError):
    """These jobs cannot train as one stacked model; the message names why and the fallback."""


# ------------------------------------------------------------------ one seed
@dataclass
class Member:
    """One seed of an ensemble: its checked run (config, folder, state on disk, plain values, name:
    the separate run's :class:`~ssa_repro.training.run_state.TrainingRun`), and (once built) the
    separate run's objects: model (initial weights; the stacked slice is copied back into it to save),
    optimizer (the format of its state dict), prompt generator, loss window, checkpointer, logger."""

    run: TrainingRun
    index: int = 0
    task: object = None
    model: torch.nn.Module | None = None
    opt: torch.optim.Optimizer | None = None
    gen: torch.Generator | None = None
    window: LossWindow | None = None
    ckpt: Checkpointer | None = None
    rng: dict = field(default_factory=dict)  # the global generators' states its separate run holds
    metrics: MetricsLog | None = None
    logger: logging.Logger | None = None
    handler: logging.Handler | None = None
    start: int = 0
    error: BaseException | None = None
    summary: dict | None = None

    @property
    def active(self) -> bool:
        return self.error is None

    @property
    def cfg(self) -> DictConfig:
        return self.run.cfg

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir


def _build_member(m: Member, device, window: torch.Tensor) -> None:
    """The separate run's model, optimizer, generator and checkpointer for ``m`` (``trainer.build``
    without DDP or compile); ``window``: its row of the ensemble's [K, log_interval] loss window."""
    tr = m.cfg.train
    m.task, m.model = init_model(m.cfg, device)
    # the global generators as the separate run leaves them (nothing draws from them while training)
    m.rng = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        m.rng["cuda"] = torch.cuda.get_rng_state(device)
    m.opt = build_optimizer(m.model, tr)
    m.gen = prompt_generator(m.cfg.seed)
    m.window = LossWindow(tr.log_interval, device, values=window)
    dd = distributed.Dist()
    m.ckpt = Checkpointer(
        RunDir(m.run_dir), m.model, m.opt, m.gen, device, dd, m.run.config, tr.keep_every, tr.keep_at
    )


def seeds_that_fit(cfg: DictConfig, device=None, share: float = MEMORY_SHARE) -> int:
    """How many seeds of ``cfg`` one stacked model may hold on ``device``: ``share`` of the memory
    available there over one seed's training estimate (``memory.estimate``; parameters, gradients,
    Adam's moments and activations all grow with K). At least 1; a large K is split into several."""
    device = torch.device(device or resolve_device(cfg.device))
    have = memory.available(device)
    if have is None:
        return 1 << 30
    return max(1, int(have * share // max(memory.estimate(cfg)["total_bytes"], 1)))


# ------------------------------------------------------------------ checks before any work
def check(cfgs: list[DictConfig], run_dirs: list) -> None:
    """Raise :class:`EnsembleRefused` unless ``cfgs`` may train as one ensemble (equal but for seed and
    logger, distinct seeds and folders, one process, no compile, stackable)."""
    if len(cfgs) != len(run_dirs) or not cfgs:
        raise ValueError(f"{len(cfgs)} configs for {len(run_dirs)} run folders")
    keys = {group_key(c) for c in cfgs}
    if len(keys) > 1:
        raise EnsembleRefused("the configs of one seed ensemble must differ only in seed (and logger)")
    seeds = [int(c.seed) for c in cfgs]
    if len(set(seeds)) != len(seeds):
        raise EnsembleRefused(f"seed: {seeds} repeats a seed; the seeds of one ensemble must differ")
    dirs = [str(Path(d).resolve()) for d in run_dirs]
    if len(set(dirs)) != len(dirs):
        raise EnsembleRefused(f"run folders {dirs}: two seeds would share a folder")
    if distributed.world_size() > 1:
        raise EnsembleRefused(f"a seed ensemble runs in one process; this one has {distributed.world_size()}")
    cfg = cfgs[0]
    if str(cfg.train.compile).lower() in ("true", "reduce-overhead"):
        raise EnsembleRefused(
            f"train.compile={cfg.train.compile}: a seed ensemble runs uncompiled (vmap); use "
            f"train.compile=auto or false, or {FALLBACK}"
        )
    why, _ = stack_problem(cfg)
    if why:
        raise EnsembleRefused(why)


# ------------------------------------------------------------------ training
def train_ensemble(cfgs: list[DictConfig], run_dirs: list, guard=None) -> list:
    """Train the seeds of ``cfgs`` (equal but for seed) in ``run_dirs`` as one stacked model; return,
    per seed, its summary (trained, or skipped as finished) or the :class:`TrainingDiverged` that
    stopped it. Checks every config and folder before any work (``run_state.TrainingRun``); holds each
    folder's lock while training. ``guard``: a ``distributed.PreemptionGuard`` (signals save every seed
    after the step in flight, then are handed on)."""
    # every config value and folder first (reads only), then the ensemble's own checks
    members = [Member(TrainingRun(c, d), index=i) for i, (c, d) in enumerate(zip(cfgs, run_dirs))]
    check(cfgs, run_dirs)
    locks = []
    own_guard = guard is None
    guard = guard or distributed.PreemptionGuard().__enter__()
    try:
        for m in members:
            locks.append(RunLock(m.run_dir, "train").acquire())
        todo = []
        for m in members:
            if m.run.state.finished is not None:
                log.info("%s: skipped (finished): %s", m.run.name, m.run_dir)
                m.summary = m.run.state.finished
            else:
                m.start = int(m.run.state.checkpoint["step"]) if m.run.state.checkpoint else 0
                todo.append(m)
        for start in sorted({m.start for m in todo}):  # seeds at one step train together
            _train_stack([m for m in todo if m.start == start], guard)
    finally:
        if own_guard:
            guard.__exit__()
        for lock in locks:
            lock.release()
    return [m.summary if m.error is None else m.error for m in members]


def _train_stack(members: list[Member], guard) -> None:
    """Train ``members`` (all at the same step) together to ``train.steps``."""
    cfg, k = members[0].cfg, len(members)
    tr, device = cfg.train, resolve_device(cfg.device)
    _, impl = stack_problem(cfg)
    windows = torch.zeros(k, tr.log_interval, device=device)  # [K, log_interval]: row k is seed k's
    with rng_kept():
        for i, m in enumerate(members):
            _build_member(m, device, windows[i])
        skeleton = build_model(skeleton_cfg(cfg, impl).model, cfg.scorer).to(device)  # weights unused
    seeds = [int(m.cfg.seed) for m in members]
    extra = {"ensemble": {"seeds": seeds, "attn_impl": impl}}
    try:
        for m in members:
            _start_member(m, device, extra)
        params, buffers = stack_module_state([m.model for m in members])  # {name: [K, ...]}
        opt = build_optimizer(skeleton, tr, params)
        if members[0].run.state.checkpoint:
            opt.load_state_dict(stacked_opt_state([m.opt for m in members]))
        has_stats = bool(skeleton.scorer_stats())
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=value_of(tr.precision) == "bf16")
        step = members[0].start
        log.info(
            "seed ensemble of %d: seeds %s, scorer %s (attention path %s), from step %d on %s",
            k,
            seeds,
            cfg.scorer.name,
            impl,
            step,
            device,
        )
        t0 = t_window = time.perf_counter()
        steps_at_window, loss_fns = step, {}
        skeleton.train()
        while step < tr.steps and any(m.active for m in members):
            stage = curriculum.stage(cfg.curriculum, step)
            set_lr(opt, lr_at(tr, step))
            loss = torch.zeros(k, device=device)
            for micro in range(tr.grad_accum):
                index = micro_batch_index(step, micro, tr.grad_accum, 1, 0)
                batches = [
                    draw_batch(m.task, index, tr.batch_size, stage, m.gen, DRAW_DEVICE) for m in members
                ]
                leaves, layout, kind = stack_batches(batches, device)
                if layout not in loss_fns:
                    loss_fns[layout] = vmapped_loss(skeleton, members[0].task, layout, kind)
                with autocast, warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=SDPA_CPU_LOOP)  # said in docs/sweeps.md
                    losses = loss_fns[layout](params, buffers, *leaves) / tr.grad_accum  # [K]
                losses.sum().backward()  # seed k's gradient: d loss_k / d params[k]
                loss += losses.detach().float()
            if tr.grad_clip:
                clip_per_seed([p.grad for p in params.values() if p.grad is not None], tr.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            filled = members[0].window.filled
            windows[:, filled] = loss  # every seed's LossWindow.add in one write
            for m in members:
                m.window.filled = filled + 1
            step += 1
            done = step == tr.steps
            if step % tr.log_interval == 0 or done:  # rows at the separate run's steps
                if has_stats:  # the scorer's b and n are read from each seed's own module
                    unstack([m.model for m in members], params, buffers)
                seconds, lr = time.perf_counter() - t_window, opt.param_groups[0]["lr"]
                for m in members:
                    _log_interval(m, step, stage.n_points, lr, seconds, step - steps_at_window, t0)
                    m.window.reset()
                t_window, steps_at_window = time.perf_counter(), step
            saved = step % tr.ckpt_interval == 0 or done or members[0].ckpt.due(step)
            if saved:
                _save(members, params, buffers, opt, step)
            if not done and guard.received is not None:
                if not saved:
                    _save(members, params, buffers, opt, step)
                log.warning("signal %d: every seed's checkpoint saved at step %d", guard.received, step)
                guard.hand_on()
        seconds = time.perf_counter() - t0
        for m in members:
            _end_member(m, step, seconds, k, device)
    finally:
        for m in members:
            if m.handler is not None:
                m.logger.removeHandler(m.handler)
                m.handler.close()


def _start_member(m: Member, device, extra: dict) -> None:
    """The separate run's start: old results moved aside, folder files, identity, restore."""
    state = m.run.state.checkpoint
    m.logger = logging.getLogger(f"{log.name}.ensemble.{m.index}")
    if m.run.state.discard:
        m.logger.warning("old results in %s moved to %s", m.run_dir, RunDir(m.run_dir).discard_results())
    m.handler = start_files(m.run.config, m.run_dir, state, device, 1, logger=m.logger, extra=extra)
    m.ckpt.run_id = RunDir(m.run_dir).adopt_identity(state.get("run_id") if state else None)
    if state:
        with rng_kept():
            m.start = m.ckpt.restore(state, m.window)
        m.rng = {k: v for k, v in state["rng"].items() if k in ("torch", "cuda") and v is not None}
    m.metrics = MetricsLog(RunDir(m.run_dir).metrics_file)
    m.metrics.truncate(m.start)
    m.logger.info(
        "%s: %s parameters on %s, %d steps%s, run folder %s (seed ensemble: %s)",
        m.run.name,
        f"{count_parameters(m.model):,}",
        device,
        m.cfg.train.steps,
        f" (resuming at {m.start})" if state else "",
        m.run_dir,
        extra["ensemble"]["seeds"],
    )


def _diverged(m: Member, e: TrainingDiverged) -> None:
    m.error = e
    m.logger.error("%s", e)
    log.error("seed %s stopped (the other seeds go on): %s", m.cfg.seed, e)


def _log_interval(m: Member, step: int, n: int, lr: float, seconds: float, steps: int, t0: float) -> None:
    if not m.active:
        return
    try:
        m.window.check(step, m.ckpt.describe_last_good())
    except TrainingDiverged as e:
        _diverged(m, e)
        return
    tr = m.cfg.train
    row = log_row(tr, step, m.window.mean(), n, lr, seconds, steps, t0)
    m.metrics.append(metrics_row(row, m.model.scorer_stats()))
    log_progress(m.logger, tr, step, row)


def _save(members: list[Member], params: dict, buffers: dict, opt, step: int) -> None:
    """Each live seed's checkpoint, in its separate run's format (refused if non-finite: stopped)."""
    unstack([m.model for m in members], params, buffers, opt, [m.opt for m in members])
    for m in members:
        if m.active:
            try:
                m.ckpt.save(step, m.window, rng=m.rng)
            except TrainingDiverged as e:
                _diverged(m, e)


def _end_member(m: Member, step: int, seconds: float, k: int, device) -> None:
    """summary.json (a live seed) and the W&B run, written from metrics.jsonl: wandb holds one open
    run per process, so the seeds' runs are made one after another once training ends."""
    tracker = tracking.Tracker.for_training(m.cfg.logger, m.run_dir, m.run.config, m.run.name)
    try:
        tr = m.cfg.train
        for row in m.metrics.rows():
            if row["step"] <= m.start:
                continue
            stats = {n: torch.tensor(v) for n, v in (row.get("scorer") or {}).items()}
            tracker.log_training({n: v for n, v in row.items() if n != "scorer"}, row["step"], stats)
            if stats and (row["step"] % tr.ckpt_interval == 0 or row["step"] == step):
                tracker.log_scorer_params(stats, row["step"])
        if m.active:
            m.summary = finish(
                m.run.name,
                m.run_dir,
                m.model,
                device,
                1,
                False,
                m.metrics,
                step,
                seconds,
                tracker,
                extra={"ensemble": k},
            )
    finally:
        tracker.finish(0 if m.active else 1)


__all__ = ["train_ensemble", "stack_problem", "seeds_that_fit", "group_key", "EnsembleRefused", "check"]
