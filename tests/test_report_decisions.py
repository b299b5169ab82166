"""Reports that decide and stay true (issue 38): each defect the review found, on synthetic per-seed
frames with known answers, checked against independent computations (numpy, scipy, statsmodels OLS),
and the primary endpoints and the 2 × 2 factorial as the committed reports print them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from scipy import stats as sps

from ssa_repro import stats
from ssa_repro.reports import claims as claims_engine
from ssa_repro.reports import factorial, paired, primary, primary_tables
from ssa_repro.reports import icl_claims as icl
from ssa_repro.studies import study

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def _row(seed, scorer, value, **kw):
    base = dict(group="core", task="every_num", arch="preln", train_sigma=1.0, evaluation="grid")
    base |= dict(predictor="model", metric="sequence_error", summary="cell", part="grid")
    return {**base, **kw, "scorer": scorer, "seed": seed, "value": value}


def _claim(key="c", sign=-1, metric="sequence_error", **both):
    both = {"summary": "cell", **both}
    spec = paired.Spec("every_num", metric, {**both, "scorer": "softmax"}, {**both, "scorer": "ssa"}, sign)
    return paired.Claim(key, f"claim {key}", "p", (spec,), "SSA − softmax")


def test_arm_means_are_over_the_paired_seeds_only():
    """10 softmax seeds, 8 SSA seeds: the contrast pairs 8, so each arm's mean is over those 8 (the
    report printed a 10-seed mean beside an 8-seed estimate: "0.494 → 0" for a paired base of 0.506)."""
    soft = [0.9, 0.1, 0.5, 0.5, 0.6, 0.4, 0.7, 0.3, 0.0, 0.0]
    ssa = [0.1, 0.0, 0.2, 0.1, 0.0, 0.3, 0.2, 0.1]
    rows = [_row(s, "softmax", v) for s, v in enumerate(soft)] + [
        _row(s, "ssa", v) for s, v in enumerate(ssa)
    ]
    t = paired.claims_table(pd.DataFrame(rows), [_claim()], n_boot=200)
    r = t.iloc[0]
    assert r.n_seeds == 8
    assert r.mean_a == pytest.approx(np.mean(soft[:8])) and r.mean_a != pytest.approx(np.mean(soft))
    assert r.mean_b == pytest.approx(np.mean(ssa))
    assert r.estimate == pytest.approx(r.mean_b - r.mean_a)


def test_a_significant_effect_inside_the_margin_is_nonzero_within_not_contradicted():
    """The some_ctx collapse case: −0.011 in every seed, tight, against a claimed increase, m = 0.05:
    the sign-flip test rejects 0, both intervals lie inside ±m, so "non-zero, within ±m"."""
    rng = np.random.default_rng(0)
    d = -0.011 + rng.normal(0, 0.002, 10)
    rows = [_row(s, "softmax", 0.3) for s in range(10)] + [_row(s, "ssa", 0.3 + x) for s, x in enumerate(d)]
    t = paired.claims_table(pd.DataFrame(rows), [_claim(sign=1)], n_boot=2000)
    assert t.iloc[0].p_holm == pytest.approx(2 / 2**10)
    assert t.iloc[0].verdict == stats.NONZERO_WITHIN
    assert paired.claim_verdict([stats.NONZERO_WITHIN, stats.WITHIN]) == stats.NONZERO_WITHIN
    assert paired.claim_verdict([stats.NONZERO_WITHIN, stats.UNDERPOWERED]) == stats.UNDERPOWERED


def test_ratios_near_one_keep_enough_digits_to_show_an_interval_excluding_one():
    assert paired.fmt(math.log(1.004), "log") == "×1.004"
    lo, hi = paired.fmt(math.log(1.001), "log"), paired.fmt(math.log(1.008), "log")
    assert (lo, hi) == ("×1.001", "×1.008")  # was ×1 [×1, ×1.01]
    assert paired.fmt(math.log(0.987), "log") == "×0.987"
    assert paired.fmt(math.log(28.46), "log") == "×28.5"


def test_a_contrast_repeated_by_a_later_claim_is_tested_once_in_the_first_family():
    """The ladder's claim repeats the per-rung claims' cells; each contrast is kept once (claims.once), so
    it has one Holm p, and the first claim's family is the one named beside it."""
    first, again = _claim("first"), _claim("again")
    other = _claim("again", summary="other")
    merged = paired.Claim("again", "claim again", "p", (*again.specs, *other.specs), "SSA − softmax")
    kept = claims_engine.once([first, merged])
    assert [c.key for c in kept] == ["first", "again"] and [s.a["summary"] for s in kept[1].specs] == [
        "other"
    ]
    assert claims_engine.once([first, again]) == [first]


