"""Keys the schemas do not know, said with the valid ones, before any work.

Two ways a wrong key reaches a config: a plain override (``model.n_layers=2``) fails in Hydra's
composition with ``Key 'n_layers' not in 'ModelConfig'``, which does not say what the keys are; and an
override with ``+`` (``+model.n_layers=2``, the form Hydra's own message suggests) is accepted and
would train with the key ignored. :func:`explain_argv` composes the command line once before Hydra
does and turns the first kind into a message with the node's valid keys and the closest match;
:func:`unknown_keys` finds the second kind in a composed config by comparing every typed node with its
schema.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError


def _schema_fields(node) -> list[str] | None:
    t = OmegaConf.get_type(node)
    return [f.name for f in dataclasses.fields(t)] if dataclasses.is_dataclass(t) else None


def _hint(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """Keys of typed nodes that their schema (dataclass) does not declare, each with the valid keys."""
    out = []
    fields = _schema_fields(cfg)
    for key in cfg.keys() if isinstance(cfg, DictConfig) else []:
        if prefix == "" and key == "hydra":
            continue
        full = f"{prefix}{key}"
        if fields is not None and key not in fields:
            out.append(
                f"{full} is not a key of {prefix.rstrip('.') or 'the config'} "
                f"({OmegaConf.get_type(cfg).__name__}); valid keys: {', '.join(fields)}{_hint(str(key), fields)}"
            )
            continue
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            out += unknown_keys(child, f"{full}.")
    return out


def _first_values(argv: list[str]) -> list[str]:
    """The command line's overrides with each sweep replaced by its first value (Hydra's own ones
    left out): one job's overrides, for one composition."""
    args = [a for a in argv if "=" in a and not a.startswith("-")]
    out = []
    for o in OverridesParser.create().parse_overrides(args):
        if o.is_hydra_override():
            continue
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                continue
            try:
                out.append(f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}")
            except Exception:  # noqa: BLE001  (glob() needs Hydra's loader: let Hydra compose it)
                continue
        else:
            out.append(o.input_line)
    return out


# Hydra's own flags whose next argument is a value, not an override
FLAGS_WITH_VALUE = {
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--info",
    "-i",
    "--experimental-rerun",
}
INFO_WORDS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath", "job", "hydra"}


def stray_word(argv: list[str]) -> str | None:
    """An argument that is not key=value where an override is expected: usually the second half of a
    value with a space in it that was not quoted."""
    for i, a in enumerate(argv):
        if a.startswith("-") or "=" in a:
            continue
        if i and (argv[i - 1] in FLAGS_WITH_VALUE or a in INFO_WORDS and argv[i - 1].startswith("-")):
            continue
        before = argv[i - 1] if i else ""
        example = (
            f"'{before.split('=', 1)[0]}=\"{before.split('=', 1)[1]} {a}\"'"
            if "=" in before
            else "'key=\"a b\"'"
        )
        return f"{a!r} is not key=value: a value with a space must be quoted, e.g. {example}"
    return None


def grammar_error(argv: list[str]) -> str | None:
    """Hydra's own words for the first override its grammar cannot read, with how to quote the value
    (an unquoted non-ASCII letter, an unbalanced bracket, ...); None when every override parses."""
    parser = OverridesParser.create()
    for a in argv:
        if "=" not in a or a.startswith("-"):
            continue
        try:
            parser.parse_overrides([a])
        except OverrideParseException as e:
            key, _, value = a.partition("=")
            why, link = str(e).splitlines()[0], "https://hydra.cc/docs/advanced/override_grammar/basic"
            odd = sorted({c for c in value if not c.isascii()})
            if not odd:
                return (
                    f"{a!r} is not an override Hydra's grammar can read ({why}): check its brackets and "
                    "quotes; a text value with spaces, commas, brackets or non-ASCII letters must be quoted, "
                    f"with the shell's quotes around it, e.g. 'key=\"a, b\"' ({link})"
                )
            inner = f"'{value}'" if '"' in value else f'"{value}"'
            return (
                f"{a!r} is not an override Hydra's grammar can read ({why}): a value with non-ASCII "
                f"characters (here {', '.join(map(repr, odd))}) must be quoted, with the shell's quotes "
                f"around it: {key + '=' + inner!r} ({link})"
            )
    return None


def explain_argv(config_dir: str | Path, config_name: str, argv: list[str]) -> str | None:
    """A message for a command line whose composition fails on an unknown key, naming the node's
    valid keys (or with a stray word, an unquoted space; with a value Hydra's grammar cannot read, how
    to quote it); None when it composes (or fails for another reason, which Hydra then reports)."""
    stray = stray_word(argv) or grammar_error(argv)
    if stray:
        return stray
    try:
        overrides = _first_values(argv)
    except OverrideParseException:
        return None  # Hydra says what is wrong with the syntax
    if GlobalHydra.instance().is_initialized():
        return None
    try:
        with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
            try:
                compose(config_name, overrides=overrides)
                return None
            except ConfigCompositionException as e:
                cause = e.__cause__
                if not isinstance(cause, (ConfigKeyError, ConfigAttributeError)) or not getattr(
                    cause, "full_key", None
                ):
                    return None
                full = str(cause.full_key)
                parent, _, key = full.rpartition(".")
                rest = [o for o in overrides if not o.lstrip("+~").startswith(f"{full}=")]
                node = compose(config_name, overrides=rest)
                node = OmegaConf.select(node, parent) if parent else node
                valid = list(node.keys()) if isinstance(node, DictConfig) else []
                where = f"{parent} ({OmegaConf.get_type(node).__name__})" if parent else "the config"
                return (
                    f"{full} is not a key of {where}; valid keys: {', '.join(map(str, valid))}"
                    f"{_hint(key, [str(v) for v in valid])}"
                )
    except Exception:  # noqa: BLE001  (anything else: Hydra reports it in its own words)
        return None
