"""Primary endpoints decided on confirmatory seeds (issue 38): a study's ``confirmatory_seeds`` are the
seeds run after its endpoints were declared; the report decides each endpoint on those seeds alone and
shows the same contrast on every seed beside it, exploratory, in its own family.

On a synthetic per-seed CSV whose earlier seeds (0-7) show a large SSA effect and whose confirmatory
seeds (8-15) a small, noisy one, checked against independent computations: the estimate as a numpy mean
over the confirmatory seeds, the p-value by enumerating every sign pattern, p_Holm by statsmodels."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from statsmodels.stats.multitest import multipletests

from ssa_repro.reports import decide as pipeline
from ssa_repro.reports import factorial, paired, primary
from ssa_repro.reports import icl_claims as icl
from ssa_repro.reports.kinds import icl as report
from ssa_repro.studies import schema as study_schema
from ssa_repro.studies import study

EARLIER, CONFIRMATORY = list(range(8)), list(range(8, 16))
SIGMA16, LENGTH80 = "train_lengths sigma=16", "sigma=1 length=80"


def _row(group, scorer, arch, seed, summary, value) -> dict:
    return dict(
        group=group,
        task="every_num",
        scorer=scorer,
        arch=arch,
        train_sigma=1.0,
        seed=seed,
        evaluation="grid_quantifier",
        predictor="model",
        metric="sequence_error",
        summary=summary,
        value=value,
    )


def _per_seed(tmp_path) -> dict:
    """every_num on core pre-LN (softmax, SSA) and the architecture group's post-LN, seeds 0-15: SSA 0.3
    below softmax at σ = 16 and 0.2 above at length 80 in every earlier seed, a small noisy effect in
    the confirmatory ones; post-LN near 0."""
    rng = np.random.default_rng(3)
    rows = []
    for seed in EARLIER + CONFIRMATORY:
        late = seed in CONFIRMATORY
        base = 0.6 + 0.1 * rng.standard_normal()
        gap16 = -0.05 + 0.1 * rng.standard_normal() if late else -0.3
        gap80 = 0.05 * rng.standard_normal() if late else 0.2
        for scorer, g16, g80 in (("softmax", 0.0, 0.0), ("ssa", gap16, gap80)):
            rows.append(_row("core", scorer, "preln", seed, "region=in_distribution", 0.01))
            rows.append(_row("core", scorer, "preln", seed, "train_lengths sigma=1", 0.01))
            rows.append(_row("core", scorer, "preln", seed, SIGMA16, base + g16))
            rows.append(_row("core", scorer, "preln", seed, LENGTH80, 0.3 + 0.01 * seed + g80))
            for summary in (SIGMA16, LENGTH80):
                value = abs(0.02 * rng.standard_normal())
                rows.append(_row("architecture", scorer, "postln", seed, summary, value))
    path = tmp_path / "per_seed_grid.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return {"grid": path}


def _setup(seeds=CONFIRMATORY) -> dict:
    """icl_cpu's claims, 2 × 2 and four primary endpoints, with ``seeds`` as its confirmatory seeds."""
    setup = OmegaConf.to_container(study.load("icl_cpu"))
    setup["confirmatory_seeds"] = seeds
    return setup


def _sign_flip_p(d) -> float:
    """The two-sided sign-flip p by enumerating all 2^n sign patterns."""
    d = np.asarray(d, float)
    obs = abs(d.sum())
    hits = sum(
        abs(np.dot(s, d)) >= obs - 1e-9 * np.abs(d).sum() for s in itertools.product((1, -1), repeat=len(d))
    )
    return hits / 2 ** len(d)


def _wide(frame: pd.DataFrame, summary: str, group="core", arch="preln") -> pd.DataFrame:
    sel = frame[(frame.group == group) & (frame.arch == arch) & (frame.summary == summary)]
    return sel.pivot_table(index="seed", columns="scorer", values="value")


