"""One device per parallel job (ssa_repro/jobs/devices.py): the rule as a pure function, the GPU locks,
and the environment each job of a real joblib multirun receives, with a fake CUDA_VISIBLE_DEVICES
list (no GPU needed: on a CPU-only torch the job records its GPU but selects none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from itertools import combinations

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ssa_repro.jobs import devices as dv
from tests.conftest import CONF, ROOT


@pytest.mark.parametrize(
    ("index", "n", "visible", "cores", "device", "gpu", "threads"),
    [
        (0, 2, ["3", "5"], 16, "auto", "3", 8),
        (1, 2, ["3", "5"], 16, "auto", "5", 8),
        (2, 2, ["3", "5"], 16, "cuda", "3", 8),  # round robin
        (5, 4, ["0", "1", "2"], 16, "auto", "2", 4),
        (1, 3, ["0", "1"], 2, "auto", "1", 1),  # never 0 threads
        (1, 2, ["3", "5"], 16, "cpu", None, 8),  # device=cpu: no GPU, cores split
        (1, 2, [], 16, "auto", None, 8),  # no GPU visible
    ],
)
def test_placement(index, n, visible, cores, device, gpu, threads):
    p = dv.placement(index, n, visible, cores, device)
    assert (p.gpu, p.threads) == (gpu, threads)
    assert p.cuda_index == (None if gpu is None else visible.index(gpu))
    env = p.env()
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(threads)
    assert env.get("SSA_JOB_GPU") == gpu


def test_visible_gpus_reads_cuda_visible_devices():
    assert dv.visible_gpus({"CUDA_VISIBLE_DEVICES": "3, 5,7"}) == ["3", "5", "7"]
    assert dv.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


@pytest.mark.parametrize(
    ("launcher", "expected"),
    [
        ({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": 3}, 3),
        ({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": -1}, 8),
        ({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": -2}, 7),
        ({"_target_": "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLocalLauncher"}, 8),
        ({"_target_": "x.RayLocalLauncher", "ray": {"remote": {"num_cpus": 4}}}, 2),
        ({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, None),
        ({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"}, None),
    ],
)
def test_parallel_jobs_by_launcher(launcher, expected):
    assert dv.parallel_jobs(OmegaConf.create(launcher), 8) == expected


def test_claim_skips_a_gpu_another_job_holds(tmp_path):
    visible = ["3", "5", "7"]
    first, lock1 = dv.claim(dv.placement(0, 3, visible, 6), visible, tmp_path)
    second, lock2 = dv.claim(dv.placement(3, 3, visible, 6), visible, tmp_path)  # index 3 -> "3": held
    assert (first.gpu, second.gpu, second.cuda_index) == ("3", "5", 1)
    third, lock3 = dv.claim(dv.placement(0, 3, visible, 6), visible, tmp_path)
    assert third.gpu == "7"
    fourth, lock4 = dv.claim(dv.placement(1, 3, visible, 6), visible, tmp_path)
    assert (fourth.gpu, lock4) == ("5", None)  # all held: shares its round-robin GPU
    lock2.release()
    again, lock5 = dv.claim(dv.placement(0, 3, visible, 6), visible, tmp_path)
    assert again.gpu == "5"
    for lock in (lock1, lock3, lock5):
        lock.release()


def test_job_device_applies_and_restores(tmp_path, monkeypatch):
    # GPUs "3" and "5" are made up: with a real GPU present, selecting index 1 would fail (that path is
    # tests/test_cuda.py's, with the GPUs the machine has)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("SSA_DEVICE_LOCKS", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("SSA_JOB_GPU", raising=False)
    before = torch.get_num_threads()
    with dv.job_device(1, 2, "auto", visible=["3", "5"], n_cores=6) as p:
        assert (p.gpu, os.environ["SSA_JOB_GPU"], os.environ["OMP_NUM_THREADS"]) == ("5", "5", "3")
        assert torch.get_num_threads() == 3
        with dv.job_device(1, 2, "auto", visible=["3", "5"], n_cores=6) as q:  # 5 is held: next free
            assert q.gpu == "3"
    assert os.environ["OMP_NUM_THREADS"] == "1" and "SSA_JOB_GPU" not in os.environ
    assert torch.get_num_threads() == before


APP = """
import json, os, time
from pathlib import Path
import hydra, torch

@hydra.main(config_path="conf", config_name="app", version_base="1.3")
def main(cfg):
    start = time.time()
    time.sleep(0.3)  # so that the two workers' jobs overlap
    record = {k: os.environ.get(k) for k in ("SSA_JOB_GPU", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    record.update(num=int(cfg.hydra_num), torch_threads=torch.get_num_threads(), start=start, end=time.time())
    Path(cfg.out, f"job{cfg.hydra_num}.json").write_text(json.dumps(record))

main()
"""

CONFIG = """
defaults:
  - override hydra/launcher: joblib
  - _self_
device: {device}
x: 0
out: {out}
hydra_num: ${{hydra:job.num}}
hydra:
  launcher:
    n_jobs: 2
  sweep:
    dir: {out}/sweep
  callbacks:
    device_per_job:
      _target_: ssa_repro.jobs.devices.OneDevicePerJob
      gpus: null
"""


def _multirun(tmp_path, device, env):  # device=cpu is covered by test_placement
    (tmp_path / "conf").mkdir()
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "conf/app.yaml").write_text(CONFIG.format(device=device, out=tmp_path))
    proc = subprocess.run(
        [sys.executable, "app.py", "-m", "x=1,2,3,4"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "SSA_DEVICE_LOCKS": str(tmp_path / "locks"),
            **env,
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((tmp_path / f"job{i}.json").read_text()) for i in range(4)]


@pytest.mark.slow
def test_joblib_jobs_get_their_own_gpu_and_a_share_of_the_cores(tmp_path):
    jobs = _multirun(tmp_path, "auto", {"CUDA_VISIBLE_DEVICES": "3,5"})
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    for j in jobs:
        assert j["SSA_JOB_GPU"] in {"3", "5"}
        assert j["OMP_NUM_THREADS"] == j["MKL_NUM_THREADS"] == str(threads)
        assert j["torch_threads"] == threads
    assert {j["SSA_JOB_GPU"] for j in jobs} == {"3", "5"}
    for a, b in combinations(jobs, 2):  # jobs that ran at the same time never share a GPU
        if a["start"] < b["end"] and b["start"] < a["end"]:
            assert a["SSA_JOB_GPU"] != b["SSA_JOB_GPU"], (a, b)


def test_train_config_installs_the_callback():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", return_hydra_config=True)
    assert cfg.hydra.callbacks.device_per_job._target_ == "ssa_repro.jobs.devices.OneDevicePerJob"