def test_every_committed_report_names_one_holm_p_and_family_per_contrast_and_repeats_no_claim():
    """In each committed claims CSV a contrast (its claim, label) appears once, with one p_Holm and the
    family it is adjusted in; the family's size k is the number of its judged rows; length_cpu's claims
    rows are not repeated (they were: rows 18-33 at 34-49)."""
    for name in ("icl_cpu", "icl_scale", "length_cpu", "early_cpu"):
        t = pd.read_csv(RESULTS / f"{name}_claims.csv")
        assert not t.duplicated(["claim", "contrast"]).any(), name
        assert "p_holm_table" not in t.columns
        judged = t[t.verdict != paired.NOT_LEARNED]
        # the primary family also holds the 2 × 2's effects (not claims rows): checked in the test below
        judged = judged[judged.family != primary.FAMILY]
        sizes = judged.groupby("family").size()
        assert (judged.family_k == judged.family.map(sizes)).all(), name
        for fam, g in judged.groupby("family"):  # Holm within the family, recomputed
            assert np.allclose(g.p_holm, stats.holm(g.p_value.to_numpy()), rtol=1e-4), (name, fam)
        text = (RESULTS / f"{name}.md").read_text()
        table_rows = [line for line in text.split("\n") if line.startswith("| ") and " → " in line]
        assert len(table_rows) == len(set(table_rows)), name


def test_a_length_contrast_is_judged_at_the_length_it_compares():
    """Both models learned counting at ×1 but are at the baseline at ×16: the ×16 contrast compares two
    guesses and is not judged (it was judged by the ×1 result)."""
    rows = []
    for seed in range(6):
        for scorer, at1, at16 in (("softmax", 0.05, 0.87), ("ssa", 0.04, 0.89)):
            for ratio, length, v in ((1, 8, at1), (16, 128, at16)):
                s = f"sigma_x=1 length={length} ratio={ratio}"
                rows.append(
                    _row(
                        seed,
                        scorer,
                        v,
                        group="length",
                        task="counting",
                        arch="alibi",
                        metric="token_error",
                        summary=s,
                    )
                )
                rows.append(
                    _row(
                        seed,
                        scorer,
                        0.88,
                        group="length",
                        task="counting",
                        arch="alibi",
                        metric="token_error",
                        summary=s,
                        predictor="random_token",
                    )
                )
    frame = pd.DataFrame(rows)
    at1 = icl.length_learned(frame)
    assert at1.learned.all()
    every = icl.length_learned(frame, ratio=None).set_index(["scorer", "ratio"])
    assert every.loc[("softmax", 1.0), "learned"] and not every.loc[("softmax", 16.0), "learned"]
    [claim] = [
        c
        for c in icl.claims(frame, OmegaConf.to_container(study.load("icl_cpu").claims))
        if c.key == "ssa_length"
    ]
    assert {s.label: s.judged for s in claim.specs} == {"alibi, counting, length 128 (×16)": False}


