"""`make gpu-check` (scripts/gpu_check.py) without a GPU: a message, exit 0, nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import ROOT


def test_gpu_check_skips_cleanly_without_a_gpu(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}  # no GPU, even on a GPU machine
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path / "results")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA GPU here" in proc.stdout and "skipped, nothing written" in proc.stdout
    assert not (tmp_path / "results").exists()


def test_make_target_runs_the_script():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^gpu-check: .*\n\t\$\(PY\) scripts/gpu_check\.py$", makefile, re.MULTILINE)
