"""One trainer for every task × model × scorer: fresh prompts each step, curriculum, Adam(W).

``train(cfg, run_dir)`` trains (or continues, or skips as finished) the configured model in ``run_dir``
and returns its summary; it is a plain function, so tests and notebooks call it directly. A job
(``ssa_repro/jobs/train_job.py``) hands its checked run to ``train_run``. It writes
(file names: :class:`ssa_repro.core.rundir.RunDir`):

    config.yaml          the resolved config
    provenance.json      one record per start: git commit, library versions, device, threads, argv
    train.log            progress lines (steps/s, ETA)
    metrics.jsonl        one row per log interval: step, loss, n_points, lr, throughput, scorer params
    checkpoints/last.pt  the whole training state (+ step_XXXXXXX.pt every train.keep_every and at
                         each step of train.keep_at)
    summary.json         final loss, parameter count, steps/s, wall time
    wandb/               the W&B run (offline by default; ssa_repro/tracking/)

The evaluation at the end of a job is not the trainer's: ``ssa_repro/jobs/train_job.py`` runs it on
the saved run, stored like ``python evaluate.py``'s. Resuming, skipping finished runs and refusing
incompatible folders: ``run_state.py``; the state on disk: ``checkpointer.py``; SIGINT, SIGTERM and
SIGUSR2 save a checkpoint after the step in flight (``distributed.PreemptionGuard``). A seed is the
same experiment on every device: its weights are initialised on the CPU and its training prompts drawn
from a CPU generator, then moved (``init_model``, ``prompt_generator``, ``draw_batch``; the seed
ensembles of ``ensemble.py`` reuse them). Under torchrun
(``WORLD_SIZE`` > 1) the model trains data-parallel, rank r drawing prompts from
``data_seed(seed) + r``, and only rank 0 writes (``distributed.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils import _pytree as pytree

from ssa_repro import tracking
from ssa_repro.core import atomic, provenance
from ssa_repro.core.enums import value_of
from ssa_repro.core.rundir import RunDir
from ssa_repro.models import build_model, count_parameters
from ssa_repro.tasks import Stage, build_task, curriculum
from ssa_repro.training import compile_policy, distributed
from ssa_repro.training.checkpointer import Checkpointer, LossWindow, TrainingDiverged
from ssa_repro.training.metrics_log import MetricsLog
from ssa_repro.training.optim import build_optimizer, lr_at, set_lr
from ssa_repro.training.run_state import TrainingRun
from ssa_repro.training.setup import micro_batch_index, rank_data_seed

log = logging.getLogger("ssa_repro.train")

DRAW_DEVICE = torch.device("cpu")  # where training prompts are drawn, whatever the model's device


def start_files(
    config: dict,
    run_dir: Path,
    state: dict | None,
    device,
    world: int,
    logger: logging.Logger | None = None,
    extra=None,
) -> logging.Handler | None:
    """Rank 0, once per start: the folder, its log file, config.yaml (``config``: the plain values,
    ``rundir.plain``) and a provenance record (with
    ``extra``'s keys). The log file takes the root logger's records, or only ``logger``'s when given (a
    seed ensemble: one log file per seed in one process)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    removed = atomic.clean_leftovers(run_dir)
    handler = _add_file_log(run_dir, logger)
    if removed:
        (logger or log).info(
            "removed %d temporary files of killed writes: %s", len(removed), [p.name for p in removed]
        )
    run = RunDir(run_dir)
    atomic.write_text(run.config_file, OmegaConf.to_yaml(config))
    prov_path = run.provenance_file
    records = atomic.read_json(prov_path, "provenance") if (state and prov_path.exists()) else []
    records.append(
        {
            **provenance.collect(device),
            "resumed_from_step": state["step"] if state else None,
            "processes": world,
            **(extra or {}),
        }
    )
    atomic.write_json(prov_path, records)
    return handler


def _add_file_log(run_dir: Path, logger: logging.Logger | None = None) -> logging.Handler | None:
    """Log to run_dir/train.log unless Hydra's job logging already does (the root logger's records, or
    ``logger``'s alone, named as the trainer's own lines are)."""
    path = RunDir(run_dir).log_file.resolve()
    root = logging.getLogger()
    if any(getattr(h, "baseFilename", None) == str(path) for h in root.handlers):
        return None
    handler = logging.FileHandler(path)
    name = "%(name)s" if logger is None else log.name
    handler.setFormatter(logging.Formatter(f"[%(asctime)s][{name}][%(levelname)s] - %(message)s"))
    (logger or root).addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    return handler