def test_findings_show_ssa_effects_against_it_as_prominently_as_for_it():
    """icl_cpu's findings: the confirmatory SSA − softmax at length 80 (+0.161, 14 of 20 seeds against
    SSA), its replication (+0.226, 23 of 30 seeds, contradicted) and the post-LN arm's SSA − softmax at
    length 80 (+0.111, called against SSA over 60 seeds: a called SSA effect is never cut from the
    findings); early_cpu's: its primary endpoints decided on their 30 confirmatory seeds, the holistic
    Zorro mean (inside the margin, estimate against SSA) and the masked-LM loss (against SSA, not called
    confirmatory; contradicted on every seed in its own family)."""
    icl_text = (RESULTS / "icl_cpu.md").read_text().split("## Primary endpoints")[0]
    assert re.search(
        r"Confirmatory \(seeds 10–29\): \*\*SSA − softmax, every_num at length 80.*\+0\.161.*"
        r"14 against the claimed direction.*estimate against SSA",
        icl_text,
    )
    assert re.search(
        r"Replication \(seeds 30–59\): \*\*SSA − softmax, every_num at length 80.*\+0\.226.*"
        r"23 against the claimed direction: \*\*contradicted\*\* — \*\*estimate against SSA",
        icl_text,
    )
    assert re.search(
        r"post-LN \+ embedding LN \(BERT\): SSA lowers.*length 80: SSA − softmax = \+0\.111.*60 seeds "
        r"\(contradicted",
        icl_text,
    )
    early_text = (RESULTS / "early_cpu.md").read_text().split("## The paper's claims")[0]
    # declared after seeds 0-6 and decided on their 30 confirmatory seeds 7-36: the holistic means are
    # inside the ±2 margin, the masked-LM loss is worse with SSA-1.5 but not called (p_Holm 0.071, at
    # power 0.96 for the planned d_z: "powered", issue 58); on
    # every seed the loss is contradicted in its own family: all shown as against SSA
    assert re.search(
        r"holistic mean_all.*SSA-2 − softmax\*\* = -0\.239 \[-1\.2, \+0\.717\].*30 seeds, 17 against the "
        r"claimed direction: \*\*not detected \(within ±m\)\*\* — \*\*estimate against SSA",
        early_text,
    )
    assert re.search(
        r"masked-LM loss.*SSA-1\.5 − softmax\*\* = \+0\.0271 \[\+0\.00492, \+0\.0501\], p_Holm 0\.071.*30 "
        r"seeds, 19 against the claimed direction: \*\*not detected \(powered for d_z 0\.8\)\*\* — \*\*estimate "
        r"against "
        r"SSA.*All seeds \(exploratory\): \+0\.031 .*: contradicted — \*\*estimate against SSA",
        early_text,
    )
    t = pd.DataFrame(
        [
            dict(
                claim="c",
                contrast="x",
                p_value=0.02,
                low=0.1,
                high=0.4,
                margin=0.05,
                estimate=0.2,
                claimed_sign=-1,
                verdict=stats.UNDERPOWERED,
                family="c",
                per_seed=(0.1, 0.3, -0.1, 0.2),
                scale="identity",
            ),
            dict(
                claim="c",
                contrast="y",
                p_value=0.02,
                low=-0.4,
                high=-0.1,
                margin=0.05,
                estimate=-0.2,
                claimed_sign=-1,
                verdict=stats.UNDERPOWERED,
                family="c",
                per_seed=(-0.1, -0.3, 0.1, -0.2),
                scale="identity",
            ),
            dict(
                claim="c",
                contrast="z",
                p_value=0.5,
                low=-0.01,
                high=0.01,
                margin=0.05,
                estimate=0.0,
                claimed_sign=-1,
                verdict=stats.WITHIN,
                family="c",
                per_seed=(0.0, 0.01, -0.01, 0.0),
                scale="identity",
            ),
        ]
    )
    got = paired.ssa_effects(t, [_claim("c")]).set_index("contrast")
    assert list(got.index) == ["x", "y"]  # z: neither p < 0.05 nor past the margin
    assert not got.loc["x", "for_ssa"] and got.loc["x", "seeds_b_worse"] == 3
    assert got.loc["y", "for_ssa"] and got.loc["y", "seeds_b_worse"] == 1


