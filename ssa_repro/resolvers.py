"""The resolvers conf/ uses (registered on import; ssa_repro/config.py imports this).

``ssa_run_name``: a run folder's name, refused naming the key when it cannot be one (``run_name``);
``ssa_job_dir``: a sweep job's folder name from its overrides (``job_dir``); ``ssa_eval_sweep_dir``:
where an evaluation multirun's job logs go (``eval_sweep_dir``). See ssa_repro/cli/sweeps.py for the
sweeps that use them.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from ssa_repro.core.rundir import RunDir

NAME_MAX = 255  # bytes of one file or folder name (Linux, macOS and Windows file systems)
MAX_DIR = 200  # characters of a job folder name before the rest is replaced by a hash
SWEEP_KEYS_ENV = "SSA_SWEEP_KEYS"  # the keys that vary across the sweep's jobs (set before jobs start)


def job_dir(overrides, exclude, seed) -> str:
    """A sweep job's folder name from its overrides (``hydra.overrides.task``): ``key=value`` joined by
    ``,`` without the keys in ``exclude``; the keys that vary across the sweep first (so they survive a
    cut), then the others, then ``seed=<seed>`` always (seeds never share a folder). Characters that
    would nest folders or need quoting become ``_``; past MAX_DIR characters the overrides are cut and
    ended with a hash of them all (the seed stays), so names stay unique. The same command gives the
    same names."""
    varying = [k for k in os.environ.get(SWEEP_KEYS_ENV, "").split(",") if k]
    items = []
    for o in overrides or []:
        key = str(o).split("=", 1)[0].lstrip("+~")
        if key not in set(exclude or []):  # sweep/size=3L2AH is shown as size=3L2AH
            items.append((key not in varying, str(o).lstrip("+~").removeprefix("sweep/")))
    clean = lambda text: re.sub(r"[/\\\s'\"*?]", "_", text)  # noqa: E731
    body, tail = clean(",".join(o for _, o in sorted(items))), clean(f"seed={seed}")
    if len(body) + len(tail) + 1 > MAX_DIR:  # cut the overrides, keep the seed
        digest = hashlib.sha1(body.encode()).hexdigest()[:10]
        body = body[: MAX_DIR - len(tail) - 12] + "~" + digest
    return f"{body},{tail}" if body else tail


def eval_sweep_dir(task_overrides, stamp: str) -> str:
    """Where an evaluation multirun's job logs go: ``<run>/eval/sweeps/<stamp>`` for one run,
    ``<common parent>/eval_sweeps/<stamp>`` for several (``run_dir`` values of the overrides)."""
    runs: list[str] = []
    for override in OverridesParser.create().parse_overrides([str(o) for o in task_overrides or []]):
        if override.key_or_group == "run_dir":
            runs = (
                list(override.sweep_string_iterator())
                if override.is_sweep_override()
                else [override.get_value_element_as_str()]
            )
    if not runs:
        return str(Path("eval_sweeps") / stamp)
    paths = [Path(r.strip("'\"")).expanduser().absolute() for r in runs]
    if len(set(paths)) == 1:
        return str(RunDir(paths[0]).eval_sweeps_dir / stamp)
    return str(Path(os.path.commonpath(paths)) / "eval_sweeps" / stamp)


def run_name(stamp: str, *keys: str, _root_) -> str:
    """A run folder's name: ``stamp`` and the values of ``keys`` (``task.name``, ``scorer.label``, ...)
    joined by ``_``. A value that would nest folders (``/``) or a name past the file system's limit
    for one name (NAME_MAX bytes) is refused naming the key and what is allowed, before Hydra creates
    any folder (else the OS's "File name too long" names no key and leaves an empty dated folder)."""
    values = [(k, str(OmegaConf.select(_root_, k))) for k in keys]
    for key, value in values:
        if "/" in value or "\0" in value:
            raise ValueError(
                f"{key}={value!r} holds '/' and would nest folders in the run folder's name; allowed: a "
                "name without '/'"
            )
    name = "_".join([stamp, *(v for _, v in values)])
    if len(name.encode()) > NAME_MAX:
        key, value = max(values, key=lambda kv: len(kv[1].encode()))
        raise ValueError(
            f"{key}={value[:40]!r}... ({len(value)} characters) makes the run folder's name "
            f"{len(name.encode())} bytes long; allowed: at most {NAME_MAX} bytes in all (the file system's "
            f"limit for one name): shorten {key}, or name the folder with hydra.run.dir=<folder>"
        )
    return name


OmegaConf.register_new_resolver("ssa_job_dir", job_dir, replace=True)
OmegaConf.register_new_resolver("ssa_run_name", run_name, replace=True)
OmegaConf.register_new_resolver("ssa_eval_sweep_dir", eval_sweep_dir, replace=True)
