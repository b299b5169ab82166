"""Every study's primary endpoints at a glance (issue 58): the tidy table a report writes beside itself
(``<name>_primary.csv``, :func:`rows`), and from those tables of every published study the README's
results block and its forest plot (:func:`readme_block`, :func:`forest`; ``python
scripts/results_table.py`` regenerates both, tests/test_readme_results.py checks the README holds
exactly the generated block).

One row per endpoint and deciding test: the confirmatory seeds (or, without declared confirmatory
seeds, every seed, in the family ``primary``) and each replication that names it, for and against SSA alike; an
endpoint with no seeds of a test run yet gets its row with 0 seeds and the verdict "not run yet". The
forest plot shows each estimate and 95% interval in units of its margin m, signed so that the right
is the claimed direction (for SSA where the endpoint compares SSA with softmax): |x| < 1 is inside the
margin.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.core.atomic import write_bytes, write_text
from ssa_repro.reports import paired
from ssa_repro.reports.tables import seed_ranges

COLUMNS = [
    "study",
    "endpoint",
    "text",
    "test",
    "seeds",
    "n_seeds",
    "estimate",
    "low",
    "high",
    "scale",
    "margin",
    "claimed_sign",
    "p_holm",
    "family",
    "verdict",
    "about_ssa",
]
START, END = "<!-- results:start -->", "<!-- results:end -->"
NOT_RUN = "not run yet"


def _seed_text(seeds) -> str:
    return seed_ranges(seeds) if len(seeds) else "—"


def rows(decided, study: str) -> pd.DataFrame:
    """The endpoints' deciding tests of one report's :class:`~ssa_repro.reports.decide.Decided`: each
    test named with the seeds declared for the endpoint (its cells' share of the confirmatory or
    replication seeds, ``decided.declared``, ``rep.declared``) and the seeds of them in the data."""
    every = list(decided.eps)
    tests = []  # (name, seeds run, results, endpoints, {endpoint: declared seeds}, the test's seeds)
    if decided.confirmatory is None:
        tests.append(("all seeds (declared after them)", None, decided.primaries, every, {}, None))
    else:
        conf = decided.confirmatory
        tests.append(("confirmatory", decided.run, decided.primaries, every, decided.declared, conf))
    for rep in decided.replications:  # a replication decides the endpoints it names
        tests.append((rep.family, rep.run, rep.results, rep.endpoints, rep.declared, rep.seeds))
    out = []
    for name, e in decided.eps.items():
        for test, run, res, names, declared, seeds in tests:
            if name not in names:
                continue
            if run is not None:  # named with the endpoint's own declared seeds and those of them run
                seeds = declared.get(name, seeds)
                test, run = f"{test} ({_seed_text(seeds)})", [s for s in run if s in set(seeds)]
            hit = res[res.endpoint == name] if len(res) else res
            if not len(hit):
                out.append({"study": study, "endpoint": name, "text": e["text"], "test": test, "n_seeds": 0})
                out[-1].update(verdict=NOT_RUN, seeds="—")
                continue
            r = hit.iloc[0]
            out.append(
                {
                    "study": study,
                    "endpoint": name,
                    "text": e["text"],
                    "test": test,
                    "seeds": _seed_text(run) if run is not None else "all",
                    "n_seeds": int(r["n_seeds"]),
                    **{c: r[c] for c in ("estimate", "low", "high", "scale", "margin", "p_holm", "family")},
                    "claimed_sign": int(r["claimed_sign"]),
                    "verdict": r["verdict"],
                    "about_ssa": bool(r["about_ssa"]),
                }
            )
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def write(table: pd.DataFrame, out_dir: Path, name: str) -> None:
    """``<out_dir>/<name>_primary.csv``, atomically (nothing where the study declares no endpoint)."""
    if len(table):
        write_text(out_dir / f"{name}_primary.csv", table.to_csv(index=False, float_format="%.6g"))


def read_all(results: Path, studies) -> pd.DataFrame:
    """The published ``<study>_primary.csv`` of each of ``studies`` that has one, in that order."""
    parts = [
        pd.read_csv(results / f"{s}_primary.csv") for s in studies if (results / f"{s}_primary.csv").exists()
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def _side(r) -> str:
    if r["verdict"] == NOT_RUN or not isinstance(r["estimate"], float) or math.isnan(r["estimate"]):
        return "—"
    toward = np.sign(r["estimate"]) == np.sign(r["claimed_sign"])
    if r["about_ssa"]:
        return "for SSA" if toward else "against SSA"
    return "as claimed" if toward else "against the claim"


def markdown(t: pd.DataFrame) -> str:
    """The README's table: study, endpoint, test (seeds), n, estimate [95%], p_Holm, verdict, side."""
    lines = [
        "| study | endpoint | test | seeds | estimate [95%] | p_Holm | verdict | estimate's side |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in t.iterrows():
        if r["verdict"] == NOT_RUN:
            est, p = "—", "—"
        else:
            sc = r["scale"]
            est = f"{paired.fmt(r['estimate'], sc)} [{paired.fmt(r['low'], sc)}, {paired.fmt(r['high'], sc)}]"
            p = f"{r['p_holm']:.2g}"
        lines.append(
            f"| [{r['study']}](docs/results/{r['study']}.md) | {r['text']} | {r['test']} | {int(r['n_seeds'])} "
            f"| {est} | {p} | {r['verdict']} | {_side(r)} |"
        )
    return "\n".join(lines)


def readme_block(t: pd.DataFrame, figure: str) -> str:
    """The README's generated block, between :data:`START` and :data:`END`."""
    return "\n".join(
        [
            START,
            "<!-- generated by `python scripts/results_table.py` from docs/results/*_primary.csv; do not edit -->",
            "",
            markdown(t),
            "",
            f"![Every primary endpoint: estimate and 95% interval in units of its margin]({figure})",
            "",
            END,
        ]
    )


def replace_block(text: str, block: str) -> str:
    """``text`` with its one block between the markers replaced by ``block`` (an error naming the
    markers where there is not exactly one of each)."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"README must hold exactly one {START} … {END} block, in that order")
    return text[: text.index(START)] + block + text[text.index(END) + len(END) :]


def forest(t: pd.DataFrame, path: Path) -> Path | None:
    """The forest plot of every decided row of ``t`` (estimate and interval / margin, claimed direction
    to the right), saved to ``path``; None where no row is decided."""
    import matplotlib.pyplot as plt  # here: a report without endpoints never loads matplotlib

    d = t[t.verdict != NOT_RUN].reset_index(drop=True)
    if not len(d):
        return None
    sign = d.claimed_sign.to_numpy(float)  # the claimed direction (claimed_sign −1: a decrease) → right
    m = d.margin.to_numpy(float)
    x, lo, hi = (sign * d[c].to_numpy(float) / m for c in ("estimate", "low", "high"))
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(d) + 1.2))
    y = np.arange(len(d))[::-1]
    colors = ["tab:blue" if s else "tab:gray" for s in d.about_ssa.astype(bool)]
    ax.hlines(y, lo, hi, colors=colors)
    ax.scatter(x, y, c=colors, zorder=3, s=14)
    ax.axvline(0, color="black", lw=0.8)
    for v in (-1, 1):
        ax.axvline(v, color="black", lw=0.6, ls=":")
    ax.set_yticks(
        y, [f"{r.study}: {r.endpoint}, {r.test.split(' (')[0]}" for r in d.itertuples()], fontsize=7
    )
    ax.set_xlabel("estimate / margin (right: the claimed direction; blue: SSA vs softmax)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    write_bytes(path, buf.getvalue())
    return path