def test_the_factorial_effects_are_the_ols_coefficients_and_primaries_share_one_holm_family():
    """The 2 × 2 (A: pre-LN → post-LN, B: softmax → SSA, paired by seed) from a per-seed frame: main
    effects and interaction equal statsmodels' OLS of y ~ seed + a + b + a·b (±1/2 coding); the two
    declared primary effects leave the design's family for `primary`, Holm-adjusted with the claim
    endpoints (k = 3 here), and the claims table row of a primary carries the same p_Holm."""
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(1)
    rows = []
    for seed in range(8):
        u = rng.normal(0, 0.05)
        for i, (group, arch) in enumerate((("core", "preln"), ("architecture", "postln"))):
            for j, scorer in enumerate(("softmax", "ssa")):
                y = 0.5 - 0.4 * i - 0.05 * j + 0.1 * i * j + u + rng.normal(0, 0.03)
                rows.append(_row(seed, scorer, y, group=group, arch=arch))
    frame = pd.DataFrame(rows)
    design = {
        "text": "t",
        "metric": "sequence_error",
        "sign": -1,
        "both": {"task": "every_num", "predictor": "model"},
        "a": [{"group": "core", "arch": "preln"}, {"group": "architecture", "arch": "postln"}],
        "b": [{"scorer": "softmax"}, {"scorer": "ssa"}],
        "cells": {"cell": {"summary": "cell"}},
    }
    ctx = claims_engine.Context({})
    eps = {
        "a": {"text": "A", "factorial": "d", "cell": "cell", "of": "A", "effect": 1.0},
        "b": {"text": "B", "factorial": "d", "cell": "cell", "of": "B", "effect": 0.8},
        "c": {
            "text": "C",
            "claim": "c",
            "contrast": "every_num",
            "effect": 0.8,
            "threshold": 0.3,
            "discordance": [0.05, 0.4],
        },
    }
    assert primary.problems(eps, "f", {"c"}, ["d"]) == []
    designs = factorial.table(frame, {"d": design}, ctx, primary.design_cells(eps))
    ols_frame = frame.assign(
        xa=np.where(frame.arch == "postln", 0.5, -0.5), xb=np.where(frame.scorer == "ssa", 0.5, -0.5)
    )
    fit = smf.ols("value ~ C(seed) + xa + xb + xa:xb", data=ols_frame).fit()
    got = designs.set_index("effect")
    for eff, coef in (("A", "xa"), ("B", "xb"), ("AxB", "xa:xb")):
        assert got.loc[eff, "estimate"] == pytest.approx(fit.params[coef], abs=1e-12)
    assert list(got.family) == ["primary", "primary", "factorial d"]
    claim = _claim("c", group="core", arch="preln")
    table = paired.claims_table(frame, [claim], families=primary.claim_families(eps), n_boot=500)
    decided = primary.decide(eps, table, designs, frame, [claim])
    want = stats.holm(np.array([got.loc["A", "p_value"], got.loc["B", "p_value"], table.p_value.iloc[0]]))
    assert decided.p_holm.to_numpy() == pytest.approx(want)
    assert table.p_holm.iloc[0] == pytest.approx(want[2]) and table.family.iloc[0] == "primary"
    assert designs.set_index("effect").loc["A", "p_holm"] == pytest.approx(want[0])
    # the bimodal endpoint: seeds below 0.3 per arm, exact McNemar against scipy's binomial test
    b = decided.set_index("endpoint").loc["c", "binary"]
    soft = frame[(frame.group == "core") & (frame.scorer == "softmax")].sort_values("seed").value < 0.3
    ssa = frame[(frame.group == "core") & (frame.scorer == "ssa")].sort_values("seed").value < 0.3
    n10, n01 = int((soft.to_numpy() & ~ssa.to_numpy()).sum()), int((~soft.to_numpy() & ssa.to_numpy()).sum())
    p = sps.binomtest(n01, n10 + n01, 0.5).pvalue if n10 + n01 else 1.0
    assert (b["a"], b["b"]) == (int(soft.sum()), int(ssa.sum())) and b["mcnemar"].p_value == pytest.approx(p)
    # the plan: seeds for 80% at α/3, continuous and binary, as stats.plan_table computes them
    plan = primary_tables.plan(eps, k=3)
    assert list(plan.endpoint) == ["a", "b", "c", "c (generalises)"]
    assert plan.iloc[0, -1] == stats.seeds_for_endpoint(1.0, k=3)


def test_primary_declarations_are_checked_with_the_file_key_and_value():
    bad = {
        "x": {"text": "t", "claim": "nope", "contrast": "c", "effect": -1},
        "y": {"text": "t", "factorial": "d", "cell": "c", "of": "C", "effect": 0.5},
        "z": {"text": "t", "claim": "c", "contrast": "c", "effect": 0.5, "discordance": [0.1, 2]},
        "w": {"text": "t", "claim": "c", "contrast": "c", "effect": 0.5, "typo": 1},
        "v": {"text": "t", "claim": "c", "contrast": "c", "effect": 0.5},
    }
    out = "\n".join(primary.problems(bad, "s.yaml", {"c"}, ["d"]))
    assert "s.yaml: primary declares 5 endpoints; allowed: at most 4" in out
    assert "s.yaml: primary.x.claim='nope' names no claim" in out
    assert "s.yaml: primary.x.effect=-1 is not allowed" in out
    assert "s.yaml: primary.y.of='C' is not allowed; allowed: A or B" in out
    assert "s.yaml: primary.z.discordance=[0.1, 2] is not allowed" in out
    assert "s.yaml: primary.w.typo=1 is not a key of an endpoint" in out
    assert primary.problems({**bad, "x": None, "y": None, "z": None, "w": None}, "s.yaml", {"c"}, ["d"]) == []


