"""An endpoint's declared seed count is the study's ``confirmatory_seeds`` its cells are declared to run
at in the study's matrix, not the whole list (issue 58: relpos_cpu declares seeds 100–139 for its three
endpoints, and its MQAR endpoint's group runs 100–129 only, so with the whole list it would stay interim
forever).

Two checks: :func:`declared_seeds.per_endpoint` on a small hand-written study (a relpos_cpu in miniature)
against the seeds counted by hand; and the report's decision on icl_cpu's synthetic per-seed CSV
(tests/test_primary_confirmatory.py) with a matrix that runs some endpoints at fewer of the confirmatory
seeds: the endpoints complete at their own count are decided, and one short of its own count is interim
with its own count in the words."""

from __future__ import annotations

import copy

import pytest

from ssa_repro.reports import claims as claims_engine
from ssa_repro.reports import declared_seeds, endpoints, primary_tables
from ssa_repro.reports.kinds import icl as report
from ssa_repro.reports.paired import Claim, Spec
from tests.test_primary_confirmatory import CONFIRMATORY, _per_seed, _setup

LINEAR, MQAR, MORE = list(range(100, 140)), list(range(100, 110)), list(range(110, 130))


def _mini() -> tuple[dict, list, dict]:
    """A relpos_cpu in miniature: the linear group at 40 seeds; MQAR's softmax and SSA at 30 (10 + 20 in
    ``more``), its other scorers at 10; one shared confirmatory list of 40."""
    setup = {
        "seeds": MQAR,
        "groups": {
            "linear": {
                "tasks": ["linear"],
                "scorers": ["softmax", "ssa"],
                "archs": ["alibi", "learned"],
                "train_sigma": [1],
                "seeds": LINEAR,
            },
            "mqar": {
                "tasks": ["mqar_w64"],
                "scorers": ["softmax", "ssa", "ssmax"],
                "archs": ["alibi"],
                "train_sigma": [1],
                "more": [{"scorers": ["softmax", "ssa"], "seeds": MORE}],
            },
        },
        "factorials": {
            "position_scorer": {
                "text": "t",
                "metric": "mse",
                "sign": -1,
                "both": {"group": "linear", "task": "linear"},
                "a": [{"arch": "learned"}, {"arch": "alibi"}],
                "b": [{"scorer": "softmax"}, {"scorer": "ssa"}],
                "cells": {"length 168": {"summary": "sigma_x=1 length=168 ratio=8"}},
            }
        },
        "confirmatory_seeds": LINEAR,
    }
    both = {"group": "mqar", "arch": "alibi", "task": "mqar_w64", "train_sigma": 1.0, "summary": "x"}
    claims = [
        Claim(
            "ssa_mqar",
            "c",
            "p",
            (Spec("m", "token_error", {**both, "scorer": "softmax"}, {**both, "scorer": "ssa"}, -1),),
        ),
        Claim(
            "ssmax",
            "c",
            "p",
            (Spec("s", "token_error", {**both, "scorer": "softmax"}, {**both, "scorer": "ssmax"}, -1),),
        ),
    ]
    eps = {
        "alibi_mqar": {"claim": "ssa_mqar", "contrast": "m"},
        "ssmax_mqar": {"claim": "ssmax", "contrast": "s"},
        "interaction": {"factorial": "position_scorer", "cell": "length 168", "of": "AxB"},
        "unknown": {"claim": "nowhere", "contrast": "x"},
    }
    return setup, claims, eps


def test_each_endpoint_counts_the_confirmatory_seeds_its_cells_run_at():
    setup, claims, eps = _mini()
    got = declared_seeds.per_endpoint(eps, LINEAR, setup, claims, claims_engine.Context({}))
    assert got["alibi_mqar"] == MQAR + MORE  # 30: the MQAR group's softmax and SSA cells
    assert got["ssmax_mqar"] == MQAR  # 10: SSMax runs only at the group's own seeds
    assert got["interaction"] == LINEAR  # 40: all four cells in the linear group
    assert got["unknown"] == LINEAR  # an endpoint whose cells are not found: the whole list
    # without a matrix every endpoint is declared at the whole list
    bare = {k: v for k, v in setup.items() if k != "groups"}
    assert set(map(len, declared_seeds.per_endpoint(eps, LINEAR, bare, claims, None).values())) == {40}


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return _per_seed(tmp_path_factory.mktemp("declared"))


