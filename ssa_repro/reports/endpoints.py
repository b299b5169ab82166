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
margin. An interim test (fewer paired seeds than declared, :func:`primary.interim`) is drawn hollow and
labelled "(interim n/N)", and its README row says "n of N (interim)": its estimate is shown, not decided.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro.core.atomic import write_bytes, write_text
from ssa_repro.reports import paired, primary
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
# an interim verdict, as primary.INTERIM writes it: its paired and declared seed counts
_INTERIM = re.compile(
    "^" + re.escape(primary.INTERIM).replace(r"\{n\}", r"(\d+)").replace(r"\{of\}", r"(\d+)") + "$"
)


def interim_counts(verdict) -> tuple[int, int] | None:
    """(paired seeds, declared seeds) of an interim verdict (:data:`primary.INTERIM`); None otherwise."""
    m = _INTERIM.match(verdict) if isinstance(verdict, str) else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def _seed_text(seeds) -> str:
    return seed_ranges(seeds) if len(seeds) else "—"


def rows(decided, study: str) -> pd.DataFrame:
    """The endpoints' deciding tests of one report's :class:`~ssa_repro.reports.decide.Decided`: each
    test named with the seeds declared for the endpoint (its cells' share of the confirmatory or
    replication seeds, ``decided.declared``, ``rep.declared``) and the seeds its contrast paired."""
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
                    # the seeds the test paired (of those run, the ones with both arms measured)
                    "seeds": _seed_text(primary.seed_ids(r) or run) if run is not None else "all",
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
        counts = interim_counts(r["verdict"])
        n = f"{counts[0]} of {counts[1]} (interim)" if counts else str(int(r["n_seeds"]))
        lines.append(
            f"| [{r['study']}](docs/results/{r['study']}.md) | {r['text']} | {r['test']} | {n} "
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


def forest_data(t: pd.DataFrame) -> pd.DataFrame:
    """What the forest plot draws, one row per decided or interim row of ``t`` (a test not run yet has
    no estimate): ``x``, ``low``, ``high`` (estimate and interval / margin, × the claimed sign: the
    claimed direction to the right), ``label`` (study: endpoint, test; "(interim n/N)" added where the
    test is interim), ``interim`` (bool: drawn hollow) and ``about_ssa`` (blue where it compares SSA
    with softmax)."""
    d = t[t.verdict != NOT_RUN].reset_index(drop=True)
    sign = d.claimed_sign.to_numpy(float)  # the claimed direction (claimed_sign −1: a decrease) → right
    m = d.margin.to_numpy(float)
    x, lo, hi = (sign * d[c].to_numpy(float) / m for c in ("estimate", "low", "high"))
    counts = [interim_counts(v) for v in d.verdict]
    labels = [
        f"{r.study}: {r.endpoint}, {r.test.split(' (')[0]}" + (f" (interim {c[0]}/{c[1]})" if c else "")
        for r, c in zip(d.itertuples(), counts)
    ]
    return pd.DataFrame(
        {
            "x": x,
            "low": np.minimum(lo, hi),
            "high": np.maximum(lo, hi),
            "label": labels,
            "interim": [c is not None for c in counts],
            "about_ssa": d.about_ssa.astype(bool).to_numpy() if len(d) else [],
        }
    )


def forest(t: pd.DataFrame, path: Path) -> Path | None:
    """The forest plot of :func:`forest_data` (a filled dot: a decided test; a hollow one: interim),
    saved to ``path``; None where no row has an estimate."""
    import matplotlib.pyplot as plt  # here: a report without endpoints never loads matplotlib

    d = forest_data(t)
    if not len(d):
        return None
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(d) + 1.2))
    y = np.arange(len(d))[::-1]
    colors = np.array(["tab:blue" if s else "tab:gray" for s in d.about_ssa])
    ax.hlines(y, d.low, d.high, colors=colors, linestyles=["dashed" if i else "solid" for i in d.interim])
    faces = np.where(d.interim, "white", colors)  # hollow: an interim estimate, not a decision
    ax.scatter(d.x, y, facecolors=faces, edgecolors=colors, zorder=3, s=18)
    ax.axvline(0, color="black", lw=0.8)
    for v in (-1, 1):
        ax.axvline(v, color="black", lw=0.6, ls=":")
    ax.set_yticks(y, list(d.label), fontsize=7)
    ax.set_xlabel(
        "estimate / margin (right: the claimed direction)\nblue: SSA vs softmax; hollow, dashed: interim, not decided",
        fontsize=8,
    )
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    write_bytes(path, buf.getvalue())
    return path
