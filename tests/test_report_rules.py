"""Issue 58: the same rule for the same kind of outcome in every part of a report (reports/decide.py,
stats/decision.py), each check built to fail on the reports as they were before it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from ssa_repro import stats
from ssa_repro.reports import decide as pipeline
from ssa_repro.reports import icl_tables, paired, primary, primary_tables


def _row(seed, scorer, value, summary, task="every_num"):
    return dict(
        group="core",
        task=task,
        arch="preln",
        train_sigma=1.0,
        evaluation="grid",
        predictor="model",
        metric="sequence_error",
        summary=summary,
        part="grid",
        scorer=scorer,
        seed=seed,
        value=value,
    )


def _claim(key, summary, sign=-1):
    both = {"summary": summary, "task": "every_num"}
    spec = paired.Spec(
        summary, "sequence_error", {**both, "scorer": "softmax"}, {**both, "scorer": "ssa"}, sign
    )
    return paired.Claim(key, f"claim {key}", "p", (spec,), "SSA − softmax")


def _flat_frame(n=20, summaries=("a", "b")):
    """Seeds that all generalise under both scorers (errors ~0.01): the plain rule calls "within ±m"."""
    rng = np.random.default_rng(0)
    rows = []
    for summary in summaries:
        for s in range(n):
            v = abs(rng.normal(0.01, 0.003))
            rows += [_row(s, "softmax", v, summary), _row(s, "ssa", abs(v + rng.normal(0, 0.002)), summary)]
    return pd.DataFrame(rows)


def test_an_exploratory_row_of_a_bimodal_metric_gets_the_robust_rule():
    """Review D2: icl_cpu's ssa_main on every seed, ssa_deviant and icl_scale's scale_sigma were called
    "within ±m" by the plain rule though their metric is a declared bimodal endpoint's."""
    frame = _flat_frame()
    claims = [_claim("endpoint", "a"), _claim("exploratory", "b")]
    eps = {"e": {"claim": "endpoint", "contrast": "a", "threshold": 0.1, "max_jump": 1.0, "effect": 0.8}}
    kinds = pipeline.outcomes(eps, claims)
    assert kinds == {"sequence_error": stats.Outcome(stats.BIMODAL, threshold=0.1, max_jump=1.0)}
    plain = paired.claims_table(frame, claims, n_boot=500)
    assert set(plain.verdict) == {stats.WITHIN}  # what the reports printed
    robust = paired.claims_table(frame, claims, n_boot=500, outcomes=kinds)
    assert set(robust.verdict) == {stats.UNDERPOWERED}
    # the robust bound: 20 seeds, no jump seen, 1 − 0.025^(1/20) of a jump of 1 ≈ 0.168 > m
    assert 1 - 0.025 ** (1 / 20) > stats.MARGINS["sequence_error"]


def test_outcomes_reject_two_kinds_for_one_metric():
    claims = [_claim("x", "a"), _claim("y", "b")]
    eps = {
        "one": {"claim": "x", "contrast": "a", "threshold": 0.1},
        "two": {"claim": "y", "contrast": "b", "threshold": 0.2},
    }
    with pytest.raises(ValueError, match="primary.two.*sequence_error.*primary.one"):
        pipeline.outcomes(eps, claims)


def test_seeds_that_generalise_are_compared_paired_by_exact_mcnemar():
    """Review D4: the table used Fisher's unpaired test and printed p = 0.00046 as "0"."""
    rows = []
    sigma = "train_lengths sigma=16"
    for s in range(30):
        a = 0.6 if s < 14 else 0.01  # softmax generalises on 16 of 30
        b = 0.6 if s < 2 else 0.01  # SSA on 28: 12 seeds only SSA, none only softmax
        rows += [_row(s, "softmax", a, sigma), _row(s, "ssa", b, sigma)]
        rows += [
            _row(s, "softmax", 0.5, "train_lengths sigma=1"),
            _row(s, "ssa", 0.5, "train_lengths sigma=1"),
        ]
        rows += [_row(s, "softmax", 0.5, "sigma=1 length=80"), _row(s, "ssa", 0.5, "sigma=1 length=80")]
    t = icl_tables.generalising(pd.DataFrame(rows))
    r = t[t["where"] == "σ = 16"].iloc[0]
    expected = sps.binomtest(12, 12, 0.5).pvalue  # McNemar: 12 discordant seeds, all one way
    assert r["McNemar p"] == f"{expected:.2g}" != "0"
    assert r["only softmax / only SSA"] == "0 / 12"
    assert (r["softmax"], r["SSA"]) == ("16/30", "28/30")
    assert "Fisher p" not in t.columns


