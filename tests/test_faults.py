"""Faults and bad input, end to end through train.py and evaluate.py: each case gives a clear message
before work (or the right result), the conventional exit code, and leaves existing files unchanged.
(The building blocks have their own tests: tests/test_reliability_*.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ssa_repro.cli.train_app import run_job
from ssa_repro.core.atomic import ConfigFileError
from ssa_repro.training.trainer import train
from ssa_repro.training.validate import ConfigError
from tests.conftest import ROOT, TINY, make_cfg

ENV = {**os.environ, "WANDB_MODE": "disabled"}


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _train(*args, **kw):
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *TINY, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=ENV,
        **kw,
    )


def test_a_finished_run_given_fewer_steps_is_refused(tmp_path):
    run_job(make_cfg(), tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match=r"train.steps=3 is fewer than the 6 steps the checkpoint holds"):
        run_job(make_cfg("train.steps=3"), tmp_path)
    assert snapshot(tmp_path) == before  # config.yaml still says 6 steps


def test_a_damaged_provenance_file_is_named(tmp_path):
    train(make_cfg("train.steps=3", "evaluation.enabled=false"), tmp_path)
    (tmp_path / "provenance.json").write_text('[{"time": "2026-')  # cut off mid-write by hand
    with pytest.raises(ConfigFileError, match=r"provenance.json .*is not valid JSON"):
        train(make_cfg("evaluation.enabled=false"), tmp_path)


@pytest.mark.slow
def test_a_second_writer_is_refused_at_once_and_the_first_finishes(tmp_path):
    run = tmp_path / "run"
    args = [
        "train.steps=1500",
        "train.compile=false",
        "train.log_interval=100",
        "evaluation.enabled=false",
        f"hydra.run.dir={run}",
    ]
    first = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *TINY, *args],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while not (run / "metrics.jsonl").exists() and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        t0 = time.time()
        second = _train(*args, timeout=120)  # the same command again: it would resume and train too
        assert time.time() - t0 < 30  # refused at once, not after training
        assert second.returncode != 0
        assert f"pid {first.pid}" in second.stderr and "train.py" in second.stderr, second.stderr
        assert first.wait(timeout=300) == 0
    finally:
        if first.poll() is None:
            first.kill()
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps))  # no row written twice


@pytest.mark.slow
def test_sigterm_during_the_end_of_run_evaluation_stops_it_non_zero(tmp_path):
    run = tmp_path / "run"
    args = ["train.steps=2", "curriculum.end=12", "evaluation.also=[deviant]", f"hydra.run.dir={run}"]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *TINY, *args],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if list((run / "eval").glob("deviant/*/parts/results-*.csv")):  # the evaluation is under way
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]
    assert "Traceback" not in out
    assert (run / "checkpoints" / "last.pt").exists() and (run / "summary.json").exists()  # training kept


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["+model.n_layers=2"],
            "model.n_layers is not a key of model (ModelConfig); valid keys: name, n_layer",
        ),
        (["model.n_layers=2"], "did you mean n_layer?"),
        (["hydra.run.dir=/tmp/a", "b"], "'b' is not key=value"),
        (["model.n_embd=100000000"], "model.n_embd"),
    ],
)
def test_bad_command_lines_are_refused_before_any_folder(tmp_path, args, needle):
    run = tmp_path / "run"
    proc = _train(
        *[a if not a.startswith("hydra.run.dir") else f"hydra.run.dir={run}" for a in args], timeout=120
    )
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not run.exists()
