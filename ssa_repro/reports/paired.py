"""The study reports' common machinery: per-seed values read from a study's index, written as tidy CSVs,
and claims decided by paired contrasts across seeds (``stats/``, docs/statistics.md).

A study's ``index.csv`` has one row per job × evaluation (group, task, scorer, arch, train_sigma, seed,
run_dir, evaluation key, protocol id). :func:`read_cells` reads every job's stored cells of one
evaluation (the newest checkpoint); a study's report reduces them to *per-seed values*, one row per
job × metric × cell summary (:data:`PER_SEED_COLUMNS`), and writes them with :func:`export`
(``per_seed_<part>.csv``). Everything the report decides is computed from those CSVs as read back
(:func:`read_back`), so anyone can recompute it.

A claim is a list of :class:`Spec` (one paired contrast b − a each, e.g. SSA − softmax on one task:
claims that span several tasks get one contrast per task, never a pooled one). :func:`claims_table`
puts every contrast of every claim in one table (``stats.contrast_table``): the paired estimate, its
bootstrap interval, the sign-flip p Holm-adjusted in the contrast's one family (``p_holm``: the claim's
contrasts, a family claims share, or the declared primary endpoints; the verdict uses it), and the
verdict of the decision rule. :func:`claim_verdict` combines a claim's contrasts; :func:`findings` picks the headline
results by a fixed rule.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.core.atomic import write_bytes, write_text
from ssa_repro.evaluation.store import stored

JOB_COLUMNS = ["group", "task", "scorer", "arch", "train_sigma", "seed"]
INDEX_DTYPES = {c: str for c in ("group", "task", "scorer", "arch", "job", "run_dir", "evaluation", "eval")}
INDEX_DTYPES["protocol_id"] = str
"""How a study's index (``index.csv``, ``index.d/``) is read: names and ids as text, never a guessed
number (a protocol id is 8 hex digits: ``12e45678`` would read as a float, ``00123456`` as 123456)."""
"""What names a job (its folder name is made of them): the per-seed files leave the name out."""
PER_SEED_COLUMNS = [*JOB_COLUMNS, "evaluation", "predictor", "metric", "summary", "value"]
# A per-seed CSV larger than this is written gzip-compressed: the full ICL study's deviant part is over
# 2 MB as text (every seed × magnitude × count × position), above what a commit should carry.
GZIP_ABOVE = 1_000_000
"""A per-seed row: the job, the evaluation key, the predictor (``model`` or a baseline), the metric and
which cell summary (e.g. ``sigma_shift``,
``sigma=16 length=80``) of the job's stored cells the value is."""

PARTLY = "partly"
EXTRA_MARGINS: dict[str, float] = {"upper": 0.5, "slope_pos": 0.1, "rms": math.log(1.25)}
"""Margins for metrics the reports contrast that :data:`stats.MARGINS` lacks: ``upper`` (the boundary's
99.5% quantile of ŷ, in y units) ±0.5, about 12% of the training range of y (±4.2 for N(0, 1) a, b, x);
``slope_pos`` (the slope of ŷ on y_true beyond that range: 1 extrapolates, 0 is a plateau) ±0.1;
``rms`` (eval=scale: the scale reaching a site of the model) ×1.25 either way, on the log scale: a
site is "flat" in σ within a quarter, against the 16× a linear path shows from σ = 1 to 16."""
EXTRA_SCALES: dict[str, str] = {"rms": "log"}


