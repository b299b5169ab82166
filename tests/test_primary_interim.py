"""A confirmatory test read before all its declared seeds are in is an interim look (issue 38): its
estimates are shown, its verdicts withheld, for every endpoint of the family while any has fewer paired
seeds than declared (the family's Holm p's depend on all of them, and a call at each look would spend α
again). On icl_cpu's synthetic per-seed CSV (tests/test_primary_confirmatory.py), the numbers are
checked against the complete test's, recomputed independently (numpy, the enumerated sign-flip p)."""

from __future__ import annotations

import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from ssa_repro.reports import primary, primary_tables
from ssa_repro.reports.kinds import icl as report
from tests.test_primary_confirmatory import CONFIRMATORY, SIGMA16, _per_seed, _setup, _sign_flip_p, _wide


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return _per_seed(tmp_path_factory.mktemp("interim"))


def test_fewer_seeds_than_declared_show_the_estimates_and_call_nothing(paths):
    declared = CONFIRMATORY + [40, 41]  # two declared seeds not run yet
    part, whole = report.decide(paths, _setup(declared)), report.decide(paths, _setup())
    got, full = part.primaries.set_index("endpoint"), whole.primaries.set_index("endpoint")
    assert part.run == CONFIRMATORY and part.confirmatory == declared
    assert got.interim.all() and not full.interim.any()
    for col in ("estimate", "low", "high", "p_value", "p_holm", "n_seeds"):
        pd.testing.assert_series_equal(got[col], full[col])  # the same seeds, the same numbers
    assert list(got.verdict) == ["interim, 8 of 10 declared seeds: not decided"] * 4
    assert full.loc["layernorm_main", "verdict"] == "yes"  # called on all 8: withheld at 8 of 10
    frame = pd.read_csv(paths["grid"])
    w = _wide(frame[frame.seed.isin(CONFIRMATORY)], SIGMA16)
    diff = (w.ssa - w.softmax).to_numpy()
    assert got.loc["ssa_sigma", "estimate"] == pytest.approx(diff.mean(), abs=1e-12)
    assert got.loc["ssa_sigma", "p_value"] == pytest.approx(_sign_flip_p(diff), abs=1e-12)
    text = "\n".join(report.primary_lines(part))
    assert (
        "Interim: the fewest paired seeds an endpoint has is 8 of the 10 declared (8 of the 10 confirmatory "
        "seeds are in this report's data: 8–15)" in text
    )
    assert text.count("interim, 8 of 10 declared seeds: not decided") == 4
    found = "\n".join(report.findings_markdown(part.found, part.claims, part.table, part)).split(
        "**Exploratory**"
    )[0]
    assert (
        "interim: the fewest paired seeds an endpoint has is 8 of the 10 declared, with seeds 8–15 run, so "
        "none is decided yet" in found
    )
    assert "**interim, 8 of 10 declared seeds: not decided**" in found


def _without(paths, tmp_path, drop) -> dict:
    frame = pd.read_csv(paths["grid"])
    out = {"grid": tmp_path / "per_seed_grid.csv"}
    frame[~drop(frame)].to_csv(out["grid"], index=False)
    return out


def test_one_endpoint_short_withholds_every_call_of_the_family(paths, tmp_path):
    """Seed 15's post-LN runs missing: the 2 × 2 endpoints have 7 of 8 seeds, the pre-LN ones all 8;
    every verdict waits (their Holm p's would change once seed 15 is in), and the words say why,
    although every confirmatory seed is in the data."""
    short = _without(paths, tmp_path, lambda f: (f.seed == 15) & (f.group == "architecture"))
    d = report.decide(short, _setup())
    got = d.primaries.set_index("endpoint")
    assert d.run == CONFIRMATORY
    assert got.loc[["ssa_sigma", "ssa_length"], "n_seeds"].tolist() == [8, 8]
    assert got.loc[["layernorm_main", "ssa_main"], "n_seeds"].tolist() == [7, 7]
    assert got.interim.all()
    assert got.loc["ssa_sigma", "verdict"] == "interim, 8 of 8 declared seeds: not decided"
    assert got.loc["ssa_main", "verdict"] == "interim, 7 of 8 declared seeds: not decided"
    text = "\n".join(report.primary_lines(d))
    assert "Interim: the fewest paired seeds an endpoint has is 7 of the 8 declared" in text
    assert "Each endpoint is decided on the confirmatory seeds alone" in text  # the rule, stated after
    found = "\n".join(report.findings_markdown(d.found, d.claims, d.table, d)).split("**Exploratory**")[0]
    assert "interim: the fewest paired seeds an endpoint has is 7 of the 8 declared" in found
    assert "decided on the confirmatory seeds alone, 8–15" not in found


