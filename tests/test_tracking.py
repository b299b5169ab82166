"""The W&B layer (ssa_repro/tracking/), offline only: nothing here talks to a W&B server.

Offline runs are read back with wandb's own reader, ``wandb leet inspect`` (wandb 0.31 writes no
wandb-summary.json offline). The network test runs in a subprocess whose environment is the real default
(no WANDB_* variable at all; the autouse fixture in conftest.py would otherwise set WANDB_MODE and hide
what a user's run does) and traces every connect/sendto with strace.
"""

from __future__ import annotations

import base64
import http.server
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from ssa_repro import tracking
from ssa_repro.cli import commands
from ssa_repro.tracking import Tracker
from tests.conftest import CONF, ROOT, make_cfg

WANDB = Path(sys.executable).with_name("wandb")
STRACE = shutil.which("strace") or ("/usr/bin/strace" if Path("/usr/bin/strace").exists() else None)
GRID = {"rows": "sigma_x", "cols": "length", "metric": "mse"}
CONFIG = {
    "task": {"name": "linear"},
    "scorer": {"label": "ssa"},
    "model": {"name": "gpt2"},
    "seed": 0,
    "logger": {"mode": "offline", "project": "ssa_repro", "entity": None, "group": None, "tags": []},
}
NAME = "linear-ssa-gpt2-s0"


def real_default_env() -> dict[str, str]:
    """This process's environment without any WANDB_* variable: what a user's shell has by default."""
    return {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}


def logger_cfg(mode="offline", **kw):
    base = {"project": "ssa_repro", "entity": None, "group": None, "tags": [], "log_checkpoints": False}
    return SimpleNamespace(mode=mode, **{**base, **kw})


