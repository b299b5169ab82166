"""The run folder type (``ssa_repro/core/rundir.py``): the one module that names a run folder's files,
configs read over the schema, and two house rules read from the source (``ast``): no other module
spells a run-folder file name, and no ``cfg.get(key, default)`` restates a schema default."""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest
import yaml
from omegaconf import OmegaConf

from ssa_repro.core import rundir, schema
from ssa_repro.core.rundir import RunDir, RunFolderError, typed
from ssa_repro.evaluation import EVALUATORS
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import TASKS
from tests.conftest import ROOT, make_cfg

PACKAGE = ROOT / "ssa_repro"
# every name core/rundir.py gives a run folder's files and folders (read from the module, so a name added
# there is guarded at once), but "eval" and "sweeps": they are also the config group, W&B's metric prefix
# and a command's option, so as bare words they say nothing about a path
GENERIC = {rundir.EVAL, rundir.EVAL_SWEEPS}
FILE_NAMES = {
    *(v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str)),
    *rundir.WANDB_FILES,
    "overrides.yaml",
} - GENERIC


def strings(tree: ast.AST) -> list[tuple[str, int]]:
    """Every string constant of the module but its docstrings (f-string pieces included)."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (n.value, n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def spells_a_file_name(text: str) -> bool:
    """``text`` (a string constant, or one literal piece of an f-string) holds a run folder's file name
    as a path segment: the whole string, or a piece between slashes ("/last.pt", "checkpoints/");
    "step_..." names a kept checkpoint. A sentence that mentions a name is not a path."""
    return text.startswith("step_") or any(seg in FILE_NAMES for seg in re.split(r"[/\\]", text))


def test_only_the_run_folder_type_spells_its_file_names():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "core" / "rundir.py"
        for text, line in strings(ast.parse(path.read_text()))
        if spells_a_file_name(text)
    ]
    assert not found, "use ssa_repro.core.rundir.RunDir instead:\n" + "\n".join(found)


def test_the_file_name_rule_catches_a_spelled_name():
    tree = ast.parse('"""Writes config.yaml."""\npath = run / "checkpoints" / f"step_{s}.pt"\n')
    assert [t for t, _ in strings(tree) if spells_a_file_name(t)] == ["checkpoints", "step_"]


def spelled(path) -> list[str]:
    return [t for t, _ in strings(ast.parse(path.read_text())) if spells_a_file_name(t)]


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("p = run / 'wandb_id.txt'", "wandb_id.txt"),  # single quotes
        ("p = f'{run}/wandb_run.json'", "/wandb_run.json"),  # an f-string in single quotes
        ('p = f"{run}/run_id.txt"', "/run_id.txt"),  # an f-string in double quotes
        ("p = Path(f'{run}/checkpoints/{name}')", "/checkpoints/"),  # a folder inside an f-string
        ('p = f"{run}/{kind}/summary.json".strip()', "/summary.json"),  # after two replacement fields
        ("p = '''config.yaml'''", "config.yaml"),  # triple quotes (not a docstring)
        ("p = rf'{run}\\last.pt'", "\\last.pt"),  # a raw f-string with a Windows separator
        ('p = os.path.join(run, "discarded")', "discarded"),  # a folder name given whole
    ],
)
def test_the_file_name_rule_catches_every_string_form(tmp_path, line, name):
    """The rule reads the syntax tree, so neither quotes nor f-strings hide a name: a module written to a
    temporary file with one such line is caught, with the piece that spells it."""
    path = tmp_path / "leak.py"
    path.write_text(f'"""A module."""\n\n{line}\n')
    assert spelled(path) == [name]


def test_the_file_name_rule_passes_docstrings_sentences_and_other_files(tmp_path):
    path = tmp_path / "clean.py"
    path.write_text(
        '"""Writes config.yaml (a docstring may name it)."""\n\n'
        'p = f"{run}/notes.txt"\n'
        "message = 'no config.yaml (not started)'\n"
        'key = "eval"\n'
    )
    assert spelled(path) == []


def test_every_run_folder_name_is_guarded():
    """The names the rule looks for are read from core/rundir.py: the W&B files and the run id too."""
    assert {
        "wandb_id.txt",
        "wandb_run.json",
        "run_id.txt",
        "config.yaml",
        "last.pt",
        "discarded",
    } <= FILE_NAMES


def schema_defaults() -> dict[str, list]:
    """Every schema field's default, by key (a key several schemas share has several)."""
    classes = [schema.ModelConfig, schema.TrainConfig, schema.CurriculumConfig, schema.LoggerConfig]
    for registry in (TASKS, SCORERS, EVALUATORS):
        classes += list(registry.schemas.values())
    out: dict[str, list] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out.setdefault(f.name, []).append(getattr(f.default, "value", f.default))
    return out