def test_the_committed_reports_print_the_primary_endpoints_and_their_power():
    """icl_cpu declares four endpoints (its two SSA − softmax cells, the 2 × 2's two main effects),
    icl_scale three on its largest rung, length_cpu two, early_cpu three; each report prints the plan
    table, the results with the power at the seeds run, and says when the endpoints were declared: each
    before its confirmatory seeds (confirmatory_seeds), on which they are decided (icl_scale's and
    early_cpu's partly run: interim, said so)."""
    for name, k in (("icl_cpu", 4), ("icl_scale", 3), ("length_cpu", 2), ("early_cpu", 3)):
        text = (RESULTS / f"{name}.md").read_text()
        said = "These endpoints were declared (issue 38) after seeds"
        assert "## Primary endpoints" in text and said in text
        if name == "icl_scale":
            assert "No confirmatory seeds run yet" in text
        if name == "early_cpu":  # all 30 of its confirmatory seeds paired: decided, not interim
            assert "(7–36: 30 of the 30 declared in the data)" in text and "Interim" not in text
        assert f"p_Holm (primary, k = {k})" in text and "seeds for 80% power" in text
        # early_cpu's 37 and icl_cpu's 60 seeds are past the exact count: the rule says how p is had
        assert stats.SIGN_FLIP_P in text and "the exact sign-flip p" not in text
    icl_text = (RESULTS / "icl_cpu.md").read_text()
    assert "## The 2 × 2 as a factorial (paired by seed)" in icl_text
    assert "“within ±m” (robust rule)" in icl_text
    setup = OmegaConf.to_container(study.load("icl_cpu"))
    assert len(setup["primary"]) == 4
    scale = OmegaConf.to_container(study.load("icl_scale"))
    assert sum(v is not None for v in scale["primary"].values()) == 3


def test_a_design_declaration_is_checked_with_the_file_key_and_value():
    good = {
        "text": "t",
        "metric": "sequence_error",
        "sign": -1,
        "both": {},
        "a": [{"arch": "preln"}, {"arch": "postln"}],
        "b": [{"scorer": "softmax"}, {"scorer": "ssa"}],
        "cells": {"c": {"summary": "s"}},
    }
    assert factorial.problems({"d": good}, "s.yaml", icl.CLAIM_NAMES) == []
    bad = {**good, "a": [{"arch": "preln"}], "sign": 0, "cells": ["c"], "typo": 1}
    del bad["metric"]
    out = factorial.problems({"d": bad}, "s.yaml", icl.CLAIM_NAMES)
    assert out == [
        "s.yaml: factorials.d.typo=1 is not a key of a design; allowed: text, metric, sign, both, a, b, cells",
        "s.yaml: factorials.d.metric is missing; a design needs text, metric, sign, both, a, b, cells",
        "s.yaml: factorials.d.a=[{'arch': 'preln'}] is not allowed; allowed: two column filters [level 0, level 1]",
        "s.yaml: factorials.d.sign=0 is not allowed; allowed: 1 or -1",
        "s.yaml: factorials.d.cells=['c'] is not a mapping; allowed: {cell name: filters}",
    ]


def test_every_called_ssa_contrast_is_in_the_findings_beyond_the_top_few():
    """paired.findings keeps at most n of the other called claims (one each, strongest first) and then
    every called row of the claims in ``keep`` (SSA's), for and against SSA alike."""
    rows = [
        dict(claim=f"c{i}", contrast="x", estimate=1.0 + i, margin=0.1, verdict=stats.YES) for i in range(6)
    ] + [
        dict(claim="ssa_a", contrast="y", estimate=0.3, margin=0.1, verdict=stats.CONTRADICTED),
        dict(claim="ssa_a", contrast="z", estimate=-0.5, margin=0.1, verdict=stats.YES),
        dict(claim="ssa_b", contrast="w", estimate=0.01, margin=0.1, verdict=stats.UNDERPOWERED),
    ]
    found = paired.findings(pd.DataFrame(rows), n=3, keep=["ssa_a", "ssa_b"])
    assert list(zip(found.claim, found.contrast)) == [
        ("c5", "x"), ("c4", "x"), ("c3", "x"), ("ssa_a", "z"), ("ssa_a", "y")
    ]  # fmt: skip
    assert list(paired.findings(pd.DataFrame(rows), n=3).claim) == ["c5", "c4", "c3"]