def eval_inputs(folder: Path) -> tuple[dict[str, pd.DataFrame], list[Path]]:
    """A small evaluation as the runner hands it over: long-form grid, by-position curves, figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for predictor, scale in (("model", 1.0), ("zero", 2.0)):
        for sx in (1.0, 2.0):
            for length in (5, 10):
                value = scale * sx * length / 10
                rows.append(
                    ["linear", "ssa", "gpt2", predictor, 1.0, sx, length, "mse", value, 8, value, value]
                )
    grid = pd.DataFrame(
        rows,
        columns="task scorer model predictor sigma_f sigma_x length metric value n_samples ci_low ci_high".split(),
    )
    by_pos = pd.DataFrame(
        [["model", p, "mse", 1.0 / p] for p in range(1, 6)] + [["zero", p, "mse", 1.0] for p in range(1, 6)],
        columns=["predictor", "position", "metric", "value"],
    )
    tables = {"grid": grid, "by_position": by_pos}
    figures = []
    for stem, frame in tables.items():
        frame.to_csv(folder / f"{stem}.csv", index=False)
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [0, 1])
        fig.savefig(folder / f"{stem}.png")
        plt.close(fig)
        figures.append(folder / f"{stem}.png")
    (folder / "summary.json").write_text("{}\n")
    return tables, figures


def inspect(run_folder: Path) -> dict:
    """wandb's own reading of an offline run: state, exit code, config, summary (one JSON object)."""
    out = subprocess.run(
        [str(WANDB), "leet", "inspect", "--summary", "--json", str(run_folder)],
        env={**real_default_env(), "WANDB_MODE": "offline"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def records(run_folder: Path) -> list[dict]:
    """Every record of an offline run's .wandb log, as wandb's reader prints them."""
    out = subprocess.run(
        [str(WANDB), "leet", "inspect", "--json", str(run_folder)],
        env={**real_default_env(), "WANDB_MODE": "offline"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def run_record(run_folder: Path) -> dict:
    (run,) = [r["run"] for r in records(run_folder) if r["type"] == "run"][:1]
    return run


def offline_runs(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / "wandb").glob("offline-run-*") if p.is_dir())


def run_id_of(folder: Path) -> str:
    """offline-run-<date>_<time>-<id>, or ...-<id>-<n> when a run restarts within the same second."""
    return re.fullmatch(r"offline-run-\d{8}_\d{6}-([0-9a-z]+)(?:-\d+)?", folder.name).group(1)


# ---------------------------------------------------------------------------------------------------
# A training run with an evaluation, then two evaluations as their own runs (made once, read by several
# tests)


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")  # restored at the end; configure_environment sets it again
    mp.setenv("WANDB_ERROR_REPORTING", "false")
    mp.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path_factory.mktemp("run")
    tables, figures = eval_inputs(run_dir / "eval" / "quick")
    stats = {"b": torch.tensor([[1.0, 2.0], [3.0, 5.0]]), "n": torch.tensor([[1.5, 1.5], [2.0, 3.0]])}
    ckpt = run_dir / "checkpoints" / "last.pt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"checkpoint")
    try:
        tr = Tracker.for_training(logger_cfg(log_checkpoints=True), run_dir, CONFIG, NAME)
        for step in (2, 4, 6):
            row = {"step": step, "loss": 3.0 / step, "lr": 1e-4, "n_points": 5, "steps_per_sec": 10.0}
            tr.log_training(row, step, stats)
        tr.log_training({"step": 7, "loss": 0.75}, 7, stats)  # the last row is not the lowest loss
        tr.log_scorer_params(stats, 7)
        tr.log_evaluation("quick", tables, figures, grid=GRID, in_distribution=0.25)
        tr.set_summary(
            tracking.training_headline(
                final_loss=0.75, parameters=1234, steps_per_sec=10.0, wall_time_s=2.5, scorer_stats=stats
            )
        )
        tr.log_checkpoint(ckpt, 7)
        tr.finish()
        eval_ids = []
        for _ in range(2):  # the same evaluation twice: two eval runs, no resume
            with Tracker.for_evaluation(run_dir, CONFIG, {"sigmas": [1.0, 2.0]}, "linear_grid") as ev:
                ev.log_evaluation("linear_grid", tables, figures, grid=GRID)
            eval_ids.append((run_dir / "eval" / "linear_grid" / "wandb_id.txt").read_text().strip())
        yield SimpleNamespace(run_dir=run_dir, eval_ids=eval_ids)
    finally:
        mp.undo()


def test_summary_holds_the_headline_numbers(logged):
    train_id = (logged.run_dir / "wandb_id.txt").read_text().strip()
    (folder,) = [p for p in offline_runs(logged.run_dir) if run_id_of(p) == train_id]
    s = inspect(folder)
    assert s["state"] == "finished" and s["exit_code"] == 0
    summary = s["summary"]
    assert summary["train/loss"] == {"min": 0.5, "last": 0.75}  # define_metric: min and last
    assert summary["train/final_loss"] == 0.75
    assert summary["model/parameters"] == 1234
    assert summary["perf/steps_per_sec"] == 10.0 and summary["perf/wall_time_s"] == 2.5
    assert summary["scorer/b_mean/L0"] == 1.5 and summary["scorer/b_mean/L1"] == 4.0
    assert summary["scorer/n_mean/L1"] == 2.5
    assert summary["eval/quick/in_dist"] == 0.25
    # the model's cells: sigma_x * length / 10 over {1, 2} x {5, 10}
    assert summary["eval/quick/grid_mean"] == pytest.approx(1.125)
    assert summary["eval/quick/grid_worst"] == pytest.approx(2.0)
    assert summary["eval/quick/grid_worst_at"] == "sigma_x=2.0, length=10"
    assert summary["eval/quick/metric"] == "mse"
    assert s["config"]["scorer"]["label"] == "ssa"


def test_images_and_tables_have_distinct_keys_and_scorer_heat_maps_are_logged(logged):
    train_id = (logged.run_dir / "wandb_id.txt").read_text().strip()
    (folder,) = [p for p in offline_runs(logged.run_dir) if run_id_of(p) == train_id]
    summary = inspect(folder)["summary"]
    kind = {k: v.get("_type") for k, v in summary.items() if isinstance(v, dict)}
    assert kind["eval/quick/grid"] == "table-file"
    assert kind["eval/quick/grid_img"] == "image-file"
    assert kind["eval/quick/grid_matrix"] == "table-file"
    assert (
        kind["eval/quick/by_position"] == "table-file" and kind["eval/quick/by_position_img"] == "image-file"
    )
    assert kind["eval/quick/by_position_plot_table"] == "table-file"  # the line chart's data
    for p in ("b", "n"):
        assert kind[f"scorer/heads/{p}"] == "table-file" and kind[f"scorer/heads/{p}_img"] == "image-file"
        assert summary[f"scorer/heads/{p}"]["nrows"] == 2 and summary[f"scorer/heads/{p}"]["ncols"] == 3
    # one line per layer (mean over heads), no panel per head
    assert summary["scorer/b/L1"] == 4.0 and not any(re.search(r"L\dH\d", k) for k in summary)
    matrix = json.loads((folder / "files" / summary["eval/quick/grid_matrix"]["path"]).read_text())
    assert matrix["columns"] == ["sigma_x", "length=5", "length=10"]
    assert matrix["data"] == [[1.0, 0.5, 1.0], [2.0, 1.0, 2.0]]
    history = [r["history"]["item"] for r in records(folder) if r["type"] == "history"]
    assert [h["train/step"] for h in history if "train/loss" in h] == [2, 4, 6, 7]


def test_one_training_run_and_two_eval_runs_in_its_group(logged):
    train_id = (logged.run_dir / "wandb_id.txt").read_text().strip()
    folders = offline_runs(logged.run_dir)
    runs = {run_id_of(f): run_record(f) for f in folders}
    assert len(folders) == 3 and set(runs) == {train_id, *logged.eval_ids}  # nothing resumed, nothing twice
    train = runs.pop(train_id)
    assert train["job_type"] == "train" and train["run_group"] == f"{NAME}-{train_id}"
    for run in runs.values():
        assert run["job_type"] == "eval" and run["run_group"] == train["run_group"]
        config = run["config"]["update"]
        assert config["train_run"]["id"] == train_id
        assert config["train_run"]["dir"] == str(logged.run_dir.resolve())
        assert config["eval"] == {"name": "linear_grid", "sigmas": [1.0, 2.0]}
        assert config["scorer"]["label"] == "ssa"  # the runs table groups eval runs by scorer too
    identity = json.loads((logged.run_dir / "wandb_run.json").read_text())
    assert identity["id"] == train_id and identity["group"] == train["run_group"]


def test_evaluations_and_checkpoints_become_artifacts(logged):
    arts = {}
    for folder in offline_runs(logged.run_dir):
        for r in records(folder):
            if r["type"] == "artifact" and r["artifact"]["type"] in ("evaluation", "model"):
                a = r["artifact"]
                arts[a["name"]] = (a["type"], sorted(e["path"] for e in a["manifest"]["contents"]))
    train_id = (logged.run_dir / "wandb_id.txt").read_text().strip()
    files = ["by_position.csv", "by_position.png", "grid.csv", "grid.png", "summary.json"]
    assert arts[f"eval-quick-{train_id}"] == ("evaluation", files)
    assert arts[f"model-{train_id}"] == ("model", ["last.pt"])  # logger.log_checkpoints=true
    for eval_id in logged.eval_ids:
        assert arts[f"eval-linear_grid-{eval_id}"] == ("evaluation", files)


def test_the_documented_offline_reading_commands_work(logged):
    (folder, *_) = offline_runs(logged.run_dir)
    env = {**real_default_env(), "WANDB_MODE": "offline"}
    view = subprocess.run(
        [str(WANDB), "leet", "inspect", "--summary", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert view.returncode == 0 and "finished (exit code 0)" in view.stdout, view.stderr
    dry = subprocess.run(
        [str(WANDB), "sync", "--dry-run", str(folder)], env=env, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0 and "Would sync 1 run" in dry.stdout + dry.stderr


def test_checkpoints_are_not_artifacts_unless_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    ckpt = tmp_path / "last.pt"
    ckpt.write_bytes(b"x")
    tr = Tracker.for_training(logger_cfg(), tmp_path, CONFIG, NAME)
    tr.log_checkpoint(ckpt, 1)
    tr.finish()
    (folder,) = offline_runs(tmp_path)
    assert not [r for r in records(folder) if r["type"] == "artifact"]


def test_a_failed_job_still_finishes_its_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    with pytest.raises(RuntimeError, match="boom"):
        with Tracker.for_training(logger_cfg(), tmp_path, CONFIG, NAME) as tr:
            tr.log_training({"loss": 1.0}, 1, None)
            raise RuntimeError("boom")
    import wandb

    assert tr.run is None and wandb.run is None
    (folder,) = offline_runs(tmp_path)
    s = inspect(folder)
    assert s["exit_code"] == 1 and s["state"] != "running"


def test_disabled_mode_logs_nothing_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "true")
    tr = Tracker.for_training(logger_cfg("disabled"), tmp_path, CONFIG, NAME)
    assert not tr.active and os.environ["WANDB_MODE"] == "disabled"
    assert os.environ["WANDB_ERROR_REPORTING"] == "false"
    tr.log_training({"loss": 1.0}, 1, None)
    tr.set_summary({"x": 1})
    tr.finish()
    assert not list(tmp_path.iterdir())
    assert not Tracker.for_evaluation(tmp_path, {**CONFIG, "logger": {"mode": "disabled"}}, {}, "g").active


# ---------------------------------------------------------------------------------------------------
# The network


NETWORK_SCRIPT = """
import os, sys
from pathlib import Path
assert not [k for k in os.environ if k.startswith("WANDB_")], "not the real default environment"
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import torch
from hydra import compose, initialize_config_dir
import ssa_repro.config  # noqa: F401
from omegaconf import OmegaConf
from ssa_repro.tracking import Tracker

with initialize_config_dir(config_dir=sys.argv[1], version_base="1.3"):
    cfg = compose("train")  # the real default: no logger override
assert cfg.logger.mode.value == "offline", cfg.logger.mode
run_dir = Path(sys.argv[2])
run_dir.mkdir(parents=True)
config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
tr = Tracker.for_training(cfg.logger, run_dir, config, "net-test")
stats = {"b": torch.ones(2, 2), "n": torch.ones(2, 2)}
for step in (1, 2):
    tr.log_training({"loss": 1.0 / step}, step, stats)
tr.log_scorer_params(stats, 2)
fig, ax = plt.subplots()
ax.plot([0, 1])
fig.savefig(run_dir / "grid.png")
frame = pd.DataFrame({"predictor": ["model"] * 2, "sigma_x": [1.0, 2.0], "length": [5, 5], "value": [0.1, 0.2]})
frame.to_csv(run_dir / "grid.csv", index=False)
tr.log_evaluation("quick", {"grid": frame}, [run_dir / "grid.png"], grid={"rows": "sigma_x", "cols": "length"})
tr.finish()
print("done")
"""


def _outside(line: str) -> bool:
    """An strace connect/sendto line that reaches past this machine (or asks DNS)."""
    if "htons(53)" in line:
        return True
    m = re.search(r'sa_family=AF_INET6?, .*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")', line)
    if not m:
        return False
    addr = m.group(1) or m.group(2)
    return not (addr.startswith("127.") or addr in ("::1", "::ffff:127.0.0.1"))


def test_outside_lines_are_recognised():
    dns = '9 connect(6, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0'
    web = '9 connect(6, {sa_family=AF_INET6, sin6_port=htons(443), inet_pton(AF_INET6, "2600::1", &sin6_addr)}, 28)'
    local = '9 connect(6, {sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr("127.0.0.1")}, 16) = 0'
    unix = '9 connect(7, {sa_family=AF_UNIX, sun_path="/run/wandb-1/socket"}, 40) = 0'
    assert _outside(dns) and _outside(web) and not _outside(local) and not _outside(unix)


def test_the_test_environment_is_the_real_default(monkeypatch):
    """The subprocess gets no WANDB_* variable, and without one the config's default mode is offline."""
    env = real_default_env()
    assert not [k for k in env if k.startswith("WANDB_")]
    monkeypatch.delenv("WANDB_MODE")
    assert make_cfg(tiny=False).logger.mode.value == "offline"


@pytest.mark.skipif(
    STRACE is None, reason="strace is not installed (apt-get install strace): cannot trace sockets"
)
@pytest.mark.slow
def test_an_offline_run_opens_no_socket_outside_the_machine(tmp_path):
    probe = subprocess.run([STRACE, "-f", "-o", os.devnull, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here (ptrace not permitted?): {probe.stderr.strip()[:200]}")
    script = tmp_path / "net.py"
    script.write_text(textwrap.dedent(NETWORK_SCRIPT))
    trace = tmp_path / "trace.txt"
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [STRACE, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace)]
        + [sys.executable, str(script), str(CONF), str(run_dir)],
        cwd=ROOT,
        env=real_default_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    lines = trace.read_text().splitlines()
    assert any("connect(" in line for line in lines)  # the trace saw wandb's own (local) sockets
    outside = [line for line in lines if _outside(line)]
    assert not outside, "offline run reached the network:\n" + "\n".join(outside[:10])
    (folder,) = offline_runs(run_dir)
    assert list(folder.glob("*.wandb"))


# ---------------------------------------------------------------------------------------------------
# Start-up checks and the environment


def test_configure_environment_sets_mode_and_switches_telemetry_off(monkeypatch):
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "true")
    assert tracking.configure_environment(logger_cfg().mode) == "offline"
    assert os.environ["WANDB_MODE"] == "offline" and os.environ["WANDB_ERROR_REPORTING"] == "false"
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "true")
    tracking.configure_environment(make_cfg("logger.mode=online").logger.mode)  # an Enum works too
    assert os.environ["WANDB_MODE"] == "online" and os.environ["WANDB_ERROR_REPORTING"] == "true"
    with pytest.raises(ValueError, match="offline, online, disabled"):
        tracking.configure_environment("dryrun")


def test_unknown_wandb_mode_is_a_problem_naming_variable_value_and_allowed(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "ofline")
    problems = tracking.check(make_cfg(tiny=False).logger)  # logger.mode comes from $WANDB_MODE
    assert len(problems) == 1
    assert "WANDB_MODE='ofline'" in problems[0] and "offline, online, disabled" in problems[0]
    assert tracking.check(make_cfg("logger.mode=disabled").logger) == problems  # still reported


def test_offline_and_disabled_need_nothing(monkeypatch):
    monkeypatch.delenv("WANDB_MODE")
    assert tracking.check(logger_cfg("offline")) == [] and tracking.check(logger_cfg("disabled")) == []


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """No API key anywhere wandb looks; the W&B host is a closed port on this machine."""
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    return tmp_path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_online_without_api_key_fails_fast_saying_what_to_do(no_credentials):
    problems = tracking.check(logger_cfg("online"))
    assert len(problems) == 1
    for part in ("WANDB_API_KEY", "wandb login", "logger.mode=offline"):
        assert part in problems[0]


def test_online_with_unreachable_server_fails_within_seconds(no_credentials, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    t0 = time.perf_counter()
    problems = tracking.check(logger_cfg("online"), timeout=3)
    assert time.perf_counter() - t0 < 25  # gave up, not hung (a hang-detector, loose for loaded machines)
    assert len(problems) == 1 and "not reachable" in problems[0] and "logger.mode=offline" in problems[0]


class FakeWandb(http.server.BaseHTTPRequestHandler):
    """Answers W&B's viewer query at /graphql: the user for the one key it knows, HTTP 401 otherwise
    (as the W&B server does); HTTP 404 elsewhere. ``seen`` records the requests."""

    key = "k" * 40
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth = base64.b64decode(self.headers.get("Authorization", "Basic ")[6:]).decode()
        FakeWandb.seen.append((self.path, auth, body["query"]))
        if self.path != "/graphql":
            self.send_error(404)
            return
        if auth != f"api:{self.key}":
            self.send_error(401)
            return
        out = json.dumps({"data": {"viewer": {"id": "VXNlcjox", "username": "me"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_wandb(no_credentials, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeWandb)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    FakeWandb.seen = []
    yield server
    server.shutdown()
    server.server_close()


def test_online_with_the_key_in_netrc_that_the_server_accepts_is_fine(fake_wandb, no_credentials):
    (no_credentials / "netrc").write_text(f"machine 127.0.0.1\n  login user\n  password {'k' * 40}\n")
    assert tracking.check(logger_cfg("online")) == []
    assert FakeWandb.seen == [("/graphql", f"api:{'k' * 40}", tracking.environment.VIEWER_QUERY)]  # one request


def test_online_with_a_key_the_server_refuses_fails_saying_so(fake_wandb, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "w" * 40)
    [problem] = tracking.check(logger_cfg("online"))
    assert "refused the API key (HTTP 401)" in problem and "wandb login --relogin" in problem
    assert "logger.mode=offline" in problem


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"])
def test_online_against_a_host_that_is_not_wandb_fails_within_the_timeout(
    no_credentials, monkeypatch, answer
):
    """A server that accepts the connection and then closes it, or answers something that is not W&B."""
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")

        def serve():
            for _ in range(2):  # the TCP check, then the viewer query
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        [problem] = tracking.check(logger_cfg("online"), timeout=3)
    assert f"{os.environ['WANDB_BASE_URL']} is not a W&B server (check WANDB_BASE_URL)" in problem


def test_online_against_a_host_that_never_answers_gives_up_after_the_timeout(no_credentials, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with socket.socket() as server:  # accepts (the kernel's backlog) and never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        [problem] = tracking.check(logger_cfg("online"), timeout=1)
    assert "is not a W&B server" in problem and ("within 1 s" in problem or "timed out" in problem)


def test_a_hanging_name_lookup_is_abandoned_after_the_timeout(monkeypatch):
    def hang(*a, **k):  # a lookup that never answers in time, then fails as a real one would
        time.sleep(30)
        raise OSError("timed out")

    monkeypatch.setattr(tracking.environment.socket, "create_connection", hang)
    t0 = time.perf_counter()
    why = tracking.environment.reachability_problem("https://api.example.invalid", timeout=0.5)
    assert time.perf_counter() - t0 < 20 and "no answer within 0.5 s" in why  # not the lookup's 30 s


# ---------------------------------------------------------------------------------------------------
# Headline helpers


def test_grid_headline_uses_the_models_cells_and_averages_other_dimensions():
    frame = pd.DataFrame(
        {
            "predictor": ["model"] * 4 + ["zero"],
            "sigma_f": [1.0, 2.0, 1.0, 2.0, 1.0],
            "sigma_x": [1.0, 1.0, 2.0, 2.0, 1.0],
            "length": [5] * 5,
            "value": [1.0, 3.0, 5.0, 7.0, 100.0],
        }
    )
    out = tracking.grid_headline(frame, {"rows": "sigma_x", "cols": "length"}, "g")
    assert out == {
        "eval/g/grid_mean": 4.0,
        "eval/g/grid_worst": 6.0,
        "eval/g/grid_worst_at": "sigma_x=2.0, length=5",
    }


def test_training_headline_leaves_out_what_is_unknown():
    out = tracking.training_headline(parameters=10, scorer_stats={"b": [[1.0, 3.0]]})
    assert out == {"model/parameters": 10, "scorer/b_mean/L0": 2.0}


def test_the_tracking_package_stands_on_core_alone():
    """W&B code beside training and evaluation, but importing only the ground floor (core) and itself,
    and wandb never at a module's top (lazily, after configure_environment)."""
    sources = sorted(Path(tracking.__file__).parent.glob("*.py"))
    assert {p.name for p in sources} >= {"__init__.py", "environment.py", "tables.py", "tracker.py"}
    for path in sources:
        source = path.read_text()
        imports = re.findall(r"^\s*(?:from|import) (ssa_repro[\w.]*)", source, flags=re.M)
        assert all(m.startswith(("ssa_repro.core", "ssa_repro.tracking")) for m in imports), path.name
        assert not re.search(r"^import wandb", source, flags=re.M), path.name


# ---------------------------------------------------------------------------------------------------
# The dashboard script


def _dashboard_module():
    return importlib.import_module("ssa_repro.cli.wandb_dashboard")  # scripts/wandb_dashboard.py's main


def test_dashboard_layout_is_built_offline():
    pytest.importorskip(
        "wandb_workspaces", reason="the optional extra is not installed: pip install -e '.[dashboard]'"
    )
    dash = _dashboard_module()
    workspace = dash.build_workspace("ent", "proj", "sweep-1")
    panels = {s.name: [type(p).__name__ for p in s.panels] for s in workspace.sections}
    assert panels == {
        "Heat maps": ["CustomChart", "CustomChart", "MediaBrowser", "BarPlot"],
        "SSA b and n": ["LinePlot", "LinePlot", "MediaBrowser"],
        "Training": ["LinePlot", "LinePlot"],
        "By position": ["MediaBrowser"],
    }
    heat, diff, images, _ = workspace.sections[0].panels
    assert heat.chart_name == "ent/ssa-repro-heatmap" and diff.chart_name == "ent/ssa-repro-difference"
    assert heat.query == {"summaryTable": {"tableKey": "eval/quick/grid"}}
    assert heat.chart_fields == {"x": "length", "y": "sigma_x", "value": "value"}
    assert diff.chart_strings["a"] == "softmax" and diff.chart_strings["b"] == "ssa"
    assert images.media_keys == ["eval/quick/grid_img"]
    b_line, n_line, heads = workspace.sections[1].panels
    assert b_line.metric_regex == r"scorer/b/L\d+" and n_line.metric_regex == r"scorer/n/L\d+"
    assert heads.media_keys == ["scorer/heads/b_img", "scorer/heads/n_img"]
    runs = workspace.runset_settings
    assert [g.name for g in runs.groupby] == ["scorer.label"]
    assert "summary:eval/quick/grid_worst" in runs.pinned_columns
    model = workspace._to_model()  # serialises as it would be saved, without saving
    assert json.dumps(model.model_dump(by_alias=True, exclude_none=True)).count('"viewType": "Vega2"') == 2


def test_dashboard_chart_presets_use_the_logged_grid_columns():
    dash = _dashboard_module()
    for spec in (dash.heatmap_spec(), dash.difference_spec()):
        text = json.dumps(spec)
        assert "${field:x}" in text and "${field:y}" in text and "${field:value}" in text
        assert "datum.predictor" in text  # the model's rows of the long-form table
    assert '"pivot": "scorer"' in json.dumps(dash.difference_spec())  # the grid table's scorer column


def test_dashboard_refuses_to_run_offline_or_without_the_extra(monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert commands.wandb_dashboard(["ent/proj", "sweep-1"]) == 2
    assert "only be created online" in capsys.readouterr().err
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setitem(sys.modules, "wandb_workspaces", None)  # as if not installed
    assert commands.wandb_dashboard(["ent/proj", "sweep-1"]) == 2
    assert "pip install -e '.[dashboard]'" in capsys.readouterr().err
    assert commands.wandb_dashboard(["no-slash", "g"]) == 2


def test_a_restarted_training_job_resumes_its_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    for step in (1, 2):  # two starts of the same job (e.g. after preemption)
        with Tracker.for_training(logger_cfg(), tmp_path, CONFIG, NAME) as tr:
            tr.log_training({"loss": 1.0}, step, None)
    run_id = (tmp_path / "wandb_id.txt").read_text().strip()
    folders = offline_runs(tmp_path)
    assert len(folders) == 2 and {run_id_of(f) for f in folders} == {run_id}  # one folder per start
    assert json.loads((tmp_path / "wandb_run.json").read_text())["group"] == f"{NAME}-{run_id}"


def test_telemetry_is_switched_off_even_when_wandb_was_imported_first(monkeypatch):
    import wandb  # noqa: F401  (already imported by earlier tests, as in a notebook)
    from wandb.analytics.opentelemetry import opentelemetry_proxy

    monkeypatch.setenv("WANDB_ERROR_REPORTING", "true")
    tracking.configure_environment("offline")
    assert opentelemetry_proxy.get_open_telemetry_proxy() is None