# ------------------------------------------------------------------ reading
def read_cells(
    index: pd.DataFrame, evaluation: str, table: str = "results", steps: str = "newest"
) -> pd.DataFrame:
    """Every job's stored ``table`` of the index's ``evaluation`` key (newest checkpoint step; every step
    with ``steps="all"``: a learning curve), with the job columns and ``evaluation`` in front and the
    protocol's ``sign`` (if it has one) as ``sign``. Empty when no job has it (missing data is the
    caller's to report)."""
    if steps not in ("newest", "all"):
        raise ValueError(f"steps={steps!r} is not allowed; allowed: 'newest', 'all'")
    frames = []
    for row in index[index.evaluation == evaluation].itertuples():
        store = next((s for s in stored(row.run_dir, row.eval) if s.id == row.protocol_id), None)
        if store is None:
            continue
        derived = store.dir / f"{table}.csv"  # a table drawn from the parts (e.g. boundary.csv)
        try:
            frame = store.read(table) if store.parts(table) else pd.read_csv(derived)
        except (FileNotFoundError, ValueError):
            continue
        if frame.empty:
            continue
        if "step" in frame and steps == "newest":
            frame = frame[frame["step"] == frame["step"].max()]
        meta = {c: getattr(row, c) for c in JOB_COLUMNS}
        meta["evaluation"] = evaluation
        meta["sign"] = str(store.protocol.get("sign", "")) if isinstance(store.protocol, Mapping) else ""
        frame = frame.drop(columns=[c for c in meta if c in frame], errors="ignore")
        frames.append(frame.assign(**meta))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    first = [*JOB_COLUMNS, "evaluation", "sign"]
    return out[first + [c for c in out.columns if c not in first]]


def reduce(cells: pd.DataFrame, mask, summary: str) -> pd.DataFrame:
    """Per-seed rows (:data:`PER_SEED_COLUMNS`): the mean ``value`` of the cells in ``mask`` per job ×
    evaluation × predictor × metric, named ``summary`` (e.g. the cells of one shift region)."""
    sel = cells[np.asarray(mask, dtype=bool)] if len(cells) else cells
    if sel.empty:
        return pd.DataFrame(columns=PER_SEED_COLUMNS)
    keys = [*JOB_COLUMNS, "evaluation", "predictor", "metric"]
    out = sel.groupby(keys, sort=False, dropna=False)["value"].mean().reset_index()
    return out.assign(summary=summary)[PER_SEED_COLUMNS]


def export(
    parts: Mapping[str, pd.DataFrame],
    out_dir: Path,
    columns: list[str] = PER_SEED_COLUMNS,
    free: tuple[str, ...] = ("evaluation", "value"),
    unsorted: int = 1,
) -> dict[str, Path]:
    """``<out_dir>/per_seed_<part>.csv`` per non-empty part (``.csv.gz`` above :data:`GZIP_ABOVE` bytes): ``columns`` (default: one row per job ×
    predictor × metric × summary; a study report may pass its own layout), sorted by every column but
    the last ``unsorted``, values with 6 significant digits (small files, and the precision every number of the
    report is computed at). One value per row key (the columns not in ``free``): where two evaluation
    keys of a study give the same summary (the same protocol under two names), the first key's is kept."""
    paths = {}
    for part, frame in parts.items():
        if frame is None or frame.empty:
            continue
        f = frame[columns].sort_values(columns[:-unsorted], kind="stable")
        f = f.drop_duplicates([c for c in columns if c not in free])
        text = f.to_csv(index=False, float_format="%.6g")
        plain = Path(out_dir) / f"per_seed_{part}.csv"
        packed = plain.with_name(plain.name + ".gz")
        # A large part goes gzip-compressed (pandas reads either; mtime=0 so the same rows give the
        # same bytes and a regenerated report does not change a committed file for nothing); the
        # other form of the same part, left by an earlier report, is removed so one file holds it.
        if len(text) > GZIP_ABOVE:
            path, stale = packed, plain
            write_bytes(path, gzip.compress(text.encode(), compresslevel=9, mtime=0))
        else:
            path, stale = plain, packed
            write_text(path, text)
        stale.unlink(missing_ok=True)
        paths[part] = path
    return paths


