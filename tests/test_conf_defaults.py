"""Each default is written once: a YAML option sets only what differs from what it extends.

The rule, one for every YAML file under conf/ (group options, presets, ``_global_`` options such as
experiments and ``debug``, Hydra launcher options and the primary configs train.yaml / evaluate.yaml):
every key a file sets in its body must change the composed config. The file's option is composed on its
own (``scorer=ssa_n2``, ``experiment=paper_lm``, ``hydra/launcher=slurm``, ...) twice: as it is, and
from a copy of conf/ where that file keeps only its ``# @package`` line and its defaults list. A key the
body sets whose composed value (unresolved, enums as names) is the same both ways restates a default
and fails the test. So
- an option extending a schema (``/schema/scorer/ssa@_here_``) sets what differs from the schema's
  defaults, and a preset (``ssa_n2``, ``curriculum/off`` -> ``default``) what differs from its base;
- a ``_global_`` option is compared against the default config composed with the group choices its
  defaults list makes (``override /task: lm`` ...): ``experiment=paper_lm`` sets only what differs
  from ``task=lm`` with ``curriculum=off``, keys of a schema it places (``/schema/task/lm@task``) only
  what differs from that schema;
- a key that an option composed later always overrides is also reported (it never has an effect).
Patches are not checked: ``_global_`` options with no defaults list (``sweep/size/*``, ``sweep/*``,
``debug/*``), applied on top of whatever else is chosen, set absolute values. ``sweep/size/1L4AH``'s
``model.n_head: 4`` equals the default, but must win over ``experiment=paper_linear``'s 8 heads.
Comments may document the keys and their defaults; comments are not keys.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.conftest import CONF

FILES = sorted(
    p.relative_to(CONF) for p in CONF.rglob("*.yaml") if p.parts[len(CONF.parts)] not in ("local", "study")
)  # study: plain matrices


def _how_to_compose(rel: Path) -> tuple[str, list[str], str]:
    """(primary config, overrides that select the file's option, the package its body lands in)."""
    group, name = "/".join(rel.parent.parts), rel.stem
    if not group:  # a primary config
        return name, [], ""
    primary = "evaluate" if group == "eval" else "train"
    head = rel.parts[0]
    if head == "sweep" and group != "sweep":  # sweep/size: not in the defaults list
        return primary, [f"+{group}={name}"], group.replace("/", ".")
    return primary, [f"{group}={name}"], group.replace("/", ".")


def _package(text: str, default: str) -> str:
    for line in text.splitlines():
        if line.startswith("# @package"):
            package = line.split()[-1]
            return "" if package == "_global_" else package
    return default


def _is_patch(rel: Path) -> bool:
    text = (CONF / rel).read_text()
    return "# @package _global_" in text and "defaults" not in (yaml.safe_load(text) or {})


def _leaves(node, prefix: tuple = ()):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key)


def _value(container, path: tuple):
    for part in path:
        if not isinstance(container, dict) or part not in container:
            return "<absent>"
        container = container[part]
    return container


def _composed(conf_dir: Path, primary: str, overrides: list[str]) -> dict:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose(primary, overrides=overrides, return_hydra_config=True)
    return OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)


def _strip_body(path: Path) -> None:
    """Keep the file's ``# @package`` line and defaults list only."""
    text = path.read_text()
    header = [line for line in text.splitlines() if line.startswith("# @package")]
    defaults = (yaml.safe_load(text) or {}).get("defaults")
    body = yaml.safe_dump({"defaults": defaults}, sort_keys=False) if defaults is not None else ""
    path.write_text("\n".join(header) + ("\n" if header else "") + body)


@pytest.fixture(scope="module")
def conf_copy(tmp_path_factory):
    return Path(shutil.copytree(CONF, tmp_path_factory.mktemp("conf") / "conf"))


@pytest.mark.parametrize("rel", FILES, ids=[str(f) for f in FILES])
def test_an_option_sets_only_what_differs_from_what_it_extends(rel, conf_copy):
    text = (CONF / rel).read_text()
    body = {k: v for k, v in (yaml.safe_load(text) or {}).items() if k != "defaults"}
    if not body or _is_patch(rel):
        return
    primary, overrides, group_package = _how_to_compose(rel)
    package = _package(text, group_package)
    keys = [(*package.split("."), *k) if package else k for k in _leaves(body)]
    full = _composed(CONF, primary, overrides)
    _strip_body(conf_copy / rel)
    try:
        without = _composed(conf_copy, primary, overrides)
    finally:
        shutil.copyfile(CONF / rel, conf_copy / rel)
    restated = [f"{'.'.join(k)}: {_value(full, k)!r}" for k in keys if _value(full, k) == _value(without, k)]
    assert not restated, f"conf/{rel} restates what it extends (remove these keys): {restated}"


def test_files_cover_every_kind_of_option():
    names = {str(f) for f in FILES}
    assert {
        "train.yaml",
        "scorer/ssa_n2.yaml",
        "experiment/paper_lm.yaml",
        "hydra/launcher/slurm.yaml",
    } <= names
    assert not any(n.startswith("local/") for n in names)
    patches = {str(f).split("/")[0] for f in FILES if _is_patch(f)}
    assert patches == {"sweep", "debug"}, patches  # the only options exempt from the rule