def test_a_plan_whose_discordance_allows_less_than_its_d_z_uses_the_smaller():
    """Review §3 / issue item 4: icl_cpu plans d_z 0.8 and a discordance 0.05 / 0.40 that allows at
    most d_z 0.61; the power printed (0.78 at 20 seeds, α/4) was the larger one's."""
    e = {"effect": 0.8, "threshold": 0.1, "discordance": [0.05, 0.4]}
    dz = primary.planned(e)
    assert dz == pytest.approx(0.35 / np.sqrt(0.45 - 0.35**2))
    assert dz < 0.8
    assert stats.power_paired(dz, 20, 0.05 / 4) < 0.6 < stats.power_paired(0.8, 20, 0.05 / 4)
    assert primary.planned({"effect": 0.8}) == 0.8


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"kind": "odd"}, "kind='odd' is not allowed"),
        ({"kind": "bimodal"}, "needs threshold"),
        ({"kind": "continuous", "threshold": 0.1}, "with a threshold"),
        ({"decide_by": "mcnemar"}, "decide_by='mcnemar' needs threshold"),
        ({"decide_by": "fisher", "threshold": 0.1}, "decide_by='fisher' is not allowed"),
    ],
)
def test_an_endpoints_kind_is_checked_with_the_file_key_and_value(extra, match):
    e = {"text": "t", "claim": "c", "contrast": "x", "effect": 0.8, **extra}
    found = primary.problems({"ep": e}, "conf/study/s.yaml", claim_keys={"c"})
    assert any("conf/study/s.yaml: primary.ep" in p and match in p for p in found), found


def test_underpowered_is_said_only_where_the_power_was_below_80_percent():
    """Review D10: "underpowered" where the planned power was 0.95-0.99."""
    rng = np.random.default_rng(4)
    rows = []
    for s in range(30):
        v = rng.normal(0.5, 0.2)
        rows += [_row(s, "softmax", v, "a"), _row(s, "ssa", v + rng.normal(0, 0.2), "a")]
    frame = pd.DataFrame(rows)
    claims = [_claim("c", "a")]
    eps = {"ep": {"text": "t", "claim": "c", "contrast": "a", "effect": 0.8}}
    table = paired.claims_table(frame, claims, families=primary.claim_families(eps), n_boot=500)
    res = primary.decide(eps, table, pd.DataFrame(), frame, claims)
    r = res.iloc[0]
    assert r["power (planned d_z)"] == pytest.approx(stats.power_paired(0.8, 30, 0.05))
    assert r["p_holm"] >= 0.05  # not detected, with 0.99 power: never "underpowered"
    assert r["verdict"] == "not detected (powered for d_z 0.8)"
    assert table.verdict.iloc[0] == r["verdict"]
    few = primary.decide(
        eps, table.assign(per_seed=[table.per_seed.iloc[0][:8]], n_seeds=8), pd.DataFrame(), frame, claims
    )
    assert few["power (planned d_z)"].iloc[0] < 0.8 and few.verdict.iloc[0] == stats.UNDERPOWERED


def test_the_simulation_table_shows_the_plain_rules_false_calls_at_the_jumps_seen():
    """Review D3: with a jump of 1.0 alone the plain rule made no false "within ±m" call; at the
    jumps these outcomes show (0.5) it makes 14-17% at 20 seeds, which the robust rule does not."""
    t = primary_tables.simulated_rates(0.05, 0.1, 1.0, seeds=[20])
    assert list(dict.fromkeys(t.outcomes)) == [
        "normal",
        "bimodal, jump 0.3",
        "bimodal, jump 0.5",
        "bimodal, jump 1",
    ]
    at_m = t[t["true effect"] == "0.05"].set_index("outcomes")
    assert at_m.loc["bimodal, jump 0.5", "“within ±m” (plain rule)"] > 0.08
    assert at_m.loc["bimodal, jump 1", "“within ±m” (plain rule)"] < 0.02
    assert (at_m["“within ±m” (robust rule)"] == 0).all()


