"""Faults and bad input, end to end through train.py and evaluate.py: each case gives a clear message
before work (or the right result), the conventional exit code, and leaves existing files unchanged.
(The building blocks have their own tests: tests/test_reliability_*.py.)"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from ssa_repro.core.atomic import ConfigFileError
from ssa_repro.evaluation import runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.jobs.train_job import run_job
from ssa_repro.training.trainer import train
from ssa_repro.training.validate import ConfigError
from tests.conftest import CONF, ROOT, TINY, make_cfg, run_script

ENV = {**os.environ, "WANDB_MODE": "disabled"}


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _train(*args, env=None, **_):
    """``python train.py debug=tiny ARGS``, in this process (conftest.run_script)."""
    return run_script("train.py", *TINY, *args, env=env)


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
        second = _train(*args, timeout=120)  # the same command again: it would resume and train too
        assert second.returncode != 0
        assert "| loss" not in second.stdout + second.stderr  # refused before any training step
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
        (["hydra.run.dir=runs/a", "b"], "'b' is not key=value"),
        (["model.n_embd=100000000"], "model.n_embd"),
        (["task.name=é"], "must be quoted, with the shell's quotes around it: 'task.name=\"é\"'"),
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


def _evaluate(*args, env=None, **_):
    """``python evaluate.py ARGS``, in this process (conftest.run_script)."""
    return run_script("evaluate.py", *args, env=env)


@pytest.mark.slow
def test_damaged_stored_results_are_set_aside_and_the_evaluation_goes_on(tmp_path):
    run = tmp_path / "run"
    train(make_cfg("evaluation.enabled=false"), run)
    args = [f"run_dir={run}", "eval=grid", "eval.sigmas=[1,2]", "eval.lengths=[5]", "eval.n_samples=2"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=args)
    first = runner.evaluate(load_run(run, torch.device("cpu")), cfg.eval)
    folder = run / "eval" / "grid" / first["protocol_id"]
    part = sorted((folder / "parts").glob("results-*.csv"))[0]
    part.write_bytes(b"\x89PNG\r\n" + part.read_bytes()[6:])  # undecodable bytes in a part
    protocol = folder / "protocol.json"
    protocol.write_bytes(protocol.read_bytes()[:40])  # a truncated protocol.json
    (folder / "summary.json").write_text('{"evaluation": "gr')  # a truncated derived file
    before = snapshot(run)
    call = part.name.split("-", 1)[1].rsplit("-", 1)[0]  # <table>-<time>-<pid>-<n>.csv: its call's parts
    damaged = {p: before[p.relative_to(run)] for p in [*(folder / "parts").glob(f"*-{call}-*"), protocol]}
    proc = _evaluate(*args, timeout=300)
    out = proc.stdout + proc.stderr  # (Hydra logs to stdout)
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    assert f"{part} (a part of the stored cells) is damaged: byte 0 of" in out
    assert f"{protocol} (the settings of the stored cells beside it) is damaged: not JSON" in out
    for path, data in damaged.items():  # moved aside, not deleted
        assert (folder / "damaged" / path.name).read_bytes() == data
    assert json.loads((folder / "summary.json").read_text())["cells"] == first["cells"]  # redrawn
    after = snapshot(run)
    kept = [p for p in before if p.parent.name != first["protocol_id"] and (run / p) not in damaged]
    assert kept and all(after.get(p) == before[p] for p in kept)  # the run's files and parts unchanged


@pytest.mark.slow
def test_values_that_overflow_are_stored_marked_from_the_cli(tmp_path):
    run = tmp_path / "run"
    train(make_cfg("evaluation.enabled=false"), run)
    before = snapshot(run)
    proc = _evaluate(
        f"run_dir={run}", "eval.sigmas=[1e7]", "eval.lengths=[5]", "eval.n_samples=2", timeout=300
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    assert "hold values that are not finite" in out and "non_finite column" in out
    after = snapshot(run)
    assert all(after.get(p) == b for p, b in before.items())


@pytest.mark.slow
def test_a_corpus_of_random_bytes_is_refused_before_any_folder(tmp_path):
    root = tmp_path / "data"
    (root / "lm").mkdir(parents=True)
    (root / "lm" / "train.txt").write_bytes(random.Random(0).randbytes(20_000))
    for name in ("valid", "test"):
        (root / "lm" / f"{name}.txt").write_text("the cat sat on the mat .\n")
    before = snapshot(tmp_path)
    run = tmp_path / "run"
    proc = run_script(
        "train.py", "experiment=lm_small", f"data.root={root}", f"data.cache_dir={tmp_path / 'cache'}",
        "task.context=8", "task.bpe_vocab=300", "model.vocab_size=300", "model.max_positions=8",
        "logger.mode=disabled", f"hydra.run.dir={run}",
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"{root / 'lm' / 'train.txt'}: " in proc.stderr and "% of its bytes (" in proc.stderr
    assert "more than the 1% a corpus may hold" in proc.stderr
    assert not run.exists() and snapshot(tmp_path) == before


@pytest.mark.slow
def test_online_wandb_against_a_host_that_is_not_wandb_is_refused_before_any_folder(tmp_path):
    with socket.socket() as server:  # accepts connections, answers with something that is not W&B
        server.bind(("127.0.0.1", 0))
        server.listen()

        def serve():
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

        threading.Thread(target=serve, daemon=True).start()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        env = {"WANDB_MODE": "online", "WANDB_API_KEY": "k" * 40, "WANDB_BASE_URL": url}
        run = tmp_path / "run"
        proc = _train("logger.mode=online", f"hydra.run.dir={run}", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"{url} is not a W&B server (check WANDB_BASE_URL): it answered HTTP 404" in proc.stderr
    assert not run.exists()


def test_a_run_whose_checkpoints_are_gone_is_refused_and_discarding_moves_its_results_aside(tmp_path):
    run = tmp_path / "run"
    run_job(make_cfg(), run)  # trained and evaluated
    old_cells = sorted(run.glob("eval/*/*/parts/*.csv"))
    shutil.rmtree(run / "checkpoints")  # deleted by hand
    before = snapshot(run)
    proc = _train(f"hydra.run.dir={run}", timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"{run} holds the results of a trained model (summary.json, eval) but no checkpoint" in proc.stderr
    assert "hydra.run.dir=<another folder>" in proc.stderr and "train.discard_old_results=true" in proc.stderr
    assert snapshot(run) == before  # nothing retrained, nothing overwritten
    summary = run_job(make_cfg("train.discard_old_results=true"), run)
    (aside,) = (run / "discarded").iterdir()
    assert (aside / "summary.json").read_bytes() == before[Path("summary.json")]  # moved, not deleted
    for part in old_cells:
        assert (aside / part.relative_to(run)).read_bytes() == before[part.relative_to(run)]
    assert summary["evaluations"]["quick"]["protocol_id"]  # the new model evaluated anew ...
    assert not set(run.glob("eval/*/*/parts/*.csv")) & set(old_cells)  # ... on cells of its own


class Payload:
    """Code in a pickle: loading it without weights_only would create the file named."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_checkpoint_holding_code_is_refused_naming_the_callable_and_never_run(tmp_path):
    run = tmp_path / "run"
    train(make_cfg("train.steps=3", "evaluation.enabled=false"), run)
    marker = tmp_path / "payload_ran"
    ckpt = run / "checkpoints" / "last.pt"
    state = torch.load(ckpt, weights_only=True)
    torch.save({**state, "extra": Payload(marker)}, ckpt)
    before = snapshot(run)
    proc = _evaluate(f"run_dir={run}", "eval.lengths=[5]", "eval.sigmas=[1]", timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"refused checkpoint {ckpt}: it holds code (posix.mkdir) that safe loading" in proc.stderr
    assert "weights_only=False" not in proc.stderr and "will likely succeed" not in proc.stderr
    assert not marker.exists()  # the payload never ran
    after = snapshot(run)
    assert all(after.get(p) == b for p, b in before.items())


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_start_up_checks_stop_the_job_before_anything_is_written(tmp_path):
    run = tmp_path / "run"
    train(make_cfg("train.steps=3", "evaluation.enabled=false"), run)
    before = snapshot(run)
    proc = _evaluate(f"run_dir={run}", "device=cuda", timeout=300)  # the device check train.py makes too
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "device=cuda but no CUDA device is available; use device=auto or device=cpu" in proc.stderr
    assert snapshot(run) == before and not (run / "eval").exists()  # no log folder either
    new = tmp_path / "new"
    proc = _train(f"hydra.run.dir={new}", env={"WANDB_MODE": "bogus"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "WANDB_MODE='bogus' is not a W&B mode" in proc.stderr and not new.exists()


def test_evaluate_on_a_read_only_run_folder_stops_before_anything_with_what_to_do(tmp_path):
    run, mnt = tmp_path / "run", tmp_path / "mnt"
    train(make_cfg("train.steps=3", "evaluation.enabled=false"), run)
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)]).returncode
    ):
        pytest.skip("mounting a tmpfs needs root and mount rights")
    try:
        shutil.copytree(run, mnt / "run")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = snapshot(mnt)
        proc = _evaluate(f"run_dir={mnt / 'run'}", "eval.sigmas=[1]", "eval.lengths=[5]", timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert f"{mnt / 'run'} is on a read-only file system: cannot write .lock" in proc.stderr
        assert "copy the run folder somewhere writable and evaluate the copy" in proc.stderr
        assert "hydra.run.dir" not in proc.stderr and snapshot(mnt) == before
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
