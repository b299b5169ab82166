"""The study pipeline (scripts/study.py): every job of every shipped study is a valid run, and the quick
study runs end to end, its per-seed CSVs read back against the stored cells and its claims table and
findings recomputed from the published CSVs."""

from __future__ import annotations

import glob
import gzip
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ssa_repro import stats
from ssa_repro.config import CONF_DIR
from ssa_repro.core.plotting import saving
from ssa_repro.jobs.prepared import problems
from ssa_repro.reports import icl_claims as icl
from ssa_repro.reports import icl_figures, icl_frame, icl_tables, paired, provenance, seed_power
from ssa_repro.reports.kinds import icl as report
from ssa_repro.studies import engine, progress, study
from ssa_repro.studies import index as study_index
from tests.conftest import HAVE_SHARED_DATA

STUDIES = sorted(p.stem for p in (CONF_DIR / "study").glob("*.yaml"))
# the ICL report's claims as the studies declare them (conf/study/claims/icl.yaml, via icl_cpu.yaml)
ICL_CLAIMS = OmegaConf.to_container(study.load("icl_cpu").claims)


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDIES)
def test_every_job_of_a_study_composes_and_validates(name):
    todo = study.jobs(study.load(name))
    assert len({j.name for j in todo}) == len(todo)  # one folder per job
    seen = set()
    for job in todo:
        key = tuple(o for o in job.overrides if not o.startswith("seed="))
        if key in seen:  # seeds differ only in the seed
            continue
        seen.add(key)
        cfg = study.compose(job)  # what the study trains (Hydra's compose: the test below)
        found = problems(cfg)
        if not HAVE_SHARED_DATA:  # the corpus studies' data files are the machine's, not the config's
            found = [p for p in found if "data file not found" not in p]
        assert found == [], job.name
        assert cfg.scorer.label == job.scorer and cfg.seed == job.seed


@pytest.mark.parametrize("name", STUDIES)
def test_a_studys_job_configs_are_hydras_compositions(name):
    """study.compose (config.compose_cached: group choices composed once, values applied to a copy) gives
    Hydra's compose value for value, resolved, on two jobs of each study that differ the most: the first
    and the last (other groups, tasks, architectures and seeds)."""
    todo = study.jobs(study.load(name))
    for job in (todo[0], todo[-1]):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            want = compose("train", overrides=list(job.overrides))
        got = study.compose(job)
        assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(want), job.name
        assert OmegaConf.to_container(got, resolve=True) == OmegaConf.to_container(want, resolve=True)


def test_a_jobs_config_composed_once_per_setting_equals_hydras_with_its_seed():
    """study.compose composes a setting without its seed= and sets the seed on the copy: the config
    must be Hydra's own composition with the seed override, value for value (resolved), for two seeds."""
    todo = [j for j in study.jobs(study.load("quick")) if j.group == "core" and j.task == "linear"]
    assert len({j.seed for j in todo}) == 2
    for job in todo:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            want = compose("train", overrides=list(job.overrides))
        got = study.compose(job)  # (composes outside: compose_cached initialises Hydra itself)
        assert got.seed == job.seed
        assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(want)
        assert OmegaConf.to_container(got, resolve=True) == OmegaConf.to_container(want, resolve=True)
    # a second seed= among the extra overrides: composed as given (Hydra's last seed= wins)
    for ov in ("seed=99", "++seed=99"):
        assert study.compose(study.jobs(study.load("quick"), (ov,))[0]).seed == 99


def test_an_unknown_study_names_the_known_ones():
    with pytest.raises(SystemExit, match="no study 'nope'.*known: .*icl_cpu"):
        study.load("nope")


def test_the_quick_study_inherits_and_replaces_lists():
    quick, full = study.load("quick"), study.load("icl_cpu")
    assert quick.name == "quick" and list(quick.seeds) == [0, 1]
    assert quick.tasks == full.tasks and quick.archs == full.archs  # inherited
    assert "train.steps=20" in quick.base and "train.steps=3000" not in quick.base  # replaced, not appended


def test_the_length_study_has_the_seeds_its_paired_tests_need():
    # every group compares each other scorer with softmax seed by seed: the exact sign-flip test must be
    # able to call a claim's contrasts after Holm over them (smallest p 2^(1−n), enumerated here), and
    # stats.power_paired must not be 0; the quick variant inherits the matrix's axes and shrinks it
    # (a group named *_probe keeps a few seeds of a task the models did not learn, to show it: exempt)
    full, quick = study.load("length_cpu"), study.load("length_quick")
    assert "length" in full.groups
    for name, g in full.groups.items():
        if name.endswith("_probe"):
            continue
        n = len(set(g.get("seeds", full.seeds)))
        contrasts = len([s for s in g.scorers if s != "softmax"])
        assert "softmax" in g.scorers and contrasts >= 1, name
        assert _sign_flip_enumerated(np.ones(n)) * contrasts < 0.05, (name, n, contrasts)
        assert stats.power_paired(3.0, n) > 0, name
    assert quick.tasks == full.tasks and quick.archs == full.archs
    assert 0 < len(study.jobs(quick)) < len(study.jobs(full))


def _stored_cells(run_dir: Path, evaluation: str) -> pd.DataFrame:
    """Every stored results part of one run, read straight from the files (not through the Store)."""
    parts = glob.glob(str(run_dir / "eval" / evaluation / "*" / "parts" / "results-*.csv"))
    assert parts, run_dir
    frame = pd.concat([pd.read_csv(p) for p in parts], ignore_index=True)
    return frame[frame.step == frame.step.max()]


def _sign_flip_enumerated(d) -> float:
    """The two-sided sign-flip p by brute force over all 2^n sign patterns (independent of stats.py)."""
    d = np.asarray(d, dtype=float)
    obs = abs(d.sum())
    sums = [abs(np.dot(s, d)) for s in itertools.product([-1.0, 1.0], repeat=len(d))]
    return float(np.mean([t >= obs - 1e-9 * np.abs(d).sum() for t in sums]))


