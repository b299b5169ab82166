"""Every refusal names the key or file, the value and what is allowed (issue 61, class 3): walks of
every schema key with a wrong-typed value (the scorers ``ssa_repro.hf.attach`` takes, a run's config
on the command line and in a run folder's config.yaml, every evaluation's ``eval.*``), and the refusals
that named no key or the wrong cause (a run folder's name the file system cannot hold, ``data.root``
a file, the fetcher's read-only ``--root`` and ``--cache-dir``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.nodes import AnyNode, BooleanNode, EnumNode, FloatNode, IntegerNode, StringNode

import ssa_repro.resolvers  # noqa: F401  (registers ssa_run_name)
from ssa_repro.core import atomic
from ssa_repro.core.rundir import RunDir, RunFolderError
from ssa_repro.data import download as D
from ssa_repro.data.paths import DataFileError, data_file
from ssa_repro.evaluation.registry import EVALUATORS, applicable
from ssa_repro.evaluation.runner import check
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import build_task
from tests.conftest import make_cfg, run_script

pytest.importorskip("transformers", reason="the hf extra: pip install -e '.[hf]'")
from ssa_repro.hf import AttachError  # noqa: E402
from ssa_repro.hf.attach import scorer_config  # noqa: E402


def wrong(node):
    """A value of the wrong type for a schema node (None where every value is allowed)."""
    if isinstance(node, BooleanNode):
        return "maybe"
    if isinstance(node, FloatNode | IntegerNode | EnumNode | ListConfig):
        return "abc"
    if isinstance(node, StringNode):
        return [1]
    return None  # AnyNode: anything goes


def leaves(node: DictConfig, prefix: str = ""):
    """(dotted key, schema node) of every typed leaf below ``node``."""
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            yield from leaves(child, f"{prefix}{key}.")
        elif not isinstance(child, AnyNode):
            yield f"{prefix}{key}", child


def scorer_keys():
    for name in SCORERS.names():
        schema = OmegaConf.structured(SCORERS.schemas[name])
        for key, node in leaves(schema):
            if key != "name":
                yield pytest.param(name, key, node, id=f"{name}.{key}")


@pytest.mark.parametrize(("scorer", "key", "node"), list(scorer_keys()))
def test_attach_names_the_key_of_every_wrong_typed_value(scorer, key, node):
    """The issue's instance: ``attach(scorer="ssa", b_init="abc")`` said only OmegaConf's first line."""
    value = wrong(node)
    with pytest.raises(AttachError) as e:
        scorer_config(scorer, {key: value})
    assert f"{key}={value!r}" in str(e.value) and "allowed: " in str(e.value), str(e.value)


def test_attach_names_the_key_and_what_is_allowed():
    with pytest.raises(AttachError, match=r"b_init='abc': .*Float; allowed: a number"):
        scorer_config("ssa", {"b_init": "abc"})
    with pytest.raises(AttachError, match=r"learn_b='maybe': .*; allowed: true or false"):
        scorer_config("ssa", {"learn_b": "maybe"})
    with pytest.raises(AttachError, match=r"param='raw2': .*; allowed: one of constrained, exp, raw"):
        scorer_config("ssa", {"param": "raw2"})


def run_keys():
    cfg = make_cfg()
    return [(k, n) for k, n in leaves(cfg) if wrong(n) is not None]


def test_every_run_config_key_with_a_wrong_typed_value_is_named_on_the_command_line():
    found = run_keys()
    assert len(found) > 40  # the walk reaches every group (task, model, scorer, train, ...)
    for key, node in found:
        value = wrong(node)
        text = f"[{value[0]}]" if isinstance(value, list) else value
        with pytest.raises(Exception) as e:  # noqa: PT011  (Hydra's composition error)
            make_cfg(f"{key}={text}")
        assert f"{key}={text}" in str(e.value), (key, str(e.value))


def test_every_key_of_a_run_folders_config_is_named_with_its_value(tmp_path):
    cfg = make_cfg()
    # (``evaluation``: the end-of-run evaluation's block, typed by the evaluation layer where it runs;
    # a finished run's folder is read over the run's schema, whose ``evaluation`` is Any; task.name and
    # scorer.name choose the schema, and are checked against their registries where the run is built)
    skip = ("evaluation.", "task.name", "scorer.name")
    for key, node in [(k, n) for k, n in run_keys() if not k.startswith(skip)]:
        bad = OmegaConf.to_container(cfg, resolve=False)
        OmegaConf.update(bad := OmegaConf.create(bad), key, wrong(node), force_add=True)
        (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(bad))
        with pytest.raises(RunFolderError) as e:
            RunDir(tmp_path).config()
        assert f"{key}=" in str(e.value) and "config.yaml" in str(e.value), (key, str(e.value))


def test_every_eval_key_with_a_wrong_typed_value_is_named():
    run_cfg = make_cfg()
    task = build_task(run_cfg.task)
    walked = 0
    for name in applicable(task):
        schema = OmegaConf.structured(EVALUATORS.schemas[name])
        for key, node in leaves(schema):
            if key in ("name", "preset") or wrong(node) is None:
                continue
            found = check(run_cfg, OmegaConf.create({"name": name, key: wrong(node)}))
            assert any(f"eval.{key}=" in p and "allowed: " in p for p in found), (name, key, found)
            walked += 1
    assert walked > 20


# ---------------------------------------------------------------------------------- names and folders
def test_a_run_folder_name_the_file_system_cannot_hold_is_refused_naming_the_key(tmp_path):
    """The issue's instance: a 300-character scorer.label ended in the OS's "File name too long" and
    left an empty outputs/<date>/; a label holding '/' nested the run folder silently."""
    for label, words in [("a" * 300, "(300 characters) makes the run folder's name"), ("a/b", "holds '/'")]:
        r = run_script("train.py", "debug=tiny", f"scorer.label={label}", cwd=tmp_path)
        assert r.returncode == 1 and f"scorer.label='{label[:40]}'" in r.stderr and words in r.stderr, (
            r.stderr
        )
        assert not list(tmp_path.iterdir())  # no folder made


def test_data_root_pointing_at_a_file_says_so(tmp_path):
    (tmp_path / "root").write_text("")
    with pytest.raises(DataFileError, match=r"resolves to .*root \(which is a file, not a folder"):
        data_file(tmp_path / "root", "zorro/a.txt")
    (tmp_path / "data" / "zorro" / "a.txt").mkdir(parents=True)  # the file's own path a folder
    with pytest.raises(DataFileError, match=r"\(where zorro/a.txt is a folder, not a file\)"):
        data_file(tmp_path / "data", "zorro/a.txt")
    with pytest.raises(DataFileError, match=r"\(which does not exist\)"):
        data_file(tmp_path / "none", "zorro/a.txt")


@pytest.fixture
def read_only_mount(monkeypatch):
    """``os.statvfs`` saying the folder ``ro`` lies on a read-only file system (a mount the tests cannot
    make), as a superuser sees one: os.access answers "not writable" there too."""
    real, access = os.statvfs, os.access

    def statvfs(path):
        result = real(path)
        if Path(path).name == "ro":
            return os.statvfs_result((*result[:8], result.f_flag | os.ST_RDONLY, result.f_namemax))
        return result

    monkeypatch.setattr(atomic.os, "statvfs", statvfs)
    monkeypatch.setattr(atomic.os, "access", lambda p, m: Path(p).name != "ro" and access(p, m))


def test_a_read_only_root_is_said_to_be_read_only(tmp_path, read_only_mount):
    """The issue's instance: a superuser got "not writable by this user" on a read-only mount."""
    (tmp_path / "ro").mkdir()
    with pytest.raises(
        D.BadInput, match=r"--root .*ro/data: .*ro is on a read-only file system; allowed: a writable"
    ):
        D.check_root(tmp_path / "ro" / "data")


