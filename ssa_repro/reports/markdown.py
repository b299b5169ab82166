"""The markdown every study report shares (ICL and early): the claims table and the decision rule, the
sections, the provenance lines, figures, the *Missing* section and the setup, and the report's end
(:func:`finish`: ``<name>.md``, ``<name>_claims.csv`` and ``<name>_primary.csv``, written atomically)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ssa_repro import stats
from ssa_repro.core.atomic import write_text
from ssa_repro.reports import endpoints, paired, provenance, seed_power
from ssa_repro.reports.decide import Decided
from ssa_repro.reports.tables import markdown_table, seed_ranges

CLAIM_COLUMNS = [
    "claim",
    "contrast",
    "metric",
    "n_seeds",
    "mean_a",
    "mean_b",
    "estimate",
    "low",
    "high",
    "p_value",
    "p_holm",
    "family",
    "family_k",
    "verdict",
    "margin",
    "scale",
    "effect_size",
]


def claims_markdown(claims, table: pd.DataFrame) -> list[str]:
    rows, unmeasured = [], []
    for c in claims:
        t = table[table.claim == c.key] if len(table) else pd.DataFrame()
        if t.empty:
            unmeasured.append(c.claim)
            continue
        measured = "; ".join(
            f"{r['contrast']}: {paired.contrast_text(r)} → {r['verdict']}" for _, r in t.iterrows()
        )
        rows.append(
            {
                "claim (tested as)": c.claim,
                "the paper's words": c.paper,
                "measured (b − a per contrast)": f"*{c.contrast_text}* — " + (measured or "no data"),
                "verdict": paired.claim_verdict(list(t.verdict)) if len(t) else "not measured",
            }
        )
    out = [markdown_table(pd.DataFrame(rows))] if rows else ["No claim could be measured (see *Missing*)."]
    if unmeasured:
        out += ["", "Not measured (no paired data yet, see *Missing*): " + "; ".join(unmeasured) + "."]
    return out


def rule_markdown(table: pd.DataFrame) -> list[str]:
    seeds = sorted(set(int(n) for n in table.n_seeds)) if len(table) else []
    lines = [
        "**Decision rule** (docs/statistics.md). Per contrast, b − a per seed (same seed: same initial "
        "weights and training prompts; same evaluation prompts), averaged over seeds; a 95% expanded "
        "percentile bootstrap interval over seeds; the sign-flip p over seeds "
        + stats.SIGN_FLIP_P
        + ", Holm-adjusted once, in "
        "the contrast's one family, named beside it: the contrasts of its claim (one per task), a family "
        "claims share, or the declared primary endpoints. *yes*: the interval excludes 0 on the claimed "
        "side and p_Holm < 0.05; *contradicted*: the same on the other side, unless both intervals lie "
        "inside ±m: then *non-zero, within ±m* (real, too small to matter; never *contradicted*); *not "
        "detected (within ±m)*: the interval and Student's t interval of the d_s inside ±m (m per metric: "
        + ", ".join(f"{k} {v:.3g}" for k, v in list(stats.MARGINS.items())[:4])
        + ", MSE ±log 1.1 on the log scale) and, on a metric a primary endpoint declares bimodal (its "
        "threshold), in every row the interval that allows for seeds jumping (`stats.robust_interval`) too; "
        "otherwise *not detected (powered for d_z …)* where the declared effect had ≥ 80% power at the seeds "
        "run (ties counted), else *not detected (underpowered)* (one rule for every row: `stats.decide`, "
        "`reports/decide.py`). A claim: *yes* if "
        "every contrast is, *partly* if some are, else *contradicted* if any is, *within ±m* if all are, "
        "else underpowered. With n seeds the smallest two-sided p is 2^(1−n) (0.031 at 6 seeds, 0.002 at "
        "10): with 6 seeds no contrast survives Holm in a family of two or more.",
    ]
    if seeds:
        rates = seed_power.rule_error_rates(seeds)
        lines += [
            "",
            "Simulated (normal seed outcomes, within-seed correlation ρ = 0.5, 400 replications, "
            "`stats.simulate_rule`, at this study's seed counts): how often one contrast is called, before "
            "Holm (Δ = 0: the false-positive rate, either direction; Δ > 0: detection in the claimed "
            "direction), beside the old overlap rule and the paired t test. Monte Carlo SE about ±0.01–0.025.",
            "",
            markdown_table(rates.round(3)),
        ]
    return lines


def remove_stale_figures(figdir: Path, figs: list) -> None:
    """Remove the PNGs in the report's own folder that this report did not draw (a renamed or no longer
    drawn figure), so the folder holds exactly what the markdown links; nothing else is touched."""
    drawn = {Path(f).resolve() for f in figs}
    for old in Path(figdir).glob("*.png"):
        if old.resolve() not in drawn:
            old.unlink()


def finish(
    lines: list[str],
    table: pd.DataFrame,
    missing: list[str],
    setup: dict | None,
    out_dir: Path,
    name: str,
    after_missing: list[str] = (),
    decided: Decided | None = None,
) -> Path:
    """A study report's end (every study's): the *Missing* section, ``after_missing``, the setup; then
    ``<name>.md``, ``<name>_claims.csv`` (the claims table, one row per contrast) and, where the study
    declares primary endpoints (``decided``), ``<name>_primary.csv`` (:func:`endpoints.rows`: the
    README's table reads it) written atomically. With nothing missing, a section without data says it
    is not measured by this study, not "see *Missing*" beside a Missing that says nothing is."""
    if not missing:
        lines = [NOT_DECLARED if line == NO_DATA else line for line in lines]
    lines = [
        *lines,
        "## Missing",
        "",
        *([f"- {m}" for m in missing] or ["Nothing: every group and evaluation is stored."]),
        "",
        *after_missing,
    ]
    if setup:
        lines += setup_lines(setup)
    path = out_dir / f"{name}.md"
    write_text(path, "\n".join(lines))
    out = (
        table.reindex(columns=[*CLAIM_COLUMNS, "claim_verdict"])
        if len(table)
        else pd.DataFrame(columns=CLAIM_COLUMNS)
    )
    write_text(out_dir / f"{name}_claims.csv", out.to_csv(index=False, float_format="%.6g"))
    if decided is not None and decided.eps:
        endpoints.write(endpoints.rows(decided, name), out_dir, name)
    return path


def provenance_lines(command: str, walls, runs: dict, name: str, paths: dict, rows: str) -> list[str]:
    """A report's opening lines: how and where it was generated, the runs' commits (``runs``:
    :func:`provenance.summarise`), and links to the per-seed CSVs (``rows``: what one row of them is)."""
    links = ", ".join(f"[`{p.name}`]({name}/{p.name})" for p in paths.values()) or "none"
    return [
        provenance.header(command, walls),
        provenance.summary_text(runs),
        f"Per-seed values: {links} (one row per {rows}; every number below is computed from them).",
    ]


def figure_lines(path: Path | None, alt: str, name: str, figs: list) -> list[str]:
    """A figure's markdown line (``path`` None: not drawn, no line); ``figs`` collects the drawn ones."""
    if path is None:
        return []
    figs.append(path)
    return [f"![{alt}]({name}/{path.name})", ""]


NO_DATA = "No data yet (see *Missing*)."


NOT_DECLARED = "Not measured: this study declares no group or evaluation that gives it."


def section(heading: str, text: str, table: pd.DataFrame | None) -> list[str]:
    body = markdown_table(table) if table is not None and len(table) else NO_DATA
    return [f"## {heading}", "", text, "", body, ""]


def setup_lines(setup: dict) -> list[str]:
    """The study's matrix as the report states it: common overrides, groups, evaluations."""

    def cell(v) -> str:  # an axis, or `more`: [{seeds, some axes}] as "every_num × postln: seeds 8–29"
        if v and isinstance(v[0], dict):
            return "; ".join(
                " × ".join(
                    ", ".join(map(str, e[a])) for a in ("tasks", "scorers", "archs", "train_sigma") if a in e
                )
                + f": seeds {seed_ranges(e['seeds'])}"
                for e in v
            )
        return ", ".join(str(x) for x in v)

    groups = [{"group": g, **{k: cell(v) for k, v in spec.items()}} for g, spec in setup["groups"].items()]
    evals = [
        {"evaluation": k, **{kk: str(vv) for kk, vv in v.items()}} for k, v in setup["evaluations"].items()
    ]
    return [
        "## Setup",
        "",
        f"Every job: `python train.py {' '.join(setup['base'])}` + its task, architecture, scorer, training σ "
        f"and seed ({', '.join(str(s) for s in setup['seeds'])} unless the group names its own); then the "
        "evaluations below on fixed prompts shared by every model (conf/study/"
        + str(setup["name"])
        + ".yaml).",
        "",
        markdown_table(pd.DataFrame(groups)),
        "",
        "Tasks: " + "; ".join(f"`{t}` = `{' '.join(ov)}`" for t, ov in setup["tasks"].items()) + ".",
        "Architectures: " + "; ".join(f"`{a}` = `{' '.join(ov)}`" for a, ov in setup["archs"].items()) + ".",
        "",
        markdown_table(pd.DataFrame(evals).fillna("")),
        "",
    ]
