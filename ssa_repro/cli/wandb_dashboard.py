"""A W&B workspace for the softmax-vs-SSA comparison of one sweep (a W&B group), created from code.

    pip install -e '.[dashboard]'          # wandb-workspaces, an optional extra
    python scripts/wandb_dashboard.py <entity>/<project> <group> [--eval quick] [--name NAME]

Online only (a workspace lives on the server): it stops with a message when W&B is offline or disabled,
when no API key is found or the server cannot be reached, and when wandb-workspaces is not installed.
It creates two Vega-Lite chart presets under the entity (the σ × length heat map per run, and the
difference map mean(softmax) − mean(SSA)), then saves a workspace with:

- the runs table filtered to the group, grouped by ``scorer.label``, headline columns pinned;
- "Heat maps": the heat-map chart (one facet per run), the difference map, the heat-map images;
- "SSA b and n": one line per layer for b and n over training, the [layer x head] heat maps;
- "Training": loss and throughput grouped by scorer; "By position": the error-by-position curves.

``build_workspace`` builds the object without saving (tests/test_tracking.py checks its layout);
docs/wandb.md describes the same workspace for building by hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from types import SimpleNamespace

from ssa_repro import tracking
from ssa_repro.cli import arguments

HEATMAP = "ssa-repro-heatmap"
DIFFERENCE = "ssa-repro-difference"


def heatmap_spec() -> dict:
    """σ × length heat map of the model's error, one facet per run (W&B's Vega-Lite 'vega2' preset)."""
    cell = {
        "x": {"field": "${field:x}", "type": "ordinal", "title": "${string:x_title}"},
        "y": {"field": "${field:y}", "type": "ordinal", "sort": "descending", "title": "${string:y_title}"},
    }
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "description": "ssa_repro: error over a rows x cols grid, one panel per run",
        "data": {"name": "wandb"},
        "transform": [{"filter": "datum.predictor == null || datum.predictor == 'model'"}],
        "facet": {"field": "name", "type": "nominal", "title": None},
        "columns": 4,
        "spec": {
            "layer": [
                {
                    "mark": "rect",
                    "encoding": {
                        **cell,
                        "color": {
                            "aggregate": "mean",
                            "field": "${field:value}",
                            "type": "quantitative",
                            "title": "${string:metric}",
                            "scale": {"scheme": "viridis"},
                        },
                    },
                },
                {
                    "mark": {"type": "text", "fontSize": 9},
                    "encoding": {
                        **cell,
                        "text": {"aggregate": "mean", "field": "${field:value}", "format": ".2g"},
                    },
                },
            ]
        },
    }


def difference_spec() -> dict:
    """mean over runs of scorer A's error minus scorer B's, per cell (positive: B is better)."""
    x, y, v = "${field:x}", "${field:y}", "${field:value}"
    cell = {
        "x": {"field": x, "type": "ordinal", "title": "${string:x_title}"},
        "y": {"field": y, "type": "ordinal", "sort": "descending", "title": "${string:y_title}"},
    }
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "description": "ssa_repro: difference map mean(A) - mean(B) of the model's error per cell",
        "data": {"name": "wandb"},
        "transform": [
            {"filter": "datum.predictor == null || datum.predictor == 'model'"},
            {"aggregate": [{"op": "mean", "field": v, "as": "mean_value"}], "groupby": [y, x, "scorer"]},
            {"pivot": "scorer", "value": "mean_value", "groupby": [y, x]},
            {"calculate": "datum['${string:a}'] - datum['${string:b}']", "as": "difference"},
        ],
        "layer": [
            {
                "mark": "rect",
                "encoding": {
                    **cell,
                    "color": {
                        "field": "difference",
                        "type": "quantitative",
                        "title": "${string:a} - ${string:b}",
                        "scale": {"scheme": "redblue", "domainMid": 0},  # blue: A - B > 0, B better
                    },
                },
            },
            {
                "mark": {"type": "text", "fontSize": 9},
                "encoding": {
                    **cell,
                    "text": {"field": "difference", "type": "quantitative", "format": ".2g"},
                },
            },
        ],
    }


def build_workspace(
    entity: str,
    project: str,
    group: str,
    *,
    eval_name: str = "quick",
    rows: str = "sigma_x",
    cols: str = "length",
    scorers: tuple[str, str] = ("softmax", "ssa"),
    name: str | None = None,
):
    """The workspace object (not saved): runs of ``group``, grouped by scorer, four sections."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    ev = f"eval/{eval_name}"
    strings = {"x_title": cols, "y_title": rows, "metric": "error"}
    fields = {"x": cols, "y": rows, "value": "value"}
    heatmap = wr.CustomChart(
        query={"summaryTable": {"tableKey": f"{ev}/grid"}},
        chart_name=f"{entity}/{HEATMAP}",
        chart_fields=fields,
        chart_strings=strings,
    )
    difference = wr.CustomChart(
        query={"summaryTable": {"tableKey": f"{ev}/grid"}},
        chart_name=f"{entity}/{DIFFERENCE}",
        chart_fields=fields,
        chart_strings={**strings, "a": scorers[0], "b": scorers[1]},
    )
    by_scorer = ws.Config("scorer.label")
    headline = [
        f"{ev}/in_dist",
        f"{ev}/grid_mean",
        f"{ev}/grid_worst",
        "train/final_loss",
        "model/parameters",
    ]
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name or f"{group}: softmax vs SSA",
        sections=[
            ws.Section(
                name="Heat maps",
                is_open=True,
                pinned=True,
                panels=[
                    heatmap,
                    difference,
                    wr.MediaBrowser(
                        title="heat map images", media_keys=[f"{ev}/grid_img"], gallery_axis="run"
                    ),
                    wr.BarPlot(
                        title="grid mean and worst cell", metrics=[f"{ev}/grid_mean", f"{ev}/grid_worst"]
                    ),
                ],
            ),
            ws.Section(
                name="SSA b and n",
                is_open=True,
                panels=[
                    wr.LinePlot(
                        title="b per layer (mean over heads)", x="train/step", metric_regex=r"scorer/b/L\d+"
                    ),
                    wr.LinePlot(
                        title="n per layer (mean over heads)", x="train/step", metric_regex=r"scorer/n/L\d+"
                    ),
                    wr.MediaBrowser(
                        title="b and n, layer x head",
                        media_keys=["scorer/heads/b_img", "scorer/heads/n_img"],
                        gallery_axis="run",
                    ),
                ],
            ),
            ws.Section(
                name="Training",
                is_open=True,
                panels=[
                    wr.LinePlot(
                        title="loss",
                        x="train/step",
                        y=["train/loss"],
                        groupby=wr.Config("scorer.label"),
                        log_y=True,
                    ),
                    wr.LinePlot(
                        title="steps/s",
                        x="train/step",
                        y=["train/steps_per_sec"],
                        groupby=wr.Config("scorer.label"),
                    ),
                ],
            ),
            ws.Section(
                name="By position",
                panels=[wr.MediaBrowser(media_keys=[f"{ev}/by_position_img"], gallery_axis="run")],
            ),
        ],
        runset_settings=ws.RunsetSettings(
            filters=[ws.Metric("Group") == group],
            groupby=[by_scorer],
            pinned_columns=["config:scorer.label", "config:seed", *[f"summary:{k}" for k in headline]],
        ),
    )


