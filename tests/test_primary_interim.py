"""A confirmatory test read before all its declared seeds are in is an interim look (issue 38): its
estimates are shown, its verdicts withheld, for every endpoint of the family while any has fewer paired
seeds than declared (the family's Holm p's depend on all of them, and a call at each look would spend α
again). On icl_cpu's synthetic per-seed CSV (tests/test_primary_confirmatory.py), the numbers are
checked against the complete test's, recomputed independently (numpy, the enumerated sign-flip p)."""

from __future__ import annotations

import pandas as pd
import pytest

from ssa_repro.reports import primary
from ssa_repro.reports import study as report
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
    assert "Interim: 8 of the 10 confirmatory seeds are in this report's data (8–15)" in text
    assert text.count("interim, 8 of 10 declared seeds: not decided") == 4
    found = "\n".join(report.findings_markdown(part.found, part.claims, part.table, part)).split(
        "**Exploratory**"
    )[0]
    assert "interim: 8 of the 10 confirmatory seeds run (8–15), so none is decided yet" in found
    assert "**interim, 8 of 10 declared seeds: not decided**" in found


def test_one_endpoint_short_withholds_every_call_of_the_family(paths, tmp_path):
    """Seed 15's post-LN runs missing: the 2 × 2 endpoints have 7 of 8 seeds, the pre-LN ones all 8;
    every verdict waits (their Holm p's would change once seed 15 is in)."""
    frame = pd.read_csv(paths["grid"])
    frame = frame[~((frame.seed == 15) & (frame.group == "architecture"))]
    short = {"grid": tmp_path / "per_seed_grid.csv"}
    frame.to_csv(short["grid"], index=False)
    got = report.decide(short, _setup()).primaries.set_index("endpoint")
    assert got.loc[["ssa_sigma", "ssa_length"], "n_seeds"].tolist() == [8, 8]
    assert got.loc[["layernorm_main", "ssa_main"], "n_seeds"].tolist() == [7, 7]
    assert got.interim.all()
    assert got.loc["ssa_sigma", "verdict"] == "interim, 8 of 8 declared seeds: not decided"
    assert got.loc["ssa_main", "verdict"] == "interim, 7 of 8 declared seeds: not decided"


def test_a_replication_short_of_its_seeds_is_interim_too(paths):
    setup = dict(_setup(), replication={"seeds": [0, 1, 2, 3, 20], "endpoints": ["ssa_sigma"]})
    setup["confirmatory_seeds"] = CONFIRMATORY
    (rep,) = report.decide(paths, setup).replications
    assert rep.run == [0, 1, 2, 3]
    r = rep.results.set_index("endpoint").loc["ssa_sigma"]
    assert r.interim and r.verdict == "interim, 4 of 5 declared seeds: not decided"
    note = primary.replication_note(rep, {"ssa_sigma": {}})
    assert note.endswith(
        "Interim: its endpoints are decided only once all its seeds are in; none is called here."
    )


def test_interim_on_no_rows_is_a_no_op():
    empty = pd.DataFrame()
    assert primary.interim(empty, 5) is empty
