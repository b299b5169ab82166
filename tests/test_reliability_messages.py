"""Messages that fit the command: a value Hydra's grammar cannot read unquoted gets the quoting that
works; a storage error in evaluate.py names what evaluate.py can change (not hydra.run.dir, which only
moves its log folder)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from ssa_repro.cli import evaluate_app
from ssa_repro.core import atomic
from ssa_repro.jobs.keys import explain_argv
from ssa_repro.training.trainer import train
from tests.conftest import CONF, make_cfg


@pytest.mark.parametrize("value", ["é", "naïve", 'ü"x'])
def test_an_unquoted_non_ascii_value_gets_the_quoting_that_parses(value):
    msg = explain_argv(CONF, "train", ["debug=tiny", f"task.name={value}"])
    assert msg.startswith(f"{f'task.name={value}'!r} is not an override Hydra's grammar can read (")
    assert "must be quoted, with the shell's quotes around it: " in msg
    suggested = msg.split("around it: ")[1].split(" (https")[0]
    [override] = OverridesParser.create().parse_overrides([eval(suggested)])  # the shell's quotes off
    assert override.value() == value  # the suggestion is what Hydra reads as the value given


def test_other_grammar_errors_keep_hydras_words_and_say_what_to_check():
    msg = explain_argv(CONF, "evaluate", ["run_dir=x", "eval.sigmas=[1,"])
    assert "no viable alternative at input '[1,'" in msg and "check its brackets and quotes" in msg
    assert explain_argv(CONF, "train", ["debug=tiny", "seed=0,1", "task.name='é'"]) is None  # all parse


def snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_storage_errors_in_evaluate_name_what_evaluate_can_change(tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(make_cfg("evaluation.enabled=false"), run)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"run_dir={run}", "eval.sigmas=[2]", "eval.lengths=[5]"])
    before = snapshot(run)
    real = os.replace

    def full(src, dst):
        if run / "eval" in Path(dst).parents:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", full)
    with pytest.raises(SystemExit) as e:
        evaluate_app.main(cfg)
    msg = str(e.value.code)
    assert msg.startswith("Error: no space left on device while writing ") and f"{run}/eval/" in msg
    assert f"make {run} writable, or copy the run folder somewhere writable" in msg
    assert "hydra.run.dir" not in msg
    after = snapshot(run)
    assert {p: after.get(p) for p in before} == before  # no existing file changed or deleted
    assert not [p for p in run.rglob("*") if p.is_file() and ".tmp" in p.name]  # nothing half-written
    monkeypatch.undo()
    with pytest.raises(atomic.StorageError, match=r"\(hydra.run.dir=<another folder>\)"):  # elsewhere
        with pytest.MonkeyPatch.context() as m:
            m.setattr(atomic.os, "replace", full)
            atomic.write_text(run / "eval" / "x.txt", "x")
