"""The dependency lock (lock.txt): generate it, check an environment against it, say what drifted.

    python3 scripts/lock.py compile               # lock.txt from pyproject.toml + constraints.txt (uv)
    .venv/bin/python scripts/lock.py check        # every installed package at the lock's version
    .venv-latest/bin/python scripts/lock.py diff  # the packages whose version differs from the lock

``lock.txt`` is uv's *universal* resolution of ``make install``'s requirements (the package with its
dev, lm, garg, hf and kernels extras, ``constraints.txt`` applied) for every Python the project supports
(``requires-python``) and every platform: one file, with environment markers where the resolution
forks (numpy, pandas and transformers differ for Python 3.10). ``make install`` passes it to pip as a
constraints file, so pip installs exactly those versions and nothing it does not need: a CPU machine
skips the nvidia-* lines that PyPI's CUDA build of torch brings; a CUDA machine gets exactly them.

torch is the one package whose *build* differs by machine (``scripts/torch_index.py``): the lock pins
its version (2.13.0), which both the CPU build (``2.13.0+cpu``) and PyPI's CUDA build satisfy, so
``check`` compares versions without their local label (PEP 440: ``==2.13.0`` matches ``2.13.0+cpu``).

``check`` and ``diff`` read the running interpreter's installed distributions (``importlib.metadata``)
and evaluate the lock's markers for it (``packaging``, installed with pip's dependencies of the suite),
so they run with the environment's own python. Only the standard library and ``packaging``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lock.txt"
# make install's extras: the one list (the Makefile passes the same names)
EXTRAS = ("dev", "lm", "garg", "hf", "kernels")
# what an environment holds that no requirement asks for: pip's own tools and the project itself
NOT_LOCKED = {"pip", "setuptools", "wheel", "ssa-repro", "ssa_repro"}
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*(?:;\s*(.+))?$")


def canonical(name: str) -> str:
    """PEP 503's normalised name (``Jinja2`` and ``jinja2``, ``ruamel.yaml`` and ``ruamel-yaml`` agree)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """The version without its local label: ``2.13.0+cpu`` -> ``2.13.0``."""
    return version.split("+", 1)[0]


def read_lock(path: Path = LOCK) -> dict[str, list[tuple[str, str | None]]]:
    """{canonical name: [(version, marker or None), ...]} from a ``name==version ; marker`` file."""
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: run `make lock` to generate it")
    pins: dict[str, list[tuple[str, str | None]]] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise SystemExit(f"{path}:{n}: not a `name==version [; marker]` line: {raw!r}")
        pins.setdefault(canonical(m[1]), []).append((m[2], m[3]))
    return pins


def locked_versions(path: Path = LOCK) -> dict[str, str]:
    """{canonical name: version} of the lock's lines whose marker holds for this interpreter."""
    from packaging.markers import Marker  # pip's dependency; in every environment the suite runs in

    out: dict[str, str] = {}
    for name, entries in read_lock(path).items():
        for version, marker in entries:
            if marker is None or Marker(marker).evaluate():
                out[name] = version
                break
    return out


def installed_versions() -> dict[str, str]:
    """{canonical name: version} of every distribution this interpreter sees (``pip freeze``'s list)."""
    return {canonical(d.metadata["Name"]): d.version for d in md.distributions() if d.metadata["Name"]}


def brought_by(root: str = "torch") -> set[str]:
    """Canonical names of the installed distributions ``root`` requires, transitively (its build's own
    dependencies: a CUDA build from another index, ``SSA_TORCH_INDEX``, brings nvidia-* packages the
    lock, resolved against PyPI's build, does not name)."""
    from packaging.requirements import Requirement

    seen, todo = set(), [root]
    while todo:
        try:
            reqs = md.requires(todo.pop()) or []
        except md.PackageNotFoundError:
            continue
        for r in reqs:
            req = Requirement(r)
            name = canonical(req.name)
            if name not in seen and (req.marker is None or req.marker.evaluate({"extra": ""})):
                seen.add(name)
                todo.append(req.name)
    return seen


def drift(path: Path = LOCK) -> list[tuple[str, str | None, str]]:
    """[(package, locked version or None if the lock lacks it, installed version)] that disagree. A
    package the lock lacks that torch's build brings (:func:`brought_by`) is torch's choice, not drift."""
    locked = locked_versions(path)
    installed = installed_versions()
    torch_deps = brought_by("torch") if "torch" in installed else set()
    rows = []
    for name, version in sorted(installed.items()):
        if name in NOT_LOCKED or (name not in locked and name in torch_deps):
            continue
        want = locked.get(name)
        if want is None or public(version) != public(want):
            rows.append((name, want, version))
    return rows


def describe(rows: list[tuple[str, str | None, str]]) -> str:
    """One line per drifted package: ``transformers 5.24.0 (lock) -> 5.25.0 (installed)``."""
    return "\n".join(
        f"  {name} {want or '(not in the lock)'} (lock) -> {have} (installed)" for name, want, have in rows
    )


def moved(packages: list[str] | tuple[str, ...] = (), path: Path = LOCK) -> str:
    """A sentence for a failing test: which packages differ from the lock (the given ones, else all).

    A test of a number the project publishes appends this to its assertion message, so a failure under
    newer versions (``make test-latest``) names the package that moved rather than only the number.
    """
    try:
        rows = drift(path)
    except (SystemExit, ImportError) as e:  # no lock beside this checkout, or no packaging
        return f"(the lock could not be read: {e})"
    if packages:
        wanted = {canonical(p) for p in packages}
        rows = [r for r in rows if r[0] in wanted]
    if not rows:
        return "every installed package is at the lock's version, so the change is in this project's code"
    return "packages that differ from lock.txt:\n" + describe(rows)


def lowest_python(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The lowest Python the project supports (``requires-python = ">=3.10"`` -> ``3.10``): the lock's floor.

    uv's universal resolution otherwise starts at the interpreter it runs under.
    """
    m = re.search(r'^requires-python\s*=\s*">=\s*([0-9.]+)', pyproject.read_text(), re.M)
    if m is None:
        raise SystemExit(f'{pyproject}: no `requires-python = ">=X.Y"` line to take the lock\'s floor from')
    return m[1]


def compile_lock(uv: str, out: Path = LOCK) -> int:
    """Run uv's universal resolution into ``out`` (relative paths, so the header's command is portable)."""
    cmd = [uv, "pip", "compile", "pyproject.toml", *[a for e in EXTRAS for a in ("--extra", e)]]
    cmd += ["--constraint", "constraints.txt", "--universal", "--python-version", lowest_python()]
    cmd += ["--output-file", str(out.relative_to(ROOT))]
    cmd += ["--custom-compile-command", "make lock"]
    print(" ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="regenerate lock.txt with uv (make lock)")
    c.add_argument("--uv", default=shutil.which("uv") or "uv", help="the uv executable")
    sub.add_parser("check", help="fail unless every installed package is at the lock's version")
    sub.add_parser("diff", help="print the packages whose installed version differs from the lock")
    a = p.parse_args(argv)
    if a.cmd == "compile":
        return compile_lock(a.uv)
    rows = drift()
    if a.cmd == "diff":
        print(f"{len(rows)} packages differ from lock.txt" + (":\n" + describe(rows) if rows else ""))
        return 0
    if rows:
        print(
            f"this environment is not the lock ({len(rows)} packages differ):\n{describe(rows)}",
            file=sys.stderr,
        )
        print(
            "recreate it (make clean install) or move the lock forward (docs/development.md)", file=sys.stderr
        )
        return 1
    print(f"lock check: {len(installed_versions())} installed distributions, each at lock.txt's version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