@pytest.mark.slow
def test_quick_study_end_to_end_and_claims_read_back_from_the_csvs(tmp_path, monkeypatch):
    root = engine.run("quick", tmp_path / "quick", n_jobs=1)
    index = pd.read_csv(root / "index.csv")
    assert len(index.job.unique()) == len(study.jobs(study.load("quick")))
    check_report(root, tmp_path / "report")

    # resuming does no work: every job is finished and every cell stored, so no run is even loaded
    before = sorted(p.stat().st_mtime_ns for p in root.rglob("parts/*.csv"))
    index_before = (root / "index.csv").read_bytes()
    loaded = []
    real_load = engine.load_run
    monkeypatch.setattr(
        engine, "load_run", lambda d, *a, **k: loaded.append(Path(d).name) or real_load(d, *a, **k)
    )
    with saving(False):  # the resumes' reports draw no figures (the first run's and check_report's do)
        engine.run("quick", root, n_jobs=1)
    assert loaded == [] and (root / "index.csv").read_bytes() == index_before
    # a derived file removed: that job alone is evaluated again (its cells reused) and the file is back
    job = index[index.evaluation == "deviant"].iloc[0]
    derived = next((Path(job.run_dir) / "eval" / "deviant").glob("*/summary.json"))
    derived.unlink()
    with saving(False):
        engine.run("quick", root, n_jobs=1)
    assert loaded == [Path(job.run_dir).name] and derived.is_file()
    assert sorted(p.stat().st_mtime_ns for p in root.rglob("parts/*.csv")) == before