def _old_decide(paths, setup) -> report.Decided:
    """The report's decide as it was before confirmatory seeds (the reference for a study without them)."""
    frame = paired.read_back(paths)
    ctx = icl.context(frame)
    claims = icl.claims(frame, setup.get("claims"))
    eps = primary.declared(setup.get("primary"), ctx)
    # the outcome kinds the study declares (issue 58: a bimodal metric gets the robust rule everywhere)
    kinds = pipeline.outcomes(eps, claims, setup.get("factorials"))
    table = paired.claims_table(frame, claims, families=primary.claim_families(eps), outcomes=kinds)
    designs = factorial.table(frame, setup.get("factorials"), ctx, primary.design_cells(eps), outcomes=kinds)
    primaries = primary.decide(eps, table, designs, frame, claims)
    per_claim = table.groupby("claim", sort=False).verdict.agg(lambda v: paired.claim_verdict(list(v)))
    table["claim_verdict"] = table.claim.map(per_claim)
    found = paired.findings(table[table.family != primary.FAMILY], n=5, first=["architecture"])
    return report.Decided(frame, claims, table, found, designs, eps, primaries)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    paths = _per_seed(tmp_path_factory.mktemp("confirmatory"))
    return paths, pd.read_csv(paths["grid"]), report.decide(paths, _setup())


def test_the_primary_endpoints_are_decided_on_the_confirmatory_seeds_alone(data):
    _, frame, d = data
    assert d.confirmatory == CONFIRMATORY and d.run == CONFIRMATORY and d.earlier == EARLIER
    got = d.primaries.set_index("endpoint")
    assert list(got.index) == ["ssa_sigma", "ssa_length", "layernorm_main", "ssa_main"]
    assert (got.n_seeds == len(CONFIRMATORY)).all() and (got.k == 4).all()
    late = frame[frame.seed.isin(CONFIRMATORY)]
    for name, summary in (("ssa_sigma", SIGMA16), ("ssa_length", LENGTH80)):
        w = _wide(late, summary)
        diff = (w["ssa"] - w["softmax"]).to_numpy()
        assert got.loc[name, "estimate"] == pytest.approx(diff.mean(), abs=1e-12)
        assert got.loc[name, "p_value"] == pytest.approx(_sign_flip_p(diff), abs=1e-12)
    # the 2 × 2's main effect of SSA (B): per seed the mean over LayerNorm placements of SSA − softmax
    pre, post = _wide(late, SIGMA16), _wide(late, SIGMA16, "architecture", "postln")
    main_b = (((pre.ssa - pre.softmax) + (post.ssa - post.softmax)) / 2).to_numpy()
    assert got.loc["ssa_main", "estimate"] == pytest.approx(main_b.mean(), abs=1e-12)
    assert got.loc["ssa_main", "p_value"] == pytest.approx(_sign_flip_p(main_b), abs=1e-12)
    # Holm over the k = 4 endpoints' p-values, as statsmodels computes it
    want = multipletests(got.p_value.to_numpy(), method="holm")[1]
    assert got.p_holm.to_numpy() == pytest.approx(want, abs=1e-12)
    # the earlier seeds' large effect is not what is decided: on every seed it is larger
    every = d.explored.set_index("endpoint")
    assert every.loc["ssa_sigma", "n_seeds"] == 16
    w = _wide(frame, SIGMA16)
    assert every.loc["ssa_sigma", "estimate"] == pytest.approx((w.ssa - w.softmax).mean(), abs=1e-12)
    assert every.loc["ssa_sigma", "estimate"] < got.loc["ssa_sigma", "estimate"]


def test_on_every_seed_the_endpoints_stay_in_their_own_families(data):
    _, _, d = data
    t = d.table
    assert primary.FAMILY not in set(t.family) and primary.FAMILY not in set(d.designs.family)
    row = t[(t.claim == "ssa_quant") & (t.contrast == "every_num, σ = 16")].iloc[0]
    assert row.family == "ssa_quant" and row.n_seeds == 16
    fam = t[t.family == "ssa_quant"]
    assert row.family_k == len(fam)  # one Holm p per contrast, in its claim's family
    assert fam.p_holm.to_numpy() == pytest.approx(multipletests(fam.p_value.to_numpy(), method="holm")[1])
    every = d.explored.set_index("endpoint")
    assert every.loc["ssa_sigma", "p_holm"] == pytest.approx(row.p_holm)
    assert every.loc["ssa_main", "family"] == "factorial layernorm_scorer"
    # the endpoints' contrasts are listed with their confirmatory test, not again among the exploratory
    assert not {"every_num, σ = 16", "every_num, length 80"} & set(d.found.contrast)