NO_SERVER_HINT = "a workspace lives on the W&B server: fix this and run the command again"
TIMEOUT = arguments.DASHBOARD_TIMEOUT  # seconds for each server step (presets, saving)


class DashboardError(RuntimeError):
    """A server step failed or took longer than its bound; the message is one line."""


def problems(timeout: float = 5.0) -> list[str]:
    """Why a workspace cannot be created here (empty: it can)."""
    mode = os.environ.get("WANDB_MODE", "online")
    if mode in ("offline", "disabled", "dryrun"):
        return [
            f"WANDB_MODE={mode}: a workspace can only be created online (unset WANDB_MODE, "
            "`wandb sync` the offline runs, then run this script)"
        ]
    try:
        import wandb_workspaces  # noqa: F401
    except ImportError:
        return ["this script needs wandb-workspaces: pip install -e '.[dashboard]'"]
    return tracking.check_online(SimpleNamespace(mode="online"), timeout=timeout, hint=NO_SERVER_HINT)


def bounded(what: str, fn, timeout: float):
    """``fn()`` in a daemon thread, given ``timeout`` seconds: its result, or a DashboardError naming
    the step, the server and the bound (wandb retries a server that answers errors for hours, without a
    word; the abandoned thread ends with the process)."""
    result: list = []

    def attempt() -> None:
        try:
            result.append((True, fn()))
        except Exception as e:  # noqa: BLE001  (reported below as one line)
            result.append((False, e))

    print(f"{what} ...", file=sys.stderr, flush=True)
    thread = threading.Thread(target=attempt, name=f"dashboard: {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    server = os.environ.get("WANDB_BASE_URL") or tracking.DEFAULT_BASE_URL
    if not result:
        raise DashboardError(
            f"{what}: no answer from the W&B server {server} within {timeout:g} s (wandb retries a server "
            "that answers errors; check the server, or raise --timeout)"
        )
    ok, value = result[0]
    if not ok:
        first = (str(value).strip().splitlines() or [type(value).__name__])[0][:300]
        raise DashboardError(f"{what}: the W&B server {server} answered {type(value).__name__}: {first}")
    return value


def create_presets(entity: str, timeout: float = TIMEOUT) -> None:
    """The two chart presets under ``entity`` (an existing preset of the same name is kept), each
    request bounded by ``timeout`` seconds."""
    import wandb

    api = wandb.Api(timeout=max(1, int(timeout)))
    for name, spec in ((HEATMAP, heatmap_spec()), (DIFFERENCE, difference_spec())):
        try:
            bounded(
                f"chart preset {entity}/{name}",
                lambda name=name, spec=spec: api.create_custom_chart(
                    entity=entity,
                    name=name,
                    display_name=name,
                    spec_type="vega2",
                    access="private",
                    spec=spec,
                ),
                timeout,
            )
        except DashboardError as e:
            if "exist" not in str(e).lower():
                raise
            print(f"chart preset {entity}/{name} exists: keeping it", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """``ssa-wandb-dashboard``'s work on its parsed arguments (ssa_repro/cli/arguments.py
    ``wandb_dashboard``)."""
    if args.path.count("/") != 1:
        print(f"expected entity/project, got {args.path!r}", file=sys.stderr)
        return 2
    if not args.timeout > 0:
        print(f"--timeout={args.timeout} must be > 0 (seconds)", file=sys.stderr)
        return 2
    found = problems(min(args.timeout, 5.0))
    if found:
        print("cannot create the workspace:\n  " + "\n  ".join(found), file=sys.stderr)
        return 2
    entity, project = args.path.split("/")
    tracking.configure_environment("online")
    try:
        create_presets(entity, args.timeout)
        workspace = build_workspace(
            entity, project, args.group, eval_name=args.eval, rows=args.rows, cols=args.cols, name=args.name
        )
        bounded(f"saving the workspace in {args.path}", workspace.save, args.timeout)
    except DashboardError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    print(workspace.url)
    return 0