def _fmt_time(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@dataclass
class Setup:
    """What a training start builds: device and process group, task, model (and its DDP / compiled
    forward), optimizer, prompt generator, loss window, checkpointer."""

    device: torch.device
    dd: distributed.Dist
    task: object
    model: torch.nn.Module
    forward: torch.nn.Module
    ddp: torch.nn.Module
    opt: torch.optim.Optimizer
    gen: torch.Generator
    window: LossWindow
    ckpt: Checkpointer
    autocast: object
    compiled: bool
    train: DictConfig  # cfg.train


def init_model(cfg: DictConfig, device) -> tuple[object, torch.nn.Module]:
    """The task and the model with seed ``cfg.seed``'s initial weights: the global generator seeded
    with ``cfg.seed``, then the task and the model built on the CPU and moved to ``device``, so the
    weights of a seed are the same on every device."""
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    return task, build_model(cfg.model, cfg.scorer).to(device)


def prompt_generator(seed: int, rank: int = 0) -> torch.Generator:
    """Rank ``rank``'s training-prompt generator, a CPU one on every device (a CUDA generator draws
    another stream from the same seed): ``draw_batch`` draws on the CPU and moves the batch."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(rank_data_seed(seed, rank))
    return gen


def draw_batch(task, index: int, batch_size: int, stage: Stage, gen: torch.Generator, device) -> object:
    """The ``index``-th training micro-batch drawn from the CPU generator ``gen`` on the CPU, then
    moved to ``device`` (:func:`batch_to`): the same prompts for a seed on CPU and CUDA."""
    batch = task.train_batch(index, batch_size, stage, gen, DRAW_DEVICE)
    return batch if torch.device(device).type == "cpu" else batch_to(batch, device)


def host_to(t: torch.Tensor, device) -> torch.Tensor:
    """A CPU tensor on ``device``. To CUDA through pinned memory, without blocking: a copy from pageable
    memory makes torch synchronise the stream (``Tensor.to``'s non_blocking=False), so the host would
    wait for every kernel queued so far and could not draw the next step's prompts while the GPU still
    computes this one. The pinned buffer outlives its copy (torch's caching host allocator waits for
    the copy's event before reusing it); kernels queued after the copy on the same stream see its data."""
    device = torch.device(device)
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def batch_to(batch, device):
    """A task's batch (a dataclass of tensors, dicts of tensors, None) with every tensor :func:`host_to`
    ``device``."""
    moved = {
        f.name: pytree.tree_map_only(torch.Tensor, lambda t: host_to(t, device), getattr(batch, f.name))
        for f in dataclasses.fields(batch)
    }
    return dataclasses.replace(batch, **moved)


def train_step(s: Setup, step: int, stage: Stage) -> torch.Tensor:
    """One optimizer step over ``train.grad_accum`` micro-batches at the curriculum's ``stage``; the
    global batch's mean loss."""
    tr, dd = s.train, s.dd
    loss = torch.zeros((), device=s.device)
    for micro in range(tr.grad_accum):
        index = micro_batch_index(step, micro, tr.grad_accum, dd.world, dd.rank)
        batch = draw_batch(s.task, index, tr.batch_size, stage, s.gen, s.device)
        # gradients are averaged over ranks once, at the last micro-batch
        sync = s.ddp.no_sync() if dd.enabled and micro < tr.grad_accum - 1 else contextlib.nullcontext()
        with sync:
            with s.autocast:
                micro_loss = s.task.training_loss(s.forward, batch) / tr.grad_accum
            micro_loss.backward()
        loss += micro_loss.detach().float()
    dd.mean(loss)
    if tr.grad_clip:
        torch.nn.utils.clip_grad_norm_(s.ddp.parameters(), tr.grad_clip)
    s.opt.step()
    s.opt.zero_grad(set_to_none=True)
    return loss


def build(run: TrainingRun) -> Setup:
    """The objects of ``run``'s start: the process group, task and model (seed ``cfg.seed``'s initial
    weights), optimizer, prompt generator, loss window, checkpointer, the (compiled) forward."""
    cfg, tr, device = run.cfg, run.cfg.train, run.device
    dd = distributed.setup(device.type)
    if dd.enabled and device.type == "cuda":
        device = torch.device("cuda", dd.local_rank)
    task, model = init_model(cfg, device)
    opt = build_optimizer(model, tr)
    gen = prompt_generator(cfg.seed, dd.rank)
    window = LossWindow(tr.log_interval, device)
    ckpt = Checkpointer(
        RunDir(run.run_dir), model, opt, gen, device, dd, run.config, tr.keep_every, tr.keep_at
    )
    ddp = forward = model
    if dd.enabled:  # gradients averaged over ranks; `model` stays the plain module (state_dict, eval)
        ddp = forward = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    # the forward only: state_dict keys, checkpoints and evaluation stay the same
    decision = compile_policy.decide(
        tr.compile,
        device_type=device.type,
        scorer=str(cfg.scorer.name),
        steps=tr.steps,
        width=cfg.model.n_embd,
    )
    forward = compile_policy.compile_forward(forward, decision, tr.compile)
    compiled = decision.compile
    # autocast for forward + loss only; weights, gradients and optimizer state stay float32
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=value_of(tr.precision) == "bf16")
    return Setup(device, dd, task, model, forward, ddp, opt, gen, window, ckpt, autocast, compiled, tr)


def log_row(
    tr, step: int, loss: float, n: int, lr: float, seconds: float, steps: int, t0: float, world: int = 1
) -> dict:
    """The metrics row of a log interval (mean ``loss``; ``steps`` steps in ``seconds``)."""
    rate = steps / max(seconds, 1e-9)
    return {
        "step": step,
        "loss": loss,
        "n_points": n,
        "lr": lr,
        "steps_per_sec": rate,
        "examples_per_sec": rate * tr.batch_size * tr.grad_accum * world,
        "elapsed_s": time.perf_counter() - t0,
    }


def log_progress(logger: logging.Logger, tr, step: int, row: dict) -> None:
    """The train.log line of a metrics row."""
    logger.info(
        "step %d/%d (%.0f%%) | loss %.4g | n_points %d | %.1f steps/s | ETA %s",
        step,
        tr.steps,
        100 * step / tr.steps,
        row["loss"],
        row["n_points"],
        row["steps_per_sec"],
        _fmt_time((tr.steps - step) / max(row["steps_per_sec"], 1e-9)),
    )


def metrics_row(row: dict, stats: dict) -> dict:
    """The metrics.jsonl row: ``row`` and the scorer's statistics ({"b": [L, H], ...}) as lists."""
    return {**row, "scorer": {k: v.cpu().tolist() for k, v in stats.items()}} if stats else row


def train(cfg: DictConfig, run_dir: str | Path, tracker=None, guard=None) -> dict:
    """Train (or continue training) the configured model in ``run_dir``; return the summary: the
    config checked and the folder read (:class:`~ssa_repro.training.run_state.TrainingRun`), then
    :func:`train_run` (a plain function: tests and notebooks call it directly)."""
    return train_run(TrainingRun(cfg, run_dir), tracker=tracker, guard=guard)


def train_run(run: TrainingRun, tracker=None, guard=None) -> dict:
    """Train (or continue, or skip as finished) the checked ``run``; return the summary. A ``tracker``
    (W&B run) or ``guard`` (signal handler) given by the caller is used and left open."""
    if run.state.finished is not None:
        return _finished(run)
    main, tr = distributed.rank() == 0, run.cfg.train
    s, handler, step, metrics = _start(run, main)
    own_tracker, own_guard = tracker is None, guard is None
    if own_tracker:
        tracker = (
            tracking.Tracker.for_training(run.cfg.logger, run.run_dir, run.config, run.name)
            if main
            else tracking.Tracker.off()
        )
    guard = guard or distributed.PreemptionGuard().__enter__()
    t0 = t_window = time.perf_counter()
    steps_at_window, exit_code = step, 1
    try:
        s.model.train()
        while step < tr.steps:
            stage = curriculum.stage(run.cfg.curriculum, step)
            set_lr(s.opt, lr_at(tr, step))
            s.window.add(train_step(s, step, stage))
            step += 1
            done = step == tr.steps
            if step % tr.log_interval == 0 or done:  # rows at the same steps after a resume
                s.window.check(step, s.ckpt.describe_last_good())
                row = log_row(
                    tr,
                    step,
                    s.window.mean(),
                    stage.n_points,
                    s.opt.param_groups[0]["lr"],
                    time.perf_counter() - t_window,
                    step - steps_at_window,
                    t0,
                    s.dd.world,
                )
                stats = s.model.scorer_stats()  # {"b": [L, H], "n": [L, H]}
                if main:
                    metrics.append(metrics_row(row, stats))
                    tracker.log_training(row, step, stats)
                    log_progress(log, tr, step, row)
                s.window.reset()
                t_window, steps_at_window = time.perf_counter(), step
            saved = step % tr.ckpt_interval == 0 or done or s.ckpt.due(step)
            if saved:
                s.ckpt.save(step, s.window)
                if main and s.model.scorer_stats():
                    tracker.log_scorer_params(s.model.scorer_stats(), step)
            if not done and _preempted(guard, s.dd, step, s.device):
                if not saved:
                    s.ckpt.save(step, s.window)
                if main:
                    log.warning("signal %d: checkpoint saved at step %d", guard.received or 0, step)
                guard.hand_on()
        compiled = compile_policy.ran_compiled(s.forward)  # False after a failed compile's fallback
        seconds = time.perf_counter() - t0
        summary = (
            finish(
                run.name,
                run.run_dir,
                s.model,
                s.device,
                s.dd.world,
                compiled,
                metrics,
                step,
                seconds,
                tracker,
            )
            if main
            else {"steps": step}
        )
        s.dd.barrier()
        exit_code = 0
        return summary
    finally:
        if own_guard:
            guard.__exit__()
        if own_tracker:
            tracker.finish(exit_code)
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()
        s.dd.close()


def _finished(run: TrainingRun) -> dict:
    """A run this config already finished: said (rank 0), and its summary."""
    done = run.state.finished
    if distributed.rank() == 0:
        # a seed ensemble trained this folder (hydra/launcher=ensemble) before its job runs: say so,
        # not "skipped", which read as if the job had been left out
        k = done.get("ensemble")
        how = f"trained in a seed ensemble of {k}" if k else "skipped (finished)"
        log.info("%s: %s: %s holds %d steps", run.name, how, run.run_dir, done["steps"])
    return done


def _start(run: TrainingRun, main: bool) -> tuple[Setup, logging.Handler | None, int, MetricsLog]:
    """A start of ``run``: old results moved aside (``train.discard_old_results``), the objects built,
    (rank 0) the folder's files and the model's identity, the checkpoint restored; the setup, the log
    file's handler, the step to go on from and the metrics log (truncated there)."""
    state, run_dir = run.state.checkpoint, run.run_dir
    if main and run.state.discard:  # train.discard_old_results=true on a folder without a checkpoint
        log.warning("old results in %s moved to %s", run_dir, RunDir(run_dir).discard_results())
    s = build(run)
    handler = start_files(run.config, run_dir, state, s.device, s.dd.world) if main else None
    if main:  # the model's identity: the checkpoint's, the folder's, or new (kept in every checkpoint)
        s.ckpt.run_id = RunDir(run_dir).adopt_identity(state.get("run_id") if state else None)
    step = s.ckpt.restore(state, s.window) if state else 0
    metrics = MetricsLog(RunDir(run_dir).metrics_file)
    if main:
        metrics.truncate(step)
        log.info(
            "%s: %s parameters on %s, %d steps%s, run folder %s",
            run.name,
            f"{count_parameters(s.model):,}",
            s.device,
            run.cfg.train.steps,
            f" (resuming at {step})" if state else "",
            run_dir,
        )
    return s, handler, step, metrics


def finish(
    name: str,
    run_dir: Path,
    model,
    device,
    world: int,
    compiled: bool,
    metrics: MetricsLog,
    step: int,
    seconds: float,
    tracker,
    extra: dict | None = None,
) -> dict:
    """summary.json (with ``extra``'s keys) and the W&B summary (rank 0)."""
    rows = metrics.rows()
    n_params = count_parameters(model)
    summary = {
        "name": name,
        "steps": step,
        "parameters": n_params,
        "device": str(device),
        "processes": world,
        "compiled": compiled,
        "train_seconds_this_start": seconds,
        **({"final_loss": rows[-1]["loss"], "steps_per_sec": rows[-1]["steps_per_sec"]} if rows else {}),
        **(extra or {}),
    }
    atomic.write_json(RunDir(run_dir).summary_file, summary)
    tracker.set_summary(
        tracking.training_headline(
            final_loss=summary.get("final_loss"),
            parameters=n_params,
            steps_per_sec=summary.get("steps_per_sec"),
            wall_time_s=seconds,
            scorer_stats=model.scorer_stats() or None,
        )
    )
    tracker.log_checkpoint(RunDir(run_dir).last_checkpoint, step)
    return summary


def _preempted(guard, dd, step: int, device) -> bool:
    """A signal arrived (on any rank: decided together, every 10 steps under DDP)."""
    if not dd.enabled:
        return guard.received is not None
    if step % 10:
        return False
    flag = torch.tensor([0.0 if guard.received is None else 1.0], device=device)
    return bool(dd.mean(flag).item() > 0)


__all__ = ["train", "train_run", "TrainingDiverged"]
