"""One trainer for every task × model × scorer: fresh prompts each step, curriculum, Adam.

``train(cfg, run_dir)`` is the whole job behind ``python train.py``; it is a plain function, so tests
and notebooks call it directly. Everything it writes goes under ``run_dir``:

    config.yaml          the resolved config
    provenance.json      one record per start: git commit, library versions, device, argv
    train.log            progress lines (steps/s, ETA)
    metrics.jsonl        one row per log interval: step, loss, n_points, lr, throughput, scorer params
    checkpoints/last.pt  model, optimizer, step, RNG states (+ step_XXXXXXX.pt every train.keep_every)
    summary.json         final loss, parameter count, wall time (the end-of-run evaluation, which the
                         entry point runs after training, adds its headline numbers)
    wandb/               the W&B run (offline by default)

Resuming (``train.resume=true``, the default, and a checkpoint in ``run_dir``) restores model,
optimizer, step and RNG states; since prompts come from a saved generator and the curriculum is a
function of the step, a resumed run reproduces the uninterrupted one exactly (on CPU). A run that
already finished with the same config (``summary.json`` at ``train.steps``; W&B settings aside) is
skipped: the call logs "skipped (finished)" and returns its summary, so re-running a sweep only does
the jobs that are missing or interrupted. SIGTERM / SIGUSR2 (preemption) save a checkpoint after the
step in flight before the process ends (``ssa_repro/training/distributed.py``).

Under ``torchrun`` (``WORLD_SIZE`` > 1) the model is trained data-parallel: ``train.batch_size`` is per
process, rank r draws its prompts from ``data_seed(seed) + r``, and only rank 0 writes anything; see
``ssa_repro/training/distributed.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ssa_repro.core import provenance
from ssa_repro.core.enums import value_of
from ssa_repro.models import build_model, count_parameters
from ssa_repro.tasks import build_task
from ssa_repro.training import checkpoint, curriculum, distributed, validate
from ssa_repro.training.optim import build_optimizer, lr_at, set_lr
from ssa_repro.wandb_logger import WandbLogger

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
RESUME_FREE = ("model.attn_impl",)  # same numbers either way (tested)


class TrainingDiverged(RuntimeError):
    """The loss became non-finite; the message names the step and the last good checkpoint."""


def micro_batch_index(step: int, micro: int, grad_accum: int, world: int, rank: int) -> int:
    """The data index of a micro-batch: corpus tasks read by index, so rank r of ``world`` processes
    takes every world-th one (a single process: 0, 1, 2, ...). Each optimizer step covers the indices
    step·A·W ... (step+1)·A·W − 1 exactly once across ranks (A = grad_accum, W = world)."""
    return (step * grad_accum + micro) * world + rank


def resolve_device(name) -> torch.device:
    name = value_of(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def data_seed(seed: int) -> int:
    """The prompt generator's seed: a different stream from the one that initialises the weights."""
    return (seed * 0x9E3779B1 + 0x7F4A7C15) % (2**63)


def rank_data_seed(seed: int, rank: int) -> int:
    """Rank ``rank``'s prompt stream in a data-parallel run (rank 0's is the single-process one)."""
    return (data_seed(seed) + rank) % (2**63)


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


def config_mismatches(saved: dict, current: dict) -> list[str]:
    """Differences in the keys that must match to resume, one line per leaf key."""
    a, b = _flatten(saved), _flatten(current)
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


def _add_file_log(run_dir: Path) -> logging.Handler | None:
    """Log to run_dir/train.log unless Hydra's job logging already does."""
    path = (run_dir / "train.log").resolve()
    root = logging.getLogger()
    if any(getattr(h, "baseFilename", None) == str(path) for h in root.handlers):
        return None
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    return handler


