"""Weights & Biases tracking: offline without a byte on the network, runs tables that answer the question.

Everything W&B goes through here; ``wandb`` is imported lazily, after :func:`configure_environment` has
set the variables that wandb reads at import/setup time.

Modes (``logger.mode``): ``offline`` (default), ``online``, ``disabled``.

- **offline / disabled: no network.** wandb decides on its usage telemetry from its *global* settings,
  which come from the environment, not from ``wandb.init(mode=...)``: with ``WANDB_MODE`` unset a run
  started with ``mode="offline"`` still builds an OpenTelemetry exporter that resolves the W&B host
  (a DNS query on port 53). :func:`configure_environment` therefore sets ``WANDB_MODE`` to the resolved
  mode and, for every mode but ``online``, ``WANDB_ERROR_REPORTING=false`` (turns the Python-side
  telemetry recorder off and starts wandb-core with ``--no-observability``). If wandb was already
  imported, its process-wide telemetry switch is turned off as well. Nothing else is needed in wandb
  0.31: offline, wandb-core's CoreWeave metadata probe has no GraphQL client, and system metrics are
  read locally.
- **online: fail fast.** :func:`check` (called from start-up validation, before the run folder is
  created) reports a missing API key (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE`` or a netrc
  entry for the W&B host), a W&B host that cannot be reached within a few seconds, and a key the
  server does not accept or a host that is not a W&B server: one authenticated request (W&B's GraphQL
  ``viewer`` query, the one ``wandb login`` makes) must return the key's user. There is no
  silent fall-back to offline: a run asked to be online that quietly is not would be lost from the
  dashboard; the message says how to run offline instead.

API::

    configure_environment(mode) -> str                   # before wandb is imported; idempotent
    check(logger_cfg) -> list[str]                       # bad WANDB_MODE, online without key/network
    check_online(logger_cfg, timeout=5.0, hint=None) -> list[str]   # the online part of check (key, host, viewer)
    name_problems(logger_cfg) -> list[str]               # tags, project, entity that wandb.init refuses
    training_headline(final_loss=, parameters=, steps_per_sec=, wall_time_s=, scorer_stats=) -> dict
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

import base64
import http.client
import json
import logging
import netrc
import os
import re
import socket
import sys
import tempfile
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ssa_repro.core import atomic
from ssa_repro.core.enums import value_of
from ssa_repro.core.identity import run_identity
from ssa_repro.core.rundir import SUMMARY, WANDB_ID, RunDir

log = logging.getLogger(__name__)

MODES = ("offline", "online", "disabled")
TAG_LEN = 64  # W&B refuses a tag longer than this (a pydantic error at wandb.init)
NAME_LEN = 128  # W&B's limit for a project name
FORBIDDEN = "/\\#?%:"  # characters W&B refuses in project and entity names
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what this module writes (12 hex digits) and wandb accepts
# wandb's folders under the home folder, by the variable that moves each (wandb's own names)
HOME_DIRS = {
    "WANDB_CONFIG_DIR": ".config/wandb",
    "WANDB_CACHE_DIR": ".cache/wandb",
    "WANDB_DATA_DIR": ".local/share/wandb",
}


class TrackingError(RuntimeError):
    """W&B could not start or resume a run; the message is one line with the cause and what to do."""


DEFAULT_BASE_URL = "https://api.wandb.ai"


# --------------------------------------------------------------------------------------------------
# Environment and start-up checks


def configure_environment(mode) -> str:
    """Set wandb's environment for ``mode`` (before wandb is imported, where possible); returns the mode.

    ``WANDB_MODE`` becomes the resolved mode, so wandb's global settings (which decide on telemetry)
    agree with the run. For every mode but ``online`` its telemetry and error reporting are switched
    off (``WANDB_ERROR_REPORTING=false``). Idempotent.
    """
    mode = value_of(mode)
    if mode not in MODES:
        raise ValueError(f"W&B mode {mode!r} is not one of {', '.join(MODES)}")
    os.environ["WANDB_MODE"] = mode
    if mode != "online":
        os.environ["WANDB_ERROR_REPORTING"] = "false"
        if "wandb" in sys.modules:
            _disable_loaded_telemetry()
    return mode


def _disable_loaded_telemetry() -> None:
    """wandb was imported before the environment was set: turn its process-wide telemetry off too."""
    try:
        from wandb.analytics.opentelemetry import opentelemetry_proxy

        opentelemetry_proxy.disable()
    except Exception:  # an internal module of wandb; its absence must not stop a run
        log.debug("could not switch off wandb telemetry after import", exc_info=True)


def check(logger_cfg, timeout: float = 5.0) -> list[str]:
    """Problems with the W&B set-up, found before any work starts (empty when all is well).

    An unknown ``WANDB_MODE`` in the environment is reported naming the variable, its value and the
    allowed values (``logger.mode`` defaults to it, and wandb's own tools read it). For
    ``logger.mode=online`` the API key and the server are checked (:func:`check_online`).
    """
    out = []
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode is not None and env_mode not in MODES:
        out.append(
            f"environment variable WANDB_MODE={env_mode!r} is not a W&B mode; allowed: {', '.join(MODES)} "
            "(unset it to log offline, or set it to one of these)"
        )
    try:
        mode = value_of(logger_cfg.mode)
    except Exception:  # the YAML default ${oc.env:WANDB_MODE,offline} failed on the value reported above
        return out or [f"logger.mode could not be resolved; allowed: {', '.join(MODES)}"]
    if mode not in MODES:
        out.append(f"logger.mode={mode!r} is not a W&B mode; allowed: {', '.join(MODES)}")
        return out
    if mode != "disabled":
        out += name_problems(logger_cfg)
    if mode == "online" and not out:
        out += check_online(logger_cfg, timeout=timeout)
    return out


def name_problems(logger_cfg) -> list[str]:
    """Tags, project and entity that wandb.init would refuse (offline too), each naming the key, the value
    and W&B's rule."""
    out = []
    for i, tag in enumerate(getattr(logger_cfg, "tags", None) or []):  # (a bare namespace has none)
        if not 1 <= len(str(tag)) <= TAG_LEN:
            out.append(
                f"logger.tags[{i}]={str(tag)[:40]!r}{'…' if len(str(tag)) > 40 else ''} has {len(str(tag))} "
                f"characters; W&B allows 1 to {TAG_LEN} per tag"
            )
    for key in ("project", "entity"):  # (wandb checks the project's name itself; an entity is in URLs)
        value = getattr(logger_cfg, key, None)
        if value is not None and (
            any(c in FORBIDDEN for c in str(value)) or not 1 <= len(str(value)) <= NAME_LEN
        ):
            out.append(
                f"logger.{key}={str(value)!r} is not a W&B {key} name (1 to {NAME_LEN} characters, none of "
                f"{' '.join(FORBIDDEN)})"
            )
    return out


def check_online(logger_cfg=None, timeout: float = 5.0, hint: str | None = None) -> list[str]:
    """Problems that would make an online run fail or hang: no API key, the W&B host unreachable, a key
    the server refuses, a host that is not a W&B server.

    The key is looked up where wandb looks (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``, a netrc
    entry for the host); the host (``WANDB_BASE_URL``, default ``https://api.wandb.ai``) is only contacted
    when a key is present: a TCP connection, then the key checked with one ``viewer`` query
    (:func:`credentials_problem`; not for an identity token, which wandb exchanges itself), each bounded
    by ``timeout`` seconds (DNS included).
    """
    base_url = os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
    offline_hint = hint or "or run with logger.mode=offline and upload later with `wandb sync`"
    who = "logger.mode=online" if hint is None else "W&B"  # (the dashboard has no logger.mode)
    but = f"{who} but" if hint is None else f"{who}:"
    if not _have_api_key(base_url):
        return [
            f"{who} needs a W&B API key for {base_url} and none was found: set WANDB_API_KEY, "
            f"or run `wandb login` (writes ~/.netrc), {offline_hint}"
        ]
    why = reachability_problem(base_url, timeout)
    if why:
        return [f"{but} the W&B server {base_url} is not reachable ({why}); {offline_hint}"]
    key = _api_key(base_url)
    why = credentials_problem(base_url, key, timeout) if key else None  # (an identity token: TCP only)
    if why:
        return [f"{but} {why}; {offline_hint}"]
    return []


VIEWER_QUERY = "query Viewer { viewer { id username } }"


def credentials_problem(base_url: str, key: str, timeout: float = 5.0) -> str | None:
    """None if the W&B server at ``base_url`` answers the ``viewer`` query authenticated with ``key``
    (HTTP basic auth, user ``api``, as wandb does) with a user, within ``timeout`` s; else why not.
    Like :func:`reachability_problem`, the request runs in a daemon thread abandoned after ``timeout``."""
    url = base_url.rstrip("/") + "/graphql"
    auth = base64.b64encode(f"api:{key}".encode()).decode()
    request = urllib.request.Request(
        url,
        data=json.dumps({"query": VIEWER_QUERY}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Basic {auth}"},
        method="POST",
    )
    not_wandb = f"{base_url} is not a W&B server (check WANDB_BASE_URL)"
    result: list[str | None] = []

    def attempt() -> None:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                body = answer.read(1 << 20)
            viewer = (json.loads(body).get("data") or {}).get("viewer")
            result.append(None if viewer else f"the W&B server {base_url} knows no user for this API key")
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                result.append(
                    f"the W&B server {base_url} refused the API key (HTTP {e.code}): check WANDB_API_KEY "
                    "or run `wandb login --relogin`"
                )
            else:
                result.append(f"{not_wandb}: it answered HTTP {e.code} {e.reason} to W&B's viewer query")
        except (ValueError, AttributeError):  # not JSON, or JSON of another shape
            result.append(f"{not_wandb}: it did not answer W&B's viewer query with W&B's JSON")
        except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out, not HTTP
            reason = getattr(e, "reason", None) or e
            result.append(f"{not_wandb}: no HTTP answer to W&B's viewer query ({reason})")

    thread = threading.Thread(target=attempt, name="wandb-credentials", daemon=True)
    thread.start()
    thread.join(timeout)
    if not result:
        return f"{not_wandb}: no answer to W&B's viewer query within {timeout:g} s"
    return result[0]


def _have_api_key(base_url: str) -> bool:
    return bool(_api_key(base_url) or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"))


def _api_key(base_url: str) -> str | None:
    """The API key wandb would use: ``WANDB_API_KEY``, else the netrc password for the host."""
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    host = urlparse(base_url).hostname or ""
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        auth = netrc.netrc(str(path)).authenticators(host) if path.exists() else None
    except (netrc.NetrcParseError, OSError):
        return None
    return auth[2] if auth and auth[2] else None


def reachability_problem(base_url: str, timeout: float = 5.0) -> str | None:
    """None if a TCP connection to the URL's host and port opens within ``timeout`` s, else why not.

    Name resolution cannot be interrupted, so the attempt runs in a daemon thread that is abandoned
    after ``timeout``: the caller never waits longer.
    """
    url = urlparse(base_url)
    host = url.hostname
    if not host:
        return f"no host in {base_url!r}"
    port = url.port or (443 if url.scheme == "https" else 80)
    result: list[str | None] = []

    def attempt() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(f"{host}:{port}: {e.strerror or e}")

    thread = threading.Thread(target=attempt, name="wandb-reachability", daemon=True)
    thread.start()
    thread.join(timeout)
    if not result:
        return f"{host}:{port}: no answer within {timeout:g} s"
    return result[0]


# --------------------------------------------------------------------------------------------------
# Headline numbers


def training_headline(
    *,
    final_loss: float | None = None,
    parameters: int | None = None,
    steps_per_sec: float | None = None,
    wall_time_s: float | None = None,
    scorer_stats: Mapping[str, Any] | None = None,
) -> dict:
    """The training run's headline numbers under their summary keys (``None`` values are left out)."""
    out: dict[str, Any] = {
        "train/final_loss": final_loss,
        "model/parameters": parameters,
        "perf/steps_per_sec": steps_per_sec,
        "perf/wall_time_s": wall_time_s,
    }
    for p, per_layer in _layer_means(scorer_stats).items():
        out.update({f"scorer/{p}_mean/L{layer}": v for layer, v in enumerate(per_layer)})
    return {k: v for k, v in out.items() if v is not None}


def grid_headline(frame, grid: Mapping[str, Any], name: str) -> dict:
    """Mean and worst cell of an evaluation grid (the model's rows; larger is worse) as summary values.

    ``grid``: ``{"rows": "sigma_x", "cols": "length", "metric": "mse", "table": "grid",
    "predictor": "model"}``; the frame is the long-form table (columns predictor, <rows>, <cols>, metric,
    value, ...). Other dimensions (e.g. ``sigma_f``) are averaged over.
    """
    cells = _grid_cells(frame, grid)
    if cells is None or cells.empty:
        return {}
    worst = cells.stack().idxmax()
    return {
        f"eval/{name}/grid_mean": float(cells.stack().mean()),
        f"eval/{name}/grid_worst": float(cells.stack().max()),
        f"eval/{name}/grid_worst_at": f"{grid['rows']}={worst[0]}, {grid['cols']}={worst[1]}",
    }


def _grid_cells(frame, grid: Mapping[str, Any]):
    """The model's cells as a rows x cols frame (mean over any other dimension), or None."""
    rows, cols = grid.get("rows"), grid.get("cols")
    if frame is None or rows not in frame or cols not in frame or "value" not in frame:
        return None
    sel = frame
    predictor = grid.get("predictor", "model")
    if "predictor" in sel and predictor in set(sel["predictor"]):
        sel = sel[sel["predictor"] == predictor]
    if grid.get("metric") and "metric" in sel and grid["metric"] in set(sel["metric"]):
        sel = sel[sel["metric"] == grid["metric"]]
    return sel.pivot_table(index=rows, columns=cols, values="value", aggfunc="mean")


def _layer_means(stats: Mapping[str, Any] | None) -> dict[str, list[float]]:
    """{"b": [L, H] tensor or nested list, ...} -> {"b": [mean over heads per layer], ...}."""
    import torch

    out = {}
    for p, v in (stats or {}).items():
        t = torch.as_tensor(v, dtype=torch.float32).detach().cpu()
        t = t.reshape(t.shape[0], -1) if t.dim() else t.reshape(1, 1)
        out[p] = t.mean(dim=1).tolist()
    return out


# --------------------------------------------------------------------------------------------------
# The tracker


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
        data = {f"train/{k}": v for k, v in row.items() if k not in ("step", "scorer") and _is_scalar(v)}
        data["train/step"] = step
        for p, per_layer in _layer_means(scorer_stats).items():
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
                _heatmap_array(t.numpy(), title=f"{p} at step {step}"),
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
                data[f"{prefix}/{stem}_plot"] = _line_chart(frame, f"{name}: {stem}")
        for path in map(Path, figures):
            if path.suffix.lower() == ".png" and path.exists():
                data[f"{prefix}/{path.stem}_img"] = wandb.Image(str(path))
        summary: dict[str, Any] = {}
        if grid:
            table = grid.get("table", "grid")
            cells = _grid_cells(tables.get(table), grid)
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


def _is_scalar(v) -> bool:
    """A number (int, float, or a 0-d tensor/array), not a bool."""
    if isinstance(v, bool):
        return False
    return isinstance(v, (int, float)) or (hasattr(v, "item") and getattr(v, "ndim", 1) == 0)


def _artifact_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "artifact"


def _line_chart(frame, title: str):
    """By-position curves (one per predictor) as W&B's built-in line-series chart."""
    import wandb

    groups = frame.groupby("predictor") if "predictor" in frame else [("value", frame)]
    xs, ys, keys = [], [], []
    for key, g in groups:
        g = g.groupby("position", sort=True)["value"].mean()
        xs.append([float(x) for x in g.index])
        ys.append([float(y) for y in g.values])
        keys.append(str(key))
    metric = str(frame["metric"].iloc[0]) if "metric" in frame and len(frame) else "value"
    return wandb.plot.line_series(xs=xs, ys=ys, keys=keys, title=f"{title} ({metric})", xname="position")


def _heatmap_array(values, title: str):
    """A small annotated [layer x head] heat map rendered to an RGB array (no pyplot, no global state)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_layer, n_head = values.shape
    fig = Figure(figsize=(1.2 + 0.55 * n_head, 0.9 + 0.4 * n_layer), dpi=100)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = ax.imshow(values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(n_head), [f"H{h}" for h in range(n_head)])
    ax.set_yticks(range(n_layer), [f"L{layer}" for layer in range(n_layer)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    if n_layer * n_head <= 256:
        mid = (float(values.min()) + float(values.max())) / 2
        for i in range(n_layer):
            for j in range(n_head):
                ax.text(j, i, f"{values[i, j]:.3g}", ha="center", va="center", fontsize=7,
                        color="black" if values[i, j] > mid else "white")  # fmt: skip
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
