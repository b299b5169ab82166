"""Every published verdict that changed since a base commit, as a markdown table:
``python scripts/verdict_changes.py <commit>`` compares the ``verdict`` column of each
docs/results/<study>_primary.csv and <study>_claims.csv at ``<commit>`` with the working tree's and prints
one row per endpoint or claim contrast whose verdict differs (study, endpoint/claim, old, new); "—" where
the row is not in one of the two (added, removed, or the file not published then)."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas loads on first use: --help answers without it
    import pandas as pd


ROOT = Path(__file__).resolve().parents[1]
RESULTS = "docs/results"
KINDS = ("primary", "claims")
NONE = "—"


def key(kind: str, r) -> str:
    """A row's name: an endpoint and its test (without its seed list), or a claim and its contrast."""
    if kind == "primary":
        return f"{r['endpoint']} ({str(r['test']).split(' (')[0]})"
    return f"{r['claim']}: {r['contrast']}"


def verdicts(text: str | None, kind: str) -> dict[str, str] | None:
    """{row name: verdict} of one CSV's text ({} where there is none; None where it has no ``verdict``
    column: an archived table of another form, e.g. icl_cpu_2026-11-24's, which is not compared)."""
    import pandas as pd

    if not text:
        return {}
    t = pd.read_csv(io.StringIO(text))
    if "verdict" not in t.columns:
        return None
    return {key(kind, r): str(r["verdict"]) for _, r in t.iterrows()}


def at_commit(commit: str, path: str) -> str | None:
    """The file's text at ``commit`` (None where it did not exist)."""
    out = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def changes(commit: str) -> pd.DataFrame:
    """One row per changed verdict: study, kind, name, old, new."""
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", commit, f"{RESULTS}/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    paths = sorted({*listed, *(str(p.relative_to(ROOT)) for p in (ROOT / RESULTS).glob("*.csv"))})
    rows = []
    for path in paths:
        name = Path(path).name
        kind = next((k for k in KINDS if name.endswith(f"_{k}.csv")), None)
        if kind is None:
            continue
        study = name.removesuffix(f"_{kind}.csv")
        now = ROOT / path
        old, new = (
            verdicts(at_commit(commit, path), kind),
            verdicts(now.read_text() if now.exists() else None, kind),
        )
        if old is None or new is None:
            continue
        for row in [*old, *(n for n in new if n not in old)]:
            before, after = old.get(row, NONE), new.get(row, NONE)
            if before != after:
                rows.append({"study": study, "kind": kind, "name": row, "old": before, "new": after})
    import pandas as pd

    return pd.DataFrame(rows, columns=["study", "kind", "name", "old", "new"])


def markdown(t: pd.DataFrame) -> str:
    lines = ["| study | endpoint / claim | old verdict | new verdict |", "|---|---|---|---|"]
    for r in t.itertuples():
        what = f"primary: {r.name}" if r.kind == "primary" else r.name
        lines.append(f"| {r.study} | {what.replace('|', '/')} | {r.old} | {r.new} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("commit", help="the base commit (e.g. where an issue was filed)")
    args = p.parse_args(argv)
    t = changes(args.commit)
    print(markdown(t) if len(t) else f"No verdict changed since {args.commit}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
