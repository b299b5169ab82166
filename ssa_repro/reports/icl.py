"""The in-context-learning study's report (conf/study/icl_cpu.yaml and its children): per-seed values,
the paper's claims as paired contrasts, and the sections per shift axis, deviant prompts, boundary
values, architecture, alternatives and wide inputs.

Per-seed values (``reports/paired.py``; one row per job × predictor × metric × cell summary):

- ``grid``: quantifier grid: the mean over each shift ``region`` (``region=in_distribution`` …, from the
  rows' ``region``, which the grid evaluator derives from the run's training length and σ), over the
  training lengths at every σ (``train_lengths sigma=σ``: the σ shift apart from length shift), and
  every cell (``sigma=σ length=L``; the model only); sequence and token error; the label-rule baselines
  beside the model. Linear grid: every cell ``sigma_f=σ_F sigma_x=σ`` for the model, zero and least
  squares (``sigma_x=1`` per σ_F is the paper's table 1).
- ``deviant``: every cell ``sign=± M=M k=k`` of every metric (model, and the labels' own
  ``follows_largest``), and per attention layer the heads' mean and the most attending head.
- ``boundary``: the boundary table's estimates per prompt set (``prompts=…``) for the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ssa_repro import stats
from ssa_repro.core.plotting import plt, save
from ssa_repro.reports import paired
from ssa_repro.reports.paired import Claim, Spec

# icl_cpu's groups, each with its own claims and report section; any other group (icl_scale's ladder)
# gets SSA − softmax per architecture (claims) and a section of its own (reports/study.py)
KNOWN_GROUPS = ("core", "architecture", "alternatives", "wide_inputs")
# icl_cpu's reference arm (group, architecture): the per-axis sections and the paper's claims read it; a
# study without it (icl_scale) reads every rung of its other groups instead (:func:`bases`)
BASE = ("core", "preln")
QUANT = ("every_ctx", "every_num", "some_ctx", "some_num")
TASK_TEXT = {
    "linear": "linear a·x + b",
    "every_ctx": "every, labels in context",
    "every_num": "every, numbers only",
    "some_ctx": "some, labels in context",
    "some_num": "some, numbers only",
}
ADVERSE = {"every": "positive", "some": "negative"}  # the insertion sign that makes following it wrong
REGIONS = ("in_distribution", "sigma_shift", "length_shift", "both_shift")
ERRORS = ("sequence_error", "token_error")
ARCH_TEXT = {
    "preln": "pre-LN (GPT-2)",
    "preln_embln": "pre-LN + embedding LN",
    "postln": "post-LN + embedding LN (BERT)",
    "postln_noemb": "post-LN, no embedding LN",
    "attn_only": "attention only (pre-LN)",
    "preln_nofinal": "pre-LN, no final LN",
}

PAPER = {
    "sigma": "“model performance dropped sharply when inference inputs included one or more values far "
    "outside the training distribution” (§4)",
    "length": "“models successfully learned to predict the correct truth values for every or some on test "
    "sequences that were significantly longer than those seen during training” (§4)",
    "ssa_quant": "“SSA yields considerable generalization improvement both in handling longer test "
    "sequences and managing deviant inputs … maintains lower error across broader ranges of sequence "
    "length and input distribution” (§7.1, fig. 4)",
    "follows": "“models base their predictions for an entire deviant sequence solely on their prediction "
    "for the largest element” (§5)",
    "collapse": "“the attention layer puts all the weight on the largest value in the sequence” (§5.3)",
    "ssa_deviant": "SSA improves “managing deviant inputs with extreme values” (§7.1)",
    "boundary": "“boundary values — values that the model fails to exceed during inference … in both "
    "attention-only and full transformer models” (§5, figs. 1, 9)",
    "ssa_linear": "“SSA substantially improved performance when tested on out-of-distribution function "
    "parameters” (§7.1, fig. 3, table 1)",
    "wide_deviant": "“Training on distributions with a much larger range of elements … improved model "
    "performance on deviant sequences” (§5.3)",
    "wide_small": "“… but significantly increased squared errors on N(0,σ) for small σ” (§5.3)",
    "architecture": "not a claim of the paper (the study's own: where LayerNorm sits decides σ "
    "generalisation; review §3.1)",
}


def evaluations_for(setup: Mapping | None):
    """task key → the evaluation keys the study runs on it (for the missing-data notes): grids by the
    key's prefix and the task's kind; an evaluation with ``tasks:`` (registered task names) only on
    those; deviant on every task, boundary on linear."""
    setup = setup or {}
    evals = setup.get("evaluations", {})

    def registered(task: str) -> str:
        ov = [o.split("=", 1)[1] for o in setup.get("tasks", {}).get(task, []) if o.startswith("task=")]
        return ov[0] if ov else task

    def which(task: str) -> list[str]:
        kind = "grid_linear" if registered(task) == "linear" else "grid_quantifier"
        out = []
        for key, spec in evals.items():
            only = (spec or {}).get("tasks")
            if only and registered(task) not in only:
                continue
            if (
                key.startswith(kind)
                or key.startswith("deviant")
                or (key.startswith("boundary") and kind == "grid_linear")
            ):
                out.append(key)
        return out

    return which


# ------------------------------------------------------------------ per-seed values
def _g(x) -> str:
    return f"{float(x):g}"


def _model_or_one_baseline(c: pd.DataFrame) -> np.ndarray:
    """The model's rows, and the baselines' of one job only (core softmax, its first seed; in a study
    without core, softmax of the first other group's first architecture and seed): a baseline
    sees the same prompts in every run (they depend on the evaluation's seed and the training length,
    not the run), so one copy is all there is (and the per-seed files stay small)."""
    model = (c.predictor == "model").to_numpy()
    groups = ["core"] if (c.group == "core").any() else sorted(set(c.group) - set(KNOWN_GROUPS))
    ref = c[c.group.isin(groups[:1]) & (c.scorer == "softmax")]
    if ref.empty:
        return model
    arch, seed = sorted(ref.arch)[0], ref.seed.min()
    first = c.group.isin(groups[:1]) & (c.scorer == "softmax") & (c.arch == arch) & (c.seed == seed)
    return model | first.to_numpy()


def grid_parts(index: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows of the grids (see the module)."""
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("grid_quantifier")):
        c = paired.read_cells(index, key)
        if c.empty or "region" not in c:
            continue
        c = c[c.metric.isin(ERRORS) & _model_or_one_baseline(c)]
        for r in REGIONS:  # the model and the baselines, both errors
            out.append(paired.reduce(c, c.region == r, f"region={r}"))
        c = c[(c.predictor == "model")]  # below: the model only (keeps the files small)
        at_train = c.length <= c.train_length
        for s in sorted(c.sigma_x.unique()):
            out.append(paired.reduce(c, at_train & np.isclose(c.sigma_x, s), f"train_lengths sigma={_g(s)}"))
        m = c[c.metric == "sequence_error"]
        out.append(
            m.assign(summary=[f"sigma={_g(s)} length={int(n)}" for s, n in zip(m.sigma_x, m.length)])[
                paired.PER_SEED_COLUMNS
            ]
        )
        if "train_length" in m:  # the length curve at σ = 1 (the paper's premise: longer prompts, same σ)
            out.append(length_rows(m[np.isclose(m.sigma_x, 1.0)]))
    for key in sorted(k for k in set(index.evaluation) if k.startswith("grid_linear")):
        c = paired.read_cells(index, key)
        if c.empty:
            continue
        c = c[(c.metric == "mse") & _model_or_one_baseline(c)]
        several = c.length.nunique() > 1  # a length grid (length_cpu): σ_F × σ_x at the training length only
        at = c[c.length == c.train_length] if several else c
        out.append(
            at.assign(summary=[f"sigma_f={_g(f)} sigma_x={_g(x)}" for f, x in zip(at.sigma_f, at.sigma_x)])[
                paired.PER_SEED_COLUMNS
            ]
        )
        if several:
            out.append(length_rows(c[np.isclose(c.sigma_f, 1.0)]))
    # a length task's own grid (grid_mqar, grid_counting, …): token and sequence error per length
    for key in sorted(
        k for k in set(index.evaluation) if k.startswith("grid_") and not k.startswith(GRID_KINDS)
    ):
        c = paired.read_cells(index, key)
        if not c.empty:
            out.append(length_rows(c[c.metric.isin(ERRORS) & _model_or_one_baseline(c)]))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