def read_back(
    paths: Mapping[str, Path],
    columns: list[str] = PER_SEED_COLUMNS,
    text: tuple[str, ...] = (
        "group",
        "task",
        "scorer",
        "arch",
        "evaluation",
        "predictor",
        "metric",
        "summary",
    ),
) -> pd.DataFrame:
    """The exported per-seed CSVs as one frame (``part`` = which file): what the report computes from;
    the ``text`` columns are read as strings (a task or scorer named like a number stays a name)."""
    frames = [pd.read_csv(p).assign(part=part) for part, p in paths.items()]
    if not frames:
        return pd.DataFrame(columns=[*columns, "part"])
    out = pd.concat(frames, ignore_index=True)
    for c in text:
        out[c] = out[c].astype(str)
    return out


def select(frame: pd.DataFrame, **where) -> pd.DataFrame:
    """Rows whose columns equal the given values (a list/tuple: any of them)."""
    keep = np.ones(len(frame), dtype=bool)
    for k, v in where.items():
        col = frame[k]
        if isinstance(v, (list, tuple, set)):
            keep &= col.isin(list(v)).to_numpy()
        elif isinstance(v, float) or isinstance(v, int) and k == "train_sigma":
            keep &= np.isclose(col.astype(float), float(v))
        else:
            keep &= (col == v).to_numpy()
    return frame[keep]


# ------------------------------------------------------------------ claims
@dataclass(frozen=True)
class Spec:
    """One paired contrast b − a: rows ``a`` and ``b`` of the per-seed frame (column filters, each
    selecting one value per seed), paired by seed, with the sign the claim predicts."""

    label: str  # e.g. the task
    metric: str
    a: Mapping
    b: Mapping
    claimed_sign: int  # +1: the claim says b > a
    # False where neither arm's model learned the task (neither beats the label-rule baseline where it was
    # trained): the difference of two guesses says nothing about the claim, so the contrast is shown with
    # its numbers but its verdict is NOT_LEARNED, which no finding and no claim verdict counts
    judged: bool = True


# the verdict of a contrast between two models that both failed to learn (Spec.judged = False)
NOT_LEARNED = "not judged (neither model learned)"


@dataclass(frozen=True)
class Claim:
    key: str
    claim: str  # what is tested, in the report's words
    paper: str  # the paper's words
    specs: Sequence[Spec] = field(default_factory=tuple)
    contrast_text: str = "b − a"  # what the estimate is, e.g. "SSA − softmax"
    primary: bool = False  # one of the study's declared primary endpoints (at most four: reports/claims.py)
    family: str | None = None  # its Holm family (claims naming one share it); None: the claim alone


def pairs(frame: pd.DataFrame, claims: Sequence[Claim]) -> pd.DataFrame:
    """The rows every contrast uses, stacked: ``claim``, ``contrast`` (the spec's label), ``metric``,
    ``arm`` (a | b), ``seed``, ``value``, ``claimed_sign``, ``family`` (the claim's Holm family: its
    ``family``, else its key). A spec with no rows contributes nothing."""
    rows = []
    for c in claims:
        for s in c.specs:
            for arm, where in (("a", s.a), ("b", s.b)):
                sel = select(frame, **{"metric": s.metric, **where})
                if sel.empty:
                    continue
                rows.append(
                    pd.DataFrame(
                        {
                            "claim": c.key,
                            "contrast": s.label,
                            "metric": s.metric,
                            "arm": arm,
                            "seed": sel.seed.to_numpy(),
                            "value": sel.value.to_numpy(float),
                            "claimed_sign": s.claimed_sign,
                            "family": c.family or c.key,
                        }
                    )
                )
    cols = ["claim", "contrast", "metric", "arm", "seed", "value", "claimed_sign", "family"]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=cols)


