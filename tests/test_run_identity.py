"""A copied run is one run, never two seeds (issue 61, class 4): every place that pools runs (compare
and the other reports through reports/runs.py, a study's index, the W&B evaluation runs) asks
core/identity.py, which tells copies (the same run id, config and checkpoint) from runs, and a copied
run folder works in place (what it stores names paths relative to the run, not absolute ones)."""

from __future__ import annotations

import json
import logging
import shutil

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro import tracking
from ssa_repro.cli import commands
from ssa_repro.core.identity import run_identity, same_runs
from ssa_repro.evaluation.grid import GridConfig
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import evaluate
from ssa_repro.reports import compare
from ssa_repro.reports.kinds import icl as study
from ssa_repro.reports.runs import ReportError, all_runs
from ssa_repro.training.trainer import train
from tests.conftest import make_cfg

CPU = torch.device("cpu")
GRID = OmegaConf.merge(
    OmegaConf.structured(GridConfig), dict(sigmas=[1.0], lengths=[5], n_samples=2, batch_size=4, seed=5)
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two evaluated runs of seeds 0 and 1."""
    root = tmp_path_factory.mktemp("identity")
    for seed in (0, 1):
        train(make_cfg("evaluation.enabled=false", f"seed={seed}"), root / f"s{seed}")
        evaluate(load_run(root / f"s{seed}", CPU), GRID)
    return root


@pytest.fixture
def runs(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "runs", symlinks=True)
    return tmp_path / "runs"


def copy(src, dst):
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)  # cp -a
    return dst


def test_compare_refuses_a_run_beside_its_copy(runs):
    """The issue's instance: ssa-compare of a run beside its cp -a copy compared them as two runs."""
    twin = copy(runs / "s0", runs / "s0_copy")
    with pytest.raises(ReportError) as e:
        compare.collect([runs / "s0", twin])
    text = str(e.value)
    assert f"{runs / 's0'}, {twin} are copies of one run (run id {run_identity(twin).run_id}" in text
    assert "give each run once" in text
    assert len(compare.collect([runs / "s0", runs / "s1"], eval="grid").groups) == 2  # two runs: compared


def test_a_copy_trained_on_is_still_one_run(runs):
    """Another instance: the copy's checkpoint changed since (trained on): one model's history, not a
    second seed."""
    twin = copy(runs / "s0", runs / "s0_later")
    with open(twin / "checkpoints" / "last.pt", "ab") as f:
        f.write(b"\0")  # another checkpoint (its bytes are all this check reads)
    (found,) = same_runs([runs / "s0", twin, runs / "s1"])
    assert not found.copies and found.paths == (runs / "s0", twin)
    with pytest.raises(ReportError, match="hold one run .* at different points"):
        compare.collect([runs / "s0", twin, runs / "s1"])


def test_copies_of_older_code_are_told_by_their_config_and_checkpoint(runs):
    """Another instance: folders of older code have no run_id.txt; equal config and checkpoint = copies."""
    twin = copy(runs / "s0", runs / "s0_copy")
    for d in (runs / "s0", twin, runs / "s1"):
        (d / "run_id.txt").unlink()
    (found,) = same_runs([runs / "s0", twin, runs / "s1"])
    assert found.copies and found.run_id is None and set(found.paths) == {runs / "s0", twin}


def test_a_backup_below_the_folder_is_refused_where_reports_walk_runs(runs):
    """Another instance: the LM and Zorro tables pool every run below a folder (all_runs)."""
    copy(runs / "s1", runs / "backup" / "s1")
    with pytest.raises(ReportError, match=r"are copies of one run"):
        all_runs([runs])


def test_a_studys_index_flags_a_copied_job(runs, caplog):
    root = runs / "study"
    for job, src in (("a", "s0"), ("b", "s0"), ("c", "s1")):
        copy(runs / src, root / "runs" / "g" / job)
    pd.DataFrame({"group": ["g"] * 3, "job": ["a", "b", "c"], "run_dir": ["x", "y", "z"]}).to_csv(
        root / "index.csv", index=False
    )
    with caplog.at_level(logging.WARNING):
        index = study.read_index(root)
    assert len(index) == 3
    assert f"the study in {root}: 1 run(s) given more than once" in caplog.text
    assert f"{root / 'runs' / 'g' / 'a'}, {root / 'runs' / 'g' / 'b'} are copies" in caplog.text


def test_the_wandb_evaluation_run_carries_the_identity(runs, monkeypatch):
    """W&B pools evaluation runs by group: each carries the run's identity, shared by its copies."""
    seen = {}

    class Run:
        def define_metric(self, *a, **k):
            pass

    def init(**kw):
        seen.update(kw)
        return Run()

    monkeypatch.setattr(tracking.tracker, "_init", init)
    monkeypatch.setattr(tracking.tracker, "configure_environment", lambda mode: "offline")
    tracking.Tracker.for_evaluation(runs / "s0", {"logger": {"mode": "offline"}}, {}, "grid")
    assert seen["config"]["run_identity"] == run_identity(runs / "s0").as_dict()
    assert seen["config"]["run_identity"]["run_id"] and seen["config"]["run_identity"]["checkpoint_sha256"]


def test_a_copied_run_folder_works_in_place(runs, tmp_path):
    """Moved to another disk: the copy evaluates from its own stored cells, and nothing it stores names
    the folder it came from (summary.json said where the original's results were)."""
    moved = copy(runs / "s0", tmp_path / "elsewhere" / "s0")
    shutil.rmtree(runs / "s0")
    summary = evaluate(load_run(moved, CPU), GRID)
    assert summary["cells_computed"] == 0 and summary["dir"].startswith(str(moved))
    stored = (moved / "eval" / "grid").rglob("summary.json")
    assert [json.loads(p.read_text())["dir"] for p in stored] == [f"eval/grid/{summary['protocol_id']}"]
    for p in moved.rglob("*"):
        if p.is_file() and p.suffix in (".json", ".csv", ".yaml", ".txt") and ".hydra" not in p.parts:
            assert str(runs / "s0") not in p.read_text(errors="replace"), p


def test_ssa_compare_says_so_in_words(runs, capsys):
    twin = copy(runs / "s0", runs / "s0_copy")
    code = commands.compare([str(runs / "s0"), str(twin), "--eval", "grid", "--out", str(runs / "cmp")])
    assert code == 2 and "are copies of one run" in capsys.readouterr().err
    assert not (runs / "cmp").exists()