def test_a_claim_not_detected_where_it_had_the_power_says_so():
    powered = stats.powered(0.8)
    assert paired.claim_verdict([powered, stats.WITHIN]) == powered
    assert paired.claim_verdict([powered, stats.UNDERPOWERED]) == stats.UNDERPOWERED
    assert paired.claim_verdict([powered, stats.YES]) == paired.PARTLY


def test_an_arm_is_learned_only_where_most_of_its_seeds_beat_the_baseline():
    """Review D5: MQAR with learned positions, softmax per seed [0.000, 0.844, 0.851, 0.845, 0.846,
    0.847, 0.846] against the baseline's 0.8687: its mean 0.7255 passed the mean gate (learned), though
    one seed of seven learned; SSA 0.8485 (no seed) passed too."""
    from ssa_repro.reports import icl_claims as icl

    softmax = [0.0, 0.844, 0.851, 0.845, 0.846, 0.847, 0.846]
    ssa = [0.8485] * 7
    rows = []
    for seed in range(7):
        for scorer, v in (("softmax", softmax[seed]), ("ssa", ssa[seed]), ("softmax", 0.8687)):
            base = scorer == "softmax" and v == 0.8687
            rows.append(
                dict(
                    _row(seed, scorer, v, "sigma_x=1 length=64 ratio=1", task="mqar_w64"),
                    group="mqar",
                    arch="learned",
                    metric="token_error",
                    predictor="random_token" if base else "model",
                )
            )
    t = icl.length_learned(pd.DataFrame(rows)).set_index("scorer")
    assert t.loc["softmax", "model"] == pytest.approx(np.mean(softmax))
    assert t.loc["softmax", "model"] < 0.8687 - 0.02  # the old gate: "learned"
    assert (t.loc["softmax", "seeds learned"], bool(t.loc["softmax", "learned"])) == ("1/7", False)
    assert (t.loc["ssa", "seeds learned"], bool(t.loc["ssa", "learned"])) == ("0/7", False)


def test_a_section_without_data_does_not_point_to_an_empty_missing(tmp_path):
    """Review D6: "No data yet (see *Missing*)" beside a Missing that said "Nothing"."""
    from ssa_repro.reports.kinds import icl as report

    lines = report.section("A section", "text", None)
    assert report.NO_DATA in lines
    path = report.finish(lines, pd.DataFrame(), [], None, tmp_path, "s")
    text = path.read_text()
    assert report.NO_DATA not in text and report.NOT_DECLARED in text
    path = report.finish(lines, pd.DataFrame(), ["group g: not stored"], None, tmp_path, "s")
    assert report.NO_DATA in path.read_text()


def test_blocks_of_seeds_that_differ_in_level_are_found_and_said():
    """Review D8: early_cpu's seeds 0-6 (an H200, before the declaration) against 7-36 (the CPU):
    holistic SSA-2 − softmax −4.02 against −0.24, Welch p 0.0017; the report pooled them unremarked."""
    import statsmodels.stats.weightstats as sw

    from ssa_repro.reports import blocks
    from ssa_repro.reports.decide import Decided

    rng = np.random.default_rng(5)
    rows = []
    for s in range(37):
        shift = -4.0 if s < 7 else -0.24
        v = rng.normal(60, 2)
        rows += [_row(s, "softmax", v, "a"), _row(s, "ssa", v + shift + rng.normal(0, 2), "a")]
    frame = pd.DataFrame(rows)
    claims = [_claim("c", "a")]
    eps = {"ep": {"text": "t", "claim": "c", "contrast": "a", "effect": 0.8}}
    decided = Decided(frame, claims, pd.DataFrame(), pd.DataFrame(), eps=eps, earlier=list(range(7)))
    t = blocks.table(decided)
    d = blocks.per_seed(eps["ep"], frame, claims)
    ref = sw.ttest_ind(d.iloc[:7], d.iloc[7:], usevar="unequal")[1]  # statsmodels' Welch test
    assert t["Welch p"].iloc[0] == f"{ref:.2g}" and bool(t["blocks differ"].iloc[0])
    assert t["earlier seeds"].iloc[0].endswith("(n = 7)")
    text = "\n".join(blocks.lines(decided))
    assert "They differ" in text and "ep" in text
    assert blocks.lines(Decided(frame, claims, pd.DataFrame(), pd.DataFrame(), eps=eps)) == []


