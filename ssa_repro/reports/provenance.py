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


def summarise(starts: pd.DataFrame) -> dict:
    """What a report states about its runs' starts (:func:`run_commits`), as plain JSON data: ``runs``
    (how many), ``starts_by_commit`` {commit: starts}, ``dirty_runs``, ``dirty_commits`` and
    ``dirty_paths`` (sorted: what made those trees dirty), ``runs_without_record`` and
    ``starts_by_device`` {device: starts}. A report stores it (``report_inputs.json``) so that it can be
    regenerated without the run folders; :func:`summary_text` words it."""
    if starts.empty:
        return {"runs": 0}
    known = starts.dropna(subset=["git_commit"])
    dirty = starts[starts.git_dirty == True]  # noqa: E712 (a column of True/False/None)
    changes = dirty.git_changes.dropna() if "git_changes" in dirty else []  # absent before 2026-11-26
    devices = starts.dropna(subset=["device"]) if "device" in starts else starts.iloc[:0]
    return {
        "runs": int(starts.run_dir.nunique()),
        "starts_by_commit": {
            str(c): int(n) for c, n in known.groupby("git_commit", sort=True).size().items()
        },
        "dirty_runs": int(dirty.run_dir.nunique()),
        "dirty_commits": sorted(str(c) for c in dirty.git_commit.dropna().unique()),
        "dirty_paths": sorted({str(p) for r in changes for p in r}),
        "runs_without_record": int(starts[starts.git_commit.isna()].run_dir.nunique()),
        "starts_by_device": {str(d): int(n) for d, n in devices.groupby("device", sort=True).size().items()},
    }


def merge_summaries(a: dict, b: dict) -> dict:
    """Two :func:`summarise` records as one (a study continued from a published report's CSVs: the
    earlier runs' record and the new runs'): counts added, commit and path lists joined. A run counted in
    both is counted twice, which a continuation does not do (it trains only the jobs the CSVs lack)."""
    if not a.get("runs"):
        return dict(b)
    if not b.get("runs"):
        return dict(a)

    def added(key: str) -> dict:
        out = dict(a.get(key, {}))
        for k, n in b.get(key, {}).items():
            out[k] = out.get(k, 0) + n
        return dict(sorted(out.items()))

    return {
        "runs": a["runs"] + b["runs"],
        "starts_by_commit": added("starts_by_commit"),
        "dirty_runs": a.get("dirty_runs", 0) + b.get("dirty_runs", 0),
        "dirty_commits": sorted({*a.get("dirty_commits", []), *b.get("dirty_commits", [])}),
        "dirty_paths": sorted({*a.get("dirty_paths", []), *b.get("dirty_paths", [])}),
        "runs_without_record": a.get("runs_without_record", 0) + b.get("runs_without_record", 0),
        "starts_by_device": added("starts_by_device"),
    }


def trained_on(starts: pd.DataFrame | dict) -> str:
    """Where the runs trained, for a report's title: "a CPU" (or nothing recorded), "one NVIDIA H200"
    (every start on that GPU), else "CPUs and GPUs". ``starts``: :func:`run_commits` or its
    :func:`summarise`."""
    if isinstance(starts, dict):
        devices = set(starts.get("starts_by_device", {}))
    else:
        devices = set(starts.device.dropna()) if "device" in starts else set()
    if not devices or devices == {"cpu"}:
        return "a CPU"
    gpus = {d.split("(", 1)[-1].rstrip(")") for d in devices if d.startswith("cuda")}
    if len(gpus) == 1 and all(d.startswith("cuda") for d in devices):
        return f"one {gpus.pop()}"
    return "CPUs and GPUs"


def commits_summary(starts: pd.DataFrame) -> str:
    """One sentence: the runs' commits with how many starts each, and any dirty tree or missing record."""
    return summary_text(summarise(starts))


def summary_text(s: dict) -> str:
    """:func:`commits_summary`'s sentence from a :func:`summarise` record (what ``--from-csv`` reads back)."""
    if not s.get("runs"):
        return "No runs."
    counts = s["starts_by_commit"]
    parts = [f"`{c}` ({n} start{'s' if n != 1 else ''})" for c, n in counts.items()]
    text = f"The {s['runs']} runs were trained at commit{'s' if len(counts) != 1 else ''} " + (
        ", ".join(parts) or "unknown"
    )
    if s["dirty_runs"]:
        commits = s["dirty_commits"]
        text += (
            f". **{s['dirty_runs']} run(s) started from a dirty tree** (uncommitted changes at "
            f"commit{'s' if len(commits) != 1 else ''} "
            + ", ".join(f"`{c}`" for c in commits)
            + "): their code is not exactly any commit"
        )
        paths = s["dirty_paths"]
        if paths:
            shown = ", ".join(f"`{p}`" for p in paths[:5])
            text += f" (changed or untracked: {shown}{', …' if len(paths) > 5 else ''})"
    if s["runs_without_record"]:
        text += f"; {s['runs_without_record']} run(s) have no provenance record"
    if len(counts) > 1:
        text += "; **the runs span several commits**"
    if s["starts_by_device"]:
        text += ". Starts by device: " + ", ".join(f"{d} {n}" for d, n in s["starts_by_device"].items())
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
