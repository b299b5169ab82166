"""The W&B run of a training job or an evaluation: :class:`Tracker`, so callers never touch wandb themselves.

    Tracker.for_training(logger_cfg, run_dir, config, name) -> Tracker      # id in run_dir/wandb_id.txt
    Tracker.for_evaluation(run_dir, run_config, protocol, name, logger_cfg=None) -> Tracker
    Tracker.off() -> Tracker                             # logs nothing (DDP ranks > 0, disabled mode)
    tracker.log_training(row, step, scorer_stats)        # train/* scalars, scorer/<p>/L<l> lines
    tracker.log_scorer_params(stats, step)               # scorer/heads/<p> table + scorer/heads/<p>_img
    tracker.log_evaluation(name, tables, figures, grid=None, in_distribution=None)
    tracker.set_summary(values)
    tracker.log_artifact(name, kind, paths)
    tracker.log_checkpoint(path, step)                   # only with logger.log_checkpoints=true
    tracker.finish(exit_code=0)                          # also: ``with tracker:`` finishes with 1 on error

Runs: a training run has ``job_type="train"``, its id in ``<run_dir>/wandb_id.txt`` (a restart resumes
it) and a W&B group: ``logger.group`` (a sweep's folder name), else ``<name>-<id>`` so that the run and
its evaluations sit together. Its identity (id, group, name, project, entity) goes to
``<run_dir>/wandb_run.json``. Each *computed* evaluation is a fresh run (``job_type="eval"``) in that
group, never a resume: its config holds the training config, the protocol under ``eval`` and the
training run's id/folder under ``train_run``; its id is written to ``<run_dir>/eval/<name>/wandb_id.txt``.
Cached evaluations should not be logged again.

Keys (``docs/wandb.md`` has the full table)::

    history  train/step (x axis), train/loss, train/lr, train/n_points, train/steps_per_sec, ...
             scorer/<p>/L<l>                    mean over heads of SSA's b or n, one line per layer
             scorer/heads/<p>, scorer/heads/<p>_img    [layer x head] table and heat map image
             eval/<name>/<table>                results table (long form, pivotable)
             eval/<name>/<figure>_img           figure as an image (never under a table's key)
             eval/<name>/<grid>_matrix          the grid as rows x cols (a heat map to read)
             eval/<name>/<table>_plot           by-position curves as a W&B line chart
    summary  train/loss {min, last}, train/final_loss, model/parameters, perf/steps_per_sec,
             perf/wall_time_s, scorer/b_mean/L<l>, scorer/n_mean/L<l>,
             eval/<name>/in_dist, eval/<name>/grid_mean, eval/<name>/grid_worst,
             eval/<name>/grid_worst_at, eval/<name>/metric
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ssa_repro.core import atomic
from ssa_repro.core.identity import run_identity
from ssa_repro.core.rundir import SUMMARY, WANDB_ID, RunDir
from ssa_repro.tracking.environment import configure_environment
from ssa_repro.tracking.tables import (
    grid_cells,
    grid_headline,
    heatmap_array,
    is_scalar,
    layer_means,
    line_chart,
)

log = logging.getLogger(__name__)

RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what this module writes (12 hex digits) and wandb accepts
# wandb's folders under the home folder, by the variable that moves each (wandb's own names)
HOME_DIRS = {
    "WANDB_CONFIG_DIR": ".config/wandb",
    "WANDB_CACHE_DIR": ".cache/wandb",
    "WANDB_DATA_DIR": ".local/share/wandb",
}


class TrackingError(RuntimeError):
    """W&B could not start or resume a run; the message is one line with the cause and what to do."""


class Tracker:
    """One W&B run (or none): what to log and where, so callers never touch wandb themselves."""

    def __init__(self, run=None, *, log_checkpoints: bool = False):
        self.run = run
        self.log_checkpoints = log_checkpoints

    # ---- construction

    @classmethod
    def off(cls) -> Tracker:
        """A tracker that logs nothing (disabled mode, data-parallel ranks other than 0)."""
        return cls(None)

    @classmethod
    def for_training(cls, logger_cfg, run_dir: Path, config: Mapping, name: str) -> Tracker:
        """The training run: resumed when ``<run_dir>/wandb_id.txt`` exists (a restart), else new."""
        mode = configure_environment(logger_cfg.mode)
        if mode == "disabled":
            return cls.off()
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        id_file = RunDir(run_dir).wandb_id_file
        run_id = _stored_id(id_file) or _new_id()
        atomic.write_text(id_file, run_id + "\n")
        group = getattr(logger_cfg, "group", None) or f"{name}-{run_id}"
        identity = {
            "id": run_id,
            "group": group,
            "name": name,
            "project": logger_cfg.project,
            "entity": getattr(logger_cfg, "entity", None),
            "mode": mode,
        }
        atomic.write_text(RunDir(run_dir).wandb_run_file, json.dumps(identity, indent=2) + "\n")
        run = _init(
            mode=mode,
            project=logger_cfg.project,
            entity=identity["entity"],
            group=group,
            tags=list(getattr(logger_cfg, "tags", None) or []),
            name=name,
            id=run_id,
            resume="allow",
            job_type="train",
            run_dir=run_dir,
            config=_plain(config),
        )
        # Plotted against train/step (a logged value, not W&B's internal step), so rows logged again
        # after a resume are kept.
        run.define_metric("train/step")
        run.define_metric("*", step_metric="train/step")
        run.define_metric("train/loss", step_metric="train/step", summary="min,last")
        log.info("W&B %s run %s (group %s) in %s", mode, run_id, group, run_dir)
        return cls(run, log_checkpoints=bool(getattr(logger_cfg, "log_checkpoints", False)))

    @classmethod
    def for_evaluation(
        cls, run_dir: Path, run_config: Mapping, protocol: Mapping, name: str, logger_cfg=None
    ) -> Tracker:
        """A fresh eval run in the training run's group (``job_type="eval"``), never a resume.

        ``run_config`` is the training run's config (its ``logger`` section gives mode, project and
        entity unless ``logger_cfg`` is passed); ``protocol`` is the evaluation's config. The new run's
        id is written to ``<run_dir>/eval/<name>/wandb_id.txt``.
        """
        run_dir = Path(run_dir)
        run_config = _plain(run_config)
        lc = dict(run_config.get("logger") or {})
        if logger_cfg is not None:
            lc.update(
                {k: getattr(logger_cfg, k) for k in ("mode", "project", "entity") if hasattr(logger_cfg, k)}
            )
        mode = configure_environment(lc.get("mode", "disabled"))
        if mode == "disabled":
            return cls.off()
        train = _read_identity(run_dir)
        train_name = train.get("name") or _run_name(run_config)
        group = (
            train.get("group")
            or lc.get("group")
            or (f"{train_name}-{train['id']}" if train.get("id") else None)
        )
        run_id = _new_id()
        out_dir = RunDir(run_dir).eval_dir / name
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(out_dir / WANDB_ID, run_id + "\n")
        config = {
            **run_config,
            "eval": {"name": name, **_plain(protocol)},
            "run_identity": run_identity(run_dir).as_dict(),  # copies of one run share it (core/identity.py)
            "train_run": {
                "id": train.get("id"),
                "dir": str(run_dir.resolve()),
                "name": train_name,
                "group": group,
            },
        }
        run = _init(
            mode=mode,
            project=train.get("project") or lc.get("project") or "ssa_repro",
            entity=train.get("entity") if train else lc.get("entity"),
            group=group,
            tags=list(lc.get("tags") or []),
            name=f"{train_name}-eval-{name}",
            id=run_id,
            resume=None,
            job_type="eval",
            run_dir=run_dir,
            config=config,
        )
        log.info("W&B %s eval run %s (group %s) for %s", mode, run_id, group, run_dir)
        return cls(run)

    # ---- logging

    @property
    def active(self) -> bool:
        return self.run is not None

    def log_training(self, row: Mapping, step: int, scorer_stats: Mapping[str, Any] | None = None) -> None:
        """One metrics row: ``train/<key>`` for each scalar, one ``scorer/<p>/L<l>`` line per layer."""
        if self.run is None:
            return
        data = {f"train/{k}": v for k, v in row.items() if k not in ("step", "scorer") and is_scalar(v)}
        data["train/step"] = step
        for p, per_layer in layer_means(scorer_stats).items():
            data.update({f"scorer/{p}/L{layer}": v for layer, v in enumerate(per_layer)})
        self.run.log(data)

    def log_scorer_params(self, stats: Mapping[str, Any] | None, step: int) -> None:
        """SSA's per-head parameters as [layer x head] heat maps: a table and an image per parameter."""
        if self.run is None or not stats:
            return
        import torch
        import wandb

        data: dict[str, Any] = {"train/step": step}
        for p, v in stats.items():
            t = torch.as_tensor(v, dtype=torch.float32).detach().cpu()
            t = t.reshape(t.shape[0], -1) if t.dim() else t.reshape(1, 1)
            columns = ["layer", *[f"H{h}" for h in range(t.shape[1])]]
            rows = [[f"L{layer}", *t[layer].tolist()] for layer in range(t.shape[0])]
            data[f"scorer/heads/{p}"] = wandb.Table(columns=columns, data=rows)
            data[f"scorer/heads/{p}_img"] = wandb.Image(
                heatmap_array(t.numpy(), title=f"{p} at step {step}"),
                caption=f"{p}: layer x head, step {step}",
            )
        self.run.log(data)

    def log_evaluation(
        self,
        name: str,
        tables: Mapping[str, Any],
        figures: list[Path] | tuple[Path, ...] = (),
        grid: Mapping[str, Any] | None = None,
        in_distribution: float | None = None,
    ) -> None:
        """An evaluation's tables, figures, headline numbers and artifact, under ``eval/<name>/``.

        Tables (DataFrames by stem) go to ``eval/<name>/<stem>``, PNG figures to
        ``eval/<name>/<stem>_img`` (distinct keys, so neither hides the other). ``grid`` describes the
        heat map table (see :func:`grid_headline`): it adds ``eval/<name>/<table>_matrix`` (rows x cols)
        and the grid's mean and worst cell to the summary. Tables with a ``position`` column also become a
        line chart ``eval/<name>/<stem>_plot``. The CSVs beside the figures, the figures and
        ``summary.json`` become an artifact ``eval-<name>-<run id>`` of type ``evaluation``.
        """
        if self.run is None:
            return
        import wandb

        prefix = f"eval/{name}"
        data: dict[str, Any] = {}
        for stem, frame in tables.items():
            data[f"{prefix}/{stem}"] = wandb.Table(dataframe=frame)
            if {"position", "value"} <= set(frame.columns):
                data[f"{prefix}/{stem}_plot"] = line_chart(frame, f"{name}: {stem}")
        for path in map(Path, figures):
            if path.suffix.lower() == ".png" and path.exists():
                data[f"{prefix}/{path.stem}_img"] = wandb.Image(str(path))
        summary: dict[str, Any] = {}
        if grid:
            table = grid.get("table", "grid")
            cells = grid_cells(tables.get(table), grid)
            if cells is not None and not cells.empty:
                wide = cells.reset_index()
                wide.columns = [str(grid["rows"]), *[f"{grid['cols']}={c}" for c in cells.columns]]
                data[f"{prefix}/{table}_matrix"] = wandb.Table(dataframe=wide)
                summary.update(grid_headline(tables[table], grid, name))
            if grid.get("metric"):
                summary[f"{prefix}/metric"] = grid["metric"]
        if in_distribution is not None:
            summary[f"{prefix}/in_dist"] = float(in_distribution)
        if data:
            self.run.log(data)
        if summary:
            self.set_summary(summary)
        files = [Path(f) for f in figures]
        folders = {f.parent for f in files}
        for folder in folders:
            files += [folder / f"{stem}.csv" for stem in tables] + [folder / SUMMARY]
        self.log_artifact(f"eval-{name}-{self.run.id}", "evaluation", files)

    def set_summary(self, values: Mapping[str, Any]) -> None:
        """Put headline numbers in the run's summary (the runs table's columns)."""
        if self.run is not None and values:
            self.run.summary.update(dict(values))

    def log_artifact(self, name: str, kind: str, paths, aliases: list[str] | None = None) -> None:
        """Files (those that exist, each once) as a W&B artifact of type ``kind`` linked to this run."""
        if self.run is None:
            return
        import wandb

        files = list(dict.fromkeys(Path(p) for p in paths if Path(p).is_file()))
        if not files:
            return
        artifact = wandb.Artifact(_artifact_name(name), type=kind)
        for f in files:
            artifact.add_file(str(f), name=f.name)
        self.run.log_artifact(artifact, aliases=aliases)

    def log_checkpoint(self, path: Path, step: int) -> None:
        """The checkpoint as a ``model`` artifact, only with ``logger.log_checkpoints=true``.

        The file is copied to wandb's staging area when logged (the trainer overwrites it later).
        """
        if self.run is not None and self.log_checkpoints:
            self.log_artifact(f"model-{self.run.id}", "model", [path], aliases=["latest", f"step-{step}"])

    def finish(self, exit_code: int = 0) -> None:
        """Finish the run (``exit_code != 0`` marks it failed); safe to call twice."""
        if self.run is not None:
            run, self.run = self.run, None
            run.finish(exit_code=exit_code)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(0 if exc_type is None else 1)


