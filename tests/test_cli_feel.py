"""The commands feel like the tools people know (issue 42) and say in one line what is wrong (issue 41):
``ssa-train``/``ssa-evaluate`` are the same code as train.py/evaluate.py (their argv checks included),
every ``--help`` prints its whole description and a help line for each option, and comparing runs of
different kinds is one line, not ``KeyError: 'shots'``.

In process where possible; one ``--help`` subprocess per installed command (marked slow; its time is not
asserted, only that it answers and prints the full description)."""

from __future__ import annotations

import importlib.metadata
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from ssa_repro.cli import arguments, commands, evaluate_app, train_app, wandb_dashboard
from ssa_repro.core.rundir import RunDir
from ssa_repro.evaluation import zorro
from ssa_repro.studies import engine
from tests.conftest import ROOT

TINY = ["debug=tiny", "train.steps=2", "evaluation.enabled=false"]


@pytest.fixture
def fresh_hydra(monkeypatch):
    """The apps' Hydra main in this process: argv restored, Hydra's global state cleared and its logging
    set-up (root handlers, level) undone after, as conftest.run_script does."""
    monkeypatch.setattr(sys, "argv", ["ssa-train"])
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    GlobalHydra.instance().clear()
    for h in root.handlers:
        if h not in handlers:
            h.close()
    root.handlers[:] = handlers
    root.setLevel(level)


# ----------------------------------------------------------------------------- ssa-train / ssa-evaluate
@pytest.mark.slow  # a Hydra run end to end (about 4 s alone, 18 s on a loaded machine)
def test_ssa_train_trains_and_names_its_log_as_train_py_does(tmp_path, fresh_hydra):
    run = tmp_path / "run"
    train_app.cli([*TINY, f"hydra.run.dir={run}"])
    summary = RunDir(run).summary()
    assert summary is not None and summary["steps"] == 2
    assert (run / "train.log").exists() and not (run / "train_app.log").exists()


@pytest.mark.slow  # a Hydra run end to end
def test_ssa_train_prepares_its_run_once(tmp_path, fresh_hydra, monkeypatch):
    """The callback prepares the job (checks, the folder read under its lock); the job goes on with that
    object: the folder's state is read once per command, and the config that ran is the checked one."""
    from ssa_repro.jobs import prepared, train_job
    from ssa_repro.training import run_state

    reads, ran = [], []
    real_prepare, real_run = run_state.prepare, train_job.run
    monkeypatch.setattr(run_state, "prepare", lambda *a, **k: reads.append(1) or real_prepare(*a, **k))
    monkeypatch.setattr(train_job, "run", lambda job: ran.append(job) or real_run(job))
    train_app.cli([*TINY, f"hydra.run.dir={tmp_path / 'run'}"])
    assert len(reads) == 1 and len(ran) == 1
    (job,) = ran
    assert isinstance(job, prepared.PreparedRun) and job.cfg._get_flag("readonly")
    assert job.run_dir == tmp_path / "run" and "hydra" not in job.cfg


