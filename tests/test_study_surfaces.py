"""Studies under bad input and faults (issue 41's study part, issue 42's progress and output folder): a
study file checked against its schema before anything runs, one study process per output folder, an
index rebuilt from every finished job, a cut index never read as a shorter one, a read-only or
misplaced output folder named in one line, one overall progress line, reports outside docs/results
unless asked. Tiny study files in tmp_path; the job runner is replaced where training is not tested."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from ssa_repro.cli import arguments, run_study
from ssa_repro.studies import engine, progress, study
from ssa_repro.studies import index as study_index
from ssa_repro.studies.schema import problems as schema_problems

GOOD = """
name: tiny
seeds: [0, 1]
base: [train.steps=2]
tasks:
  lin: [task=linear]
  evr: [task=every]
archs:
  small: [model=gpt2]
groups:
  core: {tasks: [lin, evr], scorers: [softmax, ssa], archs: [small], train_sigma: [1]}
evaluations:
  grid_linear: {name: grid, sigmas: [1], lengths: [9], n_samples: 1}
"""


def write_study(tmp_path: Path, text: str = GOOD, name: str = "tiny") -> Path:
    (tmp_path / "study").mkdir(exist_ok=True)
    path = tmp_path / "study" / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(autouse=True)
def no_job_config_checks(monkeypatch):
    """Each job's config checks (train.py's, composed with Hydra: about a second a setting) are tested in
    tests/test_study.py; here the study's own surfaces are, so they are skipped."""
    monkeypatch.setattr(engine, "problems", lambda s, todo: [])


def fake_rows(job, s, root, index, n_jobs):
    return [{"group": job.group, "job": job.name, "run_dir": f"{root}/runs/{job.group}/{job.name}",
             "evaluation": "grid_linear", "protocol_id": "p", "seed": job.seed}]  # fmt: skip


def test_a_valid_tiny_study_loads_and_every_shipped_study_passes_the_schema():
    from ssa_repro.config import CONF_DIR

    for path in sorted((CONF_DIR / "study").glob("*.yaml")):
        assert study.load(path.stem).name  # merged over its parent, then checked
    assert schema_problems(study._merged(study.study_path("quick"), CONF_DIR), "quick.yaml") == []


