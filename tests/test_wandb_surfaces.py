"""W&B under faults (issue 41): names wandb would refuse are refused with the config checks, a damaged
stored run id and a home folder wandb cannot write are handled, a server that fails the (resume) call
gives one line, and the dashboard command never hangs on a server that answers errors.

No real network: wandb's own validators and objects are called or monkeypatched, and the one server is
a local 127.0.0.1 http.server, bounded in time."""

from __future__ import annotations

import http.server
import json
import logging
import threading

import pytest
import wandb
from omegaconf import OmegaConf

from ssa_repro import tracking
from ssa_repro.cli import commands
from ssa_repro.core.rundir import WANDB_ID
from ssa_repro.jobs import prepared, train_job
from tests.conftest import make_cfg


def _wandb_accepts(**settings) -> bool:
    """wandb's own validation of run settings (what wandb.init applies, offline too)."""
    try:
        wandb.Settings(**settings)
        return True
    except Exception:  # noqa: BLE001  (pydantic's ValidationError, wandb's UsageError)
        return False


def _logger(**values):
    base = {"mode": "offline", "project": "ssa_repro", "entity": None, "group": None, "tags": []}
    return OmegaConf.create({**base, **values, "log_checkpoints": False})


# ----------------------------------------------------------------------------- names
@pytest.mark.parametrize("length", [1, 64, 65, 200])
def test_tags_are_checked_as_wandb_checks_them(length):
    tag = "t" * length
    found = tracking.name_problems(_logger(tags=["ok", tag]))
    assert (found == []) == _wandb_accepts(run_tags=("ok", tag))
    if found:
        assert found == [found[0]] and found[0].startswith("logger.tags[1]=") and "1 to 64" in found[0]


@pytest.mark.parametrize(
    "project", ["a/b", "a\\b", "a#b", "a?b", "a%b", "a:b", "p" * 128, "p" * 129, "ok-name_1"]
)
def test_project_names_are_checked_as_wandb_checks_them(project):
    found = tracking.name_problems(_logger(project=project))
    assert (found == []) == _wandb_accepts(project=project)
    if found:
        assert found[0].startswith(f"logger.project={project!r}")


def test_name_problems_stop_train_before_work(tmp_path):
    cfg = make_cfg("logger.mode=offline", "logger.project=team/project", "logger.tags=[" + "x" * 70 + "]")
    found = prepared.problems(cfg)
    assert [p.split("=")[0] for p in found] == ["logger.tags[0]", "logger.project"], found
    with pytest.raises(prepared.ConfigError):
        prepared.PreparedRun(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert prepared.problems(make_cfg("logger.mode=disabled", "logger.project=team/project")) == []


# ----------------------------------------------------------------------------- stored run id
class FakeRun:
    def __init__(self, **kwargs):
        self.kwargs, self.id = kwargs, kwargs["id"]

    def define_metric(self, *args, **kwargs):
        pass

    def finish(self, exit_code=0):
        pass


@pytest.fixture
def fake_init(monkeypatch):
    """tracking's wandb.init, recording its arguments (no wandb process, no network)."""
    calls = []

    def init(wandb_module, project, entity, group, tags, name, id, resume, job_type, run_dir, mode, config):
        calls.append({"id": id, "resume": resume, "group": group})
        return FakeRun(id=id)

    monkeypatch.setattr(tracking.tracker, "_wandb_init", init)
    return calls


@pytest.mark.parametrize(
    "content", [b"\x00\xff\xfe\n", b"", b"abc/def\n", b"x" * 300, "résumé".encode("latin-1")]
)
def test_a_damaged_stored_run_id_starts_a_new_wandb_run(content, tmp_path, fake_init, caplog):
    (tmp_path / WANDB_ID).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="ssa_repro.tracking.tracker"):
        tracking.Tracker.for_training(_logger(), tmp_path, {}, "run").finish()
    new = fake_init[0]["id"]
    assert tracking.tracker.RUN_ID.fullmatch(new) and _wandb_accepts(run_id=new)
    assert (tmp_path / WANDB_ID).read_text() == new + "\n"
    if content.strip():  # a present but damaged id is said; an empty file is simply no id
        assert any("not a W&B run id" in r.getMessage() for r in caplog.records)
    # and the next restart resumes that id
    tracking.Tracker.for_training(_logger(), tmp_path, {}, "run").finish()
    assert fake_init[1]["id"] == new and fake_init[1]["resume"] == "allow"


