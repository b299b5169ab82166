"""A replication of primary endpoints (issue 38: ≥ 30 paired seeds per endpoint): a study's
``replication: {seeds, endpoints}`` names new seeds, declared after its confirmatory test was read, on
which some endpoints are decided again, alone, Holm over them in the family ``replication``; the
confirmatory test is unchanged beside it.

On a synthetic per-seed CSV (earlier seeds 0-7, confirmatory 8-15, replication 16-23 with its own
effect), checked against independent computations: the estimate as a numpy mean over the replication's
seeds, the p-value by enumerating every sign pattern, p_Holm by statsmodels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from ssa_repro.reports import primary
from ssa_repro.reports.kinds import early
from ssa_repro.reports.kinds import icl as report
from ssa_repro.studies import study
from tests.test_primary_confirmatory import (
    CONFIRMATORY,
    EARLIER,
    LENGTH80,
    SIGMA16,
    _per_seed,
    _problems,
    _row,
    _setup,
    _sign_flip_p,
    _wide,
)
from tests.test_primary_early import _differences, _paths
from tests.test_primary_early import _setup as _early_setup

AGAIN = list(range(16, 24))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The confirmatory test's CSV and seeds 16-23, on which SSA is 0.25 (± noise) worse at length 80."""
    base = _per_seed(tmp_path_factory.mktemp("replication"))
    rng = np.random.default_rng(5)
    rows = []
    for seed in AGAIN:
        gap80 = 0.25 + 0.05 * rng.standard_normal()
        for scorer, g80 in (("softmax", 0.0), ("ssa", gap80)):
            rows.append(_row("core", scorer, "preln", seed, "region=in_distribution", 0.01))
            rows.append(_row("core", scorer, "preln", seed, "train_lengths sigma=1", 0.01))
            rows.append(_row("core", scorer, "preln", seed, SIGMA16, 0.5 + 0.1 * rng.standard_normal()))
            rows.append(_row("core", scorer, "preln", seed, LENGTH80, 0.3 + g80))
    frame = pd.concat([pd.read_csv(base["grid"]), pd.DataFrame(rows)], ignore_index=True)
    frame.to_csv(base["grid"], index=False)
    setup = _setup()
    setup["replication"] = {"seeds": AGAIN, "endpoints": ["ssa_sigma", "ssa_length"]}
    return base, frame, setup, report.decide(base, setup)


def test_the_replication_decides_its_endpoints_on_its_seeds_alone(data):
    _, frame, _, d = data
    (rep,) = d.replications
    assert (rep.family, rep.seeds, rep.endpoints) == ("replication", AGAIN, ["ssa_sigma", "ssa_length"])
    assert rep.run == AGAIN
    got = rep.results.set_index("endpoint")
    assert list(got.index) == ["ssa_sigma", "ssa_length"]
    assert (got.n_seeds == len(AGAIN)).all() and (got.k == 2).all()
    assert set(got.family) == {primary.REPLICATION}
    late = frame[frame.seed.isin(AGAIN)]
    for name, summary in (("ssa_sigma", SIGMA16), ("ssa_length", LENGTH80)):
        w = _wide(late, summary)
        diff = (w["ssa"] - w["softmax"]).to_numpy()
        assert got.loc[name, "estimate"] == pytest.approx(diff.mean(), abs=1e-12)
        assert got.loc[name, "p_value"] == pytest.approx(_sign_flip_p(diff), abs=1e-12)
    want = multipletests(got.p_value.to_numpy(), method="holm")[1]
    assert got.p_holm.to_numpy() == pytest.approx(want, abs=1e-12)
    # SSA worse at length 80 on all 8 new seeds: 2^(1-8) = 0.0078, Holm x 2 at most: contradicted
    assert got.loc["ssa_length", "verdict"] == "contradicted"


def test_the_confirmatory_test_is_unchanged_beside_it(data):
    paths, frame, setup, d = data
    alone = dict(setup, replication=None)
    before = report.decide(paths, alone)
    cols = [c for c in before.primaries.columns if c != "binary"]
    pd.testing.assert_frame_equal(d.primaries[cols], before.primaries[cols])
    assert d.run == CONFIRMATORY and before.run == CONFIRMATORY
    assert d.earlier == EARLIER  # the replication's seeds were run after the declaration
    assert sorted(before.earlier) == EARLIER + AGAIN  # (without the key they count as earlier)
    assert (d.explored.set_index("endpoint").loc[["ssa_sigma", "ssa_length"], "n_seeds"] == 24).all()
    assert before.replications == []