def _fmt_time(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def preflight(cfg: DictConfig, run_dir: str | Path) -> dict | None:
    """Every check that can fail before work starts: config values, and whether ``run_dir`` holds a
    run this config may continue. Returns the checkpoint to resume from (or None). Writes nothing."""
    validate.check(cfg)
    ckpt_path = Path(run_dir) / "checkpoints" / "last.pt"
    if not ckpt_path.exists():
        return None
    if not cfg.train.resume:
        raise validate.ConfigError(
            f"{run_dir} already holds a run (checkpoints/last.pt) and train.resume=false; use "
            "train.resume=true to continue it, or another hydra.run.dir for a new run"
        )
    state = checkpoint.load(ckpt_path)
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
    if bad:
        raise validate.ConfigError(
            f"cannot resume {ckpt_path}: the config differs from the checkpoint's in\n  - "
            + "\n  - ".join(bad)
            + "\nuse another hydra.run.dir for a new run"
        )
    return state


def _without_logger(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("logger", "evaluation")}


def finished_summary(cfg: DictConfig, run_dir: str | Path, state: dict | None) -> dict | None:
    """The summary of the run in ``run_dir`` if it already finished this config's training, else None.
    Only W&B and evaluation settings may differ (evaluations are stored per protocol and reuse what
    is there); more steps is work."""
    run_dir = Path(run_dir)
    summary_path, config_path = run_dir / "summary.json", run_dir / "config.yaml"
    if state is None or not cfg.train.resume or not summary_path.exists() or not config_path.exists():
        return None
    try:
        summary = json.loads(summary_path.read_text())
        saved = OmegaConf.to_container(OmegaConf.load(config_path))
    except Exception:  # noqa: BLE001  (a damaged file: do the work again)
        return None
    steps = cfg.train.steps
    if summary.get("steps") != steps or int(state["step"]) != steps:
        return None
    return summary if _without_logger(saved) == _without_logger(plain(cfg)) else None


def train(cfg: DictConfig, run_dir: str | Path) -> dict:
    """Train (or continue training) the configured model in ``run_dir``; return the summary."""
    state = preflight(cfg, run_dir)  # every bad value reported before anything is written
    run_dir = Path(run_dir)
    done = finished_summary(cfg, run_dir, state)
    if done is not None:
        if distributed.world_size() <= 1 or int(os.environ.get("RANK", "0")) == 0:
            log.info(
                "%s: skipped (finished): %s holds %d steps",
                done.get("name"),
                run_dir,
                done["steps"],
            )
        return done
    ckpt_path = run_dir / "checkpoints" / "last.pt"
    config = plain(cfg)
    device = resolve_device(cfg.device)
    dd = distributed.setup(device.type)
    if dd.enabled and device.type == "cuda":
        device = torch.device("cuda", dd.local_rank)
    main = dd.main  # only rank 0 writes
    handler = None
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        handler = _add_file_log(run_dir)
        OmegaConf.save(config, run_dir / "config.yaml")
        prov_path = run_dir / "provenance.json"
        records = json.loads(prov_path.read_text()) if (state and prov_path.exists()) else []
        records.append(
            {
                **provenance.collect(device),
                "resumed_from_step": state["step"] if state else None,
                "processes": dd.world,
            }
        )
        prov_path.write_text(json.dumps(records, indent=2) + "\n")

    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model = build_model(cfg.model, cfg.scorer).to(device)
    tr = cfg.train
    opt = build_optimizer(model, tr)
    # autocast for forward + loss only; weights, gradients and optimizer state stay float32
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=value_of(tr.precision) == "bf16")
    gen = torch.Generator(device=device)
    gen.manual_seed(rank_data_seed(cfg.seed, dd.rank))
    # Losses stay on the device between checks (no per-step host sync on GPU); a check finds the first
    # non-finite one and names its step. The window is saved with checkpoints, so the metrics row after
    # a resume averages the same steps as without one.
    window = torch.zeros(cfg.train.log_interval, device=device)
    step = filled = 0
    if state is not None:
        model.load_state_dict(state["model"])  # strict: a missing scorer parameter is an error
        opt.load_state_dict(state["optimizer"])
        ranks = state["rng"].get("data_ranks")
        gen.set_state(ranks[dd.rank] if ranks else state["rng"]["data"])
        torch.set_rng_state(state["rng"]["torch"])
        if device.type == "cuda" and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"], device)
        step = int(state["step"])
        filled = len(state["loss_window"])
        window[:filled] = state["loss_window"].to(device)
        if main:
            log.info("resuming from %s at step %d", ckpt_path, step)
    metrics_path = run_dir / "metrics.jsonl"
    if main:
        _truncate_metrics(metrics_path, step)
    forward = ddp = model
    if dd.enabled:  # gradients averaged over ranks; `model` stays the plain module (state_dict, eval)
        ddp = forward = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    if tr.compile:  # compiles the forward only: state_dict keys, checkpoints and eval stay the same
        forward = torch.compile(forward)

    n_params = count_parameters(model)
    name = f"{cfg.task.name}-{cfg.scorer.label}-{cfg.model.name}-s{cfg.seed}"
    if main:
        log.info(
            "%s: %s parameters on %s, %d steps, run folder %s%s",
            name,
            f"{n_params:,}",
            device,
            cfg.train.steps,
            run_dir,
            f" ({dd.world} processes, batch {tr.batch_size} each)" if dd.enabled else "",
        )
    wb = WandbLogger(cfg.logger, run_dir, config, name) if main else WandbLogger.off()
    last_good = step if state else None

    def check_finite(at: int) -> None:
        vals = window[:filled].cpu()
        bad = (~torch.isfinite(vals)).nonzero()
        if len(bad):
            where = f"{ckpt_path} (step {last_good})" if last_good is not None else "none was written"
            raise TrainingDiverged(
                f"non-finite loss ({vals[bad[0]].item()}) at step {at - filled + int(bad[0]) + 1}; "
                f"training stopped; last good checkpoint: {where}"
            )

    def save_checkpoint(at: int) -> None:
        nonlocal last_good
        check_finite(at)
        if not all(torch.isfinite(p).all() for p in model.parameters()):
            raise TrainingDiverged(
                f"non-finite weights after step {at}; training stopped; last good "
                f"checkpoint: {ckpt_path} (step {last_good})"
            )
        gen_states = dd.gather(gen.get_state().cpu())  # every rank's prompt stream (collective)
        last_good = at
        if not main:
            return
        payload = {
            "step": at,
            "device_type": device.type,
            "loss_window": window[:filled].cpu(),
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "rng": {
                "data": gen.get_state(),
                "data_ranks": gen_states if dd.enabled else None,
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            },
            "config": config,
        }
        checkpoint.save(ckpt_path, payload)
        if cfg.train.keep_every and at % cfg.train.keep_every == 0:
            checkpoint.save(ckpt_path.with_name(f"step_{at:07d}.pt"), payload)

    def preempted() -> bool:
        """A preemption signal arrived (on any rank: decided together, every 10 steps under DDP)."""
        if not dd.enabled:
            return guard.received is not None
        if step % 10:
            return False
        flag = torch.tensor([0.0 if guard.received is None else 1.0], device=device)
        return bool(dd.mean(flag).item() > 0)

    t0 = t_window = time.perf_counter()
    steps_at_window = step
    exit_code = 1
    guard = distributed.PreemptionGuard().__enter__()
    try:
        model.train()
        while step < cfg.train.steps:
            n = curriculum.n_points(cfg.curriculum, step)
            set_lr(opt, lr_at(tr, step))
            loss = torch.zeros((), device=device)
            for micro in range(tr.grad_accum):
                index = micro_batch_index(step, micro, tr.grad_accum, dd.world, dd.rank)
                batch = task.train_batch(index, tr.batch_size, n, gen, device)
                sync = contextlib.nullcontext()
                if dd.enabled and micro < tr.grad_accum - 1:
                    sync = ddp.no_sync()  # gradients are averaged over ranks once, at the last micro-batch
                with sync:
                    with autocast:
                        micro_loss = task.training_loss(forward, batch) / tr.grad_accum
                    micro_loss.backward()
                loss += micro_loss.detach().float()
            dd.mean(loss)  # the global batch's loss (the same on every rank)
            if tr.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tr.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            window[filled] = loss
            filled += 1
            step += 1
            done = step == cfg.train.steps
            if step % cfg.train.log_interval == 0 or done:  # rows at the same steps after a resume
                check_finite(step)
                now = time.perf_counter()
                rate = (step - steps_at_window) / max(now - t_window, 1e-9)
                row = {
                    "step": step,
                    "loss": window[:filled].mean().item(),
                    "n_points": n,
                    "lr": opt.param_groups[0]["lr"],
                    "steps_per_sec": rate,
                    "examples_per_sec": rate * tr.batch_size * tr.grad_accum * dd.world,
                    "elapsed_s": now - t0,
                }
                if main:
                    _log_row(row, model.scorer_stats(), metrics_path, wb)
                (log.info if main else log.debug)(
                    "step %d/%d (%.0f%%) | loss %.4g | n_points %d | %.1f steps/s | ETA %s",
                    step,
                    cfg.train.steps,
                    100 * step / cfg.train.steps,
                    row["loss"],
                    n,
                    rate,
                    _fmt_time((cfg.train.steps - step) / max(rate, 1e-9)),
                )
                filled, t_window, steps_at_window = 0, now, step
            saved = step % cfg.train.ckpt_interval == 0 or done
            if saved:
                save_checkpoint(step)
            if not done and preempted():
                if not saved:
                    save_checkpoint(step)
                if main:
                    log.warning("signal %d: checkpoint saved at step %d", guard.received or 0, step)
                guard.hand_on()

        summary = {
            "name": name,
            "steps": step,
            "parameters": n_params,
            "device": str(device),
            "processes": dd.world,
            "train_seconds_this_start": time.perf_counter() - t0,
        }
        if not main:  # rank 0 evaluates (same prompts as a single process) and writes
            dd.barrier()
            exit_code = 0
            return summary
        rows = read_metrics(metrics_path)
        if rows:
            summary["final_loss"] = rows[-1]["loss"]
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        dd.barrier()
        exit_code = 0
        return summary
    finally:
        guard.__exit__()
        wb.finish(exit_code)
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()
        dd.close()


def _log_row(row: dict, stats: dict, metrics_path: Path, wb: WandbLogger) -> None:
    """One metrics row to metrics.jsonl (scorer parameters as [layer][head] lists) and to W&B (flat)."""
    if stats:  # {"b": [L, H], "n": [L, H]}
        row["scorer"] = {k: v.cpu().tolist() for k, v in stats.items()}
    with open(metrics_path, "a") as f:
        f.write(json.dumps(row) + "\n")
    flat = {f"train/{k}": v for k, v in row.items() if k != "scorer"}
    for k, v in row.get("scorer", {}).items():
        for layer, heads in enumerate(v):
            flat.update({f"scorer/{k}/L{layer}H{h}": x for h, x in enumerate(heads)})
    wb.log(flat)


def read_metrics(path: Path) -> list[dict]:
    """The rows of metrics.jsonl; a half-written last line (from a killed run) is skipped."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop rows logged after the checkpoint we resume from (they will be logged again)."""
    if not path.exists():
        return
    keep = [row for row in read_metrics(path) if row["step"] <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in keep))
    tmp.replace(path)


__all__ = ["train", "preflight", "read_metrics", "TrainingDiverged", "resolve_device"]
