"""Damaged stored evaluation files: each is named with what it is and what to do, never crashes the
command and is never deleted. A damaged part is moved aside (with the parts of its call) and its cells
are computed again (equal to the originals: the evaluation is seeded); a damaged protocol.json is
rewritten from the evaluation's settings, one with other settings is refused; the derived files are
redrawn, never read; compare leaves damaged files in place and says which cells it leaves out; values
that overflow are stored marked, with a warning."""

from __future__ import annotations

import json
import logging
import re
import shutil

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.cli import commands
from ssa_repro.evaluation.grid import GridConfig
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import evaluate
from ssa_repro.evaluation.store import DamagedFile, StoreError, read_part, read_protocol, stored
from ssa_repro.training.trainer import train
from tests.conftest import make_cfg

CPU = torch.device("cpu")
GRID = dict(sigmas=[1.0, 2.0], lengths=[5], n_samples=2, batch_size=4, seed=5)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A trained tiny run with one grid protocol stored (two calls: two groups of parts)."""
    d = tmp_path_factory.mktemp("evaluated") / "run"
    train(make_cfg("evaluation.enabled=false"), d)
    evaluate(load_run(d, CPU), OmegaConf.merge(OmegaConf.structured(GridConfig), {**GRID, "sigmas": [1.0]}))
    evaluate(load_run(d, CPU), OmegaConf.merge(OmegaConf.structured(GridConfig), GRID))
    return d


@pytest.fixture
def run(evaluated, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(evaluated, d)
    return d


def grid(**kw):
    return OmegaConf.merge(OmegaConf.structured(GridConfig), {**GRID, **kw})


def files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def cells(store):
    frame = store.read("results").drop(columns=["non_finite"], errors="ignore")
    return frame.sort_values(["sigma_f", "sigma_x", "predictor"]).reset_index(drop=True)


def parts_of(store):
    return sorted((store.dir / "parts").glob("*.csv"))


def call_of(part):
    """The evaluation call that wrote a part: <table>-<time>-<pid>-<n>.csv -> <time>-<pid>."""
    return part.name.split("-", 1)[1].rsplit("-", 1)[0]


# ---------------------------------------------------------------------------------- the checks alone
@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda b: b[:40] + b"\xff\xfe" + b[42:], "byte 40 of"),
        (lambda b: b[:-7], "ends mid-row (no newline at the end)"),
        (lambda b: b.rsplit(b"\n", 2)[0] + b"\n1,2\n", "fields where the header has"),
        (lambda b: b"", "it is empty"),
        (lambda b: b.replace(b"step", b"stop", 1), "no step column"),
    ],
)
def test_a_damaged_part_is_named_with_what_is_wrong(run, damage, why):
    (store,) = stored(run, "grid")
    path = parts_of(store)[0]
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DamagedFile, match=re.escape(why)) as e:
        read_part(path)
    assert str(path) in str(e.value) and "a part of the stored cells" in str(e.value)


def test_a_whole_part_reads_as_pandas_reads_it(run):
    (store,) = stored(run, "grid")
    for path in parts_of(store):
        pd.testing.assert_frame_equal(read_part(path), pd.read_csv(path))


def test_a_damaged_protocol_file_is_named(run):
    (store,) = stored(run, "grid")
    path = store.dir / "protocol.json"
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(DamagedFile, match=r"protocol.json \(the settings of the stored cells .*not JSON"):
        read_protocol(path)


# ---------------------------------------------------------------------------------- evaluate repairs
def test_a_damaged_part_is_moved_aside_and_its_cells_computed_again(run, caplog):
    (store,) = stored(run, "grid")
    want = cells(store)
    first = store.parts("results")[0]  # the first call's results (σ = 1 only)
    rest = [p for p in parts_of(store) if call_of(p) != call_of(first)]
    original = first.read_bytes()
    first.write_bytes(original[:40] + b"\xff" + original[41:])  # one byte damaged on disk
    before = files(run)
    with caplog.at_level(logging.WARNING):
        summary = evaluate(load_run(run, CPU), grid())
    assert f"{first} (a part of the stored cells) is damaged: byte 40 of" in caplog.text
    assert "their cells are computed again" in caplog.text
    assert summary["cells_computed"] == 1 and summary["cells_reused"] == 3 and rest
    aside = store.dir / "damaged" / first.name
    assert aside.read_bytes() == before[first.relative_to(run)]  # moved, not deleted or changed
    assert "byte 40 of" in (store.dir / "damaged" / f"{first.name}.txt").read_text()
    (again,) = stored(run, "grid")
    pd.testing.assert_frame_equal(cells(again), want)  # the same numbers: the evaluation is seeded
    for path in rest:  # the other call's parts are untouched
        assert path.read_bytes() == before[path.relative_to(run)]


def test_a_damaged_part_takes_the_parts_of_its_call_aside(run):
    (store,) = stored(run, "grid")
    want = cells(store)
    calls = {}
    for p in parts_of(store):
        calls.setdefault(call_of(p), []).append(p)
    group = next(g for g in calls.values() if len(g) > 1)  # results and by_position of one call
    other = next(p for p in group if not p.name.startswith("results-"))
    held = pd.read_csv(next(p for p in group if p.name.startswith("results-")))
    other.write_bytes(other.read_bytes()[:-5])
    summary = evaluate(load_run(run, CPU), grid())
    n = len(held[["sigma_f", "sigma_x", "length"]].drop_duplicates())
    assert summary["cells_computed"] == n > 0  # the call's cells, whole again in every table
    assert sorted(p.name for p in (store.dir / "damaged").glob("*.csv")) == sorted(p.name for p in group)
    assert "written in the same call" in next((store.dir / "damaged").glob("results-*.txt")).read_text()
    pd.testing.assert_frame_equal(cells(stored(run, "grid")[0]), want)


def test_a_damaged_protocol_file_is_written_again_from_the_settings(run, caplog):
    (store,) = stored(run, "grid")
    path = store.dir / "protocol.json"
    whole = path.read_bytes()
    path.write_bytes(whole[:60])  # cut off by a copy that was not atomic
    with caplog.at_level(logging.WARNING):
        summary = evaluate(load_run(run, CPU), grid())
    assert summary["cells_computed"] == 0 and summary["protocol_id"] == store.id
    assert json.loads(path.read_bytes()) == json.loads(whole)  # the same settings, rewritten
    assert (store.dir / "damaged" / "protocol.json").read_bytes() == whole[:60]
    assert f"{path} (the settings of the stored cells beside it) is damaged: not JSON" in caplog.text


def test_a_protocol_file_with_other_settings_is_refused(run):
    (store,) = stored(run, "grid")
    path = store.dir / "protocol.json"
    info = json.loads(path.read_text())
    info["protocol"]["seed"] = 6  # a hand edit: the cells beside it were made with seed 5
    path.write_text(json.dumps(info))
    before = files(run)
    with pytest.raises(StoreError, match=f"{path} holds other settings than the evaluation"):
        evaluate(load_run(run, CPU), grid())
    assert files(run) == before


def test_derived_files_are_redrawn_not_read(run):
    (store,) = stored(run, "grid")
    path = store.dir / "summary.json"
    whole = json.loads(path.read_text())
    table = (store.dir / "results.csv").read_bytes()
    path.write_text(path.read_text()[:25])  # damaged derived files
    (store.dir / "results.csv").write_bytes(table[:-30])
    (store.dir / whole["figures"][0]).unlink()  # and a figure gone
    summary = evaluate(load_run(run, CPU), grid())
    assert summary["cells_computed"] == 0
    assert (store.dir / "results.csv").read_bytes() == table and (
        store.dir / whole["figures"][0]
    ).stat().st_size
    drawn = {p: p.stat().st_mtime_ns for p in store.dir.iterdir() if p.is_file()}
    evaluate(load_run(run, CPU), grid())  # nothing changed: nothing rewritten
    assert {p: p.stat().st_mtime_ns for p in store.dir.iterdir() if p.is_file()} == drawn
    again = json.loads(path.read_text())
    assert {k: v for k, v in again.items() if k != "dir"} == {k: v for k, v in whole.items() if k != "dir"}


# ---------------------------------------------------------------------------------- readers
def test_compare_leaves_damaged_files_in_place_and_says_what_it_leaves_out(run, caplog, capsys):
    (store,) = stored(run, "grid")
    first = store.parts("results")[0]
    first.write_bytes(b"\x80" * 10 + b"\n")
    before = files(run)
    with caplog.at_level(logging.WARNING):
        frame = stored(run, "grid")[0].read("results")
    assert len(frame[["sigma_f", "sigma_x"]].drop_duplicates()) == 3  # the damaged call's cell left out
    assert not ((frame.sigma_f == 1.0) & (frame.sigma_x == 1.0)).any()
    assert files(run) == before  # left where it is
    assert f"{first} (a part of the stored cells) is damaged" in caplog.text
    assert f"python evaluate.py run_dir={run} eval=grid" in caplog.text
    other = run.parent / "other"
    shutil.copytree(run, other)
    (other / "run_id.txt").write_text("r-another-run\n")  # (a copy would be refused as one run twice)
    (store.dir / "protocol.json").write_bytes(b'{"evaluation": "gr')  # and then its protocol.json
    before = files(run)
    with caplog.at_level(logging.WARNING):
        code = commands.compare([str(run), str(other), "--eval", "grid", "--out", str(run.parent / "cmp")])
    assert code == 2  # refused in words (no traceback): the protocol is not stored in every run
    assert "is stored in every run" in capsys.readouterr().err
    assert "protocol.json (the settings of the stored cells beside it) is damaged: not JSON" in caplog.text
    assert files(run) == before  # a report writes nothing into a run


# ---------------------------------------------------------------------------------- non-finite values
def test_values_that_overflow_are_stored_marked_with_a_warning(run, caplog):
    with caplog.at_level(logging.WARNING):
        summary = evaluate(load_run(run, CPU), grid(sigmas=[1e7]))
    frame = pd.read_csv(run / "eval" / "grid" / summary["protocol_id"] / "results.csv")
    inf = frame[frame["value"].abs() == float("inf")]
    assert len(inf) and set(inf["non_finite"]) == {"value"}  # e.g. averaging's mse in float32
    assert frame.loc[frame["value"].abs() < float("inf"), "non_finite"].isna().all()
    assert summary["non_finite_rows"] == len(inf)
    assert "hold values that are not finite" in caplog.text and "predictor=" in caplog.text


# ---------------------------------------------------------------------------------- run identity
def test_cells_of_another_model_are_never_reused(run):
    ckpt = run / "checkpoints" / "last.pt"
    state = torch.load(ckpt, weights_only=True)
    assert state["run_id"] == (run / "run_id.txt").read_text().strip()  # written at the first start
    (store,) = stored(run, "grid")
    assert set(store.read()["run_id"]) == {state["run_id"]}  # and kept in every stored cell
    torch.save({**state, "run_id": "ranother"}, ckpt)  # another model in the same folder
    summary = evaluate(load_run(run, CPU), grid())
    assert (summary["cells_computed"], summary["cells_reused"]) == (4, 0)
    derived = pd.read_csv(store.dir / "results.csv")
    assert set(derived["run_id"]) == {"ranother"}  # the old model's cells are not drawn as its own


def test_a_folder_of_older_code_keeps_working_and_adopts_an_identity(tmp_path):
    run = tmp_path / "run"
    train(make_cfg("train.steps=3", "evaluation.enabled=false"), run)
    ckpt = run / "checkpoints" / "last.pt"
    state = torch.load(ckpt, weights_only=True)
    torch.save({k: v for k, v in state.items() if k != "run_id"}, ckpt)  # as today's code writes them
    (run / "run_id.txt").unlink()
    first = evaluate(load_run(run, CPU), grid())
    assert "run_id" not in pd.read_csv(run / "eval" / "grid" / first["protocol_id"] / "results.csv")
    assert evaluate(load_run(run, CPU), grid())["cells_computed"] == 0  # its cells reused as before
    train(make_cfg("train.steps=6", "evaluation.enabled=false"), run)  # resumed: adopts an identity
    adopted = (run / "run_id.txt").read_text().strip()
    assert torch.load(ckpt, weights_only=True)["run_id"] == adopted
    again = evaluate(load_run(run, CPU), grid())
    assert again["steps"] == [3, 6] and again["cells_computed"] == 4
