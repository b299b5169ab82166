"""``metrics.jsonl``: one JSON row per log interval, appended one whole line at a time.

Rows are appended with :func:`ssa_repro.core.atomic.append_line` (one ``write``, then ``fsync``), so a
killed run leaves at most one torn last line, which :func:`read_metrics` skips. At a resume the rows
logged after the checkpoint are dropped (:meth:`MetricsLog.truncate`, an atomic rewrite): they are
logged again as the run repeats those steps, so the file reads as if the run was never interrupted.
"""

from __future__ import annotations

import json
from pathlib import Path

from ssa_repro.core import atomic


def read_metrics(path: Path) -> list[dict]:
    """The rows of metrics.jsonl; a half-written last line (from a killed run) is skipped."""
    rows = []
    for line in Path(path).read_text().splitlines() if Path(path).exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class MetricsLog:
    def __init__(self, path: Path):
        self.path = Path(path)

    def truncate(self, step: int) -> None:
        """Drop the rows logged after ``step`` (the checkpoint a run resumes from)."""
        if self.path.exists():
            keep = [row for row in read_metrics(self.path) if row["step"] <= step]
            atomic.write_text(self.path, "".join(json.dumps(row) + "\n" for row in keep))

    def append(self, row: dict) -> None:
        atomic.append_line(self.path, json.dumps(row))

    def rows(self) -> list[dict]:
        return read_metrics(self.path)