def test_the_report_shows_the_replication_between_the_two(data):
    _, _, _, d = data
    text = "\n".join(report.primary_lines(d))
    assert "A replication was declared after the confirmatory test had been read" in text
    assert "Seeds in the data: 16–23 (8 of the 8 declared)" in text
    assert "| replication: seeds 16–23 (n = 8) |" in text
    assert "(family `replication`, k = 2)" in text
    assert "The replication's 2 endpoints at its Holm level α/2 = 0.025" in text  # its own power plan
    # the robust rule's floor: with no jump seen, 1 − 0.025^(1/n) < m / M = 0.05 first at n = 72
    want = next(n for n in range(2, 1000) if 1 - 0.025 ** (1 / n) < 0.05)
    assert want == 72 and f"can call “within ±m” only from {want} seeds on" in text
    rows = [r for r in text.splitlines() if r.startswith("| ")]
    tests = [r.split(" | ")[1] for r in rows if "seeds" in r and "(n = " in r]
    assert tests[:3] == [
        "confirmatory: seeds 8–15 (n = 8)",
        "replication: seeds 16–23 (n = 8)",
        "all seeds, exploratory (n = 24)",
    ]
    # the post-LN endpoints are not replicated: no replication row of theirs
    assert sum("replication: seeds" in r for r in rows) == 2
    found = "\n".join(report.findings_markdown(d.found, d.claims, d.table, d)).split("**Exploratory**")[0]
    assert "a replication of 2 of them, declared after the confirmatory test had been read" in found
    assert found.count("Replication (seeds 16–23)") == 2
    assert "(replication, k = 2)" in found


def test_replication_seeds_not_run_yet_give_the_line(data):
    paths, _, setup, _ = data
    d = report.decide(paths, dict(setup, replication={"seeds": [40, 41, 42], "endpoints": ["ssa_length"]}))
    assert d.replications[0].results.empty and d.replications[0].run == []
    text = "\n".join(report.primary_lines(d))
    assert "No replication seeds run yet: none of seeds 40–42 is in this report's data." in text
    assert "| no replication seeds run yet |" in text
    found = "\n".join(report.findings_markdown(d.found, d.claims, d.table, d))
    assert found.count("Replication: no replication seeds run yet (seeds 40–42 declared).") == 1


def test_the_early_report_replicates_too():
    d = early.decide(
        _paths(),
        _early_setup([0, 1, 2]) | {"replication": {"seeds": [4, 5, 6], "endpoints": ["holistic_ssa2"]}},
    )
    frame = d.frame
    got = d.replications[0].results.set_index("endpoint")
    diff = _differences(frame, "holistic_ssa2", [4, 5, 6])
    assert list(got.index) == ["holistic_ssa2"] and got.loc["holistic_ssa2", "n_seeds"] == 3
    assert got.loc["holistic_ssa2", "estimate"] == pytest.approx(diff.mean(), abs=1e-9)
    assert got.loc["holistic_ssa2", "p_holm"] == pytest.approx(_sign_flip_p(diff), abs=1e-12)  # k = 1
    assert d.earlier == [3]


def test_the_schema_checks_a_replication_with_the_file_key_and_value():
    good = {"seeds": [30, 31], "endpoints": ["ssa_sigma"]}
    assert _problems(replication=good) == ""
    assert _problems(replication=None) == ""
    out = _problems(replication={"seeds": [29, 30], "endpoints": ["ssa_sigma"]})
    assert "s.yaml: replication.seeds=[29] are confirmatory seeds already" in out
    out = _problems(replication={"seeds": [30], "endpoints": ["nope"]})
    assert "s.yaml: replication.endpoints[0]='nope' is not allowed; allowed: names of declared primary" in out
    assert "ssa_sigma, ssa_length, layernorm_main, ssa_main" in out
    out = _problems(replication={"seeds": [30]})
    assert (
        "s.yaml: replication={'seeds': [30]} is not a mapping with exactly the keys seeds, endpoints" in out
    )
    out = _problems(replication=good, confirmatory_seeds=None)
    assert "is given without confirmatory_seeds" in out
    out = _problems(replication={"seeds": [30, 30], "endpoints": ["ssa_sigma"]})
    assert "s.yaml: replication.seeds[1]=30 repeats replication.seeds[0]" in out


def test_the_shipped_replication():
    r = study.load("icl_cpu").replication
    assert list(r.seeds) == list(range(30, 60))
    assert list(r.endpoints) == ["ssa_sigma", "ssa_length", "layernorm_main", "ssa_main"]
    for child in ("icl_scale", "quick"):
        assert study.load(child).get("replication") is None


LATER = list(range(24, 32))