def test_a_read_only_cache_is_refused_before_any_download(tmp_path, read_only_mount):
    """Another instance: --cache-dir was never checked; a derived file's input failed mid-run."""
    (tmp_path / "ro").mkdir()
    manifest = D.load_manifest()
    derived = next(e for e in manifest.files if e.derive and e.inputs)
    with pytest.raises(D.BadInput, match=r"--cache-dir .*ro: .*read-only file system; allowed: a writable"):
        D.check_cache([derived], manifest, tmp_path / "ro")
    rc = D.main(["--root", str(tmp_path / "data"), "--only", derived.group, "--cache-dir", str(tmp_path / "ro"),
                 "--base-url", "http://127.0.0.1:9", "--no-progress"])  # fmt: skip
    assert rc == 2 and not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.part"))


def test_a_refused_folder_name_leaves_no_state_for_the_next_command(tmp_path):
    """After train.py refused scorer.label='a/b' in this process, Hydra's HydraConfig still holds that
    config: evaluate's main, called next, must not read it (it did: the hand-off resolved its run dir)."""
    from hydra import compose, initialize_config_dir

    from ssa_repro.cli import evaluate_app
    from ssa_repro.config import CONF_DIR
    from tests.conftest import make_cfg

    r = run_script("train.py", "debug=tiny", "scorer.label=a/b", cwd=tmp_path)
    assert r.returncode == 1 and "holds '/'" in r.stderr
    run = tmp_path / "run"
    from ssa_repro.jobs.train_job import run_job

    run_job(make_cfg("evaluation.enabled=false"), run)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"run_dir={run}", "eval=quick"])
    evaluate_app.main(cfg)  # raised InterpolationResolutionError (scorer.label='a/b') before
    assert list((run / "eval").iterdir())