def test_an_endpoint_with_no_confirmatory_row_makes_the_test_interim_and_counts_in_holm(paths, tmp_path):
    """Every confirmatory post-LN row missing: the two 2 × 2 endpoints cannot be computed. The two
    found are adjusted over the k = 4 declared (the missing counting as p = 1), and nothing is called."""
    short = _without(paths, tmp_path, lambda f: f.seed.isin(CONFIRMATORY) & (f.group == "architecture"))
    d = report.decide(short, _setup())
    got = d.primaries.set_index("endpoint")
    assert list(got.index) == ["ssa_sigma", "ssa_length"] and got.interim.all()
    assert (got.k == 4).all()
    want = multipletests(list(got.p_value) + [1.0, 1.0], method="holm")[1][:2]
    assert got.p_holm.to_numpy() == pytest.approx(want, abs=1e-12)
    assert "2 of the 4 endpoints have no paired seed yet" in "\n".join(report.primary_lines(d))


def test_a_replication_short_of_its_seeds_is_interim_too(paths):
    setup = dict(_setup(), replication={"seeds": [0, 1, 2, 3, 20], "endpoints": ["ssa_sigma"]})
    (rep,) = report.decide(paths, setup).replications
    assert rep.run == [0, 1, 2, 3]
    r = rep.results.set_index("endpoint").loc["ssa_sigma"]
    assert r.interim and r.verdict == "interim, 4 of 5 declared seeds: not decided"
    note = primary_tables.replication_note(rep, {"ssa_sigma": {}})
    assert note.endswith(
        "Interim: the fewest paired seeds an endpoint has is 4 of the 5 declared; its endpoints are "
        "decided only once each has all its seeds paired, so none is called here."
    )


def test_a_replication_whose_endpoints_were_all_removed_is_dropped_and_numbering_kept(paths):
    setup = _setup()
    setup["primary"] = dict(setup["primary"], ssa_main=None)  # a child study's null
    setup["replication"] = [
        {"seeds": [40], "endpoints": ["ssa_main"]},
        {"seeds": [41], "endpoints": ["ssa_sigma"]},
    ]
    d = report.decide(paths, setup)
    assert [r.family for r in d.replications] == ["replication 2"]
    text = "\n".join(report.primary_lines(d))
    assert "(family `replication`," not in text and "(family `replication 2`, k = 1)" in text


def test_interim_on_no_rows_is_a_no_op():
    empty = pd.DataFrame()
    assert primary.interim(empty, 5, 2) is empty
    assert primary_tables.shortfall(empty, 5, 2) == ""


def test_seeds_run_with_no_pair_yet_are_interim_not_decided(paths, tmp_path):
    """A confirmatory seed with one arm only (SSA not run yet): the seed is in the data, no endpoint has
    a paired seed, and the words say so instead of "decided on the confirmatory seeds alone"."""
    only = _without(paths, tmp_path, lambda f: f.seed.isin(CONFIRMATORY) & (f.scorer == "ssa"))
    d = report.decide(only, _setup())
    assert d.run == CONFIRMATORY and d.primaries.empty
    text = "\n".join(report.primary_lines(d))
    assert "Interim: none of the 4 endpoints has a paired seed yet" in text
    found = "\n".join(report.findings_markdown(d.found, d.claims, d.table, d)).split("**Exploratory**")[0]
    assert "interim: none of the 4 endpoints has a paired seed yet" in found
    assert "decided on the confirmatory seeds alone" not in found


def test_one_confirmatory_seed_reads_as_interim_with_zero_power(paths, tmp_path):
    """The first confirmatory seed of a study continued over sessions: one paired seed. The report reads
    it (it raised in the power at n = 1 before): power 0, since the sign-flip test's only p is then 1."""
    first = _without(paths, tmp_path, lambda f: f.seed.isin(CONFIRMATORY[1:]))
    d = report.decide(first, _setup())
    got = d.primaries.set_index("endpoint")
    assert (got.n_seeds == 1).all() and got.interim.all()
    assert (got["power (planned d_z)"] == 0).all() and (got["power (observed d_s, ties)"] == 0).all()
    assert (got.p_value == 1).all()
    assert "interim, 1 of 8 declared seeds: not decided" in "\n".join(report.primary_lines(d))


def test_power_paired_at_one_seed_is_zero_and_below_one_an_error():
    from ssa_repro import stats

    assert stats.power_paired(0.8, 1) == 0.0
    assert stats.power_paired(0.8, 6) > 0  # 2^(1-6) = 1/32 < 0.05: the test can reach α
    with pytest.raises(ValueError, match="n_seeds=0 must be at least 1"):
        stats.power_paired(0.8, 0)