def restated_defaults(tree: ast.AST, defaults: dict[str, list]) -> list[tuple[str, int]]:
    """``x.get("key", default)`` calls whose default is the schema's default for ``key``."""
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in defaults
        ):
            continue
        try:
            value = ast.literal_eval(node.args[1])
        except ValueError:
            continue
        if any(value == d and type(value) is type(d) for d in defaults[node.args[0].value]):
            found.append((node.args[0].value, node.lineno))
    return found


def test_no_get_restates_a_schema_default():
    defaults = schema_defaults()
    found = [
        f"{path.relative_to(ROOT)}:{line}: .get({key!r}, ...) restates the schema's default"
        for path in sorted(PACKAGE.rglob("*.py"))
        for key, line in restated_defaults(ast.parse(path.read_text()), defaults)
    ]
    assert not found, "read the key from the typed config:\n" + "\n".join(found)


def test_the_default_rule_catches_a_restated_default():
    tree = ast.parse('a = cfg.get("post_ln", False)\nb = cfg.get("post_ln", True)\nc = d.get("post_ln")\n')
    assert restated_defaults(tree, schema_defaults()) == [("post_ln", 1)]


# ------------------------------------------------------------------ reading a run folder's config
def write_config(folder, cfg: dict):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / rundir.CONFIG).write_text(yaml.safe_dump(cfg))
    return RunDir(folder)


def saved_config(*overrides: str) -> dict:
    return rundir.plain(make_cfg(*overrides))


def test_an_old_config_reads_new_keys_as_the_schemas_defaults(tmp_path):
    old = saved_config("scorer=ssa")
    del old["model"]["final_ln"], old["model"]["emb_ln"], old["scorer"]["learn_n"]
    old["task"]["lowercase_zorro"] = True  # a retired key: kept as written
    cfg = write_config(tmp_path / "run", old).config()
    assert cfg.model.final_ln is True and cfg.model.emb_ln is None
    assert cfg.scorer.learn_n == SCORERS.schemas["ssa"]().learn_n
    assert cfg.task.lowercase_zorro is True
    assert cfg.model.n_layer == old["model"]["n_layer"] and cfg.seed == old["seed"]
    # what was written reads back unchanged
    assert rundir.plain(cfg)["model"] == {**old["model"], "final_ln": True, "emb_ln": None}


def test_a_config_the_schema_refuses_names_the_file_and_key(tmp_path):
    bad = saved_config()
    bad["model"]["n_layer"] = "many"
    with pytest.raises(RunFolderError, match=r"config\.yaml.*model\.n_layer"):
        write_config(tmp_path / "run", bad).config()


def test_typed_matches_the_composed_config():
    """A composed config read over the schema is itself: nothing is added or changed."""
    cfg = make_cfg("task=every", "scorer=ssa")
    assert rundir.plain(typed(cfg)) == rundir.plain(cfg)


def test_typed_keeps_a_copy_per_data_and_hands_out_independent_ones():
    """typed() keeps its result for the same data: a second call equals the first, is a new object (a
    caller's change does not reach the kept one), and other values or another scorer are typed anew."""
    cfg = make_cfg("task=every", "scorer=ssa")
    first = typed(cfg)
    first.model.n_layer = 99
    second = typed(cfg)
    assert second is not first and second.model.n_layer == cfg.model.n_layer
    assert rundir.plain(second) == rundir.plain(cfg)
    other = make_cfg("task=every", "scorer=ssa", "model.n_layer=3")
    assert typed(other).model.n_layer == 3 and typed(cfg).model.n_layer == cfg.model.n_layer
    assert typed(make_cfg("task=every", "scorer=softmax")).scorer.name == "softmax"


def test_paths_and_state(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.problems() == [f"run_dir={run.path} is not a folder"]
    write_config(run.path, saved_config())
    assert run.is_run() and [p.split(" has no ")[1].split()[0] for p in run.problems()] == [
        "checkpoints/last.pt"
    ]
    assert run.kept_checkpoint(1200).name == "step_0001200.pt"
    assert run.kept_checkpoint(1200).parent == run.last_checkpoint.parent
    assert run.summary() is None
    run.summary_file.write_text("{not json")
    assert run.summary() is None  # damaged: not finished
    run.summary_file.write_text('{"steps": 3}')
    assert run.summary() == {"steps": 3}
    assert OmegaConf.is_config(run.raw_config())
