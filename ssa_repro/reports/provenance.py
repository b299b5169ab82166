"""Where a study report's numbers come from: the report's own commit and machine, and the commits the runs
were trained at (each run's ``provenance.json``: one record per start, with ``git_commit`` and
``git_dirty``), so a report says when its runs came from a dirty tree or from several commits.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

import pandas as pd

from ssa_repro.core.provenance import dirty
from ssa_repro.core.rundir import PROVENANCE


def git_state(cwd: Path | None = None) -> tuple[str, bool | None]:
    """(short commit, dirty) of the checkout holding this file (or ``cwd``); ("unknown", None) outside
    git. Dirty = a tracked file modified, documentation excepted (core.provenance.dirty: the report
    rewrites its own files under docs/results/)."""
    cwd = Path(cwd or Path(__file__).parent)

    def git(*args) -> str:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd)
        return out.stdout.strip() if out.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "unknown", None
    return commit, dirty(git("status", "--porcelain", "--untracked-files=no"))


COLUMNS = ["run_dir", "start", "time", "git_commit", "git_dirty", "git_changes", "device"]


def device_text(record: dict) -> str | None:
    """Where a start ran, as a report names it: ``cpu``, ``cuda (NVIDIA H200)``; None if not recorded."""
    device = record.get("device")
    if not device:
        return None
    name = (record.get("cuda") or {}).get("name") if str(device).startswith("cuda") else None
    return f"{device} ({name})" if name else str(device)


def run_commits(run_dirs) -> pd.DataFrame:
    """One row per start of every run: ``run_dir``, ``start`` (0-based), ``time``, ``git_commit`` (short),
    ``git_dirty``, ``git_changes`` (the paths that made it dirty), ``device`` (:func:`device_text`); a run without a readable provenance.json gives one
    row with ``git_commit`` NaN."""
    rows = []
    for run_dir in dict.fromkeys(str(r) for r in run_dirs):
        path = Path(run_dir) / PROVENANCE
        try:
            records = json.loads(path.read_text())
        except (OSError, ValueError):
            records = []
        if not records:
            rows.append(dict.fromkeys(COLUMNS) | {"run_dir": run_dir, "start": 0})
        for i, r in enumerate(records):
            commit = r.get("git_commit")
            rows.append(
                {
                    "run_dir": run_dir,
                    "start": i,
                    "time": r.get("time"),
                    "git_commit": commit[:7] if isinstance(commit, str) else None,
                    "git_dirty": r.get("git_dirty"),
                    "git_changes": r.get("git_changes"),  # absent in runs before 2026-11-26
                    "device": device_text(r),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def trained_on(starts: pd.DataFrame) -> str:
    """Where the runs trained, for a report's title: "a CPU" (or nothing recorded), "one NVIDIA H200"
    (every start on that GPU), else "CPUs and GPUs"."""
    devices = set(starts.device.dropna()) if "device" in starts else set()
    if not devices or devices == {"cpu"}:
        return "a CPU"
    gpus = {d.split("(", 1)[-1].rstrip(")") for d in devices if d.startswith("cuda")}
    if len(gpus) == 1 and all(d.startswith("cuda") for d in devices):
        return f"one {gpus.pop()}"
    return "CPUs and GPUs"


def commits_summary(starts: pd.DataFrame) -> str:
    """One sentence: the runs' commits with how many starts each, and any dirty tree or missing record."""
    if starts.empty:
        return "No runs."
    n_runs = starts.run_dir.nunique()
    counts = starts.dropna(subset=["git_commit"]).groupby("git_commit", sort=True).size()
    parts = [f"`{c}` ({n} start{'s' if n != 1 else ''})" for c, n in counts.items()]
    text = f"The {n_runs} runs were trained at commit{'s' if len(counts) != 1 else ''} " + (
        ", ".join(parts) or "unknown"
    )
    dirty = starts[starts.git_dirty == True]  # noqa: E712 (a column of True/False/None)
    if len(dirty):
        text += (
            f". **{dirty.run_dir.nunique()} run(s) started from a dirty tree** (uncommitted changes at "
            f"commit{'s' if dirty.git_commit.nunique() != 1 else ''} "
            + ", ".join(f"`{c}`" for c in sorted(dirty.git_commit.dropna().unique()))
            + "): their code is not exactly any commit"
        )
        paths = sorted({p for r in dirty.git_changes.dropna() for p in r}) if "git_changes" in dirty else []
        if paths:
            shown = ", ".join(f"`{p}`" for p in paths[:5])
            text += f" (changed or untracked: {shown}{', …' if len(paths) > 5 else ''})"
    unknown = starts[starts.git_commit.isna()].run_dir.nunique()
    if unknown:
        text += f"; {unknown} run(s) have no provenance record"
    if len(counts) > 1:
        text += "; **the runs span several commits**"
    if "device" in starts and starts.device.notna().any():
        by = starts.dropna(subset=["device"]).groupby("device", sort=True).size()
        text += ". Starts by device: " + ", ".join(f"{d} {n}" for d, n in by.items())
    return text + "."


def header(command: str, walls: list[float], cwd: Path | None = None) -> str:
    """The report's provenance line: commit (dirty flagged), command, machine, the study's wall time."""
    commit, dirty = git_state(cwd)
    state = " **with uncommitted changes (dirty tree)**" if dirty else ""
    wall = (
        f"{sum(walls) / 60:.0f} min over {len(walls)} invocation{'s' if len(walls) != 1 else ''}"
        if walls
        else "not recorded"
    )
    return (
        f"Generated by `{command}` at commit `{commit}`{state} on {platform.machine()} "
        f"({platform.processor() or 'cpu'}, {os.cpu_count()} cores). Study wall time: {wall}."
    )