# --------------------------------------------------------------------------------------------------
# Helpers


def _init(*, mode, project, entity, group, tags, name, id, resume, job_type, run_dir: Path, config):
    """wandb.init with the settings every run here shares; a failure (a server that refuses the resume
    call, a name wandb rejects) becomes one :class:`TrackingError` line."""
    import wandb

    _movable_home_dirs(run_dir)
    try:
        return _wandb_init(
            wandb, project, entity, group, tags, name, id, resume, job_type, run_dir, mode, config
        )
    except Exception as e:  # noqa: BLE001  (wandb raises CommError, UsageError, pydantic's ValueError, ...)
        what = f"{'resume' if resume else 'start'} {job_type} run {id}"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise TrackingError(
            f"W&B could not {what} ({mode}, project {project!r}): {type(e).__name__}: {first}; run with "
            "logger.mode=offline (upload later with `wandb sync`) or logger.mode=disabled"
        ) from e


def _wandb_init(wandb, project, entity, group, tags, name, id, resume, job_type, run_dir, mode, config):
    return wandb.init(
        project=project,
        entity=entity,
        group=group,
        tags=tags,
        name=name,
        id=id,
        resume=resume,
        job_type=job_type,
        dir=str(run_dir),
        mode=mode,
        config=config,
        reinit="finish_previous",  # a run a previous job of this process left open is closed first
        settings=wandb.Settings(silent=True, console="off"),
    )


