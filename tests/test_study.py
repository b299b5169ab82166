"""The study pipeline (scripts/study.py): every job of every shipped study is a valid run, and the quick
study runs end to end with a claims table whose numbers read back from the stored cells."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ssa_repro.cli import study
from ssa_repro.cli.train_app import problems
from ssa_repro.config import CONF_DIR
from ssa_repro.reports import study as report

STUDIES = sorted(p.stem for p in (CONF_DIR / "study").glob("*.yaml"))


@pytest.mark.parametrize("name", STUDIES)
def test_every_job_of_a_study_composes_and_validates(name):
    todo = study.jobs(study.load(name))
    assert len({j.name for j in todo}) == len(todo)  # one folder per job
    seen = set()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for job in todo:
            key = tuple(o for o in job.overrides if not o.startswith("seed="))
            if key in seen:  # seeds differ only in the seed
                continue
            seen.add(key)
            cfg = compose("train", overrides=list(job.overrides))
            assert problems(cfg) == [], job.name
            assert cfg.scorer.label == job.scorer


def test_an_unknown_study_names_the_known_ones():
    with pytest.raises(SystemExit, match="no study 'nope'.*known: .*icl_cpu"):
        study.load("nope")


def test_the_quick_study_inherits_and_replaces_lists():
    quick, full = study.load("quick"), study.load("icl_cpu")
    assert quick.name == "quick" and list(quick.seeds) == [0, 1]
    assert quick.tasks == full.tasks and quick.archs == full.archs  # inherited
    assert "train.steps=40" in quick.base and "train.steps=3000" not in quick.base  # replaced, not appended


def _stored_cells(run_dir: Path, evaluation: str) -> pd.DataFrame:
    """Every stored results part of one run, read straight from the files (not through the Store)."""
    parts = glob.glob(str(run_dir / "eval" / evaluation / "*" / "parts" / "results-*.csv"))
    assert parts, run_dir
    frame = pd.concat([pd.read_csv(p) for p in parts], ignore_index=True)
    return frame[frame.step == frame.step.max()]


@pytest.mark.slow
def test_quick_study_end_to_end_and_a_claim_reads_back(tmp_path):
    root = study.run("quick", tmp_path / "quick", n_jobs=1)
    index = pd.read_csv(root / "index.csv")
    assert len(index.job.unique()) == len(study.jobs(study.load("quick")))
    setup = OmegaConf.to_container(study.load("quick"))
    path = report.write(root, tmp_path / "report", "quick", "pytest", setup)
    text = path.read_text()
    for section in ("## Claims", "## Setup", "## Did the models learn", "## Figures"):
        assert section in text
    assert "commit" in text and "train.steps=40" in text
    figures = list((tmp_path / "report" / "quick").glob("*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)

    # the in-distribution sequence error of softmax on `every, numbers only`, as the learning table shows
    # it, recomputed from the raw stored parts: mean over the σ = 1 cells at training lengths, then seeds
    rows = index[(index.group == "core") & (index.task == "every_num") & (index.scorer == "softmax")]
    rows = rows[rows.evaluation == "grid_quantifier"]
    per_seed = []
    for run_dir in rows.run_dir:
        c = _stored_cells(Path(run_dir), "grid")
        m = c[(c.metric == "sequence_error") & (c.predictor == "model")]
        per_seed.append(m[(m.sigma_x == m.sigma_x.min()) & (m.length <= 21)]["value"].mean())
    learn = report.learning_table(index)
    assert len(per_seed) == 2
    shown = learn[(learn.task == "every, numbers only") & (learn.scorer == "softmax")]
    assert len(shown) == 1 and shown.seeds.item() == 2, learn
    assert shown["in-distribution error"].item().startswith(f"{np.mean(per_seed):.3g} ["), (shown, per_seed)

    # resuming does no work: every job is finished and every cell stored
    before = sorted(p.stat().st_mtime_ns for p in root.rglob("parts/*.csv"))
    study.run("quick", root, n_jobs=1)
    assert sorted(p.stat().st_mtime_ns for p in root.rglob("parts/*.csv")) == before


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_a_study_with_an_invalid_job_config_stops_before_anything_is_written(tmp_path):
    root = tmp_path / "study"
    with pytest.raises(SystemExit) as e:
        study.run("quick", root, extra=("device=cuda",))
    msg = str(e.value.code)
    assert msg.startswith("Error: study quick: invalid job configs:\n  - ")
    assert "device=cuda but no CUDA device is available; use device=auto or device=cpu" in msg
    assert not root.exists()
