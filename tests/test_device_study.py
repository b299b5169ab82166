"""scripts/device_study.sh, the time-boxed study command for a lent GPU: its argument checks (the whole
command, a study stopped by its time limit and continued, was run by hand on the quick study: 2026-11-28,
docs/development.md)."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device_study.sh"


def run(*args, env=None):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, env=env)


def test_usage_without_name_and_seconds():
    out = run("quick")
    assert out.returncode == 2 and "usage: bash scripts/device_study.sh NAME SECONDS" in out.stderr


def test_refuses_without_out_before_any_work(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["STUDY_ROOT"] = str(tmp_path / "root")
    out = run("quick", "10", env=env)
    assert out.returncode != 0 and "OUT: the folder whose files come back" in out.stderr
    assert not (tmp_path / "root").exists()
