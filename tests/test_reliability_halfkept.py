"""Derived outputs a kill leaves half-made are completed on the next evaluation (issue 61, class 1):
a stored cell whose rows another table should hold counts as missing and is computed again, a call
writes its ``results`` part last (the part that makes its cells count as stored), temporary files of
dead writers are removed (their pid checked, a live writer's left alone) and an emptied figure is drawn
again."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.evaluation import store as store_mod
from ssa_repro.evaluation.deviant import DeviantConfig
from ssa_repro.evaluation.grid import GridConfig
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import evaluate
from ssa_repro.evaluation.store import stored
from ssa_repro.training.trainer import train
from tests.conftest import make_cfg

CPU = torch.device("cpu")
GRID = dict(sigmas=[1.0, 2.0], lengths=[4, 5], n_samples=2, batch_size=4, seed=5)


def grid(**kw):
    return OmegaConf.merge(OmegaConf.structured(GridConfig), {**GRID, **kw})


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A trained tiny run with one grid protocol stored in one call."""
    d = tmp_path_factory.mktemp("halfkept") / "run"
    train(make_cfg("evaluation.enabled=false"), d)
    evaluate(load_run(d, CPU), grid())
    return d


@pytest.fixture
def run(evaluated, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(evaluated, d)
    return d


def dead_pid() -> int:
    """The pid of a process that has ended (its temporary files are leftovers)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def by_position(store):
    frame = pd.read_csv(store.dir / "by_position.csv")
    return frame.sort_values(["sigma_f", "sigma_x", "length", "position", "predictor"]).reset_index(drop=True)


def test_a_per_position_table_a_kill_left_short_is_completed(run, caplog):
    """The issue's instance: killed after the results part, before the per-position part (and its
    0-byte temporary file left behind): the next evaluation computes the cells again."""
    (store,) = stored(run, "grid")
    whole = by_position(store)
    assert set(whole["length"]) == {5}  # the longest length of each σ
    (part,) = store.parts("by_position")
    part.unlink()  # the kill: this part was never renamed into place
    leftover = store.dir / "parts" / f".{part.name}.tmp{dead_pid()}"
    leftover.write_bytes(b"")
    (store.dir / "by_position.csv").write_text(whole[whole["sigma_x"] == 1.0].to_csv(index=False))
    with caplog.at_level(logging.WARNING):
        summary = evaluate(load_run(run, CPU), grid())
    assert "lack their rows in by_position" in caplog.text
    n_long = len(whole[["sigma_f", "sigma_x"]].drop_duplicates())
    assert summary["cells_computed"] == n_long  # the longest cell of each σ, nothing else
    pd.testing.assert_frame_equal(by_position(store), whole, check_like=True)  # seeded: the same numbers
    assert not leftover.exists()
    assert evaluate(load_run(run, CPU), grid())["cells_computed"] == 0  # whole now: nothing more


def test_a_live_writers_temporary_file_is_left_alone(run):
    (store,) = stored(run, "grid")
    live = store.dir / "parts" / f".results-x.csv.tmp{subprocess.os.getppid()}"
    dead = store.dir / f".summary.json.tmp{dead_pid()}"  # a derived file's write, killed
    live.write_bytes(b"")
    dead.write_bytes(b"{")
    evaluate(load_run(run, CPU), grid())
    assert live.exists() and not dead.exists()


def test_a_call_writes_its_results_part_last(run, monkeypatch):
    """A kill between a call's parts leaves cells that count as missing: ``results`` (what makes a
    cell count as stored) is written after every other table of the call."""
    (store,) = stored(run, "grid")
    for p in store.dir.glob("parts/*.csv"):
        p.unlink()
    real = store_mod.atomic_path
    written = []

    def killed(path, *a, **kw):
        written.append(path.name.split("-")[0])
        if len(written) == 2:
            raise KeyboardInterrupt  # a stop between the first and the second part of the call
        return real(path, *a, **kw)

    monkeypatch.setattr(store_mod, "atomic_path", killed)
    with pytest.raises(KeyboardInterrupt):
        evaluate(load_run(run, CPU), grid(sigmas=[1.0], lengths=[5]))
    assert written == ["by_position", "results"]
    monkeypatch.setattr(store_mod, "atomic_path", real)
    summary = evaluate(load_run(run, CPU), grid(sigmas=[1.0], lengths=[5]))
    assert summary["cells_computed"] == 1


def test_an_emptied_figure_is_drawn_again(run):
    """A figure cut to 0 bytes (a copy that was not atomic, a full disk elsewhere) while ``.drawn.json``
    says it was drawn from these parts: drawn again, not kept."""
    (store,) = stored(run, "grid")
    figure = store.dir / json.loads((store.dir / "summary.json").read_text())["figures"][0]
    figure.write_bytes(b"")
    evaluate(load_run(run, CPU), grid())
    assert figure.stat().st_size > 0


def test_an_attention_table_a_kill_left_short_is_completed(run):
    """The same class in another evaluation: deviant's per-layer attention table (``detail``)."""
    cfg = OmegaConf.merge(
        OmegaConf.structured(DeviantConfig),
        dict(
            magnitudes=[2.0], counts=[1, 2], length=6, n_samples=1, batch_size=4, detail=True, figures=False
        ),
    )
    evaluate(load_run(run, CPU), cfg)
    (store,) = stored(run, "deviant")
    whole = pd.read_csv(store.dir / "attention.csv")
    for part in store.parts("attention"):
        part.unlink()
    summary = evaluate(load_run(run, CPU), cfg)
    assert summary["cells_computed"] == 2
    pd.testing.assert_frame_equal(pd.read_csv(store.dir / "attention.csv"), whole, check_like=True)