def test_the_mechanism_probe_says_its_declared_hypothesis_is_contradicted():
    """Review D7: preln_nofinal has pre-LN's stream growth (×16) and attention-share collapse (×0.062)
    yet its error is 0.0085 against 0.574; the report never said the hypothesis failed."""
    from ssa_repro.reports import mechanism

    def row(claim, estimate, verdict):
        return {"claim": claim, "estimate": estimate, "verdict": verdict}

    t = pd.DataFrame(
        [
            row("sigma", 0.565, stats.YES),
            row("scale_residual: preln", np.log(16.2), stats.YES),
            row("attn_share: preln", np.log(0.0637), stats.YES),
            row("architecture: postln", -0.574, stats.YES),
            row("scale_residual: postln", np.log(1.006), stats.NONZERO_WITHIN),
            row("attn_share: postln", np.log(1.04), stats.WITHIN),
            row("architecture: preln_nofinal", -0.565, stats.YES),
            row("scale_residual: preln_nofinal", np.log(16.1), stats.YES),
            row("attn_share: preln_nofinal", np.log(0.0624), stats.YES),
        ]
    )
    m = mechanism.table(t).set_index("arm")
    assert list(m.agrees) == [True, True, False]
    assert (m.loc["preln_nofinal", "predicted"], m.loc["preln_nofinal", "observed (error at σ = 16)"]) == (
        "fails",
        "generalises",
    )
    text = "\n".join(mechanism.lines(t))
    assert (
        "**The data contradict the hypothesis**: preln_nofinal (predicted: fails; observed: generalises)"
        in text
    )
    agree = t[~t.claim.str.endswith("preln_nofinal")]
    assert "agree with the hypothesis on every arm" in "\n".join(mechanism.lines(agree))


def test_findings_list_one_measurement_once():
    """Review D7: a post-LN model's stream and its first attention's input are one tensor at layer 0;
    the findings listed it twice, as two claims."""
    t = pd.DataFrame(
        [
            dict(
                claim="scale_residual: x", verdict=stats.YES, estimate=2.79, margin=0.22, per_seed=(2.7, 2.8)
            ),
            dict(
                claim="scale_attn_input: x",
                verdict=stats.YES,
                estimate=2.79,
                margin=0.22,
                per_seed=(2.7, 2.8),
            ),
            dict(
                claim="attn_share: x", verdict=stats.YES, estimate=-1.07, margin=0.22, per_seed=(-1.0, -1.1)
            ),
        ]
    )
    assert list(paired.findings(t).claim) == ["scale_residual: x", "attn_share: x"]


def test_a_study_without_an_ssa_arm_does_not_promise_ssa_claims_in_its_title():
    from ssa_repro.reports.kinds import icl as report

    setup = {
        "base": ["model.n_layer=2", "model.n_embd=32", "train.steps=3000"],
        "groups": {"g": {"scorers": ["softmax"]}},
    }
    assert "SSA's" not in report.title("m", setup) and "no SSA arm" in report.title("m", setup)
    setup["groups"]["g"]["scorers"] = ["softmax", "ssa"]
    assert "SSA's in-context-learning claims" in report.title("m", setup)