def test_ssa_train_says_an_unknown_key_with_the_valid_ones(tmp_path, fresh_hydra):
    with pytest.raises(SystemExit) as e:
        train_app.cli(["debug=tiny", "train.setps=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert str(e.value).startswith(
        "Error: train.setps is not a key of train"
    ) and "did you mean steps" in str(e.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a Hydra run end to end (about 4 s alone, 18 s on a loaded machine)
def test_ssa_evaluate_evaluates_and_needs_a_run(tmp_path, fresh_hydra, monkeypatch):
    """The run is named as a sweep prints its job folder (``.../scorer=ssa,seed=0``), without quotes."""
    run = tmp_path / "sweep" / "scorer=ssa,seed=0"
    train_app.cli([*TINY, f"hydra.run.dir='{run}'"])
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["ssa-evaluate"])
    with pytest.raises(SystemExit) as e:
        evaluate_app.cli(["eval=grid"])
    assert str(e.value) == "Error: give the run to evaluate: ssa-evaluate run_dir=<run folder> [eval=<name>]"
    grid = ["eval=grid", "eval.sigmas=[1.0]", "eval.lengths=[5]", "eval.n_samples=1", "eval.batch_size=4"]
    evaluate_app.cli([f"run_dir={run}", *grid])
    (protocol,) = (run / "eval" / "grid").iterdir()
    assert any(protocol.glob("*.csv")), list(protocol.iterdir())


@pytest.mark.parametrize("name", ["scorer=ssa,seed=0", "seed=1", "it's=a,b", "plain"])
def test_a_run_folder_is_passed_to_hydra_as_one_value(tmp_path, name):
    """Hydra's own override parser reads the quoted ``run_dir=`` as the folder, whole; a value that is no
    folder and holds no ``=`` (a sweep over folders) and one already quoted are left as given."""
    folder = tmp_path / name
    folder.mkdir()
    (arg,) = evaluate_app.quote_run_dir([f"run_dir={folder}"])
    (override,) = OverridesParser.create().parse_overrides([arg])
    assert override.value() == str(folder) and not override.is_sweep_override()
    assert evaluate_app.quote_run_dir(["run_dir=a,b", "eval=grid"]) == ["run_dir=a,b", "eval=grid"]
    assert evaluate_app.quote_run_dir([f"run_dir='{tmp_path}'"]) == [f"run_dir='{tmp_path}'"]


def test_train_py_and_evaluate_py_are_the_commands():
    """One path: the scripts only call the commands (cli/commands.py), whose work is the apps' cli()."""
    for script, command in (("train.py", "train"), ("evaluate.py", "evaluate")):
        text = (ROOT / script).read_text()
        assert (
            f"from ssa_repro.cli.commands import {command}" in text and "hydra" not in text.split('"""')[-1]
        )
    assert commands.HYDRA_WORK == {
        "train": "ssa_repro.cli.train_app:cli",
        "evaluate": "ssa_repro.cli.evaluate_app:cli",
    }


# ----------------------------------------------------------------------------- help texts
def _help(main, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", sorted(commands.WORK))
def test_help_prints_the_whole_description_and_a_line_per_option(command, capsys):
    """Each option of the parser has its own help (before: the dashboard's --rows and --cols had none),
    and the description is whole (before: cut mid-sentence at the docstring's first line)."""
    parser = commands.WORK[command][0]()
    assert parser.prog == command
    assert parser.description.rstrip().endswith((".", ")")), parser.description
    bare = [a.option_strings or [a.dest] for a in parser._actions if not a.help]
    assert bare == [], bare
    text = _help(lambda argv: commands.run(command, argv), capsys)
    assert " ".join(parser.description.split()) in text and "--help" in text


def test_a_usage_error_is_said_before_any_work(capsys):
    """argparse refuses a wrong argument with the command's usage, exit status 2, before the work loads."""
    with pytest.raises(SystemExit) as e:
        commands.zorro_table(["run", "--method", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ssa-zorro-table") and "invalid choice: 'nope'" in err


def test_restated_choices_match_their_owners():
    """The parsers restate choices a deeper module owns (no torch before the arguments are read)."""
    assert arguments.ZORRO_METHODS == zorro.METHODS
    assert arguments.ENSEMBLE_MODES == engine.ENSEMBLE_MODES
    assert arguments.DASHBOARD_TIMEOUT == wandb_dashboard.TIMEOUT


@pytest.mark.parametrize("primary", ["train", "evaluate"])
def test_hydra_help_lists_usage_groups_and_defaults(primary, capsys):
    """train.py/evaluate.py --help: the usage line of conf/<primary>.yaml, each group with its options
    (the default marked), and where the keys are; the same text however --help is placed."""
    for argv in (["--help"], ["task=linear", "-h"]):
        with pytest.raises(SystemExit) as e:
            getattr(commands, primary)(argv)
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: python {primary}.py ")
        assert arguments.config_groups(primary) in out and "--cfg job" in out
    assert "scorer: " in arguments.hydra_help("train") and "softmax*" in arguments.hydra_help("train")


def test_help_loads_no_heavy_library():
    """Every installed command's --help (and train.py's, evaluate.py's) answers before torch, pandas,
    seaborn, matplotlib, scipy or statsmodels load: in a fresh interpreter, where they are seen in
    sys.modules afterwards (before: 5-22 s, those imports)."""
    code = """
import contextlib, io, sys
from importlib.metadata import entry_points
heavy = ("torch", "pandas", "seaborn", "matplotlib", "scipy", "statsmodels", "transformers", "wandb")
names = sorted(e.name for e in entry_points(group="console_scripts") if e.name.startswith("ssa-"))
for e in entry_points(group="console_scripts"):
    if e.name in names:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            e.load()(["--help"])
print(len(names), sorted({m.split(".")[0] for m in sys.modules} & set(heavy)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["9", "[]"], out


def test_scripts_help_loads_no_heavy_library():
    """The same for every script in scripts/ (the developer tools too: the GPU check, the benches): each
    answers --help before its heavy imports (a guard at the top parses the arguments first)."""
    code = """
import contextlib, io, runpy, sys
heavy = ("torch", "pandas", "seaborn", "matplotlib", "scipy", "statsmodels", "transformers", "wandb")
sys.argv = [sys.argv[1], "--help"]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    runpy.run_path(sys.argv[0], run_name="__main__")
print(sorted({m.split(".")[0] for m in sys.modules} & set(heavy)))
"""
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    assert len(scripts) >= 13
    loaded = {
        s.name: subprocess.run(
            [sys.executable, "-c", code, str(s)], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.strip()
        for s in scripts
    }
    assert {k: v for k, v in loaded.items() if v != "[]"} == {}


# ----------------------------------------------------------------------------- compare: kinds
def _fake_run(folder: Path, task: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"task:\n  name: {task}\nscorer:\n  label: softmax\n")
    return folder


@pytest.mark.parametrize("corpus", ["lm", "mlm"])
def test_comparing_runs_of_different_kinds_is_one_line(corpus, tmp_path, capsys):
    a = _fake_run(tmp_path / "a", corpus)
    b = _fake_run(tmp_path / "b", "linear")
    assert commands.compare([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("Error: the runs are of different kinds")
    assert f"task={corpus}: a" in err and "task=linear: b" in err


# ----------------------------------------------------------------------------- installed commands
COMMANDS = {
    "ssa-train": "== Configuration groups ==",
    "ssa-evaluate": "== Configuration groups ==",
    **{c: " ".join(parser().description.split()) for c, (parser, _) in commands.WORK.items()},
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_installed_command_answers_help_with_its_whole_description(command, capsys, fresh_hydra):
    """Each console command's entry point, as installed (its metadata), answers --help with its full
    description: in this process (a subprocess per command cost 9-26 s of imports; real command lines of
    train.py and evaluate.py run in tests/test_evaluate.py, test_faults.py and test_ensemble.py)."""
    (entry,) = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == command]
    with pytest.raises(SystemExit) as e:
        entry.load()(["--help"])
    assert e.value.code in (0, None)
    out = capsys.readouterr().out
    assert COMMANDS[command] in " ".join(out.split()), out[:2000]