def _new_id() -> str:
    return uuid.uuid4().hex[:12]


def _stored_id(path: Path) -> str | None:
    """The W&B run id stored in ``path``, or None when there is none; a damaged one (not a run id: cut,
    overwritten, binary) is said in a warning and ignored (a new W&B run is started; the training run
    itself resumes from its checkpoint as usual)."""
    try:
        text = path.read_bytes().decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot read the W&B run id in %s (%s): starting a new W&B run", path, e)
        return None
    if RUN_ID.fullmatch(text):
        return text
    log.warning("%s holds %r, not a W&B run id: starting a new W&B run", path, text[:40])
    return None


def _movable_home_dirs(run_dir: Path) -> None:
    """Where the home folder cannot take wandb's files (read-only, full, a file in the way) and the
    variable is unset, point wandb's config, cache and data folders (artifact staging) into
    ``<run_dir>/wandb/home/`` instead, with one log line; wandb would otherwise fail at the first
    artifact (PermissionError from its staging folder)."""
    for var, rel in HOME_DIRS.items():
        if os.environ.get(var):
            continue
        if not _writable(Path.home() / rel):
            fallback = (
                Path(run_dir) / "wandb" / "home" / var.removeprefix("WANDB_").removesuffix("_DIR").lower()
            )
            fallback.mkdir(parents=True, exist_ok=True)
            os.environ[var] = str(fallback)
            log.info("W&B: %s cannot be written; %s=%s", Path.home() / rel, var, fallback)


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _read_identity(run_dir: Path) -> dict:
    """The training run's W&B identity (wandb_run.json, else just the id from wandb_id.txt), or {}."""
    path = RunDir(run_dir).wandb_run_file
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            pass
    run_id = _stored_id(RunDir(run_dir).wandb_id_file)
    return {"id": run_id} if run_id else {}


def _run_name(config: Mapping) -> str:
    """The trainer's run name from a training config: <task>-<scorer>-<model>-s<seed>."""
    try:
        return f"{config['task']['name']}-{config['scorer']['label']}-{config['model']['name']}-s{config['seed']}"
    except (KeyError, TypeError):
        return "run"


def _plain(config) -> dict:
    """A plain dict from a dict or an OmegaConf config (enums as their values)."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(config, resolve=True, enum_to_str=True)
    return dict(config)


def _artifact_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "artifact"