def test_the_report_says_which_seeds_confirm_and_that_the_endpoints_were_declared_before_them(data):
    _, _, d = data
    text = "\n".join(report.primary_lines(d))
    assert primary.NOTE not in text
    assert "declared (issue 38) after seeds 0–7 had been run" in text
    assert "before the confirmatory seeds 8–15 were run" in text
    assert "| confirmatory: seeds 8–15 (n = 8) |" in text and "| all seeds, exploratory (n = 16) |" in text
    found = "\n".join(report.findings_markdown(d.found, d.claims, d.table, d))
    first = found.split("**Exploratory**")[0]
    assert "declared after seeds 0–7 were run and before seeds 8–15" in first
    assert first.count("Confirmatory (seeds 8–15)") == 4 and first.count("All seeds (exploratory)") == 4


def test_without_confirmatory_seeds_the_decisions_are_as_before(data):
    paths, _, _ = data
    setup = _setup()
    del setup["confirmatory_seeds"]
    new, old = report.decide(paths, setup), _old_decide(paths, setup)
    assert new.confirmatory is None and new.explored.empty
    pd.testing.assert_frame_equal(new.table, old.table)
    pd.testing.assert_frame_equal(new.designs, old.designs)
    pd.testing.assert_frame_equal(new.found, old.found)
    cols = [c for c in old.primaries.columns if c != "binary"]
    pd.testing.assert_frame_equal(new.primaries[cols], old.primaries[cols])
    assert (new.primaries.n_seeds == 16).all() and set(new.table.family) >= {primary.FAMILY}
    assert report.primary_lines(new) == report.primary_lines(old)
    assert report.findings_markdown(new.found, new.claims, new.table, new) == report.findings_markdown(
        old.found, old.claims, old.table, old
    )
    assert primary.NOTE in report.primary_lines(new)
    setup["confirmatory_seeds"] = None  # a child study's null: the same
    again = report.decide(paths, setup)
    pd.testing.assert_frame_equal(again.primaries[cols], old.primaries[cols])


def test_confirmatory_seeds_not_in_the_data_give_the_line_not_a_crash(data):
    paths, _, _ = data
    d = report.decide(paths, _setup([20, 21, 22]))
    assert d.primaries.empty and d.run == [] and len(d.explored) == 4
    lines = "\n".join(report.primary_lines(d))
    found = "\n".join(report.findings_markdown(d.found, d.claims, d.table, d))
    assert primary.NO_CONFIRMATORY in lines and primary.NO_CONFIRMATORY in found
    assert "none of seeds 20–22 is in this report's data" in lines
    assert "| all seeds, exploratory (n = 16) |" in lines


def _problems(**changes) -> str:
    cfg = study.load("icl_cpu")
    for k, v in changes.items():
        cfg[k] = v
    return "\n".join(study_schema.problems(cfg, "s.yaml"))


def test_the_schema_checks_confirmatory_seeds_with_the_file_key_and_value():
    assert _problems() == ""
    assert _problems(confirmatory_seeds=None, replication=None) == ""  # (a replication needs them)
    assert "s.yaml: confirmatory_seeds[1]=10 repeats confirmatory_seeds[0]" in _problems(
        confirmatory_seeds=[10, 10]
    )
    assert "s.yaml: confirmatory_seeds[0]=-1 is not allowed; allowed: distinct integers >= 0" in _problems(
        confirmatory_seeds=[-1]
    )
    assert "s.yaml: confirmatory_seeds=[] is not a non-empty list" in _problems(confirmatory_seeds=[])
    assert "s.yaml: confirmatory_seeds='10-29' is not a non-empty list" in _problems(
        confirmatory_seeds="10-29"
    )
    out = _problems(confirmatory_seeds=[10], primary=None)
    assert "s.yaml: confirmatory_seeds=[10] is given without primary endpoints" in out
    assert "allowed: with a `primary:` section, or null" in out


def test_the_shipped_studies_declare_their_confirmatory_seeds():
    assert list(study.load("icl_cpu").confirmatory_seeds) == list(range(10, 30))
    assert list(study.load("length_cpu").confirmatory_seeds) == list(range(6, 30))
    # declared 2026-11-28 before they ran (none run yet: the reports say so)
    assert list(study.load("icl_scale").confirmatory_seeds) == list(range(5, 35))
    assert list(study.load("early_cpu").confirmatory_seeds) == list(range(7, 37))
    assert study.load("quick").get("confirmatory_seeds") is None  # seeds 0-1 only: as before