@pytest.fixture(scope="module")
def two(data, tmp_path_factory):
    """The replication above, and a second one declared after it: ssa_sigma again on seeds 24-31, where
    SSA is 0.2 (± noise) better at σ = 16."""
    _, frame, setup, _ = data
    rng = np.random.default_rng(11)
    rows = []
    for seed in LATER:
        gap16 = -0.2 + 0.05 * rng.standard_normal()
        for scorer, g16 in (("softmax", 0.0), ("ssa", gap16)):
            rows.append(_row("core", scorer, "preln", seed, "region=in_distribution", 0.01))
            rows.append(_row("core", scorer, "preln", seed, "train_lengths sigma=1", 0.01))
            rows.append(_row("core", scorer, "preln", seed, SIGMA16, 0.6 + g16))
            rows.append(_row("core", scorer, "preln", seed, LENGTH80, 0.3))
    both = pd.concat([frame, pd.DataFrame(rows)], ignore_index=True)
    paths = {"grid": tmp_path_factory.mktemp("two") / "per_seed_grid.csv"}
    both.to_csv(paths["grid"], index=False)
    first = setup["replication"]
    setup2 = dict(setup, replication=[first, {"seeds": LATER, "endpoints": ["ssa_sigma"]}])
    return paths, both, setup2, report.decide(paths, setup2), report.decide(paths, setup)


def test_a_second_replication_is_its_own_family_and_leaves_the_first_alone(two):
    _, frame, _, d, one = two
    first, second = d.replications
    assert (first.family, second.family) == ("replication", "replication 2")
    assert second.run == LATER and second.endpoints == ["ssa_sigma"]
    # the first replication's results are those it had alone (its Holm level unchanged)
    pd.testing.assert_frame_equal(first.results, one.replications[0].results)
    got = second.results.set_index("endpoint").loc["ssa_sigma"]
    diff = (lambda w: (w["ssa"] - w["softmax"]).to_numpy())(_wide(frame[frame.seed.isin(LATER)], SIGMA16))
    assert got.estimate == pytest.approx(diff.mean(), abs=1e-12)
    assert got.p_value == pytest.approx(_sign_flip_p(diff), abs=1e-12)
    assert got.k == 1 and got.p_holm == pytest.approx(got.p_value, abs=1e-15)  # Holm over one
    assert got.family == "replication 2" and got.verdict == "yes"  # SSA better on all 8: 2^-7
    assert d.earlier == EARLIER  # neither replication's seeds count as run before the declaration


def test_the_report_names_each_replications_family(two):
    _, _, _, d, _ = two
    text = "\n".join(report.primary_lines(d))
    assert "A replication was declared after the confirmatory test had been read" in text
    assert (
        "A second replication was declared after the confirmatory test and the earlier replications" in text
    )
    assert "| replication 2: seeds 24–31 (n = 8) |" in text
    assert "(family `replication 2`, k = 1)" in text
    assert "Family `replication 2`'s 1 endpoint at its Holm level α/1 = 0.05:" in text
    assert "(`replication` of 16–23; `replication 2` of 24–31, declared)" in text
    # the results table's test column (the Blocks table's seed columns also say "(n = …)": not these)
    cells = [r.split(" | ")[1] for r in text.splitlines() if r.startswith("| ") and "(n = " in r]
    rows = [c for c in cells if ": seeds" in c or c.startswith("all seeds")]
    assert rows[:4] == [
        "confirmatory: seeds 8–15 (n = 8)",
        "replication: seeds 16–23 (n = 8)",
        "replication 2: seeds 24–31 (n = 8)",
        "all seeds, exploratory (n = 32)",
    ]
    found = "\n".join(report.findings_markdown(d.found, d.claims, d.table, d)).split("**Exploratory**")[0]
    assert "a replication (family `replication 2`) of 1 of them" in found
    assert found.count("Replication (family `replication 2`, seeds 24–31)") == 1


def test_the_schema_checks_a_list_of_replications():
    first = {"seeds": [30, 31], "endpoints": ["ssa_sigma"]}
    assert _problems(replication=[first, {"seeds": [32], "endpoints": ["ssa_length"]}]) == ""
    out = _problems(replication=[first, {"seeds": [31, 32], "endpoints": ["ssa_length"]}])
    assert (
        "s.yaml: replication[1].seeds=[31] are in replication[0].seeds already; allowed: seeds not in" in out
    )
    out = _problems(replication=[first, {"seeds": [29], "endpoints": ["ssa_length"]}])
    assert "s.yaml: replication[1].seeds=[29] are confirmatory seeds already" in out
    out = _problems(replication=[first, {"seeds": [40]}])
    assert (
        "s.yaml: replication[1]={'seeds': [40]} is not a mapping with exactly the keys seeds, endpoints"
        in out
    )
    assert "s.yaml: replication=[] is an empty list" in _problems(replication=[])
    out = _problems(replication=[first, {"seeds": [40], "endpoints": ["nope"]}])
    assert "s.yaml: replication[1].endpoints[0]='nope' is not allowed" in out