# ----------------------------------------------------------------------------- home folder
def test_a_home_folder_wandb_cannot_write_moves_its_folders_into_the_run(tmp_path, monkeypatch):
    """Files where wandb's folders go (what a read-only home does to a root user's tests too): wandb's
    artifact staging failed with a PermissionError at the first artifact; now its folders move into the
    run folder and wandb's own staging call succeeds."""
    home = tmp_path / "home"
    home.mkdir()
    for name in (".config", ".cache", ".local"):
        (home / name).write_text("not a folder")
    monkeypatch.setenv("HOME", str(home))
    for var in tracking.tracker.HOME_DIRS:  # set, then removed: monkeypatch restores each (unset) after the test,
        monkeypatch.setenv(var, "x")  # also what _movable_home_dirs sets in os.environ
        monkeypatch.delenv(var)
    from wandb.sdk.artifacts.staging import get_staging_dir

    with pytest.raises(PermissionError):
        get_staging_dir()  # the fault, as wandb meets it
    run_dir = tmp_path / "run"
    tracking.tracker._movable_home_dirs(run_dir)
    staging = get_staging_dir()
    assert staging.startswith(str(run_dir / "wandb" / "home"))
    assert set(tracking.tracker.HOME_DIRS) <= {v for v in tracking.tracker.HOME_DIRS if tracking.tracker.os.environ.get(v)}


def test_a_writable_home_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in tracking.tracker.HOME_DIRS:  # set, then removed: monkeypatch restores each (unset) after the test,
        monkeypatch.setenv(var, "x")  # also what _movable_home_dirs sets in os.environ
        monkeypatch.delenv(var)
    tracking.tracker._movable_home_dirs(tmp_path / "run")
    assert not any(tracking.tracker.os.environ.get(v) for v in tracking.tracker.HOME_DIRS)


# ----------------------------------------------------------------------------- server failures
def test_a_server_that_fails_the_resume_call_gives_one_line(tmp_path, monkeypatch):
    (tmp_path / WANDB_ID).write_text("abc123def456\n")

    def refuse(**kwargs):
        raise wandb.errors.CommError("HTTP 500: internal server error\n<html>…</html>")

    monkeypatch.setattr(wandb, "init", refuse)
    with pytest.raises(tracking.TrackingError) as e:
        tracking.Tracker.for_training(_logger(mode="online"), tmp_path, {}, "run")
    msg = str(e.value)
    assert "\n" not in msg and "resume train run abc123def456" in msg and "HTTP 500" in msg
    assert "logger.mode=offline" in msg
    assert tracking.TrackingError in train_job.FAILURES  # train.py prints "Error: <line>", exit 1


# ----------------------------------------------------------------------------- dashboard
class ErrorServer(http.server.BaseHTTPRequestHandler):
    """Passes the key check (W&B's viewer query), then answers every other request with HTTP 500."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if b"query Viewer" in body:
            self._send(200, json.dumps({"data": {"viewer": {"id": "1", "username": "u"}}}).encode())
        else:
            self._send(500, b"internal error")

    def do_GET(self):
        self._send(500, b"internal error")

    def _send(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def error_server(monkeypatch, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ErrorServer)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("WANDB_BASE_URL", url)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    yield url
    # (left serving: wandb's abandoned retry thread keeps asking it until the test process ends)


def test_dashboard_stops_with_an_error_against_a_server_that_answers_errors(error_server, capsys):
    """Before: no output for more than 5 minutes (wandb retries HTTP 500s for hours)."""
    code = commands.wandb_dashboard(["team/project", "sweep", "--timeout", "3"])
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: chart preset team/ssa-repro-heatmap") and error_server in last, err
    assert "chart preset team/ssa-repro-heatmap ..." in err  # a progress line before the wait


def test_dashboard_without_a_key_does_not_advise_logger_options(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_IDENTITY_TOKEN_FILE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    assert commands.wandb_dashboard(["team/project", "sweep"]) == 2
    err = capsys.readouterr().err
    assert "needs a W&B API key" in err and "logger." not in err and "WANDB_API_KEY" in err


def test_dashboard_timeout_must_be_positive(capsys):
    assert commands.wandb_dashboard(["team/project", "sweep", "--timeout", "0"]) == 2
    assert "--timeout=0.0 must be > 0" in capsys.readouterr().err