def _relpos_frame(n=40, mqar=True):
    """relpos_cpu's primary cells (issue 59) on synthetic seeds 100-139: ALiBi's SSA effect on linear
    MSE at 8× (log ratio −0.65) against learned positions' (−0.1), and MQAR token error at 16×."""
    rng = np.random.default_rng(0)
    rows = []
    base = dict(train_sigma=1.0, predictor="model", part="grid")
    for seed in range(100, 100 + n):
        for arch in ("learned", "alibi"):
            level = rng.lognormal(0, 0.3)
            for scorer in ("softmax", "ssa"):
                eff = 0.0 if scorer == "softmax" else (-0.65 if arch == "alibi" else -0.1)
                v = level * np.exp(eff + rng.normal(0, 0.2))
                for length, ratio in ((21, 1), (168, 8)):
                    rows.append(
                        dict(base, group="linear", task="linear", scorer=scorer, arch=arch, seed=seed)
                        | dict(evaluation="length", metric="mse", value=v if ratio == 8 else v / 10)
                        | dict(summary=f"sigma_x=1 length={length} ratio={ratio}")
                    )
        for scorer, v in (("softmax", 0.88), ("ssa", 0.3)) if mqar else ():
            for length, ratio in ((8, 1), (128, 16)):
                rows.append(
                    dict(base, group="mqar", task="mqar_w64", scorer=scorer, arch="alibi", seed=seed)
                    | dict(evaluation="length", metric="token_error")
                    | dict(summary=f"sigma_x=1 length={length} ratio={ratio}")
                    | dict(value=(v + rng.normal(0, 0.05)) if ratio == 16 else 0.01)
                )
    return pd.DataFrame(rows)


def test_relpos_cpus_endpoints_an_interaction_among_them_go_through_the_one_pipeline(tmp_path):
    """Issue 59's study: two ladder endpoints (MQAR token error, linear MSE as a log ratio) and a 2 × 2
    interaction (``of: AxB``), one Holm family of three, decided on the declared seeds."""
    from omegaconf import OmegaConf

    from ssa_repro.reports.kinds import icl as report
    from ssa_repro.studies import study

    setup = OmegaConf.to_container(study.load("relpos_cpu"))
    path = tmp_path / "per_seed_grid.csv"
    _relpos_frame().to_csv(path, index=False)
    d = report.decide({"grid": path}, setup)
    r = d.primaries.set_index("endpoint")
    assert set(r.index) == {"alibi_mqar", "alibi_linear", "interaction"} and (r.k == 3).all()
    assert (r.n_seeds == 40).all() and not r.interim.any()
    assert r.loc["interaction", "scale"] == "log" and r.loc["interaction", "estimate"] < 0
    assert r.loc["interaction", "verdict"] == stats.YES  # declared in its direction: decided as claimed
    assert r.loc["alibi_linear", "verdict"] == stats.YES == r.loc["alibi_mqar", "verdict"]
    np.testing.assert_allclose(r.p_holm, stats.holm(r.p_value))
    # with the MQAR cells not run yet: every verdict withheld (interim), nothing crashes
    _relpos_frame(mqar=False).to_csv(path, index=False)
    part = report.decide({"grid": path}, setup).primaries
    assert part.interim.all() and set(part.endpoint) == {"alibi_linear", "interaction"}


def test_relpos_cpus_report_on_an_empty_root_says_no_data_yet(tmp_path):
    from ssa_repro.cli import run_study

    run_study.main(["relpos_cpu", "--report-only", "--root", str(tmp_path / "empty")])
    text = (tmp_path / "empty" / "relpos_cpu.md").read_text()
    assert "No runs." in text and "No data yet (see *Missing*)." in text
    assert "No claim could be measured" in text


def test_endpoints_declared_with_the_study_are_not_said_to_follow_earlier_runs():
    """relpos_cpu declared its endpoints before any run: its report must not say they came after runs."""
    from ssa_repro.reports.primary_tables import note

    text = note(confirmatory=[100, 101, 102], run=[100, 101], earlier=[])
    assert "declared with the study, before any of its runs (seeds 100–102)" in text
    assert "after" not in text.split(".")[0]
    earlier = note(confirmatory=[10, 11], run=[10, 11], earlier=[0, 1])
    assert "declared (issue 38) after seeds 0, 1 had been run" in earlier