def claims_table(
    frame: pd.DataFrame,
    claims: Sequence[Claim],
    *,
    n_boot: int = 4000,
    families: Mapping[tuple[str, str], str] | None = None,
    outcomes: Mapping[str, stats.Outcome] | None = None,
) -> pd.DataFrame:
    """Every contrast of every claim (:func:`stats.contrast_table`, Holm within each claim's family: the
    claim itself unless claims name a shared ``family``; ``families`` {(claim, contrast): family} moves
    single contrasts into another family, e.g. the declared primary endpoints into ``primary``): one row
    per claim × contrast with a and b both measured (columns ``claim``, ``contrast``, ``metric``,
    ``n_seeds``, ``estimate``, ``low``, ``high``, ``p_value``, ``p_holm`` (the one Holm p of the contrast,
    within ``family``, of ``family_k`` judged contrasts), ``verdict``, ``margin``, ``scale``,
    ``effect_size``, ``per_seed``, ``mean_a``, ``mean_b``). The verdict is :func:`stats.verdict`'s with
    ``inside_margin``: a significant effect inside ±m is "non-zero, within ±m", never "contradicted";
    ``mean_a``/``mean_b`` are over the seeds the contrast pairs (both arms measured), the seeds its
    estimate is the mean over. ``outcomes``: the study's declared outcome kinds by metric
    (``reports/decide.py``: a bimodal metric gets the robust rule in every row)."""
    p = pairs(frame, claims)
    if p.empty:
        return pd.DataFrame()
    both = p.groupby(["claim", "contrast"]).arm.transform("nunique") == 2
    p = p[both]
    # only the seeds with both arms: the contrast's estimate, and its arms' means, are over these
    arms = p.groupby(["claim", "contrast", "seed"]).arm.transform("nunique") == 2
    p = p[arms & p.value.notna()]
    if p.empty:
        return pd.DataFrame()
    if families:
        p = p.assign(family=[families.get((c, s), f) for c, s, f in zip(p.claim, p.contrast, p.family)])
    # Holm within each family over the judged contrasts only: an unjudged one (two models that did not
    # learn, Spec.judged) gets its estimate and interval, but joins no family and no finding
    unjudged = {(c.key, s.label) for c in claims for s in c.specs if not s.judged}
    judged = np.array([(c, s) not in unjudged for c, s in zip(p.claim, p.contrast)], dtype=bool)
    kw = dict(
        by=["claim", "contrast", "metric", "family"],
        arm_col="arm",
        base="a",
        claimed_sign="claimed_sign",
        margin={**stats.MARGINS, **EXTRA_MARGINS},
        scale={**stats.METRIC_SCALES, **EXTRA_SCALES},
        family=["family"],
        n_boot=n_boot,
        inside_margin=True,
        outcome=dict(outcomes or {}),
    )
    parts = []
    if judged.any():
        t = stats.contrast_table(p[judged], **kw)
        t["family_k"] = t.groupby("family").family.transform("size")
        parts.append(t)
    if not judged.all():
        unjudged_rows = stats.contrast_table(p[~judged], **kw)
        parts.append(unjudged_rows.assign(verdict=NOT_LEARNED, p_holm=np.nan, family="", family_k=0))
    t = parts[0]
    if len(parts) > 1 or not judged.any():  # each unjudged row back beside its claim's others
        t = pd.concat(parts, ignore_index=True)
        first = {c: i for i, c in reversed(list(enumerate(t.claim)))}
        t = t.iloc[np.argsort([first[c] for c in t.claim], kind="stable")].reset_index(drop=True)
    # each arm's seed mean on the contrast's scale: geometric for log-scale metrics (MSE, perplexity),
    # so that mean_b / mean_a is exp(estimate), the ratio the contrast reports
    scales = {**stats.METRIC_SCALES, **EXTRA_SCALES}
    log = p.metric.map(lambda m: scales.get(m, "identity") == "log").to_numpy(bool)
    on_scale = p.assign(value=np.where(log, np.log(p.value.clip(lower=stats.FLOOR)), p.value), log=log)
    means = on_scale.groupby(["claim", "contrast", "arm"]).agg(value=("value", "mean"), log=("log", "first"))
    means = means.value.where(~means.log, np.exp(means.value)).unstack("arm")
    t["mean_a"] = [means.loc[(c, s), "a"] for c, s in zip(t.claim, t.contrast)]
    t["mean_b"] = [means.loc[(c, s), "b"] for c, s in zip(t.claim, t.contrast)]
    return t


