"""Claims as data (ssa_repro/reports/claims.py): a study file's ``claims:`` section is checked before a
study runs (a typo names the file, the claim and the key), and a claim added to a study file becomes a row
of its report's claims table whose numbers match an independent computation (the paired mean difference by
hand, the exact sign-flip p by enumerating every sign pattern, scipy's permutation test beside it)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from scipy import stats as sps

from ssa_repro.core.plotting import saving
from ssa_repro.reports import claims, paired, seed_power
from ssa_repro.reports import icl_claims as icl
from ssa_repro.reports.kinds import early
from ssa_repro.reports.kinds import icl as report
from ssa_repro.studies import study

SEEDS = list(range(8))
NEW_CLAIM = """
claims:
  my_claim:
    claim: "SSA lowers the in-distribution error on every_num"
    paper: "not a claim of the paper (a test's own)"
    contrast: "SSA − softmax"
    metric: sequence_error
    sign: -1
    label: every_num
    both: {group: core, arch: preln, predictor: model, task: every_num, summary: region=in_distribution}
    a: {scorer: softmax}
    b: {scorer: ssa}
"""


def study_file(tmp_path: Path, body: str, parent: str = "icl_cpu") -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(f"defaults: [{parent}, _self_]\nname: mine\n{body}")
    return path


def refused(path: Path) -> str:
    with pytest.raises(SystemExit) as e:
        study.load(str(path))
    return str(e.value)


def test_a_typo_in_a_claim_is_refused_naming_the_file_the_claim_and_the_key(tmp_path):
    typo = NEW_CLAIM.replace("metric: sequence_error", "metrc: sequence_error")
    msg = refused(study_file(tmp_path, typo))
    assert "mine.yaml: claims.my_claim.metrc='sequence_error' is not a key of a claim; allowed keys:" in msg
    assert "mine.yaml: claims.my_claim.metric is missing; a claim needs" in msg
    # a value the report does not give, a list it does not have, a judge it does not know, a bad sign
    bad = (
        NEW_CLAIM.replace("label: every_num", 'label: "{sigma_maxx}"')
        .replace("sign: -1", "sign: 2\n    for: {t: quants}\n    judge: learnt")
        .replace("{scorer: ssa}", "{scorer: ssa}\n  per_base: {each: {b: bases}, claims: {x: 3}}")
    )
    msg = refused(study_file(tmp_path, bad))
    assert "claims.my_claim.label='{sigma_maxx}' names {sigma_maxx}, which is neither a value" in msg
    assert (
        "claims.my_claim.for.t='quants' is not a list of report 'icl'; allowed: M_max, architectures," in msg
    )
    assert "claims.my_claim.judge='learnt' is not a judge of report 'icl'; allowed: learned" in msg
    assert "claims.my_claim.sign=2 is not allowed; allowed: 1 (b > a) or -1 (b < a)" in msg
    assert "claims.per_base.claims.x=3 is not a mapping" in msg
    # the early report's names are its own
    msg = refused(
        study_file(tmp_path, NEW_CLAIM.replace("every_num\n", '"{sigma_max}"\n'), parent="early_cpu")
    )
    assert "names {sigma_max}, which is neither a value of the report" in msg and "zorro_last" in msg


def test_at_most_four_primary_claims(tmp_path):
    one = NEW_CLAIM.split("claims:\n")[1].replace("sign: -1", "sign: -1\n    primary: true")
    # five claims on five different cells (the same contrast twice would be tested once: claims.once)
    five = "claims:\n" + "".join(
        one.replace("my_claim", f"c{i}").replace("in_distribution", f"region{i}") for i in range(5)
    )
    assert "mine.yaml: claims declares 5 primary claims; allowed: at most 4" in refused(
        study_file(tmp_path, five)
    )
    entries = OmegaConf.to_container(OmegaConf.create(five))["claims"]
    entries["c4"]["primary"] = False
    assert claims.problems(entries, "f", icl.CLAIM_NAMES, icl.JUDGES, "icl") == []
    entries["c4"]["primary"] = "yes"
    assert claims.problems(entries, "f", icl.CLAIM_NAMES, icl.JUDGES, "icl") == [
        "f: claims.c4.primary='yes' is not allowed; allowed: true or false"
    ]
    entries["c4"]["primary"] = False
    built = claims.build(entries, claims.Context({}))
    assert [c.primary for c in built] == [True, True, True, True, False]
    # the declared primaries lead, the others keep the file's order
    for i in range(4):
        entries[f"c{i}"]["primary"] = i == 2
    assert [c.key for c in claims.build(entries, claims.Context({}))] == ["c2", "c0", "c1", "c3", "c4"]


def per_seed_frame() -> pd.DataFrame:
    """Core pre-LN every_num, softmax and SSA, 8 seeds: the in-distribution sequence error, SSA lower on
    7 of 8 seeds by differing amounts."""
    rng = np.random.default_rng(3)
    soft = rng.uniform(0.2, 0.4, len(SEEDS))
    ssa = soft - np.array([0.05, 0.02, 0.07, -0.01, 0.04, 0.03, 0.06, 0.01])
    rows = [
        {
            "group": "core",
            "task": "every_num",
            "scorer": scorer,
            "arch": "preln",
            "train_sigma": 1.0,
            "seed": s,
            "evaluation": "grid_quantifier",
            "predictor": "model",
            "metric": "sequence_error",
            "summary": "region=in_distribution",
            "value": float(v),
        }
        for scorer, values in (("softmax", soft), ("ssa", ssa))
        for s, v in zip(SEEDS, values)
    ]
    return pd.DataFrame(rows, columns=paired.PER_SEED_COLUMNS)


def test_a_claim_added_in_a_study_file_is_a_row_of_its_claims_table(tmp_path):
    setup = OmegaConf.to_container(study.load(str(study_file(tmp_path, NEW_CLAIM))))
    assert list(setup["claims"])[-1] == "my_claim"  # added after the inherited ones, which stay
    assert set(setup["claims"]) - {"my_claim"} == set(study.load("icl_cpu").claims)
    src = tmp_path / "csv"
    src.mkdir()
    paths = paired.export({"grid": per_seed_frame()}, src)
    report.save_inputs(src, report.run_inputs(tmp_path / "runs", None, [], paths))
    with saving(False):
        md = report.from_csv(report.render, src, tmp_path / "out", "mine", "test", setup).read_text()
    assert "SSA lowers the in-distribution error on every_num" in md
    table = pd.read_csv(tmp_path / "out" / "mine_claims.csv")
    [row] = table[table.claim == "my_claim"].to_dict("records")

    # independently: the per-seed CSV as written (6 significant digits), paired by seed
    back = pd.read_csv(paths["grid"]).pivot(index="seed", columns="scorer", values="value")
    d = (back.ssa - back.softmax).to_numpy(float)
    assert row["n_seeds"] == len(SEEDS) and row["contrast"] == "every_num"
    assert row["estimate"] == pytest.approx(d.mean(), rel=1e-5)
    # the exact two-sided sign-flip p: every one of the 2^8 sign patterns, |Σ ε d| ≥ |Σ d|
    t = [abs(np.dot(eps, d)) for eps in itertools.product((-1, 1), repeat=len(d))]
    exact = np.mean(np.array(t) >= abs(d.sum()) * (1 - 1e-9))
    assert row["p_value"] == pytest.approx(exact, rel=1e-4)
    scipy_p = sps.permutation_test(
        (d,), np.mean, permutation_type="samples", alternative="two-sided", n_resamples=np.inf
    ).pvalue
    assert row["p_value"] == pytest.approx(scipy_p, rel=1e-4)
    assert row["p_holm"] == pytest.approx(exact, rel=1e-4)  # a family of one: Holm leaves it
    assert row["mean_a"] == pytest.approx(back.softmax.mean(), rel=1e-5)
    assert row["mean_b"] == pytest.approx(back.ssa.mean(), rel=1e-5)


def test_a_study_without_the_claim_has_no_such_row(tmp_path):
    frame = paired.read_back(paired.export({"grid": per_seed_frame()}, tmp_path))
    entries = OmegaConf.to_container(study.load("icl_cpu").claims)
    assert icl.claims(frame, entries) == []  # the frame has none of the inherited claims' cells
    added = {**entries, **OmegaConf.to_container(OmegaConf.create(NEW_CLAIM))["claims"]}
    [mine] = [c for c in icl.claims(frame, added) if c.key == "my_claim"]
    assert [(s.label, s.metric, s.claimed_sign) for s in mine.specs] == [("every_num", "sequence_error", -1)]
    assert mine.specs[0].a == {
        "group": "core",
        "arch": "preln",
        "predictor": "model",
        "task": "every_num",
        "summary": "region=in_distribution",
        "scorer": "softmax",
    }


def test_templates_keep_a_lone_placeholders_type_and_loops_nest_in_order():
    entries = {
        "c": {
            "key": "c {k}",
            "claim": "step {k}",
            "paper": "p",
            "contrast": "b − a",
            "metric": "m",
            "sign": 1,
            "for": {"x": ["u", "v"], "y": "ys"},
            "label": "{x}/{y.name}",
            "both": {"step": "{k}", "item": "{y.name}"},
            "a": {"scorer": "{x}"},
            "b": {"scorer": "s"},
        }
    }
    ctx = claims.Context({"k": 7, "ys": lambda b: [{"name": f"{b['x']}1"}, {"name": f"{b['x']}2"}]})
    [c] = claims.build(entries, ctx)
    assert c.key == "c 7" and c.claim == "step 7"
    assert [s.label for s in c.specs] == ["u/u1", "u/u2", "v/v1", "v/v2"]
    assert c.specs[0].a == {"step": 7, "item": "u1", "scorer": "u"}  # an int, not "7"
    # `when`: a missing value skips the claim
    assert (
        claims.build({"c": {**entries["c"], "when": ["gone"]}}, claims.Context({**ctx.values, "gone": None}))
        == []
    )


@pytest.mark.parametrize("module", [icl, early])
def test_a_reports_context_gives_exactly_the_names_the_schema_allows(module):
    ctx = module.context(pd.DataFrame(columns=[*paired.PER_SEED_COLUMNS, "part", "step", "item", "method"]))
    assert set(ctx.values) == set(module.CLAIM_NAMES)
    assert set(ctx.judges) == set(module.JUDGES)


def test_claims_naming_one_family_share_their_holm_adjustment(tmp_path):
    """Two one-contrast claims: alone each is its own family (p_Holm = p); with ``family: shared`` the
    two p-values are Holm-adjusted together (by hand: the smaller × 2, the larger at least that)."""
    one = per_seed_frame()
    other = one.assign(task="some_num")
    ssa = other.scorer == "ssa"  # SSA higher than in every_num on three seeds: a larger p
    other.loc[ssa, "value"] = other.loc[ssa, "value"] + np.array([0, 0.04, 0, 0, 0, 0.05, 0.07, 0])
    frame = paired.read_back(paired.export({"grid": pd.concat([one, other])}, tmp_path))
    entry = OmegaConf.to_container(OmegaConf.create(NEW_CLAIM))["claims"]["my_claim"]
    mine = {
        "on_every": entry,
        "on_some": {
            **entry,
            "label": "some_num",
            "both": {**entry["both"], "task": "some_num"},
        },
    }
    alone = paired.claims_table(frame, icl.claims(frame, mine), n_boot=200).set_index("claim")
    assert (alone.p_holm == alone.p_value).all()
    shared = {k: {**v, "family": "shared"} for k, v in mine.items()}
    assert claims.problems(shared, "f", icl.CLAIM_NAMES, icl.JUDGES, "icl") == []
    table = paired.claims_table(frame, icl.claims(frame, shared), n_boot=200).set_index("claim")
    p = table.p_value.to_numpy(float)
    lo, hi = np.argsort(p)
    want = np.empty(2)
    want[lo] = min(1.0, 2 * p[lo])
    want[hi] = max(want[lo], min(1.0, p[hi]))
    assert p[hi] > p[lo] and table.p_holm.to_numpy(float) == pytest.approx(want)
    assert set(table.family) == {"shared"}
    assert list(seed_power.power_table(table.reset_index())["family k"]) == [
        2,
        2,
    ]  # the family, not the claim