# Each: a change to GOOD, then what the one line must name (key, value, what is allowed).
BAD = {
    "missing key": (GOOD.replace("seeds: [0, 1]\n", ""), ["seeds is missing", "a study file needs"]),
    "group lacks scorers": (
        GOOD.replace("scorers: [softmax, ssa], ", ""),
        ["groups.core.scorers is missing", "a group needs tasks, scorers, archs, train_sigma"],
    ),
    "unknown scorer": (GOOD.replace("[softmax, ssa]", "[softmax, sofmax]"), ["groups.core.scorers[1]='sofmax'", "conf/scorer/*.yaml: ", "ssa_n2"]),
    "empty group": (GOOD.replace("tasks: [lin, evr]", "tasks: []"), ["groups.core.tasks=[] is not a non-empty list", "allowed"]),
    "undefined task": (GOOD.replace("tasks: [lin, evr]", "tasks: [lin, every_nm]"), ["groups.core.tasks[1]='every_nm'", "the study's tasks: lin, evr"]),
    "unknown arch": (GOOD.replace("archs: [small]", "archs: [big]"), ["groups.core.archs[0]='big'", "the study's archs: small"]),
    "duplicate seeds": (GOOD.replace("[0, 1]", "[0, 1, 0]"), ["seeds[2]=0 repeats seeds[0]", "distinct values"]),
    "duplicate sigma": (GOOD.replace("train_sigma: [1]", "train_sigma: [1, 1.0]"), ["train_sigma[1]=1.0 repeats"]),
    "group seeds": (GOOD.replace("train_sigma: [1]}", "train_sigma: [1], seeds: [2, -1]}"), ["groups.core.seeds[1]=-1", "integers >= 0"]),
    "empty groups": (GOOD.split("groups:")[0] + "groups: {}\nevaluations: {}\n", ["groups={} is not a non-empty mapping"]),
    "unknown top key": (GOOD + "seed: 3\n", ["seed=3 is not a key of a study file", "allowed keys"]),
    "unknown group key": (GOOD.replace("train_sigma: [1]}", "train_sigma: [1], scorer: [ssa]}"), ["groups.core.scorer=['ssa'] is not a key of a group"]),
    "unknown evaluator": (GOOD.replace("name: grid", "name: gird"), ["evaluations.grid_linear.name='gird' is not an evaluator", "grid"]),
    "unknown evaluation key": (GOOD.replace("n_samples: 1", "n_sample: 1"), ["evaluations.grid_linear.n_sample=1 is not a key of evaluator 'grid'", "n_samples"]),
    "wrong value type": (GOOD.replace("n_samples: 1", "n_samples: many"), ["evaluations.grid_linear.n_samples='many' has the wrong type"]),
    "evaluation of an unknown group": (GOOD.replace("n_samples: 1}", "n_samples: 1, groups: [cor]}"), ["evaluations.grid_linear.groups[0]='cor'", "the study's groups: core"]),
    "override not a string": (GOOD.replace("base: [train.steps=2]", "base: [{train: 2}]"), ["base[0]={'train': 2} is not a string"]),
    "folder name": (GOOD.replace("name: tiny", "name: ../x"), ["name='../x' is not a usable folder name"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_study_file_is_refused_in_one_line_before_anything_runs(tmp_path, monkeypatch, case):
    text, words = BAD[case]
    path = write_study(tmp_path, text)
    monkeypatch.setattr(engine, "run_one", lambda *a: pytest.fail("a job ran"))
    with pytest.raises(SystemExit) as e:
        engine.run("tiny", tmp_path / "out", n_jobs=1, conf_dir=tmp_path)
    msg = str(e.value.code)
    assert msg.startswith("Error: invalid study file:\n  - ")
    lines = msg.splitlines()[1:]
    hit = [line for line in lines if all(w in line for w in words)]
    assert hit, msg  # one line holds the file, the key, the value and what is allowed
    assert str(path) in hit[0] or "study/tiny.yaml" in hit[0]
    assert not (tmp_path / "out").exists()


def test_an_unreadable_study_file_is_named_with_its_line(tmp_path):
    write_study(tmp_path, GOOD.replace("archs:\n", "archs: [\n"))
    with pytest.raises(SystemExit, match=r"tiny.yaml is not a readable study file: .*line \d+"):
        study.load("tiny", tmp_path)
    write_study(tmp_path, GOOD + "name: again\n")  # a duplicate key
    with pytest.raises(SystemExit, match="duplicate key name"):
        study.load("tiny", tmp_path)
    write_study(tmp_path, "- a\n- b\n")
    with pytest.raises(SystemExit, match="a study file is a mapping of keys"):
        study.load("tiny", tmp_path)
    # a path works as the name, and a parent it names must exist
    write_study(tmp_path, "defaults: [nope]\n", name="child")
    with pytest.raises(SystemExit, match="no study 'nope'"):
        study.load(str(tmp_path / "study" / "child.yaml"), tmp_path)


def test_a_second_study_process_on_the_same_folder_is_refused_naming_the_holder(tmp_path, monkeypatch):
    """Two study processes on one folder used to both run, and the index kept only the last one's jobs."""
    write_study(tmp_path)
    root = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ssa_repro.core.runlock import RunLock; "
         "RunLock(sys.argv[1], 'study tiny').acquire(); print('held', flush=True); time.sleep(60)", str(root)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(engine, "run_one", lambda *a: pytest.fail("a job ran beside another study"))
        with pytest.raises(SystemExit) as e:
            engine.run("tiny", root, n_jobs=1, conf_dir=tmp_path)
        msg = str(e.value.code)
        assert f"{root} is in use by another study process" in msg and f"pid {holder.pid}" in msg
        assert "use another --root" in msg and "\n" not in msg
    finally:
        holder.kill()
        holder.wait()
    monkeypatch.setattr(engine, "run_one", fake_rows)
    assert engine.run("tiny", root, n_jobs=1, conf_dir=tmp_path) == root  # the holder is gone: it runs


def test_the_index_holds_every_finished_job_also_those_another_invocation_indexed(tmp_path, monkeypatch):
    """The index is rebuilt from every finished job's rows: jobs indexed by another invocation (another
    --groups, or an index written before index.d existed) are kept; a job run twice is listed once."""
    write_study(
        tmp_path,
        GOOD.replace(
            "evaluations:",
            "  more: {tasks: [lin], scorers: [softmax], archs: [small], train_sigma: [1]}\nevaluations:",
        ),
    )
    root = tmp_path / "out"
    s = study.load("tiny", tmp_path)
    every = study.jobs(s)
    more = [j for j in every if j.group == "more"]
    root.mkdir()  # an index.csv of before index.d, holding the `more` group's jobs
    pd.DataFrame([r for j in more for r in fake_rows(j, s, root, 0, 1)]).to_csv(
        root / "index.csv", index=False
    )
    monkeypatch.setattr(engine, "run_one", fake_rows)
    engine.run("tiny", root, n_jobs=1, groups=("core",), conf_dir=tmp_path)
    engine.run("tiny", root, n_jobs=1, groups=("core",), conf_dir=tmp_path)  # again: no repeated rows
    index = pd.read_csv(root / "index.csv")
    assert list(index.job) == [j.name for j in every]  # both groups, in the study's order, once each
    assert sorted(p.stem for p in (root / "index.d").rglob("*.csv")) == sorted(j.name for j in every)


def test_an_index_cut_short_is_rebuilt_with_a_warning_or_refused(tmp_path, monkeypatch, caplog):
    write_study(tmp_path)
    root = tmp_path / "out"
    monkeypatch.setattr(engine, "run_one", fake_rows)
    engine.run("tiny", root, n_jobs=1, conf_dir=tmp_path)
    whole = (root / "index.csv").read_bytes()
    seen = {}

    def writer(root_, out, name, command, setup):
        seen["jobs"] = list(pd.read_csv(Path(root_) / "index.csv").job)
        seen["out"] = Path(out)
        return Path(out) / f"{name}.md"

    monkeypatch.setitem(run_study.REPORTS, "icl", writer)
    path = str(tmp_path / "study" / "tiny.yaml")
    for cut in (whole[: len(whole) - 7], whole[: whole.index(b"\n", 60) + 1]):  # mid-row; at a row's end
        (root / "index.csv").write_bytes(cut)
        with caplog.at_level(logging.WARNING, logger="ssa_repro.study"):
            assert run_study.main([path, "--report-only", "--root", str(root)]) == 0
        assert seen["jobs"] == [j.name for j in study.jobs(study.load(path))]  # all 8, not fewer
        assert "rebuilt from the rows of the 8 finished jobs" in caplog.text
        caplog.clear()
    # without the jobs' rows (an index of before index.d) a cut index is refused, naming the file
    import shutil

    shutil.rmtree(root / "index.d")
    (root / "index.csv").write_bytes(whole[: len(whole) - 7])
    with pytest.raises(SystemExit) as e:
        run_study.main([path, "--report-only", "--root", str(root)])
    msg = str(e.value.code)
    assert f"{root / 'index.csv'} is damaged: it does not end with a newline" in msg
    assert "without --report-only to rebuild it" in msg and "\n" not in msg


def test_a_damaged_index_names_the_damage(tmp_path):
    for text, words in (
        (b"group,job,run_dir,evaluation,protocol_id\ng,a,r,e,p\ng,b,r", "does not end with a newline"),
        (b"group,job,run_dir,evaluation,protocol_id\ng,a,r,e,p\ng,b,r\n", "line(s) 3 lack evaluation, protocol_id"),
        (b"group,job\ng,a\n", "lacks the column(s) run_dir, evaluation, protocol_id"),
        (b'group,job,run_dir,evaluation,protocol_id\n"g,a,r,e,p\n', "not a readable CSV"),
    ):  # fmt: skip
        path = tmp_path / "index.csv"
        path.write_bytes(text)
        try:
            with pytest.raises(study_index.IndexDamaged, match=words.replace("(", r"\(").replace(")", r"\)")):
                study_index.checked_index(path)
        finally:
            path.unlink()


def _refuse_writes_under(root: Path, err: int, monkeypatch):
    """Writes under ``root`` fail with ``err``, as on a read-only folder (the tests run as root, which
    permissions do not stop)."""
    real_open, real_mkdir = os.open, os.mkdir

    def guarded(fn):
        def call(path, *a, **k):
            if str(path).startswith(str(root)):
                raise OSError(err, os.strerror(err), str(path))
            return fn(path, *a, **k)

        return call

    monkeypatch.setattr(os, "open", guarded(real_open))
    monkeypatch.setattr(os, "mkdir", guarded(real_mkdir))


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_a_read_only_output_folder_is_named_in_one_line_before_any_job(tmp_path, monkeypatch, err):
    write_study(tmp_path)
    root = tmp_path / "out"
    root.mkdir()
    monkeypatch.setattr(engine, "run_one", lambda *a: pytest.fail("a job ran"))
    _refuse_writes_under(root, err, monkeypatch)
    with pytest.raises(SystemExit) as e:
        engine.run("tiny", root, n_jobs=1, conf_dir=tmp_path)
    msg = str(e.value.code)
    assert msg.startswith("Error: study tiny: cannot write its output folder: ") and "\n" not in msg
    assert str(root) in msg and "--root <another folder>" in msg
    assert ("read-only file system" if err == errno.EROFS else "not writable") in msg


def test_an_output_folder_that_is_a_file_is_named(tmp_path, monkeypatch):
    write_study(tmp_path)
    (tmp_path / "out").write_text("")
    monkeypatch.setattr(engine, "run_one", lambda *a: pytest.fail("a job ran"))
    with pytest.raises(SystemExit, match=r"--root .*out is a file, not a folder"):
        engine.run("tiny", tmp_path / "out", n_jobs=1, conf_dir=tmp_path)


def test_progress_is_one_line_on_a_terminal_and_a_log_line_per_job_elsewhere(
    tmp_path, monkeypatch, capsys, caplog
):
    """joblib's `[Parallel(n_jobs=1)]: Done 1 tasks` chatter is gone: on a terminal one tqdm line (jobs
    done of N, failures, elapsed, ETA); elsewhere no bar, one log line per finished job."""
    write_study(tmp_path)

    def one_fails(job, s, root, index, n_jobs):
        if index == 3:
            raise ValueError("boom")
        return fake_rows(job, s, root, index, n_jobs)

    monkeypatch.setattr(engine, "run_one", one_fails)
    with caplog.at_level(logging.INFO, logger="ssa_repro.study"), pytest.raises(SystemExit):
        engine.run("tiny", tmp_path / "a", n_jobs=1, conf_dir=tmp_path)
    err = capsys.readouterr().err
    assert "[Parallel" not in err and "\r" not in err and "job/s" not in err
    assert (
        "job 1 of 8 done (core/" in caplog.text
        and "job 4 of 8 done" in caplog.text
        and ", failed)" in caplog.text
    )
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ssa_repro.study"), pytest.raises(SystemExit):
        engine.run("tiny", tmp_path / "b", n_jobs=1, conf_dir=tmp_path)
    err = capsys.readouterr().err
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("study tiny: 100%") and "8/8" in last and "failed=1" in last and "<00:00" in last
    assert "[Parallel" not in err and "job 1 of 8 done" not in caplog.text


def test_a_logged_study_line_gives_elapsed_time_and_the_time_left_at_the_rate_so_far(caplog):
    """Without a terminal each finished job's line says the time since the start and done-rate × jobs
    left: at t = 90 s with 1 of 4 done, 0:01:30 elapsed and 3 × 90 s = 0:04:30 left; at t = 200 s with 2
    done, 2 × 100 s."""
    ticks = iter([1000.0, 1090.0, 1200.0])
    p = progress.Progress("x", 4, clock=lambda: next(ticks))
    p.bar.disable = True  # as in a log file
    job = study.Job("core", "linear", "ssa", "small", 1.0, 3, ())
    with caplog.at_level(logging.INFO, logger="ssa_repro.study"):
        p.done(job, "")
        p.done(job, "boom")
    p.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "job 1 of 4 done (core/linear-ssa-small-sigma1-s3): 0:01:30 elapsed, about 0:04:30 left at this rate",
        "job 2 of 4 done (core/linear-ssa-small-sigma1-s3, failed): 0:03:20 elapsed, about 0:03:20 left at this rate",
    ]


def test_the_report_goes_to_the_study_folder_unless_published(tmp_path, monkeypatch):
    """`ssa-study icl_cpu` wrote into the tracked docs/results by default; now into its --root (or
    --out), and into docs/results only with --publish."""
    write_study(tmp_path)
    seen = []
    monkeypatch.setitem(
        run_study.REPORTS, "icl", lambda r, out, n, c, s: seen.append((Path(out), c)) or Path(out) / "x.md"
    )
    monkeypatch.setattr(arguments, "PUBLISHED", tmp_path / "published")  # (cli/arguments.py owns it)
    path, root = str(tmp_path / "study" / "tiny.yaml"), tmp_path / "out"
    run_study.main([path, "--report-only", "--root", str(root)])
    run_study.main([path, "--report-only", "--root", str(root), "--publish"])
    run_study.main([path, "--report-only", "--root", str(root), "--out", str(tmp_path / "mine")])
    assert [o for o, _ in seen] == [root, tmp_path / "published", tmp_path / "mine"]
    assert seen[1][1] == f"python scripts/study.py {path} --report-only --root {root} --publish"
    with pytest.raises(SystemExit):  # argparse: --out and --publish together
        run_study.main([path, "--report-only", "--publish", "--out", "x"])
    monkeypatch.chdir(tmp_path)  # the default root is under outputs/, not docs/
    assert study.default_root("tiny") == Path("outputs/study/tiny")


def test_the_lock_is_released_after_a_failed_or_interrupted_study(tmp_path, monkeypatch):
    write_study(tmp_path)
    root = tmp_path / "out"

    def stop(job, s, r, index, n):
        raise KeyboardInterrupt("stopped")

    monkeypatch.setattr(engine, "run_one", stop)
    with pytest.raises(KeyboardInterrupt):
        engine.run("tiny", root, n_jobs=1, conf_dir=tmp_path)
    probe = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom ssa_repro.core.runlock import RunLock\nRunLock(sys.argv[1]).acquire()", str(root)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr  # another process can take the folder now
    monkeypatch.setattr(engine, "run_one", fake_rows)
    engine.run("tiny", root, n_jobs=1, conf_dir=tmp_path)  # and so can this one, again


def test_a_job_config_is_composed_once_and_again_after_a_config_file_changes(tmp_path, monkeypatch):
    """study.compose keeps each job's composed config (config.compose_cached; problems, run_one and a resumed study in one
    process asked for it again and again): the same config as Hydra's compose, a fresh copy each call
    (changing one changes no later one), and composed anew once a file under the config folder
    changes."""
    import shutil

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    conf = tmp_path / "conf"
    shutil.copytree(study.CONF_DIR, conf)
    monkeypatch.setattr(study, "CONF_DIR", conf)
    job = study.Job("core", "lin", "softmax", "small", 1.0, 3, ("task=linear", "train.lr=0.003", "seed=3"))
    calls = []
    import ssa_repro.config as config

    monkeypatch.setattr(config, "compose", lambda *a, **k: calls.append(a) or compose(*a, **k))
    first = study.compose(job)
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        fresh = compose("train", overrides=list(job.overrides))
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(fresh) and OmegaConf.is_struct(first)
    first.train.lr = 1.0
    again = study.compose(job)
    assert again.train.lr == 0.003 and len(calls) == 1  # a copy of the kept one: no second compose
    # another seed and learning rate, the same group choices: values applied to a copy, no compose
    other = study.compose(study.Job("core", "lin", "softmax", "small", 1.0, 4, ("task=linear", "seed=4")))
    assert other.seed == 4 and other.train.lr == 1e-4  # train/default.yaml's, not the first job's 0.003
    assert len(calls) == 1
    ev = study.compose(study.Job("core", "ev", "softmax", "small", 1.0, 4, ("task=every", "seed=4")))
    assert ev.task.name == "every" and len(calls) == 2  # another group choice: composed
    (conf / "train" / "default.yaml").write_text(
        (conf / "train" / "default.yaml").read_text() + "\ngrad_clip: 0.25\n"
    )
    assert study.compose(job).train.grad_clip == 0.25 and len(calls) == 3


def test_a_dry_run_lists_each_settings_jobs_by_state_and_writes_nothing(tmp_path, capsys):
    """ssa-study --dry-run: per setting the seeds and how many jobs are finished (record matching the
    run), trained with evaluations due (summary.json), stopped mid-training (a checkpoint) or to train;
    the root is not created, and --dry-run with --report-only is refused."""
    from ssa_repro.core.rundir import RunDir

    path = write_study(tmp_path)
    root = tmp_path / "out"
    s = study.load("tiny", tmp_path)
    jobs = {j.name: j for j in study.jobs(s)}
    text = engine.plan("tiny", root, conf_dir=tmp_path)
    assert text.splitlines()[0] == f"study tiny: 8 jobs in {root}: 8 to train, 0 to resume training, " + (
        "0 trained with evaluations due, 0 finished (their rows reused)"
    )
    assert not root.exists()

    def run_dir(name):
        return RunDir(root / "runs" / "core" / name)

    run_dir("lin-softmax-small-sigma1-s0").path.mkdir(parents=True)
    run_dir("lin-softmax-small-sigma1-s0").summary_file.write_text("{}")
    for name in ("lin-ssa-small-sigma1-s1", "evr-softmax-small-sigma1-s0"):
        run_dir(name).last_checkpoint.parent.mkdir(parents=True)
        run_dir(name).last_checkpoint.write_bytes(b"")
    done = jobs["evr-softmax-small-sigma1-s0"]  # its record names what its rows were made from
    cfg = study.compose(done)
    key = study_index.done_key(
        cfg, s, study.evaluations(s, str(cfg.task.name), "core"), run_dir(done.name).path
    )
    record = study_index.job_rows_path(root, "core", done.name).with_suffix(".key")
    record.parent.mkdir(parents=True)
    record.write_text(key + "\n")
    before = sorted(root.rglob("*"))
    lines = engine.plan("tiny", root, conf_dir=tmp_path).splitlines()
    assert lines[0].endswith(
        "5 to train, 1 to resume training, 1 trained with evaluations due, 1 finished (their rows reused)"
    )
    rows = {
        tuple(r.split()[:3]): r.split()[5:] for r in lines[2:-1]
    }  # (group, task, scorer) -> seeds, counts
    assert lines[1].split() == [
        "group",
        "task",
        "scorer",
        "arch",
        "train_sigma",
        "seeds",
        "jobs",
        "finished",
        "evaluate",
        "resume",
        "train",
    ]
    assert rows == {
        ("core", "lin", "softmax"): ["0-1", "2", "0", "1", "0", "1"],
        ("core", "lin", "ssa"): ["0-1", "2", "0", "0", "1", "1"],
        ("core", "evr", "softmax"): ["0-1", "2", "1", "0", "0", "1"],
        ("core", "evr", "ssa"): ["0-1", "2", "0", "0", "0", "2"],
    }
    assert sorted(root.rglob("*")) == before  # nothing written, no lock taken
    assert run_study.main([str(path), "--root", str(root), "-n", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "4 jobs in" in out
        and "1 to resume training" in out
        and out.rstrip().endswith("dry run: nothing written")
    )
    with pytest.raises(SystemExit, match="--dry-run and --report-only exclude each other"):
        run_study.main([str(path), "--root", str(root), "-n", "--report-only"])