def claim_verdict(verdicts: Sequence[str]) -> str:
    """A claim's verdict from its contrasts' (one per task): every one "yes" → yes; some "yes" →
    partly; else any "contradicted" → contradicted; every one "within ±m" → within; every one within
    ±m, some of them non-zero → "non-zero, within ±m"; every one within ±m or not detected where its
    declared effect had the power → "not detected (powered for …)"; else underpowered;
    no contrast → "not measured". Contrasts :data:`NOT_LEARNED` do not count (all of them: NOT_LEARNED)."""
    v = list(verdicts)
    if not v:
        return "not measured"
    if all(x == NOT_LEARNED for x in v):
        return NOT_LEARNED
    v = [x for x in v if x != NOT_LEARNED]
    if all(x == stats.YES for x in v):
        return stats.YES
    if stats.YES in v:
        return PARTLY
    if stats.CONTRADICTED in v:
        return stats.CONTRADICTED
    if all(x == stats.WITHIN for x in v):
        return stats.WITHIN
    if all(x in (stats.WITHIN, stats.NONZERO_WITHIN) for x in v):
        return stats.NONZERO_WITHIN
    powered = [x for x in v if x.startswith(stats.POWERED_PREFIX)]
    if powered and all(x == stats.WITHIN or x in powered for x in v):
        return powered[0]  # every contrast not detected where it had the power (or within ±m)
    return stats.UNDERPOWERED


