"""The commands feel like the tools people know (issue 42) and say in one line what is wrong (issue 41):
``ssa-train``/``ssa-evaluate`` are the same code as train.py/evaluate.py (their argv checks included),
every ``--help`` prints its whole description and a help line for each option, and comparing runs of
different kinds is one line, not ``KeyError: 'shots'``.

In process where possible; one ``--help`` subprocess per installed command (marked slow; its time is not
asserted, only that it answers and prints the full description)."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from ssa_repro.cli import evaluate_app, lm_table, stats_table, train_app, wandb_dashboard, zorro_table
from ssa_repro.core.rundir import RunDir
from ssa_repro.reports import compare
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


def test_ssa_train_says_an_unknown_key_with_the_valid_ones(tmp_path, fresh_hydra):
    with pytest.raises(SystemExit) as e:
        train_app.cli(["debug=tiny", "train.setps=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert str(e.value).startswith(
        "Error: train.setps is not a key of train"
    ) and "did you mean steps" in str(e.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a Hydra run end to end (about 4 s alone, 18 s on a loaded machine)
def test_ssa_evaluate_evaluates_and_needs_a_run(tmp_path, fresh_hydra, monkeypatch):
    run = tmp_path / "run"
    train_app.cli([*TINY, f"hydra.run.dir={run}"])
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["ssa-evaluate"])
    with pytest.raises(SystemExit) as e:
        evaluate_app.cli(["eval=grid"])
    assert str(e.value) == "Error: give the run to evaluate: ssa-evaluate run_dir=<run folder> [eval=<name>]"
    grid = ["eval=grid", "eval.sigmas=[1.0]", "eval.lengths=[5]", "eval.n_samples=1", "eval.batch_size=4"]
    evaluate_app.cli([f"run_dir={run}", *grid])
    (protocol,) = (run / "eval" / "grid").iterdir()
    assert any(protocol.glob("*.csv")), list(protocol.iterdir())


def test_train_py_and_evaluate_py_are_the_commands():
    """One path: the scripts only call the apps' cli()."""
    for script, app in (("train.py", "train_app"), ("evaluate.py", "evaluate_app")):
        text = (ROOT / script).read_text()
        assert f"from ssa_repro.cli.{app} import cli" in text and "hydra" not in text.split('"""')[-1]


# ----------------------------------------------------------------------------- help texts
def _first_paragraph(doc: str) -> str:
    return " ".join(doc.split("\n\n")[0].split())


def _help(main, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("module", [stats_table, zorro_table, lm_table], ids=lambda m: m.__name__)
def test_help_prints_the_whole_description(module, capsys):
    text = _help(module.main, capsys)
    whole = _first_paragraph(module.__doc__)
    assert whole.endswith(".") and whole in text  # (before: the docstring's first line, cut mid-sentence)


@pytest.mark.parametrize(
    "main", [stats_table.main, zorro_table.main, lm_table.main, wandb_dashboard.main, compare.main]
)
def test_every_option_has_a_help_line(main, capsys, monkeypatch):
    """Each option of the parser has its own help (before: the dashboard's --rows and --cols had none)."""
    seen = []
    real = argparse.ArgumentParser.parse_args

    def spy(self, *args, **kwargs):
        seen.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    text = _help(main, capsys)
    (parser,) = seen
    assert parser.description and parser.description.rstrip().endswith((".", ")")), parser.description
    bare = [a.option_strings or [a.dest] for a in parser._actions if not a.help]
    assert bare == [], bare
    assert "--help" in text


# ----------------------------------------------------------------------------- compare: kinds
def _fake_run(folder: Path, task: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"task:\n  name: {task}\nscorer:\n  label: softmax\n")
    return folder


@pytest.mark.parametrize("corpus", ["lm", "mlm"])
def test_comparing_runs_of_different_kinds_is_one_line(corpus, tmp_path, capsys):
    a = _fake_run(tmp_path / "a", corpus)
    b = _fake_run(tmp_path / "b", "linear")
    assert compare.main([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("Error: the runs are of different kinds")
    assert f"task={corpus}: a" in err and "task=linear: b" in err


# ----------------------------------------------------------------------------- installed commands
COMMANDS = {
    "ssa-train": "== Configuration groups ==",
    "ssa-evaluate": "== Configuration groups ==",
    "ssa-compare": compare.parser().description,
    "ssa-stats-table": _first_paragraph(stats_table.__doc__),
    "ssa-zorro-table": _first_paragraph(zorro_table.__doc__),
    "ssa-lm-table": _first_paragraph(lm_table.__doc__),
    "ssa-wandb-dashboard": "Create a W&B workspace comparing softmax and SSA for one sweep",
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
