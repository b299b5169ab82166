"""The example notebook runs against a real run folder (so it stays true)."""

from __future__ import annotations

import json

import matplotlib

from ssa_repro.jobs.train_job import run_job
from tests.conftest import ROOT, make_cfg

matplotlib.use("Agg")


def test_explore_notebook_runs(tmp_path):
    run_job(make_cfg("scorer=ssa"), tmp_path)
    nb = json.loads((ROOT / "notebooks" / "explore_run.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    scope: dict = {}
    exec(cells[0], scope)  # imports; then point it at our run
    scope["RUN"] = tmp_path
    for src in cells[1:]:
        exec(src, scope)
    assert scope["table"].shape == (2, 2)  # the 2 × 2 σ grid of the tiny run
