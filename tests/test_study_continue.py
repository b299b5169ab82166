"""A study continued in a later session (``ssa-study <name> --continue-from docs/results/<name>``): the
published jobs are not trained again and the report joins their per-seed rows with the new runs'; and a
group's ``more`` sub-matrices (more seeds for a primary endpoint's cells than for the rest of the group:
core/matrix.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from ssa_repro.cli import arguments, run_study
from ssa_repro.reports import inputs, provenance
from ssa_repro.reports.kinds import icl as report
from ssa_repro.reports.tables import seed_ranges
from ssa_repro.studies import engine, study
from ssa_repro.studies import index as study_index


def _study(tmp_path: Path, **group) -> Path:
    """The quick study with one group ``core`` (every_num and linear, softmax and SSA) given ``group``."""
    quick = OmegaConf.to_container(study.load("quick"))
    quick.pop("defaults", None)
    quick["name"] = "cont"
    quick["groups"] = {
        "core": {"tasks": ["linear", "every_num"], "scorers": ["softmax", "ssa"], "archs": ["preln"]}
        | {"train_sigma": [1]}
        | group
    }
    for key in ("primary", "factorials"):
        quick.pop(key, None)
    path = tmp_path / "cont.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(quick)))
    return path


def test_more_seeds_for_a_sub_matrix_in_seed_major_order(tmp_path):
    more = [
        {"seeds": [2, 3], "tasks": ["every_num"]},
        {"seeds": [1, 4], "tasks": ["linear"], "scorers": ["ssa"]},
    ]
    s = study.load(str(_study(tmp_path, seeds=[0, 1], more=more)))
    todo = study.jobs(s)
    got = [(j.seed, j.task, j.scorer) for j in todo]
    base = [(seed, t, sc) for seed in (0, 1) for t in ("linear", "every_num") for sc in ("softmax", "ssa")]
    extra = [(seed, "every_num", sc) for seed in (2, 3) for sc in ("softmax", "ssa")] + [(4, "linear", "ssa")]
    assert sorted(got) == sorted(base + extra) and len(got) == len(set(got)) == 13  # (1, linear, ssa) once
    # seed-major, and within a seed the group's axis order (tasks, then scorers)
    assert got[:4] == [
        (0, "linear", "softmax"),
        (0, "linear", "ssa"),
        (0, "every_num", "softmax"),
        (0, "every_num", "ssa"),
    ]
    assert [g[0] for g in got] == sorted(g[0] for g in got)
    assert {j.name for j in todo if j.seed == 4} == {"linear-ssa-preln-sigma1-s4"}
    # the report's missing-job count expects the same 13 jobs
    lines = inputs.missing_jobs(None, OmegaConf.to_container(s), lambda group, task: [])
    assert lines == ["group `core`: 0 of 13 jobs trained and indexed"]


@pytest.mark.parametrize(
    "more, fragment",
    [
        ([{"seeds": [0, 1], "tasks": ["some_num"]}], "groups.core.more[0].tasks[0]='some_num'"),
        ([{"seeds": [0, 0]}], "groups.core.more[0].seeds[1]=0"),
        ([{"seeds": [-1]}], "groups.core.more[0].seeds[0]=-1"),
        ([{"tasks": ["linear"]}], "groups.core.more[0].seeds"),
        ([{"seeds": [3], "arch": ["preln"]}], "groups.core.more[0].arch="),
        ({"seeds": [3]}, "groups.core.more="),
    ],
)
def test_bad_sub_matrices_are_refused_naming_the_key(tmp_path, more, fragment):
    with pytest.raises(SystemExit) as e:  # the study file is checked when loaded, before any job
        study.load(str(_study(tmp_path, more=more)))
    assert f"cont.yaml: {fragment}" in str(e.value.code)


def _published(tmp_path: Path, seeds, value: float, wall=(100.0,), runs=None) -> Path:
    """A published report's folder: a per-seed grid CSV (core every_num, both scorers, ``seeds``, every
    cell ``value``) and its report_inputs.json."""
    rows = [
        dict(group="core", task="every_num", scorer=sc, arch="preln", train_sigma=1, seed=seed)
        | dict(evaluation="grid_quantifier", predictor="model", metric="sequence_error")
        | dict(summary="train_lengths sigma=16", value=value)
        for seed in seeds
        for sc in ("softmax", "ssa")
    ]
    folder = tmp_path / "published"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "per_seed_grid.csv", index=False)
    inputs = {
        "per_seed": {"grid": "per_seed_grid.csv"},
        "wall_seconds": list(wall),
        "runs": runs
        or {"runs": 2 * len(seeds), "starts_by_commit": {"aaaaaaa": 2 * len(seeds)}}
        | {"starts_by_device": {"cpu": 2 * len(seeds)}},
        "missing": ["group `core`: 4 of 6 jobs trained and indexed"],
    }
    (folder / report.INPUTS).write_text(json.dumps(inputs))
    return folder


def test_the_prior_rows_join_the_new_ones_and_a_job_trained_again_keeps_only_its_new_rows(tmp_path):
    prior = _published(tmp_path, seeds=[0, 1], value=0.5)
    assert report.prior_jobs(prior) == {
        ("core", "every_num", sc, "preln", 1.0, seed) for seed in (0, 1) for sc in ("softmax", "ssa")
    }
    new = pd.read_csv(_published(tmp_path / "new", seeds=[1, 2], value=0.25) / "per_seed_grid.csv")
    new["train_sigma"] = 1.0  # as computed from the run folders: σ a float
    parts, inputs = report.with_prior({"grid": new}, prior)
    got = parts["grid"].assign(train_sigma=lambda f: f.train_sigma.astype(float))
    by_seed = got.groupby("seed").value.agg(["min", "max", "size"])
    # seed 0 only published (0.5); seed 1 trained again (0.25 only, not both); seed 2 new
    assert by_seed.to_dict("index") == {
        0: {"min": 0.5, "max": 0.5, "size": 2},
        1: {"min": 0.25, "max": 0.25, "size": 2},
        2: {"min": 0.25, "max": 0.25, "size": 2},
    }
    assert inputs["wall_seconds"] == [100.0]
    assert report.with_prior({"grid": new}, None) == ({"grid": new}, None)


def test_published_jobs_count_as_trained_in_the_missing_lines_and_the_inputs_are_joined(tmp_path):
    prior = _published(tmp_path, seeds=[0, 1], value=0.5)
    parts, old = report.with_prior({}, prior)
    setup = {
        "seeds": [0, 1, 2],
        "groups": {
            "core": {"tasks": ["every_num"], "scorers": ["softmax", "ssa"], "archs": ["preln"]}
            | {"train_sigma": [1]}
        },
    }
    index = pd.DataFrame(
        [
            {
                "group": "core",
                "task": "every_num",
                "job": "every_num-softmax-preln-sigma1-s2",
                "evaluation": "grid_quantifier",
            }
        ]
    )
    combined = report.trained_index(index, parts, lambda group, task: ["grid_quantifier"])
    assert inputs.missing_jobs(combined, setup, lambda group, task: ["grid_quantifier"]) == [
        "group `core`: 5 of 6 jobs trained and indexed"
    ]
    # a published job counts with the evaluations its rows come from: one the study also asks for, and
    # none of its published rows hold, is missing for those jobs (the new job lacks it too)
    wants = lambda group, task: ["grid_quantifier", "deviant"]  # noqa: E731
    assert inputs.missing_jobs(report.trained_index(index, parts, wants), setup, wants) == [
        "group `core`: 5 of 6 jobs trained and indexed",
        "group `core`, task `every_num`: `deviant` stored for 0 jobs",
    ]
    new = {"wall_seconds": [7.0], "runs": {"runs": 1, "starts_by_commit": {"bbbbbbb": 1}}, "missing": []}
    new["runs"] |= {"starts_by_device": {"cpu": 1}, "dirty_runs": 1, "dirty_commits": ["bbbbbbb"]}
    joined = report.continued_inputs(old, new, prior)
    assert joined["wall_seconds"] == [100.0, 7.0]
    assert joined["runs"]["runs"] == 5
    assert joined["runs"]["starts_by_commit"] == {"aaaaaaa": 4, "bbbbbbb": 1}
    assert joined["runs"]["starts_by_device"] == {"cpu": 5}
    assert joined["runs"]["dirty_commits"] == ["bbbbbbb"] and joined["runs"]["dirty_runs"] == 1
    assert joined["missing"] == []  # its own lines, the published jobs counted: never the earlier report's
    assert joined["continued"]["from"] == report.shown_path(prior) and joined["continued"]["earlier"][
        "wall_seconds"
    ] == [100.0]
    # joined again with the same run folder (the report published, then made again): nothing twice
    root = tmp_path / "root"
    root.mkdir()
    once = report.continued_inputs(old, new, prior, root)
    twice = report.continued_inputs(once, new, prior, root)
    assert twice["wall_seconds"] == once["wall_seconds"] == [100.0, 7.0]
    assert twice["runs"] == once["runs"] and twice["runs"]["runs"] == 5
    # another session's run folder (another identity) adds to what was published
    other = tmp_path / "other"
    other.mkdir()
    later = report.continued_inputs(once, new, prior, other)
    assert later["wall_seconds"] == [100.0, 7.0, 7.0] and later["runs"]["runs"] == 6
    assert provenance.merge_summaries({"runs": 0}, new["runs"]) == new["runs"]


def test_a_continued_study_does_not_train_the_published_jobs(tmp_path, monkeypatch):
    path = _study(tmp_path, seeds=[0, 1, 2])
    ran = []
    monkeypatch.setattr(engine, "run_one", lambda job, s, r, i, n: ran.append(job) or [])
    skip = {("core", "every_num", sc, "preln", 1.0, seed) for seed in (0, 1) for sc in ("softmax", "ssa")}
    engine.run(str(path), tmp_path / "runs", n_jobs=1, skip=skip)
    every = study.jobs(study.load(str(path)))
    assert len(every) == 12
    assert sorted((j.task, j.scorer, j.seed) for j in ran) == sorted(
        (j.task, j.scorer, j.seed) for j in every if (j.task != "every_num" or j.seed == 2)
    )


def test_the_command_passes_the_published_jobs_and_folder_through(tmp_path, monkeypatch):
    prior = _published(tmp_path, seeds=[0], value=0.5)
    seen = {}
    monkeypatch.setattr(engine, "run", lambda *a, **k: seen.setdefault("skip", k["skip"]))
    monkeypatch.setattr(study_index, "report_index", lambda root, cfg: None)

    def write(root, out, name, command, setup, prior=None):
        seen["prior"] = prior
        return Path(out) / f"{name}.md"

    monkeypatch.setitem(run_study.REPORTS, "icl", write)
    argv = ["quick", "--root", str(tmp_path / "r"), "--continue-from", str(prior)]
    a = arguments.study().parse_args(argv)
    a.argv = argv
    assert run_study.run(a) == 0
    assert seen["skip"] == {("core", "every_num", sc, "preln", 1.0, 0) for sc in ("softmax", "ssa")}
    assert seen["prior"] == prior


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--continue-from", "{empty}"],
            "Error: --continue-from {empty}: {empty}/report_inputs.json is missing",
        ),
        (
            ["--report-only", "--from-csv", "{prior}", "--continue-from", "{prior}"],
            "--from-csv and --continue-from exclude each other",
        ),
    ],
)
def test_a_folder_that_is_not_a_published_report_is_refused_before_anything_runs(
    tmp_path, monkeypatch, extra, message
):
    empty = tmp_path / "empty"
    empty.mkdir()
    prior = _published(tmp_path, seeds=[0], value=0.5)
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("nothing may run"))
    argv = ["quick", "--root", str(tmp_path / "r"), *(x.format(empty=empty, prior=prior) for x in extra)]
    a = arguments.study().parse_args(argv)
    a.argv = argv
    with pytest.raises(SystemExit) as e:
        run_study.run(a)
    assert message.format(empty=empty) in str(e.value.code)
    assert not (tmp_path / "r").exists()


def test_the_setup_table_states_the_sub_matrices_and_their_seeds(tmp_path):
    assert seed_ranges([12, 8, 9, 10]) == "8–10, 12" and seed_ranges([1, 2]) == "1, 2"
    setup = OmegaConf.to_container(study.load("icl_cpu"))
    table = "\n".join(report.setup_lines(setup))
    assert "| every_num × postln: seeds 8–29; every_num × postln: seeds 30–59 |" in table
    assert "| every_num: seeds 10–29; every_num: seeds 30–59 |" in table  # the replication's, as declared


def test_the_index_finds_its_run_folders_from_another_working_directory(tmp_path, monkeypatch):
    """index.csv's run_dir is relative to where the study ran (outputs/study/<name>/runs/...); a report
    made from another directory reads the folders under its root, not nothing."""
    root = tmp_path / "elsewhere" / "outputs" / "study" / "s"
    (root / "runs" / "core" / "job-a").mkdir(parents=True)
    rows = [
        {"group": "core", "job": "job-a", "run_dir": "outputs/study/s/runs/core/job-a", "evaluation": "g"},
        {"group": "core", "job": "job-b", "run_dir": "outputs/study/s/runs/core/job-b", "evaluation": "g"},
    ]
    pd.DataFrame(rows).to_csv(root / "index.csv", index=False)
    monkeypatch.chdir(tmp_path)
    index = report.read_index(root)
    assert list(index.run_dir) == [str(root / "runs" / "core" / "job-a"), "outputs/study/s/runs/core/job-b"]


def test_a_published_record_names_no_machine_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert report.shown_path(Path("docs/results/x")) == "docs/results/x"
    assert report.shown_path(tmp_path / "docs" / "results" / "x") == "docs/results/x"
    assert report.shown_path(Path("/elsewhere/checkout/docs/results/x")) == "docs/results/x"
    assert report.shown_path(Path("/elsewhere/folder")) == "folder"


EARLY = Path(__file__).resolve().parents[1] / "docs" / "results" / "early_cpu"


def test_the_early_study_continues_from_its_published_report(tmp_path, monkeypatch):
    """early_cpu (the early report: its own per-seed columns) continued from docs/results/early_cpu: the
    published jobs (the masked-LM ones, 2 curves, the decoder leg's pairs) are not trained again, and a report
    joined with no new run holds exactly the published per-seed rows, the published jobs counted as
    trained."""
    from ssa_repro.reports import early_cells
    from ssa_repro.reports.kinds import early

    published = early_cells.read_back(report.load_inputs(EARLY)[0])
    keys = report.prior_jobs(EARLY, early_cells.read_back)
    groups = pd.Series([k[0] for k in keys]).value_counts().to_dict()
    assert groups["mlm"] >= 21 and groups["curves"] == groups["curves_wide"] == 1  # seeds 0-6 and on
    assert groups["lm"] >= 6 and groups["lm"] % 2 == 0  # softmax and SSA per seed
    assert keys == set(report.job_keys(published))
    seen = {}
    monkeypatch.setattr(engine, "run", lambda *a, **k: seen.setdefault("skip", k["skip"]))
    monkeypatch.setattr(study_index, "report_index", lambda root, cfg: None)
    monkeypatch.setitem(run_study.REPORTS, "early", lambda *a, prior=None: seen.setdefault("prior", prior))
    argv = ["early_cpu", "--root", str(tmp_path / "r"), "--continue-from", str(EARLY), "--out", str(tmp_path)]
    a = arguments.study().parse_args(argv)
    a.argv = argv
    assert run_study.run(a) == 0
    assert seen["skip"] == keys and seen["prior"] == EARLY
    setup = OmegaConf.to_container(study.load("early_cpu"))
    md = early.write(tmp_path / "none", tmp_path / "out", "early_cpu", "cmd", setup, prior=EARLY)
    joined = early_cells.read_back(report.load_inputs(tmp_path / "out" / "early_cpu")[0])
    cols = list(early_cells.COLUMNS)
    pd.testing.assert_frame_equal(
        joined[cols].sort_values(cols[:-2]).reset_index(drop=True),
        published[cols].sort_values(cols[:-2]).reset_index(drop=True),
    )
    text = md.read_text()
    if groups["mlm"] < 111:  # 3 scorers x 37 seeds; a missing job is named, a complete group is not
        assert f"group `mlm`: {groups['mlm']} of 111 jobs trained and indexed" in text
    else:
        assert "group `mlm`:" not in text
    # the confirmatory seeds (7-36) with all three arms published decide whether the test is interim
    mlm = published[published.group == "mlm"]
    arms = mlm[mlm.seed.between(7, 36)].groupby("seed").scorer.nunique()
    paired = int((arms == 3).sum())
    if not len(arms):
        assert "No confirmatory seeds run yet" in text
    elif paired < 30:
        assert "Interim: " in text and f"interim, {paired} of 30 declared seeds: not decided" in text
    else:
        assert "Interim: " not in text