GRID_KINDS = (
    "grid_quantifier",
    "grid_linear",
)  # the grid keys the ICL parts read; other grid_* are length tasks


def length_rows(c: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows of a length curve: summary ``sigma_x=<σ> length=<n> ratio=<n / training length>``, one
    per cell (the ratio from the run's own training length, ``train_length``: never assumed)."""
    c = c[c.sigma_x.notna()] if "sigma_x" in c else c.assign(sigma_x=1.0)
    ratio = c.length.astype(float) / c.train_length.astype(float)
    summary = [
        f"sigma_x={_g(s)} length={int(n)} ratio={r:.3g}" for s, n, r in zip(c.sigma_x, c.length, ratio)
    ]
    return c.assign(summary=summary)[paired.PER_SEED_COLUMNS]


DEVIANT_METRICS = (
    "sequence_error",
    "error_at_inserted",
    "error_after_inserted",
    "error_elsewhere",
    "follows_largest",
    "attention_on_inserted",
    "attention_on_inserted_max_head",
    "uniform_share",
    "mse",
    "mse_inserted",
    "mse_untouched",
    "mse_after_inserted",
)


def deviant_parts(index: pd.DataFrame) -> pd.DataFrame:
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("deviant")):
        c = paired.read_cells(index, key)
        if not c.empty:
            c = c[c.predictor.isin(["model", "labels"]) & c.metric.isin(DEVIANT_METRICS)]
            c = c[(c.k == 1) | c.metric.isin(["sequence_error", "mse"])]  # k > 1: the M × k figure's metric
            out.append(
                c.assign(summary=[f"sign={s} M={_g(m)} k={int(k)}" for s, m, k in zip(c.sign, c.M, c.k)])[
                    paired.PER_SEED_COLUMNS
                ]
            )
        a = paired.read_cells(index, key, "attention")
        if not a.empty and "layer" in a:
            # every layer, the heads' mean and the most attending head, k = 1 (the files stay small)
            a = a[a["head"].astype(str).isin(["mean", "max"]) & (a.k == 1)].assign(predictor="model")
            out.append(
                a.assign(
                    summary=[
                        f"layer={int(layer)} head={h} sign={s} M={_g(m)} k={int(k)}"
                        for layer, h, s, m, k in zip(a.layer, a["head"], a.sign, a.M, a.k)
                    ]
                )[paired.PER_SEED_COLUMNS]
            )
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


BOUNDARY_METRICS = (
    "lower",
    "upper",
    "y_true_low",
    "y_true_high",
    "train_low",
    "train_high",
    "saturation_neg",
    "saturation_pos",
    "slope_neg",
    "slope_pos",
    "plateau_neg",
    "plateau_pos",
    "bound_low",
    "bound_high",
    "bound_abs",
)
"""The boundary table's estimates exported per seed (evaluation/boundary.py: quantiles of ŷ, y_true and
training y; saturation points; the plateau's slope and level beyond the training range; the read-out
bound from the checkpoint's last LayerNorm, NaN without one)."""


def boundary_parts(index: pd.DataFrame) -> pd.DataFrame:
    out = []
    for key in sorted(k for k in set(index.evaluation) if k.startswith("boundary")):
        c = paired.read_cells(index, key, "boundary")
        if c.empty:
            continue
        c = c[c.predictor.isin(["model", "least_squares"])]  # least squares: no boundary, slope 1
        metrics = [m for m in BOUNDARY_METRICS if m in c.columns]
        long = c.melt(
            id_vars=[*paired.JOB_COLUMNS, "evaluation", "predictor", "prompts"],
            value_vars=metrics,
            var_name="metric",
            value_name="value",
        )
        # the query sweep in full; the σ_F sets' boundaries; least squares only where the boundary claim
        # compares with it (the files stay small)
        sweep = long.prompts == "query_sweep"
        keep = (long.predictor == "model") & (sweep | long.metric.isin(["lower", "upper", "y_true_high"]))
        keep |= sweep & long.metric.isin(["upper", "slope_pos"])
        long = long[keep & (long.prompts != "all")]
        out.append(long.assign(summary="prompts=" + long.prompts.astype(str))[paired.PER_SEED_COLUMNS])
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=paired.PER_SEED_COLUMNS)