def check_report(root: Path, out: Path) -> None:
    """The quick study's report from ``root`` into ``out``: its sections, figures and per-seed CSVs, a
    per-seed value against the raw stored parts, and the claims and findings recomputed from the CSVs."""
    index = pd.read_csv(root / "index.csv")
    setup = OmegaConf.to_container(study.load("quick"))
    path = report.write(root, out, "quick", "pytest", setup)
    text = path.read_text()
    for section in ("## Findings", "## The paper's claims", "**Decision rule**", "## Setup", "## Missing"):
        assert section in text
    assert "commit" in text and "train.steps=20" in text and "trained at commit" in text
    figures = list((out / "quick").glob("*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)
    csvs = {
        p.name.removeprefix("per_seed_").split(".")[0]: p for p in (out / "quick").glob("per_seed_*.csv*")
    }
    assert {"grid", "deviant", "boundary"} <= set(csvs)

    # a per-seed value against the raw stored parts: every_num softmax, in-distribution sequence error
    grid = pd.read_csv(csvs["grid"])
    rows = index[(index.group == "core") & (index.task == "every_num") & (index.scorer == "softmax")]
    for row in rows[rows.evaluation == "grid_quantifier"].itertuples():
        seed = row.seed
        c = _stored_cells(Path(row.run_dir), "grid")
        raw = c[(c.metric == "sequence_error") & (c.predictor == "model") & (c.region == "in_distribution")]
        shown = grid[
            (grid.group == "core")
            & (grid.task == "every_num")
            & (grid.scorer == "softmax")
            & (grid.seed == seed)
            & (grid.predictor == "model")
            & (grid.metric == "sequence_error")
            & (grid.summary == "region=in_distribution")
        ]
        assert len(shown) == 1 and np.isclose(shown.value.item(), raw.value.mean(), rtol=1e-5, atol=1e-9)

    # the claims table and the findings, recomputed from the published CSVs alone
    claims = pd.read_csv(out / "quick_claims.csv")
    assert len(claims) and set(claims.verdict) <= {*stats.VERDICTS}
    decided = report.decide(csvs, setup)  # the study file's claims, 2 × 2 and primary endpoints
    table, found = decided.table, decided.found
    assert len(table) == len(claims)
    for col in ("estimate", "low", "high", "p_value", "p_holm"):
        assert np.allclose(
            table[col].to_numpy(float), claims[col].to_numpy(float), rtol=1e-5, equal_nan=True
        ), col
    assert list(table.verdict) == list(claims.verdict)
    for _, f in found.iterrows():  # every finding is a called row of the table, printed in the report
        assert f["verdict"] in (stats.YES, stats.CONTRADICTED) and f["contrast"] in text

    # one claim cell independently: SSA − softmax linear log-MSE at the largest σ_F, x ~ N(0, 1)
    lin = grid[(grid.task == "linear") & (grid.group == "core") & (grid.predictor == "model")]
    sf = max(float(s.split("=")[1].split()[0]) for s in lin.summary)
    cell = lin[lin.summary == f"sigma_f={sf:g} sigma_x=1"].pivot(
        index="seed", columns="scorer", values="value"
    )
    d = np.log(cell.ssa.to_numpy()) - np.log(cell.softmax.to_numpy())
    row = claims[(claims.claim == "ssa_linear") & (claims.contrast == f"σ_F = {sf:g}")]
    assert len(row) == 1 and row.n_seeds.item() == len(d) == 2
    assert np.isclose(row.estimate.item(), d.mean(), rtol=1e-5)
    assert np.isclose(row.p_value.item(), _sign_flip_enumerated(d))
    family = claims[claims.claim == "ssa_linear"]
    assert np.allclose(
        family.p_holm,
        np.minimum(
            1, np.maximum.accumulate((len(family) - np.arange(len(family))) * np.sort(family.p_value))
        )[np.argsort(np.argsort(family.p_value, kind="stable"))],
    )


def test_a_report_without_results_says_what_is_missing(tmp_path):
    setup = OmegaConf.to_container(study.load("quick"))
    path = report.write(tmp_path / "nothing", tmp_path / "out", "quick", "pytest", setup)
    text = path.read_text()
    assert "does not exist" in text and "group `core`: 0 of 8 jobs" in text
    assert "No contrast is called" in text
    # a section that reads one group's runs appears where the study has that group (quick: no alternatives)
    assert "## Architecture" in text and "## Wide inputs" in text and "## Alternatives" not in text


def test_a_ladder_report_has_its_group_section_and_not_icl_cpus(tmp_path):
    """icl_scale inherits icl_cpu's arch table and evaluations but not its groups: its report shows the
    ladder's SSA − softmax section and none of the architecture, alternatives or wide-input sections."""
    setup = OmegaConf.to_container(study.load("icl_scale"))
    text = report.write(tmp_path / "nothing", tmp_path / "out", "icl_scale", "pytest", setup).read_text()
    assert "## Group `ladder`: SSA − softmax per architecture" in text
    for absent in ("## Architecture", "## Alternatives", "## Wide inputs"):
        assert absent not in text


def test_claim_verdicts_and_the_findings_rule():
    v = paired.claim_verdict
    assert v([stats.YES, stats.YES]) == stats.YES
    assert v([stats.YES, stats.UNDERPOWERED]) == paired.PARTLY
    assert v([stats.CONTRADICTED, stats.WITHIN]) == stats.CONTRADICTED
    assert v([stats.WITHIN, stats.WITHIN]) == stats.WITHIN
    assert v([stats.WITHIN, stats.UNDERPOWERED]) == stats.UNDERPOWERED
    table = pd.DataFrame(
        {
            "claim": ["a", "a", "b", "c", "architecture"],
            "contrast": ["a1", "a2", "b1", "c1", "x"],
            "estimate": [0.3, -0.5, 0.02, 0.9, 0.1],
            "margin": [0.05, 0.05, 0.02, 0.05, 0.05],
            "verdict": [stats.YES, stats.CONTRADICTED, stats.YES, stats.UNDERPOWERED, stats.YES],
        }
    )
    found = paired.findings(table, n=3, first=["architecture"])
    # called only (c1 is not), one per claim (a's largest in margins: a2), architecture first
    assert list(found.contrast) == ["x", "a2", "b1"]


def test_runs_from_a_dirty_tree_are_flagged(tmp_path):
    for name, dirty in (("r1", False), ("r2", True)):
        (tmp_path / name).mkdir()
        changed = [".site/", "ssa_repro/a.py"] if dirty else []
        (tmp_path / name / "provenance.json").write_text(
            json.dumps(
                [{"time": "t", "git_commit": "abcdef0123", "git_dirty": dirty, "git_changes": changed}]
            )
        )
    starts = provenance.run_commits([tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"])
    assert list(starts.git_commit[:2]) == ["abcdef0", "abcdef0"]
    text = provenance.commits_summary(starts)
    assert "`abcdef0` (2 starts)" in text and "1 run(s) started from a dirty tree" in text
    assert "(changed or untracked: `.site/`, `ssa_repro/a.py`)" in text  # what made it dirty
    assert "1 run(s) have no provenance record" in text
    assert provenance.trained_on(starts) == "a CPU"  # nothing recorded


def test_a_report_says_where_its_runs_trained(tmp_path):
    """Each start's device from provenance.json: counted in the commits sentence and named in the title
    (a study trained on a lent GPU must not call itself a CPU study)."""
    gpu = {"device": "cuda", "cuda": {"name": "NVIDIA H200", "version": "13.0"}}
    for name, extra in (("r1", gpu), ("r2", gpu), ("r3", {"device": "cpu"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "provenance.json").write_text(
            json.dumps([{"time": "t", "git_commit": "abcdef0123", "git_dirty": False, **extra}])
        )
    both = provenance.run_commits([tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"])
    assert list(both.device) == ["cuda (NVIDIA H200)", "cuda (NVIDIA H200)", "cpu"]
    assert "Starts by device: cpu 1, cuda (NVIDIA H200) 2" in provenance.commits_summary(both)
    assert provenance.trained_on(both) == "CPUs and GPUs"
    gpu_only = provenance.run_commits([tmp_path / "r1", tmp_path / "r2"])
    assert provenance.trained_on(gpu_only) == "one NVIDIA H200"
    assert provenance.trained_on(provenance.run_commits([tmp_path / "r3"])) == "a CPU"
    ladder = OmegaConf.to_container(study.load("icl_scale"))
    assert "trained on one NVIDIA H200 (A_2L32_3k" in report.title("icl_scale", ladder, "one NVIDIA H200")


def _grid_row(group, task, scorer, arch, seed, summary, value) -> dict:
    """One per-seed row of a made-up grid (the model's sequence error, training σ 1)."""
    return dict(
        group=group,
        task=task,
        scorer=scorer,
        arch=arch,
        train_sigma=1.0,
        seed=seed,
        evaluation="grid_quantifier",
        predictor="model",
        metric="sequence_error",
        summary=summary,
        value=value,
    )


def _synthetic_per_seed(tmp_path) -> dict[str, Path]:
    """Per-seed grid values of a made-up study: every_num, 10 core seeds, SSA 0.3 below softmax at σ = 16
    (training lengths) in every seed; post-LN (6 seeds) near 0 where pre-LN fails; some_num no effect."""
    rng = np.random.default_rng(0)
    rows = []

    def add(group, task, scorer, arch, seed, summary, value):
        rows.append(_grid_row(group, task, scorer, arch, seed, summary, value))

    for seed in range(10):
        for task in ("every_num", "some_num"):
            base = 0.6 + 0.1 * rng.standard_normal()
            for scorer in ("softmax", "ssa"):
                if scorer == "softmax":
                    gap = 0.0
                else:
                    gap = -0.3 if task == "every_num" else 0.001 * rng.standard_normal()
                add("core", task, scorer, "preln", seed, "region=in_distribution", 0.01)
                add("core", task, scorer, "preln", seed, "train_lengths sigma=1", 0.01)
                add("core", task, scorer, "preln", seed, "train_lengths sigma=16", base + gap)
                add("core", task, scorer, "preln", seed, "sigma=1 length=80", 0.3 + 0.01 * seed)
        if seed < 6:
            for scorer in ("softmax", "ssa"):
                add(
                    "architecture",
                    "every_num",
                    scorer,
                    "postln",
                    seed,
                    "train_lengths sigma=16",
                    0.001 * seed,
                )
        if seed < 5:  # a group the report does not know (a scale ladder's rung)
            for scorer in ("softmax", "ssa"):
                value = 0.5 - 0.1 * (scorer == "ssa")
                add("ladder", "every_num", scorer, "C", seed, "train_lengths sigma=16", value)
    path = tmp_path / "per_seed_grid.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return {"grid": path}


def test_export_compresses_a_large_part_reproducibly_and_leaves_one_file_per_part(tmp_path, monkeypatch):
    frame = pd.read_csv(_synthetic_per_seed(tmp_path)["grid"])
    out = tmp_path / "report"
    assert paired.export({"grid": frame}, out)["grid"].name == "per_seed_grid.csv"
    plain_text = (out / "per_seed_grid.csv").read_text()
    monkeypatch.setattr(paired, "GZIP_ABOVE", 100)  # every part is "large" now
    big = paired.export({"grid": frame}, out)
    first = big["grid"].read_bytes()
    assert big["grid"].name == "per_seed_grid.csv.gz" and first[:2] == b"\x1f\x8b"  # gzip magic
    assert sorted(p.name for p in out.iterdir()) == ["per_seed_grid.csv.gz"]  # the plain one removed
    assert gzip.decompress(first).decode() == plain_text  # the same table, compressed
    # the same rows give the same bytes (no timestamp in the gzip header); read back like the plain one
    assert paired.export({"grid": frame}, out)["grid"].read_bytes() == first
    back = paired.read_back(big)
    assert len(back) == plain_text.count("\n") - 1 and set(back.scorer) == {"softmax", "ssa"}
    monkeypatch.setattr(paired, "GZIP_ABOVE", 10**9)  # small again: back to plain text, the .gz removed
    assert paired.export({"grid": frame}, out)["grid"].name == "per_seed_grid.csv"
    assert sorted(p.name for p in out.iterdir()) == ["per_seed_grid.csv"]


def test_claims_are_per_task_and_findings_follow_the_rule_on_a_synthetic_study(tmp_path):
    frame, claims, table, found = report.compute(_synthetic_per_seed(tmp_path), ICL_CLAIMS)
    ssa = table[table.claim == "ssa_quant"]
    # one contrast per task and axis, never pooled; Holm within the claim (4 contrasts)
    assert sorted(ssa.contrast) == sorted(
        ["every_num, σ = 16", "every_num, length 80", "some_num, σ = 16", "some_num, length 80"]
    )
    every = ssa[ssa.contrast == "every_num, σ = 16"].iloc[0]
    assert np.isclose(every.estimate, -0.3) and every.n_seeds == 10
    assert np.isclose(every.p_value, 2 / 2**10) and np.isclose(every.p_holm, 4 * 2 / 2**10)
    assert every.verdict == stats.YES
    assert set(ssa[ssa.contrast.str.startswith("some_num")].verdict) == {stats.WITHIN}
    assert every.claim_verdict == paired.PARTLY
    # the architecture: 6 paired seeds (pre-LN from core), a family of two scorers: the smallest
    # two-sided p, 2/2^6, times 2 is above 0.05, so the rule cannot call it (underpowered)
    arch = table[table.claim == "architecture: postln"]
    assert list(arch.n_seeds) == [6, 6] and (arch.estimate < -0.2).all()
    assert set(arch.verdict) == {stats.UNDERPOWERED}
    # another group: SSA − softmax per architecture (rung), 5 paired seeds
    ladder = table[table.claim == "ssa_ladder"]
    assert list(ladder.contrast) == ["C, every_num, σ = 16 (training lengths)"] and ladder.n_seeds.item() == 5
    assert np.isclose(ladder.estimate.item(), -0.1)
    # the softmax σ-shift rise is called; findings: called rows only, largest in margins first
    assert table[(table.claim == "sigma") & (table.contrast == "every_num")].verdict.item() == stats.YES
    assert len(found) >= 2 and set(found.verdict) <= {stats.YES, stats.CONTRADICTED}
    strength = (found.estimate.abs() / found.margin).to_numpy()
    assert (np.diff(strength) <= 0).all()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_a_study_with_an_invalid_job_config_stops_before_anything_is_written(tmp_path):
    root = tmp_path / "study"
    with pytest.raises(SystemExit) as e:
        engine.run("quick", root, extra=("device=cuda",))
    msg = str(e.value.code)
    assert msg.startswith("Error: study quick: invalid job configs:\n  - ")
    assert "device=cuda but no CUDA device is available; use device=auto or device=cpu" in msg
    assert not root.exists()


def test_a_failing_job_does_not_stop_the_others_and_the_study_says_which(tmp_path, monkeypatch):
    todo = study.jobs(study.load("quick"))
    bad = todo[1]
    ran = []

    def fake(job, s, root, index, n_jobs):
        ran.append(job.name)
        if job == bad:
            raise ValueError("checkpoint damaged")
        return [{"job": job.name, "evaluation": "grid"}]

    monkeypatch.setattr(engine, "run_one", fake)
    root = tmp_path / "study"
    with pytest.raises(SystemExit) as e:
        engine.run("quick", root, n_jobs=1)
    msg = str(e.value.code)
    assert ran == [j.name for j in todo]  # every job ran, the ones after the failure too
    assert f"1 of {len(todo)} jobs failed" in msg
    assert f"{bad.group}/{bad.name}: ValueError: checkpoint damaged" in msg
    assert (root / "failures.txt").read_text() == f"{bad.group}/{bad.name}: ValueError: checkpoint damaged\n"
    index = pd.read_csv(root / "index.csv")
    assert sorted(index.job) == sorted(j.name for j in todo if j != bad)


def test_sigterm_inside_the_jobs_raises_keyboardinterrupt_and_restores_the_handler():
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        with progress.workers_stop_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            import time

            time.sleep(5)  # the handler raises during the sleep; never reached in full
    assert signal.getsignal(signal.SIGTERM) is before


def children(pid: int) -> set[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # a real study process with worker processes, killed
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_killed_study_stops_its_workers_and_says_how_to_resume(tmp_path):
    """``kill <study pid>`` (SIGTERM) used to leave the joblib workers training, holding their runs'
    locks; now they stop with it and the study exits 130 saying how to resume."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = tmp_path / "study"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "scripts/study.py", "quick", "--root", str(root), "--jobs", "2"],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(root.glob("runs/*/*/train.log")):  # a worker is training
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no job started"
            time.sleep(0.5)
        workers = children(proc.pid)
        assert workers
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 130, err
        assert "rerun the same command to resume" in err
        deadline = time.monotonic() + 120  # the workers are terminated, not left training
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(alive(w) for w in workers), [w for w in workers if alive(w)]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_index_grows_while_the_study_runs(tmp_path, monkeypatch):
    """index.csv names the jobs finished so far while the study runs (and when it is stopped), so the
    report can use them; it used to be written only once every job had finished."""
    todo = study.jobs(study.load("quick"))
    root = tmp_path / "study"
    seen = {}

    def fake(job, s, root_, index, n_jobs):
        if index == 2:
            seen["index"] = list(pd.read_csv(root / "index.csv").job)
        return [{"group": job.group, "job": job.name, "evaluation": "grid"}]

    monkeypatch.setattr(engine, "run_one", fake)
    monkeypatch.setattr(engine, "INDEX_EVERY_S", -1.0)  # rewrite after every job
    engine.run("quick", root, n_jobs=1)
    assert seen["index"] == [j.name for j in todo[:2]]
    assert list(pd.read_csv(root / "index.csv").job) == [j.name for j in todo]


def test_the_index_is_rebuilt_from_every_finished_jobs_rows(tmp_path):
    """index.csv is the rows of every finished job (``index.d``, one file per job) in the study's job
    order: a job indexed again replaces its rows, a failed job's are dropped, others' are kept, and a
    job no longer in the study is left out. (It replaced a merge of the old index with this
    invocation's results, which lost the rows of another process's jobs.)"""
    a, b, c = (study.Job("g1", t, "softmax", "preln", 1.0, 0, ()) for t in ("a", "b", "c"))
    for job, v in ((a, 0), (b, 0), (c, 0)):
        study_index.store_rows(tmp_path, job, [{"group": job.group, "job": job.name, "v": v}])
    study_index.store_rows(
        tmp_path, b, [{"group": "g1", "job": b.name, "v": 1}, {"group": "g1", "job": b.name, "v": 2}]
    )
    study_index.store_rows(tmp_path, a, [])  # a failed now
    index = study_index.write_index(tmp_path, [a, b])  # c is no longer in the study
    assert list(zip(index.job, index.v)) == [(b.name, 1), (b.name, 2)]
    assert pd.read_csv(tmp_path / "index.csv").equals(index)
    assert study_index.checked_index(Path("/nonexistent/index.csv")) is None


def test_a_finished_jobs_record_vouches_only_for_the_rows_written_with_it(tmp_path):
    """store_rows keeps the done key beside a job's rows (never in them); finished_rows hands the rows
    back only for that key; rows stored again without a key, or a failed job, leave no record."""
    job = study.Job("g1", "a", "softmax", "preln", 1.0, 0, ())
    rows = [{"group": "g1", "job": job.name, "evaluation": "grid", "v": 0.5, study_index.DONE_KEY: "k1"}]
    study_index.store_rows(tmp_path, job, rows)
    path = study_index.job_rows_path(tmp_path, "g1", job.name)
    assert study_index.DONE_KEY not in pd.read_csv(path).columns
    assert path.with_suffix(".key").read_text() == "k1\n"
    got = study_index.finished_rows(tmp_path, job, "k1")
    assert [{k: v for k, v in r.items() if k != study_index.DONE_KEY} for r in got] == [
        {k: v for k, v in rows[0].items() if k != study_index.DONE_KEY}
    ]
    assert (
        study_index.finished_rows(tmp_path, job, "k2") is None
        and study_index.finished_rows(tmp_path, job, None) is None
    )
    study_index.store_rows(tmp_path, job, [{k: v for k, v in rows[0].items() if k != study_index.DONE_KEY}])
    assert not path.with_suffix(".key").exists() and study_index.finished_rows(tmp_path, job, "k1") is None
    # ids and names come back as the text they were written as (a protocol id is 8 hex digits)
    odd = [{**rows[0], "protocol_id": pid} for pid in ("12e45678", "00123456")]
    for row in odd:
        study_index.store_rows(tmp_path, job, [row])
        assert study_index.finished_rows(tmp_path, job, "k1")[0]["protocol_id"] == row["protocol_id"]
    assert study_index.write_index(tmp_path, [job]).protocol_id.tolist() == ["00123456"]
    assert report.read_index(tmp_path).protocol_id.tolist() == ["00123456"]
    study_index.store_rows(tmp_path, job, [])  # failed now
    assert not path.exists() and not path.with_suffix(".key").exists()


def test_the_wall_time_has_one_line_per_invocation_also_when_rewritten_while_running(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "run_one", lambda job, s, r, i, n: [{"group": job.group, "job": job.name}])
    monkeypatch.setattr(engine, "INDEX_EVERY_S", -1.0)  # rewritten after every job
    root = tmp_path / "study"
    took = []
    for _ in range(2):  # the second call resumes: a second line
        t0 = time.monotonic()
        engine.run("quick", root, n_jobs=1)
        took.append(time.monotonic() - t0)
    lines = [float(x) for x in (root / "wall_seconds.txt").read_text().splitlines()]
    # each line is its own invocation's time: inside what the caller measured around it
    assert len(lines) == 2 and all(0 <= w <= t for w, t in zip(lines, took, strict=True)), (lines, took)


def test_tasks_and_groups_select_jobs_and_unknown_names_are_refused():
    s = study.load("icl_cpu")
    todo = study.jobs(s)
    some = study.select_groups(todo, ("architecture",), s, ("every_num",))
    assert some and {(j.group, j.task) for j in some} == {("architecture", "every_num")}
    assert len(study.select_groups(todo, None, s, ("every_num",))) == sum(j.task == "every_num" for j in todo)
    with pytest.raises(SystemExit, match="no task\\(s\\) \\['evry'\\]; known: linear"):
        study.select_groups(todo, None, s, ("evry",))


def test_seeds_select_jobs_and_a_seed_no_selected_job_has_is_refused():
    s = study.load("early_cpu")
    todo = study.jobs(s)
    some = study.select_groups(todo, ("mlm",), s, None, (24, 25, 36))
    # each seed once per scorer arm, nothing from another group
    assert sorted((j.seed, j.scorer) for j in some) == sorted(
        (seed, arm) for seed in (24, 25, 36) for arm in ("softmax", "ssa_n1.5", "ssa_n2")
    )
    with pytest.raises(
        SystemExit,
        match=r"--seeds \[12\]: no job of study early_cpu in group\(s\) \['lm'\] has them; its seeds: 0-9$",
    ):
        study.select_groups(todo, ("lm",), s, None, (3, 12))


@pytest.mark.parametrize(
    ("given", "want"), [(["7"], [[7]]), (["24-26", "3"], [[24, 25, 26], [3]]), (["5-5"], [[5]])]
)
def test_seeds_argument_reads_integers_and_inclusive_ranges(given, want):
    from ssa_repro.cli import arguments

    assert arguments.study().parse_args(["early_cpu", "--seeds", *given]).seeds == want


@pytest.mark.parametrize("bad", ["x", "9-3", "-2", "1.5"])
def test_a_bad_seed_argument_is_refused_naming_what_is_allowed(bad, capsys):
    from ssa_repro.cli import arguments

    with pytest.raises(SystemExit):
        arguments.study().parse_args(["early_cpu", "--seeds", bad])
    err = capsys.readouterr().err
    assert "argument --seeds" in err and "an inclusive range low-high (24-36)" in err, err


def test_a_ladder_title_names_every_rung_and_the_core_title_its_size():
    ladder = OmegaConf.to_container(study.load("icl_scale"))
    head = report.title("icl_scale", ladder)
    assert all(a in head for a in ("A_2L32_3k", "B_2L32_12k", "C_4L64_12k")), head
    assert not any(a in head for a in ("postln", "attn_only", "preln_nofinal")), head  # icl_cpu's, inherited
    core = report.title("icl_cpu", OmegaConf.to_container(study.load("icl_cpu")))
    assert "2-layer, width-32" in core and "3000 steps on" in core  # every group trains the base's size


def test_a_title_names_the_groups_trained_at_another_size():
    """length_cpu's group mqar trains width 64 for 8,000 steps (its task key's overrides): the title
    says so beside the base's size (it used to give the base's alone)."""
    head = report.title("length_cpu", OmegaConf.to_container(study.load("length_cpu")))
    assert (
        "2-layer, width-32 transformers trained for 3000 steps (group mqar: 2-layer, width-64, 8000 steps)"
        in head
    )
    made = {
        "base": ["model.n_layer=2", "model.n_embd=32", "train.steps=100"],
        "tasks": {"t": [], "long": ["train.steps=50", "train.steps=200"]},  # the last override wins
        "archs": {"a": [], "wide": ["model.n_embd=64"]},
        "groups": {
            "g": {"tasks": ["t"], "archs": ["a", "wide"]},
            "h": {"tasks": ["long"], "archs": ["a"]},
            "i": {"tasks": ["t", "long"], "archs": ["wide"]},
        },
    }
    head = report.title("made", made)
    assert (
        "trained for 100 steps (groups g, i: 2-layer, width-64, 100 steps; group h: 2-layer, width-32, 200 steps; group i: 2-layer, width-64, 200 steps) on"
        in head
    ), head


def _ladder_per_seed(tmp_path, seeds: int = 5) -> dict[str, Path]:
    """Per-seed grid values of a made-up ladder (no core group): rungs A and C, every_num; at A SSA is 0.2
    above softmax at length 80 and equal under σ shift; at C both are near 0 everywhere."""
    rows = []
    for seed in range(seeds):
        for arch in ("A", "C"):
            for scorer in ("softmax", "ssa"):
                for summary, value in (
                    ("region=in_distribution", 0.01),
                    ("train_lengths sigma=1", 0.01),
                    ("train_lengths sigma=16", 0.4 if arch == "A" else 0.001),
                    (
                        "sigma=1 length=80",
                        (0.1 + 0.2 * (scorer == "ssa") + 0.01 * seed) if arch == "A" else 0.002,
                    ),
                ):
                    rows.append(_grid_row("ladder", "every_num", scorer, arch, seed, summary, value))
    path = tmp_path / "per_seed_grid.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return {"grid": path}


def test_a_study_without_core_reads_the_papers_claims_on_every_rung(tmp_path):
    """icl_scale has no core group: the one-arm claims and sections are read on each rung (keys and rows
    tagged with it), never left as "no data"; and with 5 seeds the findings say why nothing is called."""
    frame, claims, table, found = report.compute(_ladder_per_seed(tmp_path), ICL_CLAIMS)
    assert icl.bases(frame) == [("ladder", "A"), ("ladder", "C")]
    ssa = table[table.claim.str.startswith("ssa_quant")]
    assert sorted(set(ssa.claim)) == ["ssa_quant @ A", "ssa_quant @ C"]
    at_a = ssa[(ssa.claim == "ssa_quant @ A") & (ssa.contrast == "every_num, length 80")].iloc[0]
    assert np.isclose(at_a.estimate, 0.2) and at_a.n_seeds == 5
    assert at_a.p_value == pytest.approx(2 / 2**5)  # every seed the same sign: the smallest p at 5 seeds
    assert {c.claim.split(":")[0] for c in claims if "@" in c.key} == {"A", "C"}
    # the per-arm tables stack the rungs, an arch column first
    shift = icl_frame.over_bases(icl_tables.shift_table, frame)
    assert list(shift.columns[:3]) == ["arch", "task", "predictor"] and set(shift.arch) == {"A", "C"}
    # icl_cpu's own frame keeps one arm and no arch column
    (tmp_path / "core").mkdir()
    core = report.compute(_synthetic_per_seed(tmp_path / "core"), ICL_CLAIMS)[0]
    assert (
        icl.bases(core) == [icl.BASE]
        and "arch" not in icl_frame.over_bases(icl_tables.shift_table, core).columns
    )
    # nothing can be called with 5 seeds (smallest p 1/16), and the findings say so
    assert found.empty
    text = "\n".join(report.findings_markdown(found, claims, table))
    assert "at most 5 paired seeds" in text and "2^(1−5) = 0.0625" in text
    # the ladder's figures: one per cell, rungs on the x axis
    figs = icl_figures.ladder_figures(frame, tmp_path / "figs")
    (tmp_path / "figs" / "ladder_0_every_num.png").write_bytes(b"an old name")  # from an earlier report
    (tmp_path / "figs" / "per_seed_grid.csv").write_text("kept")
    report.remove_stale_figures(tmp_path / "figs", figs)
    left = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert left == ["ladder_arms_0_every_num.png", "ladder_arms_1_every_num.png", "per_seed_grid.csv"]
    assert [f.name for f in figs] == ["ladder_arms_0_every_num.png", "ladder_arms_1_every_num.png"]
    # each contrast is tested once (claims.once): the ladder's cells here are the per-rung claims' own,
    # so `ssa_ladder` adds none and every SSA − softmax cell has one Holm p, in its rung's family
    assert table[table.claim == "ssa_ladder"].empty
    assert not table.duplicated(["contrast", "mean_a", "mean_b", "estimate"]).any()
    assert set(ssa.contrast) == {"every_num, σ = 16", "every_num, length 80"}
    assert set(ssa.family) == {"ssa_quant @ A", "ssa_quant @ C"}


def test_a_contrast_between_two_models_that_did_not_learn_is_shown_not_judged():
    """Length tasks: where neither model beats the label-rule baseline at its training length, SSA −
    softmax compares two guesses. The contrast keeps its estimate but gets paired.NOT_LEARNED, joins no
    Holm family (the judged contrast's p is not doubled), no claim verdict and no finding."""
    rows = []
    for seed in range(6):
        for scorer, learned_err, guess_err in (("softmax", 0.10, 0.86), ("ssa", 0.02, 0.96)):
            for task, err in (("counting", learned_err), ("mqar", guess_err)):
                for ratio, length in ((1, 8), (16, 128)):
                    value = err if ratio == 1 else min(err + 0.05, 1.0)
                    row = _grid_row("length", task, scorer, "alibi", seed, "", value)
                    summary = f"sigma_x=1 length={length} ratio={ratio}"
                    rows.append({**row, "metric": "token_error", "summary": summary})
            for task in ("counting", "mqar"):  # the baselines: a uniform guess, the same for every model
                for ratio, length in ((1, 8), (16, 128)):
                    row = _grid_row("length", task, scorer, "alibi", seed, "", 0.88)
                    rows.append(
                        {
                            **row,
                            "predictor": "random_token",
                            "metric": "token_error",
                            "summary": f"sigma_x=1 length={length} ratio={ratio}",
                        }
                    )
    frame = pd.DataFrame(rows)
    learned = icl.length_learned(frame).set_index(["task", "scorer"])
    assert learned.loc[("counting", "ssa"), "learned"] and learned.loc[("counting", "softmax"), "learned"]
    # mqar: softmax 0.86 is not 0.02 below the guess's 0.88, SSA is above it
    assert not learned.loc[("mqar", "softmax"), "learned"] and not learned.loc[("mqar", "ssa"), "learned"]
    assert learned.loc[("mqar", "softmax"), "baseline"] == pytest.approx(0.88)
    [claim] = [c for c in icl.claims(frame, ICL_CLAIMS) if c.key == "ssa_length"]
    judged = {s.label: s.judged for s in claim.specs}
    assert judged == {"alibi, counting, length 128 (×16)": True, "alibi, mqar, length 128 (×16)": False}
    table = paired.claims_table(frame, [claim], n_boot=500)
    by = table.set_index("contrast")
    mq, ct = by.loc["alibi, mqar, length 128 (×16)"], by.loc["alibi, counting, length 128 (×16)"]
    assert mq.verdict == paired.NOT_LEARNED and np.isnan(mq.p_holm) and mq.family_k == 0  # in no family
    assert mq.estimate == pytest.approx(1.0 - 0.91)  # shown: 0.96 + 0.05 capped at 1, against 0.86 + 0.05
    assert ct.p_holm == pytest.approx(ct.p_value) == pytest.approx(2 / 2**6)  # a family of one, not two
    assert ct.verdict == stats.YES  # SSA 0.08 lower in every seed
    assert list(table.contrast) == [s.label for s in claim.specs]  # in the claim's order
    assert paired.claim_verdict(list(table.verdict)) == stats.YES
    assert paired.claim_verdict([paired.NOT_LEARNED]) == paired.NOT_LEARNED
    found = paired.findings(table)
    assert list(found.contrast) == ["alibi, counting, length 128 (×16)"]


def test_the_wall_time_is_written_while_a_long_job_runs(tmp_path, monkeypatch):
    """A study killed in the middle of a long job keeps the wall time it had run (the line used to be
    written only when a job finished, so a session's kill lost the time since the last one)."""
    root = tmp_path / "study"
    seen = []

    def slow(job, s, root_, index, n_jobs):
        if index == 0:  # the first job outlasts several clock ticks before any job has finished
            deadline = time.monotonic() + 10
            while not (root / "wall_seconds.txt").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(
                (root / "wall_seconds.txt").read_text() if (root / "wall_seconds.txt").exists() else None
            )
        return [{"group": job.group, "job": job.name}]

    monkeypatch.setattr(engine, "run_one", slow)
    monkeypatch.setattr(engine, "INDEX_EVERY_S", 1e9)  # never after a job: only the clock writes
    monkeypatch.setattr(engine, "WALL_EVERY_S", 0.05)
    engine.run("quick", root, n_jobs=1)
    assert seen[0] is not None and len(seen[0].splitlines()) == 1 and float(seen[0]) >= 0
    assert len((root / "wall_seconds.txt").read_text().splitlines()) == 1  # the final line replaced it


def test_the_wall_clock_thread_writes_until_the_block_ends():
    calls = []
    with progress.wall_clock(lambda: calls.append(time.monotonic()), 0.01):
        time.sleep(0.2)
    n = len(calls)
    time.sleep(0.05)
    assert n >= 3 and len(calls) == n  # ticked while running, silent after


def test_power_is_at_the_claims_holm_family_size_from_the_observed_differences_with_ties():
    """A contrast in a family of k judged contrasts is powered at α/k (Holm's first step), from its
    observed per-seed differences with their ties (stats.power_sign_flip): 3 ties among 8 seeds leave 5
    non-zero d_s, whose smallest two-sided p is 2^(1−5) = 0.0625 ≥ 0.05, so the power is exactly 0 (the
    normal-theory power of the same d_z is not); 8 differences of one sign give p = 2/2^8 < 0.05/3 in
    every resample, power 1. The seeds for 80% are counted up at the observed d_z, checked against
    statsmodels' paired t power; an unjudged contrast is left out."""
    from statsmodels.stats.power import TTestPower

    tied = (0.0, 0.0, 0.0, 0.3, 0.5, 0.2, 0.4, 0.6)
    same = (0.3, 0.5, 0.2, 0.4, 0.6, 0.35, 0.45, 0.25)
    base = {"n_seeds": 8, "verdict": stats.UNDERPOWERED}
    rows = [
        {**base, "claim": "three", "contrast": c, "family": "three", "family_k": 3, "per_seed": same}
        for c in ("a", "b", "c")
    ]
    rows += [
        {**base, "claim": "one", "contrast": "d", "family": "one", "family_k": 1, "per_seed": tied},
        {**base, "claim": "one", "contrast": "e", "family": "", "family_k": 0, "per_seed": same}
        | {"verdict": paired.NOT_LEARNED},
    ]
    for r in rows:
        d = np.asarray(r["per_seed"])
        r["effect_size"] = d.mean() / d.std(ddof=1)
    t = seed_power.power_table(pd.DataFrame(rows)).set_index("contrast")
    assert list(t.index) == ["a", "b", "c", "d"] and list(t["family k"]) == [3, 3, 3, 1]
    assert list(t.ties) == [0, 0, 0, 3]
    assert t.loc["d", "power now (sign flip, ties)"] == 0.0
    dz_tied = rows[3]["effect_size"]
    assert TTestPower().power(effect_size=dz_tied, nobs=8, alpha=0.05) > 0.6  # what the old table printed
    assert t.loc["a", "power now (sign flip, ties)"] == 1.0
    # the seeds for 80%: the first n whose power at α/k reaches 0.8, and never below the exact test's floor
    n3 = int(t.loc["a", "seeds for 80%"])
    dz = rows[0]["effect_size"]
    assert TTestPower().power(effect_size=dz, nobs=n3, alpha=0.05 / 3) >= 0.8 and 3 * 2.0 ** (1 - n3) < 0.05


def test_claims_table_means_are_on_the_contrasts_scale():
    """For a log-scale metric (perplexity) each arm's mean is geometric, so mean_b / mean_a is the ratio
    the estimate reports (exp of the mean log ratio); an identity-scale metric keeps arithmetic means."""
    a, b = np.array([10.0, 100.0, 40.0]), np.array([9.0, 70.0, 41.0])
    rows = [
        {"seed": s, "scorer": sc, "metric": m, "value": v}
        for m in ("perplexity", "sequence_error")
        for sc, vals in (("softmax", a), ("ssa", b))
        for s, v in enumerate(vals / (1 if m == "perplexity" else 200))
    ]
    frame = pd.DataFrame(rows)
    claims = [
        paired.Claim(
            "c",
            "claim",
            "paper",
            tuple(
                paired.Spec(m, m, {"scorer": "softmax"}, {"scorer": "ssa"}, -1)
                for m in ("perplexity", "sequence_error")
            ),
        )
    ]
    t = paired.claims_table(frame, claims, n_boot=200).set_index("contrast")
    ppl = t.loc["perplexity"]
    assert ppl.mean_a == pytest.approx(np.exp(np.log(a).mean())) and ppl.mean_b == pytest.approx(
        np.exp(np.log(b).mean())
    )
    assert ppl.mean_b / ppl.mean_a == pytest.approx(np.exp(ppl.estimate))
    err = t.loc["sequence_error"]
    assert err.mean_a == pytest.approx(a.mean() / 200) and err.mean_b == pytest.approx(b.mean() / 200)


@pytest.mark.parametrize("device, expected", [("cpu", "cpu"), ("cuda", "cuda")])
def test_a_job_is_evaluated_on_the_device_it_trained_on(monkeypatch, tmp_path, device, expected):
    """A GPU study evaluates on the job's GPU (its one CPU thread is too few for Zorro or LM-eval), a CPU
    study on the CPU; the last checkpoint and every kept step alike. Nothing is trained or loaded here:
    the device each checkpoint is loaded onto is recorded."""
    s = study.load("early_quick")
    job = next(j for j in study.jobs(s) if j.task == "mlm")
    cfg = OmegaConf.create({"device": device, "task": {"name": "mlm"}})
    seen = []

    class Run:
        step = 10

    monkeypatch.setattr(engine, "run_job", lambda cfg, run_dir: {"final_loss": 1.0})
    monkeypatch.setattr(
        engine, "load_run", lambda run_dir, dev, step=None: seen.append((str(dev), step)) or Run()
    )
    monkeypatch.setattr(
        engine.runner, "evaluate", lambda run, ecfg: {"evaluation": "zorro", "protocol_id": "p"}
    )
    rows = engine._train_and_evaluate(job, s, cfg, tmp_path / "run")
    assert rows and {d for d, _ in seen} == {expected}
    assert sorted(st for _, st in seen if st is not None) == [
        5,
        10,
    ]  # zorro_early's kept steps, then the last