def fmt(x: float, scale: str = "identity") -> str:
    """A number as the report prints it (3 significant digits; log-scale contrasts as a ratio ×, with
    three decimals between ×0.9 and ×1.1, so that an interval excluding 1 shows it: ×1.004 [×1.001,
    ×1.008], not ×1 [×1, ×1.01])."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if scale == "log":
        r = math.exp(x)
        return f"×{r:.3f}" if 0.9 <= r < 1.1 else f"×{r:.3g}"
    return f"{x:+.3g}" if x else "0"


def holm_text(row) -> str:
    """``p_Holm 0.016 (family sigma, k = 4)``: the contrast's one Holm p, with the family it is adjusted
    in; an unjudged contrast joins none (its raw p)."""
    if not row.get("family_k"):
        return f"p {row['p_value']:.2g} (raw, in no family)"
    return f"p_Holm {row['p_holm']:.2g} (family {row['family']}, k = {int(row['family_k'])})"


def contrast_text(row) -> str:
    """``+0.12 [0.05, 0.2], p_Holm 0.01 (family sigma, k = 4), 10 seeds``: a contrast row of
    :func:`claims_table`."""
    sc = row["scale"]
    return (
        f"{fmt(row['estimate'], sc)} [{fmt(row['low'], sc)}, {fmt(row['high'], sc)}], "
        f"{holm_text(row)}, {int(row['n_seeds'])} seeds"
    )


def findings(
    table: pd.DataFrame, n: int = 5, first: Sequence[str] = (), keep: Sequence[str] = ()
) -> pd.DataFrame:
    """The headline contrasts, by rule: those the decision rule calls (verdict "yes" or "contradicted"),
    ranked by |estimate| / margin (the effect in units of what matters for the metric), at most one per
    claim (its largest); the claims whose key starts with one in ``first`` (e.g. the architecture's) lead
    when called. At most ``n`` rows, and after them every called row of the claims in ``keep`` (the SSA
    claims: an effect for or against SSA that the rule calls is never left out of the findings). Rows
    with the same per-seed values (one measurement under two claims) count once."""
    if table.empty:
        return table
    called = table[table.verdict.isin([stats.YES, stats.CONTRADICTED])].copy()
    if called.empty:
        return called
    # one measurement under two claims (e.g. a post-LN model's stream and its first attention's input at
    # layer 0: one tensor) is one finding: the first claim's
    if "per_seed" in called:
        called = called[~called.per_seed.map(tuple).duplicated()]
    kept = called[called.claim.isin(list(keep))]
    called = called[~called.claim.isin(list(keep))]
    if called.empty:
        return kept
    called["strength"] = called.estimate.abs() / called.margin.where(called.margin > 0, np.nan)
    called["topic"] = called.claim.str.split(":").str[0]  # "architecture: postln" → "architecture"
    best = called.sort_values("strength", ascending=False).groupby("topic", sort=False).head(1)
    best["lead"] = [next((i for i, f in enumerate(first) if c.startswith(f)), len(first)) for c in best.claim]
    best = best.sort_values(["lead", "strength"], ascending=[True, False]).head(n)
    if kept.empty:
        return best
    kept = kept.assign(strength=kept.estimate.abs() / kept.margin.where(kept.margin > 0, np.nan))
    return pd.concat([best, kept.sort_values("strength", ascending=False)])


def ssa_effects(table: pd.DataFrame, claims: Sequence[Claim], alpha: float = 0.05) -> pd.DataFrame:
    """The exploratory SSA contrasts (claims whose contrast is "SSA …": SSA is arm b) with a raw sign-flip
    p < ``alpha``, or an interval entirely past the margin, that their Holm family does not call, for SSA
    and against it alike, strongest first:
    the effects a reader must see beside the called ones (e.g. SSA worse at length 80, raw p 0.025, in a
    family of eight). Adds ``for_ssa`` (the estimate on the claimed side) and ``seeds_b_worse`` (seeds
    where SSA is on the unclaimed side)."""
    if table.empty:
        return table
    ssa = {c.key for c in claims if c.contrast_text.startswith("SSA")}
    t = table[
        table.claim.isin(ssa)
        & ((table.p_value < alpha) | (table.low > table.margin) | (table.high < -table.margin))
        & ~table.verdict.isin([stats.YES, stats.CONTRADICTED, NOT_LEARNED])
        & (table.get("family", "") != "primary")
    ].copy()
    if t.empty:
        return t
    sign = np.sign(t.estimate.to_numpy(float))
    t["for_ssa"] = sign == t.claimed_sign.to_numpy(int)
    t["seeds_b_worse"] = [
        int(np.sum(np.asarray(d, float) * s < 0)) for d, s in zip(t.per_seed, t.claimed_sign)
    ]
    return t.sort_values("p_value", kind="stable")


def ssa_effect_lines(table: pd.DataFrame | None, claims) -> list[str]:
    """The exploratory SSA contrasts :func:`ssa_effects` picks, for and against SSA alike, each
    with the seeds on SSA's worse side, its raw p and its one Holm p (a finding list's last part)."""
    ssa = ssa_effects(table, claims) if table is not None and len(table) else pd.DataFrame()
    if not len(ssa):
        return []
    lines = [
        "",
        "**Exploratory SSA contrasts with a raw p < 0.05 or an interval past the margin, not called in "
        "their Holm family**, for and against SSA alike (hypotheses for the next run, not results):",
        "",
    ]
    for _, r in ssa.iterrows():
        c = next(c for c in claims if c.key == r["claim"])
        sc = r["scale"]
        lines.append(
            f"- {'for' if r['for_ssa'] else '**against**'} SSA — {c.claim}, {r['contrast']}: "
            f"{c.contrast_text} = {fmt(r['estimate'], sc)} [{fmt(r['low'], sc)}, "
            f"{fmt(r['high'], sc)}] (margin ±{r['margin']:.3g}), {int(r['seeds_b_worse'])} of "
            f"{int(r['n_seeds'])} seeds worse with SSA, raw p {r['p_value']:.2g} ({holm_text(r)})."
        )
    return lines