def per_seed(index: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {"grid": grid_parts(index), "deviant": deviant_parts(index), "boundary": boundary_parts(index)}


# ------------------------------------------------------------------ the claims
def _levels(frame: pd.DataFrame, prefix: str, key: str) -> list[float]:
    """The values of ``key`` in summaries starting with ``prefix`` (e.g. the grid's σ's)."""
    s = frame.summary[frame.summary.str.startswith(prefix)]
    vals = s.str.extract(rf"{key}=([-\d.e+]+)")[0].dropna().astype(float)
    return sorted(set(vals))


def axes(frame: pd.DataFrame) -> dict:
    """The grid's and deviant protocol's points, read from the per-seed summaries."""
    g = frame[frame.part == "grid"] if "part" in frame else frame
    d = frame[frame.part == "deviant"] if "part" in frame else frame
    sig = _levels(g, "train_lengths", "sigma")
    lengths = _levels(g, "sigma=", "length")
    sf = _levels(g, "sigma_f=", "sigma_f")
    ms = _levels(d, "sign=", "M")
    return {
        "sigma_max": sig[-1] if sig else None,
        "sigma_min": sig[0] if sig else None,
        "length_max": int(lengths[-1]) if lengths else None,
        "sigma_f": sf,
        "M_max": ms[-1] if ms else None,
        "M": ms,
    }


def bases(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """The arms (group, architecture) the per-axis sections and the paper's claims are read on:
    :data:`BASE` where the study has it, else every architecture of the groups outside
    :data:`KNOWN_GROUPS` (a scale ladder's rungs), in name order."""
    if not len(frame):
        return []
    if ((frame.group == BASE[0]) & (frame.arch == BASE[1])).any():
        return [BASE]
    other = frame[~frame.group.isin(KNOWN_GROUPS)]
    return sorted(set(zip(other.group, other.arch)))


def tag(base: tuple[str, str]) -> str:
    """A base arm's label in claim keys, table rows and figure names: "" for :data:`BASE`, else its
    architecture (a rung's name)."""
    return "" if tuple(base) == BASE else str(base[1])


def claims(frame: pd.DataFrame) -> list[Claim]:
    """The paper's claims (and the study's architecture hypothesis) as paired contrasts, one per task
    (or σ_F, scorer, architecture): every claim the data can address. The claims about one arm are read
    on each of :func:`bases` (a ladder: one copy per rung, its key and text prefixed by the rung)."""
    out = []
    for base in bases(frame):
        t = tag(base)
        out += [
            replace(c, key=f"{c.key} @ {t}", claim=f"{t}: {c.claim}") if t else c
            for c in base_claims(frame, base)
        ]
    return out + other_claims(frame)


def base_claims(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> list[Claim]:
    """The paper's claims about one arm (σ and length shift, SSA out of distribution, deviant prompts,
    linear σ_F), read on ``base`` = (group, architecture)."""
    ax = axes(frame)
    core = {"group": base[0], "arch": base[1]}
    out = []
    s_max, s_min, L = ax["sigma_max"], ax["sigma_min"], ax["length_max"]
    quant = [t for t in QUANT if t in set(frame.task)]
    if s_max is not None:
        shift = f"train_lengths sigma={_g(s_max)}"
        indist = "region=in_distribution"
        longest = f"sigma={_g(s_min)} length={L}"
        base = {**core, "predictor": "model"}
        out.append(
            Claim(
                "sigma",
                f"Softmax error rises under σ shift (σ = {_g(s_min)} → {_g(s_max)} at training lengths)",
                PAPER["sigma"],
                [
                    Spec(
                        t,
                        "sequence_error",
                        {**base, "task": t, "scorer": "softmax", "summary": indist},
                        {**base, "task": t, "scorer": "softmax", "summary": shift},
                        +1,
                    )
                    for t in quant
                ],
                f"σ = {_g(s_max)} − in distribution",
            )
        )
        out.append(
            Claim(
                "length",
                f"Softmax error at σ = {_g(s_min)} stays low at length {L} (longer than training); "
                "here “within ±m” supports the paper and “contradicted” means the error rises",
                PAPER["length"],
                [
                    Spec(
                        t,
                        "sequence_error",
                        {**base, "task": t, "scorer": "softmax", "summary": indist},
                        {**base, "task": t, "scorer": "softmax", "summary": longest},
                        -1,
                    )
                    for t in quant
                ],
                f"length {L} − in distribution",
            )
        )
        specs = []
        for t in quant:
            for name, summ in ((f"σ = {_g(s_max)}", shift), (f"length {L}", longest)):
                specs.append(
                    Spec(
                        f"{t}, {name}",
                        "sequence_error",
                        {**base, "task": t, "scorer": "softmax", "summary": summ},
                        {**base, "task": t, "scorer": "ssa", "summary": summ},
                        -1,
                    )
                )
        out.append(
            Claim(
                "ssa_quant",
                "SSA lowers the quantifier error out of distribution",
                PAPER["ssa_quant"],
                specs,
                "SSA − softmax",
            )
        )
    if ax["M_max"] is not None:
        m = _g(ax["M_max"])
        adverse = {t: ADVERSE[t.split("_")[0]] for t in quant}
        cell = {t: f"sign={adverse[t]} M={m} k=1" for t in quant}
        out.append(
            Claim(
                "follows",
                f"With one inserted value of the adverse sign (M = {m}), predictions follow it more than the "
                "true labels do",
                PAPER["follows"],
                [
                    Spec(
                        t,
                        "follows_largest",
                        {**core, "task": t, "scorer": "softmax", "predictor": "labels", "summary": cell[t]},
                        {**core, "task": t, "scorer": "softmax", "predictor": "model", "summary": cell[t]},
                        +1,
                    )
                    for t in quant
                ],
                "model − labels",
            )
        )
        out.append(
            Claim(
                "collapse",
                f"The last layer's most attending head puts more than the uniform share on the inserted value "
                f"(M = {m}, adverse sign)",
                PAPER["collapse"],
                [
                    Spec(
                        t,
                        "attention_on_inserted_max_head",
                        {
                            **core,
                            "task": t,
                            "scorer": "softmax",
                            "predictor": "model",
                            "summary": cell[t],
                            "metric": "uniform_share",
                        },
                        {**core, "task": t, "scorer": "softmax", "predictor": "model", "summary": cell[t]},
                        +1,
                    )
                    for t in quant
                ],
                "max-head attention − uniform share",
            )
        )
        out.append(
            Claim(
                "ssa_deviant",
                f"SSA lowers the sequence error on deviant prompts (M = {m}, k = 1, adverse sign)",
                PAPER["ssa_deviant"],
                [
                    Spec(
                        t,
                        "sequence_error",
                        {**core, "task": t, "scorer": "softmax", "predictor": "model", "summary": cell[t]},
                        {**core, "task": t, "scorer": "ssa", "predictor": "model", "summary": cell[t]},
                        -1,
                    )
                    for t in quant
                ],
                "SSA − softmax",
            )
        )
    if ax["sigma_f"]:
        specs = [
            Spec(
                f"σ_F = {_g(f)}",
                "mse",
                {
                    **core,
                    "task": "linear",
                    "scorer": "softmax",
                    "predictor": "model",
                    "summary": f"sigma_f={_g(f)} sigma_x=1",
                },
                {
                    **core,
                    "task": "linear",
                    "scorer": "ssa",
                    "predictor": "model",
                    "summary": f"sigma_f={_g(f)} sigma_x=1",
                },
                -1,
            )
            for f in ax["sigma_f"]
            if f > 1
        ]
        out.append(
            Claim(
                "ssa_linear",
                "SSA lowers the linear MSE for out-of-distribution functions (x ~ N(0, 1))",
                PAPER["ssa_linear"],
                specs,
                "SSA / softmax MSE",
            )
        )
    return out


def other_claims(frame: pd.DataFrame) -> list[Claim]:
    """The claims across arms: boundary values per architecture; wide inputs and the LayerNorm
    architectures against core pre-LN (where the study has those groups); SSA − softmax per
    architecture of any other group (a scale ladder)."""
    ax = axes(frame)
    core = {"group": BASE[0], "arch": BASE[1]}
    out = []
    s_max = ax["sigma_max"]
    bnd = (
        paired.select(frame, part="boundary", summary="prompts=query_sweep") if "part" in frame else frame[:0]
    )
    if len(bnd):
        out.append(boundary_claim(bnd))
    wide = frame[frame.group == "wide_inputs"]
    if len(wide):
        ms = [x for x in ax["M"] if x > 1] or ax["M"]
        specs = []
        for s in ("softmax", "ssa"):
            for mm in ms[-2:]:
                cell = f"sign=positive M={_g(mm)} k=1"
                specs.append(
                    Spec(
                        f"every_num, {s}, M = {_g(mm)}",
                        "sequence_error",
                        {**core, "task": "every_num", "scorer": s, "predictor": "model", "summary": cell},
                        {
                            "group": "wide_inputs",
                            "task": "every_num",
                            "scorer": s,
                            "predictor": "model",
                            "summary": cell,
                        },
                        -1,
                    )
                )
        out.append(
            Claim(
                "wide_deviant",
                "Training on wider inputs (σ_train = 5) lowers the deviant error",
                PAPER["wide_deviant"],
                specs,
                "wide − σ_train = 1",
            )
        )
        specs = [
            Spec(
                f"linear, {s}",
                "mse",
                {
                    **core,
                    "task": "linear",
                    "scorer": s,
                    "predictor": "model",
                    "summary": "sigma_f=1 sigma_x=1",
                },
                {
                    "group": "wide_inputs",
                    "task": "linear",
                    "scorer": s,
                    "predictor": "model",
                    "summary": "sigma_f=1 sigma_x=1",
                },
                +1,
            )
            for s in ("softmax", "ssa")
        ]
        out.append(
            Claim(
                "wide_small",
                "Training on wider inputs raises the squared error at small σ (σ_F = σ_x = 1)",
                PAPER["wide_small"],
                specs,
                "wide / σ_train = 1 MSE",
            )
        )
    arch_group = frame[frame.group == "architecture"]
    if s_max is not None and len(arch_group):
        # one claim per architecture against pre-LN (its family: the two scorers); the findings lead with them
        shift = f"train_lengths sigma={_g(s_max)}"
        pre = {"arch": "preln", "group": "core", "task": "every_num", "predictor": "model", "summary": shift}
        arch_claims = [
            Claim(
                f"architecture: {a}",
                f"every_num at σ = {_g(s_max)} (training lengths): {ARCH_TEXT[a]} lowers the error against "
                "pre-LN",
                PAPER["architecture"],
                [
                    Spec(
                        s,
                        "sequence_error",
                        {**pre, "scorer": s},
                        {**pre, "group": "architecture", "arch": a, "scorer": s},
                        -1,
                    )
                    for s in ("softmax", "ssa")
                ],
                f"{a} − pre-LN",
            )
            for a in ("postln", "preln_embln", "postln_noemb", "attn_only", "preln_nofinal")
            if a in set(arch_group.arch)
        ]
        out = out + arch_claims
    # any other group (e.g. icl_scale's ladder): SSA − softmax per architecture (rung) on each axis apart —
    # σ shift at training lengths, length shift at the training σ and the adverse deviant insertion on the
    # quantifiers, the largest σ_F on linear — so the rungs can be read side by side
    learned = length_learned(frame)
    learned = {
        tuple(k): v for k, v in zip(learned[["group", "task", "arch", "scorer"]].values, learned.learned)
    }
    for group in sorted(set(frame.group) - set(KNOWN_GROUPS)):
        g = frame[frame.group == group]
        specs = []
        for a in sorted(set(g.arch)):
            at = {"group": group, "arch": a, "predictor": "model"}
            cells = ladder_cells(ax, set(g.task), g)
            for label, t, metric, summ in cells:
                # a length task that neither model learned: shown, not judged (paired.NOT_LEARNED)
                judged = any(learned.get((group, t, a, s), True) for s in ("softmax", "ssa"))
                specs.append(
                    Spec(
                        f"{a}, {t}, {label}",
                        metric,
                        {**at, "task": t, "scorer": "softmax", "summary": summ},
                        {**at, "task": t, "scorer": "ssa", "summary": summ},
                        -1,
                        judged,
                    )
                )
        out.append(
            Claim(
                f"ssa_{group}",
                f"SSA lowers the out-of-distribution error in group `{group}`, per architecture",
                PAPER["ssa_quant"],
                specs,
                "SSA − softmax",
            )
        )
    return out


def ladder_cells(ax: dict, tasks: set, frame: pd.DataFrame | None = None) -> list[tuple[str, str, str, str]]:
    """The cells a ladder compares across rungs, (label, task, metric, summary): per quantifier task σ
    shift at training lengths, length shift at the training σ and the adverse deviant insertion (largest
    M, k = 1); on linear the largest σ_F at x ~ N(0, 1); and, where ``frame`` has length curves
    (:func:`length_rows`), the longest length at σ_x = 1 of linear (MSE) and of the length tasks (token
    error)."""
    s_max, s_min, L, m_max = ax["sigma_max"], ax["sigma_min"], ax["length_max"], ax["M_max"]
    cells = []
    for t in [t for t in QUANT if t in tasks]:
        if s_max is not None:
            shift = f"train_lengths sigma={_g(s_max)}"
            cells.append((f"σ = {_g(s_max)} (training lengths)", t, "sequence_error", shift))
            cells.append(
                (f"length {L} (σ = {_g(s_min)})", t, "sequence_error", f"sigma={_g(s_min)} length={L}")
            )
        if m_max is not None:
            sign = ADVERSE[t.split("_")[0]]
            cells.append(
                (f"deviant {sign} M = {_g(m_max)}", t, "sequence_error", f"sign={sign} M={_g(m_max)} k=1")
            )
    if ax["sigma_f"] and "linear" in tasks and ax["sigma_f"][-1] > 1:
        sf = _g(ax["sigma_f"][-1])
        cells.append((f"σ_F = {sf}", "linear", "mse", f"sigma_f={sf} sigma_x=1"))
    curves = length_curves(frame) if frame is not None else pd.DataFrame()
    for t in sorted(tasks - set(QUANT)):
        c = curves[(curves.task == t) & np.isclose(curves.sigma_x, 1.0)] if len(curves) else curves
        if len(c):
            top = c[c.ratio == c.ratio.max()].iloc[0]
            cells.append(
                (f"length {top.length} (×{top.ratio:g})", t, LENGTH_METRIC.get(t, "token_error"), top.summary)
            )
    return cells


def boundary_claim(bnd: pd.DataFrame) -> Claim:
    """Query sweep, every architecture and scorer with boundary rows (icl_cpu's in :data:`ARCH_TEXT` order,
    then any other, e.g. a ladder's rungs): the model against least squares (no boundary)."""
    # the plateau's slope beyond the training range of y (1: extrapolates, 0: a plateau) where the
    # evaluation stores it, else the 99.5% quantile of ŷ; against least squares (no boundary)
    metric = "slope_pos" if bnd[bnd.metric == "slope_pos"].value.notna().any() else "upper"
    where = {"task": "linear", "train_sigma": 1.0, "summary": "prompts=query_sweep"}
    specs = [
        Spec(
            f"{ARCH_TEXT.get(a, a)}, {s}",
            metric,
            {**where, "arch": a, "scorer": s, "predictor": "least_squares"},
            {**where, "arch": a, "scorer": s, "predictor": "model"},
            -1,
        )
        for a in [*[a for a in ARCH_TEXT if a in set(bnd.arch)], *sorted(set(bnd.arch) - set(ARCH_TEXT))]
        for s in ("softmax", "ssa")
        if len(paired.select(bnd, arch=a, scorer=s))
    ]
    what = (
        "the slope of ŷ on y_true beyond the training range of y"
        if metric == "slope_pos"
        else "the 99.5% quantile of ŷ"
    )
    return Claim(
        "boundary",
        f"Query sweep: {what} is lower for the model than for least squares (no boundary), "
        "in every architecture",
        PAPER["boundary"],
        specs,
        "model − least squares",
    )


# ------------------------------------------------------------------ tables and figures
def _prefix(base: tuple[str, str]) -> str:
    return f"{tag(base)}: " if tag(base) else ""


def _suffix(base: tuple[str, str]) -> str:
    return f"_{tag(base)}" if tag(base) else ""


def over_bases(fn, frame: pd.DataFrame, *args) -> pd.DataFrame:
    """``fn(frame, *args, base)`` on each of :func:`bases`, stacked; with several (a ladder's rungs) an
    ``arch`` column first names the rung of each row."""
    parts = []
    many = len(bases(frame)) > 1
    for base in bases(frame):
        t = fn(frame, *args, base=base)
        if many and len(t):
            t = t.copy()
            t.insert(0, "arch", base[1])
        parts.append(t)
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def seed_stats(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Seed mean, min and max and the seed count of ``value`` per ``by``."""
    g = frame.groupby(by, sort=False).value
    return pd.DataFrame({"mean": g.mean(), "min": g.min(), "max": g.max(), "seeds": g.size()}).reset_index()


def _mmm(r) -> str:
    return f"{r['mean']:.3g} ({r['min']:.2g}–{r['max']:.2g}, n={int(r['seeds'])})"


def shift_table(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """Per task × scorer (and each baseline once): the sequence and token error in each shift region, as
    seed mean (min–max over seeds), on the arm ``base`` = (group, architecture)."""
    g = paired.select(frame, part="grid", group=base[0], arch=base[1])
    g = g[g.summary.str.startswith("region=") & g.task.isin(QUANT)]
    if g.empty:
        return pd.DataFrame()
    rows = []
    for (task, scorer, pred), sub in g.groupby(["task", "scorer", "predictor"], sort=False):
        if pred != "model" and scorer != "softmax":
            continue  # a baseline does not depend on the scorer: shown once
        row = {
            "task": TASK_TEXT.get(task, task),
            "predictor": scorer if pred == "model" else f"baseline: {pred}",
        }
        for metric in ERRORS:
            for r in REGIONS:
                s = sub[(sub.metric == metric) & (sub.summary == f"region={r}")]
                if len(s):
                    row[f"{metric.split('_')[0]}: {r.replace('_', ' ')}"] = _mmm(
                        seed_stats(s, ["metric"]).iloc[0]
                    )
        rows.append(row)
    return pd.DataFrame(rows)


def ood_table(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """SSA − softmax per cell of the σ = max row and of the longest length (core, sequence error), each a
    paired contrast (Holm within each task): where the out-of-distribution effects live."""
    ax = axes(frame)
    if ax["sigma_max"] is None:
        return pd.DataFrame()
    g = paired.select(
        frame, part="grid", group=base[0], arch=base[1], predictor="model", metric="sequence_error"
    )
    cells = g[
        g.summary.str.match(rf"sigma={_g(ax['sigma_max'])} length=|sigma=[\d.]+ length={ax['length_max']}$")
    ]
    cells = cells[cells.task.isin(QUANT)]
    if cells.empty or cells.scorer.nunique() < 2:
        return pd.DataFrame()
    t = stats.contrast_table(
        cells[cells.scorer.isin(["softmax", "ssa"])], by=["task", "summary"], family=["task"], n_boot=2000
    )
    means = cells.groupby(["task", "summary", "scorer"]).value.mean().unstack("scorer")
    return pd.DataFrame(
        {
            "task": [TASK_TEXT.get(x, x) for x in t.task],
            "cell": t.summary,
            "softmax": [f"{means.loc[(a, b), 'softmax']:.3g}" for a, b in zip(t.task, t.summary)],
            "SSA": [f"{means.loc[(a, b), 'ssa']:.3g}" for a, b in zip(t.task, t.summary)],
            "SSA − softmax [95%], p_Holm (task)": [
                f"{e:+.3g} [{lo:+.3g}, {hi:+.3g}], {p:.2g}"
                for e, lo, hi, p in zip(t.estimate, t.low, t.high, t.p_holm)
            ],
            "verdict (claim: SSA lower)": t.verdict,
        }
    )


def dots(
    frame: pd.DataFrame,
    x: str,
    hue: str,
    title: str,
    ylabel: str,
    path: Path,
    *,
    log: bool = False,
    refs: Mapping[str, float] | None = None,
    order=None,
) -> Path | None:
    """Per-seed dots (jittered) and the seed mean (a bar) of ``value`` per ``x`` × ``hue``; horizontal
    reference lines ``refs`` (label → value)."""
    if frame.empty:
        return None
    xs = list(order) if order is not None else list(dict.fromkeys(frame[x]))
    hues = list(dict.fromkeys(frame[hue]))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(xs) * len(hues) + 1.5), 3.0))
    width = 0.8 / max(1, len(hues))
    rng = np.random.default_rng(0)
    for j, h in enumerate(hues):
        for i, xv in enumerate(xs):
            v = frame[(frame[x] == xv) & (frame[hue] == h)].value.to_numpy(float)
            if not len(v):
                continue
            pos = i - 0.4 + width * (j + 0.5)
            ax.plot(
                pos + rng.uniform(-width / 4, width / 4, len(v)),
                v,
                "o",
                ms=3,
                color=f"C{j}",
                alpha=0.7,
                label=h if i == 0 else None,
            )
            ax.hlines(v.mean(), pos - width / 2.5, pos + width / 2.5, color=f"C{j}", lw=2)
    for k, (label, v) in enumerate((refs or {}).items()):
        ax.axhline(v, color="k", ls=["--", ":", "-."][k % 3], lw=0.8, label=label)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs], rotation=20, ha="right", fontsize=7)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=8)
    if log:
        ax.set_yscale("symlog", linthresh=1e-3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, path, formats=("png",), dpi=100)
    return Path(path)  # the figure's path also where saving is off (plotting.saving: a dry render)


def shift_figure(frame: pd.DataFrame, task: str, out: Path, base: tuple[str, str] = BASE) -> Path | None:
    """σ shift at training lengths and length shift at the training σ, per seed (the arm ``base``,
    sequence error)."""
    g = paired.select(
        frame, part="grid", group=base[0], arch=base[1], predictor="model", metric="sequence_error", task=task
    )
    if g.empty:
        return None
    ax_ = axes(frame)
    sig = g[g.summary.str.startswith("train_lengths")].assign(
        point=lambda f: "σ=" + f.summary.str.split("=").str[-1]
    )
    if ax_["sigma_min"] is None:  # no cell at training lengths (a run whose curriculum stopped short)
        return None
    lng = g[g.summary.str.match(rf"sigma={_g(ax_['sigma_min'])} length=")].assign(
        point=lambda f: "L=" + f.summary.str.split("=").str[-1]
    )
    both = pd.concat([sig, lng])
    order = list(
        dict.fromkeys(sig.sort_values("summary", key=lambda s: s.str.split("=").str[-1].astype(float)).point)
    )
    order += list(
        dict.fromkeys(lng.sort_values("summary", key=lambda s: s.str.split("=").str[-1].astype(float)).point)
    )
    return dots(
        both,
        "point",
        "scorer",
        f"{_prefix(base)}{TASK_TEXT.get(task, task)}: σ shift at training lengths | length shift "
        f"at σ = {_g(ax_['sigma_min'])}",
        "sequence error",
        out / f"shift_{task}{_suffix(base)}.png",
        order=order,
    )


def deviant_grid_figure(
    frame: pd.DataFrame, task: str, out: Path, base: tuple[str, str] = BASE
) -> Path | None:
    """The M × k grid of the sequence error (MSE for linear), seed mean per scorer and sign (arm ``base``)."""
    metric = "mse" if task == "linear" else "sequence_error"
    d = paired.select(
        frame, part="deviant", group=base[0], arch=base[1], predictor="model", metric=metric, task=task
    )
    if d.empty:
        return None
    parts = d.summary.str.extract(r"sign=(\w+) M=([\d.e+]+) k=(\d+)")
    d = d.assign(sign=parts[0], M=parts[1].astype(float), k=parts[2].astype(int))
    panels = list(d.groupby(["scorer", "sign"], sort=True))
    fig, axs = plt.subplots(1, len(panels), figsize=(2.6 * len(panels) + 0.8, 2.8), squeeze=False)
    for a, ((scorer, sign), p) in zip(axs[0], panels):
        m = p.groupby(["k", "M"]).value.mean().unstack("M")
        im = a.imshow(
            m.to_numpy(),
            aspect="auto",
            cmap="viridis",
            vmin=0 if metric != "mse" else None,
            vmax=1 if metric != "mse" else None,
        )
        a.set_xticks(range(m.shape[1]), [_g(v) for v in m.columns], fontsize=6)
        a.set_yticks(range(m.shape[0]), [str(v) for v in m.index], fontsize=6)
        for (i, j), v in np.ndenumerate(m.to_numpy()):
            a.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=6, color="w")
        role = (
            ""
            if task == "linear"
            else (" (adverse)" if ADVERSE[task.split("_")[0]] == sign else " (control)")
        )
        a.set_title(f"{scorer}, {sign}{role}", fontsize=7)
        a.set_xlabel("M", fontsize=7)
        a.set_ylabel("k", fontsize=7)
    fig.suptitle(
        f"{_prefix(base)}{TASK_TEXT.get(task, task)}: deviant {metric.replace('_', ' ')} (seed mean)",
        fontsize=8,
    )
    fig.subplots_adjust(top=0.78, bottom=0.2, right=0.88)
    fig.colorbar(im, cax=fig.add_axes([0.9, 0.2, 0.012, 0.58]))
    save(fig, out / f"deviant_{task}{_suffix(base)}.png", formats=("png",), dpi=100)
    return out / f"deviant_{task}{_suffix(base)}.png"


def _mean_table(frame: pd.DataFrame, rows: list[str], col: str) -> pd.DataFrame:
    """Seed mean (min–max, n) of ``value`` with ``rows`` as rows and ``col`` as columns."""
    if frame.empty:
        return pd.DataFrame()
    s = seed_stats(frame, [*rows, col])
    s["text"] = [_mmm(r) for _, r in s.iterrows()]
    return s.pivot_table(index=rows, columns=col, values="text", aggfunc="first", sort=False).reset_index()


def deviant_table(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """Per quantifier task × scorer × sign at the largest M, k = 1 (the arm ``base``): where the errors
    are, whether the predictions follow the inserted value (beside the labels), and the attention on it."""
    ax = axes(frame)
    if ax["M_max"] is None:
        return pd.DataFrame()
    d = paired.select(frame, part="deviant", group=base[0], arch=base[1])
    d = d[d.task.isin(QUANT) & d.summary.str.endswith(f"M={_g(ax['M_max'])} k=1")]
    d = d[d.summary.str.startswith("sign=") | d.summary.str.match(r"layer=\d+ head=(mean|max)")]
    if d.empty:
        return pd.DataFrame()
    sign = d.summary.str.extract(r"sign=(\w+)")[0]
    name = np.where(
        d.summary.str.startswith("layer="),
        d.summary.str.extract(r"(layer=\d+ head=\w+)")[0] + " attention",
        np.where(d.predictor == "labels", d.metric + " (labels)", d.metric),
    )
    d = d.assign(sign=sign.to_numpy(), what=name)
    d = d.assign(
        sign=[
            f"{s} ({'adverse' if ADVERSE[t.split('_')[0]] == s else 'control'})"
            for s, t in zip(d.sign, d.task)
        ]
    )
    keep = [
        "sequence_error",
        "error_at_inserted",
        "error_after_inserted",
        "error_elsewhere",
        "follows_largest",
        "follows_largest (labels)",
        "uniform_share",
        "attention_on_inserted",
        "attention_on_inserted_max_head",
    ]
    d = d[d.what.isin(keep) | d.what.str.startswith("layer=")]
    g = d.groupby(["task", "scorer", "sign", "what"], sort=False).value.mean().unstack("what").reset_index()
    g["task"] = [TASK_TEXT.get(t, t) for t in g.task]
    cols = (
        ["task", "scorer", "sign"]
        + [c for c in keep if c in g]
        + sorted(c for c in g if str(c).startswith("layer="))
    )
    return g[cols].round(3)


def boundary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per architecture × scorer × training σ (query sweep): the seed means of the boundary estimates."""
    b = paired.select(frame, part="boundary", summary="prompts=query_sweep", predictor="model")
    shown = ["upper", "y_true_high", "train_high", "saturation_pos", "slope_pos", "plateau_pos", "bound_high"]
    b = b[b.metric.isin(shown)]
    if b.empty:
        return pd.DataFrame()
    keys = ["arch", "scorer", "train_sigma"]
    t = b.pivot_table(index=keys, columns="metric", values="value", aggfunc="mean", sort=False)
    t = t[[m for m in shown if m in t.columns]]
    t["seeds"] = b.groupby(keys, sort=False).seed.nunique()
    t = t.reset_index()
    t["arch"] = [ARCH_TEXT.get(a, a) for a in t.arch]
    return t.round(3)


def architecture_table(frame: pd.DataFrame) -> pd.DataFrame:
    """every_num and linear per architecture × scorer (pre-LN from core): in distribution, σ shift at
    training lengths, length shift at the training σ, deviant error; linear in distribution and σ_F max."""
    ax = axes(frame)
    if ax["sigma_max"] is None:
        return pd.DataFrame()
    want = {
        ("every_num", "grid", "sequence_error", "region=in_distribution"): "every_num in distribution",
        (
            "every_num",
            "grid",
            "sequence_error",
            f"train_lengths sigma={_g(ax['sigma_max'])}",
        ): f"every_num σ = {_g(ax['sigma_max'])}",
        (
            "every_num",
            "grid",
            "sequence_error",
            f"sigma={_g(ax['sigma_min'])} length={ax['length_max']}",
        ): f"every_num length {ax['length_max']}",
    }
    if ax["M_max"] is not None:
        want[("every_num", "deviant", "sequence_error", f"sign=positive M={_g(ax['M_max'])} k=1")] = (
            f"every_num deviant +{_g(ax['M_max'])}"
        )
    if ax["sigma_f"]:
        want[("linear", "grid", "mse", "sigma_f=1 sigma_x=1")] = "linear MSE in distribution"
        want[("linear", "grid", "mse", f"sigma_f={_g(ax['sigma_f'][-1])} sigma_x=1")] = (
            f"linear MSE σ_F = {_g(ax['sigma_f'][-1])}"
        )
    rows = frame[
        (frame.predictor == "model")
        & frame.group.isin(["core", "architecture"])
        & np.isclose(frame.train_sigma, 1.0)
    ]
    key = list(zip(rows.task, rows.part, rows.metric, rows.summary))
    rows = rows[[k in want for k in key]]
    if rows.empty or rows.arch.nunique() < 2:
        return pd.DataFrame()
    rows = rows.assign(what=[want[k] for k in zip(rows.task, rows.part, rows.metric, rows.summary)])
    t = _mean_table(rows, ["arch", "scorer"], "what")
    t["arch"] = [ARCH_TEXT.get(a, a) for a in t.arch]
    return t[["arch", "scorer"] + [v for v in want.values() if v in t]]


def contrasts_against(
    frame: pd.DataFrame,
    group: str,
    summaries: Mapping[str, str],
    arm_col: str = "scorer",
    base: str = "softmax",
) -> pd.DataFrame:
    """Every arm of ``group`` against ``base`` (from core, paired by seed), per task × summary, sequence
    error (MSE for linear); Holm within each task. For the alternatives (temperature, hybrid)."""
    rows = frame[(frame.part == "grid") & (frame.predictor == "model") & np.isclose(frame.train_sigma, 1.0)]
    rows = rows[
        ((rows.group == group) | ((rows.group == "core") & (rows.scorer == base))) & (rows.arch == "preln")
    ]
    rows = rows[rows.summary.isin(list(summaries)) & rows.metric.isin(["sequence_error", "mse"])]
    if rows.empty or rows[arm_col].nunique() < 2:
        return pd.DataFrame()
    t = stats.contrast_table(
        rows, by=["task", "metric", "summary"], arm_col=arm_col, base=base, family=["task"], n_boot=2000
    )
    return pd.DataFrame(
        {
            "task": [TASK_TEXT.get(x, x) for x in t.task],
            "where": [summaries[s] for s in t.summary],
            arm_col: t[arm_col],
            f"− {base} [95%]": [paired.contrast_text(r) for _, r in t.iterrows()],
            "verdict (claim: lower)": t.verdict,
        }
    )


def linear_table1(frame: pd.DataFrame, base: tuple[str, str] = BASE) -> pd.DataFrame:
    """MSE per σ_F at x ~ N(0, 1) (the paper's table 1): per scorer (the arm ``base``, seed mean) and the
    baselines (zero, least squares, …)."""
    g = paired.select(frame, part="grid", group=base[0], arch=base[1], task="linear")
    g = g[g.summary.str.endswith("sigma_x=1")]
    if g.empty:
        return pd.DataFrame()
    g = g[(g.predictor == "model") | (g.scorer == "softmax")]  # baselines do not depend on the scorer
    g = g.assign(
        who=np.where(g.predictor == "model", g.scorer, "baseline: " + g.predictor),
        sigma_f=g.summary.str.extract(r"sigma_f=([\d.]+)")[0].astype(float),
    )
    t = g.pivot_table(index="who", columns="sigma_f", values="value", aggfunc="mean")
    t.columns = [f"σ_F = {c:g}" for c in t.columns]
    t = t.reset_index().rename(columns={"who": "predictor"})
    return t.sort_values("predictor", key=lambda s: s.str.startswith("baseline")).round(4)


def generalising(frame: pd.DataFrame, base: tuple[str, str] = BASE, threshold: float = 0.1) -> pd.DataFrame:
    """Seeds whose σ-shift sequence error (training lengths, largest σ) stays below ``threshold``, per
    quantifier task, softmax vs SSA, with Fisher's exact test (bimodal outcomes: a seed generalises or
    not)."""
    ax = axes(frame)
    if ax["sigma_max"] is None:
        return pd.DataFrame()
    rows = []
    for summ, where in (
        (f"train_lengths sigma={_g(ax['sigma_max'])}", f"σ = {_g(ax['sigma_max'])}"),
        (f"sigma={_g(ax['sigma_min'])} length={ax['length_max']}", f"length {ax['length_max']}"),
    ):
        g = paired.select(
            frame,
            part="grid",
            group=base[0],
            arch=base[1],
            predictor="model",
            metric="sequence_error",
            summary=summ,
        )
        for task in [t for t in QUANT if t in set(g.task)]:
            a = g[(g.task == task) & (g.scorer == "softmax")].value
            b = g[(g.task == task) & (g.scorer == "ssa")].value
            if not len(a) or not len(b):
                continue
            ka, kb = int(stats.generalises(a, threshold).sum()), int(stats.generalises(b, threshold).sum())
            test = stats.fraction_test(ka, len(a), kb, len(b))
            rows.append(
                {
                    "task": TASK_TEXT[task],
                    "where": where,
                    "softmax": f"{ka}/{len(a)}",
                    "SSA": f"{kb}/{len(b)}",
                    "Fisher p": round(test.p_value, 3),
                }
            )
    return pd.DataFrame(rows)


def boundary_figure(frame: pd.DataFrame, out: Path) -> Path | None:
    """The 99.5% quantile of ŷ per architecture × scorer (query sweep, per seed), with the training range
    of y, the true quantile and the mean read-out bound from the checkpoints as lines."""
    b = paired.select(frame, part="boundary", summary="prompts=query_sweep", predictor="model")
    up = b[b.metric == "upper"]
    if up.empty:
        return None
    refs = {}
    for metric, label in (("train_high", "y in training (99.5%)"), ("bound_high", "read-out bound (mean)")):
        v = b[b.metric == metric].value.dropna()
        if len(v):
            refs[label] = float(v.mean())
    up = up.assign(arch=up.arch.map(lambda a: ARCH_TEXT.get(a, a)))
    return dots(
        up,
        "arch",
        "scorer",
        "linear, query sweep: 99.5% quantile of ŷ per seed",
        "upper boundary of ŷ",
        out / "boundary.png",
        refs=refs,
    )


def linear_figure(frame: pd.DataFrame, out: Path, base: tuple[str, str] = BASE) -> Path | None:
    """MSE per σ_F at x ~ N(0, 1) per seed and scorer (the arm ``base``)."""
    g = paired.select(frame, part="grid", group=base[0], arch=base[1], task="linear", predictor="model")
    g = g[g.summary.str.endswith("sigma_x=1")]
    if g.empty:
        return None
    g = g.assign(sigma_f="σ_F=" + g.summary.str.extract(r"sigma_f=([\d.]+)")[0])
    return dots(
        g,
        "sigma_f",
        "scorer",
        f"{_prefix(base)}linear, x ~ N(0, 1): MSE per σ_F (the paper's table 1), per seed",
        "MSE",
        out / f"linear_mse{_suffix(base)}.png",
        log=True,
    )


def ladder_figures(frame: pd.DataFrame, out: Path) -> list[Path]:
    """Per group outside :data:`KNOWN_GROUPS` with several architectures (a ladder's rungs): one figure per
    :func:`ladder_cells` cell, the per-seed values of softmax and SSA across the rungs."""
    ax, paths = axes(frame), []
    for group in sorted(set(frame.group) - set(KNOWN_GROUPS)):
        g = frame[(frame.group == group) & (frame.predictor == "model")]
        if g.arch.nunique() < 2:
            continue
        for i, (label, task, metric, summ) in enumerate(ladder_cells(ax, set(g.task), g)):
            rows = g[(g.task == task) & (g.metric == metric) & (g.summary == summ)]
            path = dots(
                rows,
                "arch",
                "scorer",
                f"{TASK_TEXT.get(task, task)}, {label}: per seed across `{group}`",
                metric.replace("_", " "),
                out / f"{group}_arms_{i}_{task}.png",
                log=metric == "mse",
                order=sorted(set(rows.arch)),
            )
            if path:
                paths.append(path)
    return paths


# ------------------------------------------------------------------ length curves (length_cpu)
LENGTH_METRIC = {
    "linear": "mse"
}  # a task's curve metric: quantifiers sequence error, length tasks token error


def curve_metric(task: str) -> str:
    return LENGTH_METRIC.get(task, "sequence_error" if task in QUANT else "token_error")


def length_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-seed rows of the length curves (:func:`length_rows`) with their σ_x, length and ratio to
    the training length as columns, each task at its curve metric (:func:`curve_metric`)."""
    if frame is None or not len(frame):
        return pd.DataFrame()
    c = frame[frame.summary.str.startswith("sigma_x=") & frame.summary.str.contains(" ratio=")]
    c = c[[m == curve_metric(t) for t, m in zip(c.task, c.metric)]]
    if c.empty:
        return pd.DataFrame()
    parts = c.summary.str.extract(r"sigma_x=([\d.e+-]+) length=(\d+) ratio=([\d.e+-]+)")
    return c.assign(sigma_x=parts[0].astype(float), length=parts[1].astype(int), ratio=parts[2].astype(float))


def length_learned(frame: pd.DataFrame) -> pd.DataFrame:
    """Whether each length task's model learned it: per group × task × architecture × scorer, the seed-mean
    error at the training length (×1, σ_x = 1) against the best label-rule baseline's there (``baseline``,
    the lowest seed-mean of the baselines; they do not depend on the model); ``learned`` when the model's
    is lower by more than the metric's margin (``stats.MARGINS``: 0.02 for token error). The paper's tasks
    (quantifiers, linear) are not listed: their claims read their own cells."""
    cols = ["group", "task", "arch", "scorer", "model", "baseline", "learned"]
    c = length_curves(frame)
    if c.empty:
        return pd.DataFrame(columns=cols)
    c = c[np.isclose(c.sigma_x, 1.0) & np.isclose(c.ratio, 1.0) & ~c.task.isin([*QUANT, "linear"])]
    model = c[c.predictor == "model"].groupby(["group", "task", "arch", "scorer"]).value.mean()
    if model.empty:
        return pd.DataFrame(columns=cols)
    base = c[c.predictor != "model"].groupby(["task", "predictor"]).value.mean().groupby("task").min()
    out = model.rename("model").reset_index()
    out["baseline"] = out.task.map(base)
    margin = [stats.MARGINS.get(curve_metric(t), 0.0) for t in out.task]
    out["learned"] = (out.model < out.baseline - margin) | out.baseline.isna()
    return out[cols]


def length_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task × architecture (position scheme) × scorer, and each baseline once: the curve metric at
    σ_x = 1 per test length as a multiple of the training length (seed mean; seeds in the last column)."""
    c = length_curves(frame)
    c = c[np.isclose(c.sigma_x, 1.0)] if len(c) else c
    if c.empty:
        return pd.DataFrame()
    c = c[(c.predictor == "model") | (c.scorer == "softmax")]
    who = np.where(c.predictor == "model", c.scorer, "baseline: " + c.predictor)
    c = c.assign(who=who, arch=np.where(c.predictor == "model", c.arch, "—"))
    t = c.pivot_table(
        index=["task", "arch", "who"], columns="ratio", values="value", aggfunc="mean", sort=False
    )
    t.columns = [f"×{r:.2g}" for r in t.columns]
    t = t[sorted(t.columns, key=lambda x: float(x[1:]))]
    t["seeds"] = c.groupby(["task", "arch", "who"], sort=False).seed.nunique()
    t["metric"] = [curve_metric(task) for task in t.index.get_level_values("task")]
    return t.reset_index().rename(columns={"who": "predictor"}).round(4)


def length_figure(frame: pd.DataFrame, task: str, out: Path) -> Path | None:
    """Error against test length / training length at σ_x = 1: a panel per architecture (position
    scheme), a line per scorer (seed mean) over its per-seed dots; baselines dashed."""
    c = length_curves(frame)
    c = c[(c.task == task) & np.isclose(c.sigma_x, 1.0)] if len(c) else c
    model = c[c.predictor == "model"] if len(c) else c
    if model.empty:
        return None
    archs = sorted(set(model.arch))
    fig, axs = plt.subplots(1, len(archs), figsize=(2.4 * len(archs) + 0.6, 2.6), sharey=True, squeeze=False)
    for a, arch in zip(axs[0], archs):
        for j, (scorer, g) in enumerate(model[model.arch == arch].groupby("scorer", sort=True)):
            a.plot(g.ratio, g.value, "o", ms=2, alpha=0.35, color=f"C{j}")
            m = g.groupby("ratio").value.mean()
            a.plot(m.index, m.to_numpy(), "-", lw=1.5, color=f"C{j}", label=scorer)
        for k, (pred, b) in enumerate(c[c.predictor != "model"].groupby("predictor", sort=True)):
            m = b.groupby("ratio").value.mean()
            a.plot(m.index, m.to_numpy(), ["--", ":", "-."][k % 3], color="k", lw=0.8, label=pred)
        a.axvline(1.0, color="0.6", lw=0.6)
        a.set_xscale("log", base=2)
        a.set_title(ARCH_TEXT.get(arch, arch), fontsize=8)
        a.set_xlabel("test length / training length", fontsize=7)
        a.tick_params(labelsize=6)
    axs[0][0].set_ylabel(curve_metric(task).replace("_", " "), fontsize=8)
    axs[0][-1].legend(fontsize=6)
    fig.suptitle(f"{TASK_TEXT.get(task, task)}: length extrapolation at σ_x = 1, per seed", fontsize=8)
    fig.tight_layout()
    save(fig, out / f"length_{task}.png", formats=("png",), dpi=100)
    return out / f"length_{task}.png"