def _matrix(core_seeds, postln_seeds, confirmatory) -> dict:
    """icl_cpu's setup with every_num on core pre-LN run at ``core_seeds`` beyond 0–9 and the post-LN
    arm at ``postln_seeds`` beyond 0–7; ``confirmatory``: the declared list."""
    setup = copy.deepcopy(_setup(confirmatory))
    setup["groups"]["core"]["more"] = [{"tasks": ["every_num"], "seeds": core_seeds}]
    setup["groups"]["architecture"]["more"] = [
        {"tasks": ["every_num"], "archs": ["postln"], "seeds": postln_seeds}
    ]
    setup.pop("replication")  # its seeds (30–59) are not in this matrix
    return setup


def test_endpoints_complete_at_their_own_declared_seeds_are_decided(paths):
    """10 seeds declared (8–17), the matrix runs every endpoint's cells at 8–15 only, all 8 in the data:
    every test is complete (the whole list's 10 would keep them interim forever)."""
    setup = _matrix(list(range(10, 16)), CONFIRMATORY, list(range(8, 18)))
    d = report.decide(paths, setup)
    got = d.primaries.set_index("endpoint")
    assert d.declared == {n: CONFIRMATORY for n in got.index}
    assert not got.interim.any() and (got.declared == 8).all()
    assert not any(v.startswith("interim") for v in got.verdict)
    rows = endpoints.rows(d, "icl_cpu").set_index("endpoint")
    assert (rows.test == "confirmatory (8–15)").all() and (rows.seeds == "8–15").all()


def test_an_endpoint_short_of_its_own_count_keeps_the_family_interim_and_is_named(paths):
    """The pre-LN endpoints declared at 8–17 (10; 8 in the data), the post-LN arm at 8–15 (8, all in):
    each row says its own count, and the words name the endpoint furthest from its count."""
    setup = _matrix(list(range(10, 18)), CONFIRMATORY, list(range(8, 18)))
    d = report.decide(paths, setup)
    got = d.primaries.set_index("endpoint")
    assert got.interim.all()
    assert got.loc["ssa_sigma", "verdict"] == "interim, 8 of 10 declared seeds: not decided"
    assert got.loc["ssa_main", "verdict"] == "interim, 8 of 8 declared seeds: not decided"
    short = primary_tables.shortfall(d.primaries, len(d.confirmatory), len(d.eps), d.run)
    assert (
        short == "ssa_sigma has 8 of the 10 paired seeds declared for its cells, the furthest from its count"
    )
    rows = endpoints.rows(d, "icl_cpu").set_index("endpoint")
    assert rows.loc["ssa_sigma", "test"] == "confirmatory (8–17)"
    assert rows.loc["ssa_main", "test"] == "confirmatory (8–15)"


def test_each_test_names_the_seeds_it_paired(paths, tmp_path):
    """The post-LN arm measured at seeds 8–11 only, the core arms at 8–15: an endpoint with a post-LN arm
    names the 4 seeds its test paired (the report's test column and the published CSV's seeds), not the
    8 confirmatory seeds present somewhere in the data (issue 59's report said "100–135" for 10 seeds)."""
    import pandas as pd

    frame = pd.read_csv(paths["grid"])
    frame = frame[~((frame.arch == "postln") & (frame.seed >= 12))]
    frame.to_csv(tmp_path / "per_seed_grid.csv", index=False)
    setup = _matrix(list(range(10, 16)), CONFIRMATORY, CONFIRMATORY)
    d = report.decide({"grid": tmp_path / "per_seed_grid.csv"}, setup)
    got = d.primaries.set_index("endpoint")
    short = [n for n in got.index if got.loc[n, "n_seeds"] == 4]
    full = [n for n in got.index if got.loc[n, "n_seeds"] == 8]
    assert short and full  # both kinds of endpoint are in icl_cpu's four
    rows = endpoints.rows(d, "icl_cpu").set_index("endpoint")
    assert all(rows.loc[n, "seeds"] == "8–11" for n in short)
    assert all(rows.loc[n, "seeds"] == "8–15" for n in full)
    table = primary_tables.results_table(
        d.primaries, explored=d.explored, run=d.run, eps=d.eps, declared=d.declared
    )
    tests = " ".join(table.test)
    assert "confirmatory: seeds 8–11 (n = 4)" in tests and "confirmatory: seeds 8–15 (n = 8)" in tests
