"""What produced a run: code version, library versions, machine and device (modded-nanogpt's habit)."""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import platform
import socket
import subprocess
import sys
from pathlib import Path

import torch

PACKAGES = ("torch", "numpy", "hydra-core", "omegaconf", "wandb", "pandas", "matplotlib", "seaborn")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def changes(status: str) -> list[str]:
    """The paths in ``git status --porcelain`` output that can alter a run: any changed or untracked
    path except documentation (``docs/``, ``*.md``) — a study writes its report into docs/results/,
    which must not mark the study's later runs as made from a dirty tree."""
    out = []
    for line in status.splitlines():
        if not line.strip():
            continue
        # "XY path" (or "XY old -> new"); split rather than slice: a stripped output loses the first
        # line's leading space (" M path" -> "M path")
        path = line.split(maxsplit=1)[-1].split(" -> ")[-1].strip('"')
        if not (path.startswith("docs/") or path.endswith(".md")):
            out.append(path)
    return out


def dirty(status: str) -> bool:
    """Whether the status shows a change that can alter a run (:func:`changes`)."""
    return bool(changes(status))


MAX_CHANGES = 20  # changed paths recorded per start (a report names them; an untracked tree can be huge)


def collect(device: torch.device) -> dict:
    status = _git("status", "--porcelain")
    info = {
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else dirty(status),
        "git_changes": None if status is None else changes(status)[:MAX_CHANGES],
        "python": sys.version.split()[0],
        "packages": {p: _version(p) for p in PACKAGES},
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_threads": torch.get_num_threads(),
        "device": str(device),
    }
    if device.type == "cuda":
        info["cuda"] = {"name": torch.cuda.get_device_name(device), "version": torch.version.cuda}
    return info
